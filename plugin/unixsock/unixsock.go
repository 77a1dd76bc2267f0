// Package unixsock claims unix socket paths for listeners: a socket nobody
// listens on is stale and removed; one a process listens on, answering or
// not, is never touched. The device-plugin Runner, the admin API and the
// start-up checks use it.
package unixsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/atomicfile"
)

// DefaultProbeTimeout bounds Claim's connect to an existing
// socket. A unix connect never waits on Linux (a listener whose backlog is
// full refuses at once with EAGAIN), so the bound only guards other
// systems; whatever ends it, the socket counts as in use.
const DefaultProbeTimeout = 3 * time.Second

// Claim makes path free for a new listening unix socket. Nothing at
// path: nil. A unix socket nobody listens on (connection refused: the file
// a killed process leaves behind): the socket is removed, nil. A unix socket
// some process listens on — answering or not: a connect that succeeds, or
// one refused for a full backlog or that times out — is in use: an error
// wrapping ErrInUse naming path, and the socket is left alone. A
// stopped or hung process's socket is never taken: only its owner knows
// whether it will answer again. Anything else at path: an error wrapping
// ErrNotSocket. timeout bounds the connect; <= 0 means
// DefaultProbeTimeout. Claim sends nothing on the connection.
//
// Between the probe and the caller's listen another process could take the
// path; Claim narrows that window, it cannot close it.
func Claim(path string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("socket %s: %w", path, err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("socket path %s is %s: %w", path, atomicfile.Kind(fi.Mode()), ErrNotSocket)
	}
	listening, err := socketListened(path, timeout)
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if listening {
		return fmt.Errorf("socket %s: %w", path, ErrInUse)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// socketListened reports whether a process listens on the unix socket at
// path: false only when the connect is refused because nobody listens (or
// the file went away meanwhile).
func socketListened(path string, timeout time.Duration) (bool, error) {
	conn, err := net.DialTimeout("unix", path, timeout)
	if err == nil {
		conn.Close()
		return true, nil // accepted or queued: somebody listens
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist) {
		return false, nil // nothing listens: stale
	}
	var ne net.Error
	if errors.Is(err, syscall.EAGAIN) || (errors.As(err, &ne) && ne.Timeout()) {
		return true, nil // a full backlog: a listener that does not accept
	}
	return false, fmt.Errorf("probe: %w", err)
}
