package plugin

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// DefaultSocketProbeTimeout is how long ClaimSocket waits for a process to
// answer on an existing socket before it takes the socket for stale. A live
// process answers within milliseconds; the margin is for loaded nodes,
// where taking a live socket for stale would delete it. Only a socket whose
// owner is stopped costs the whole wait.
const DefaultSocketProbeTimeout = 3 * time.Second

// probeRequest is what ClaimSocket sends on an existing socket: a complete
// HTTP/1.1 request, which the admin API answers and any HTTP server answers.
// A gRPC server (the kubelet, another device plugin) writes its HTTP/2
// settings as soon as it accepts a connection and closes the connection on
// this preface, which counts as an answer too.
const probeRequest = "GET / HTTP/1.1\r\nHost: socket-probe\r\nConnection: close\r\n\r\n"

// ClaimSocket makes path free for a new listening unix socket. Nothing at
// path: nil. A unix socket on which no process answers, because nothing
// listens (connection refused) or because the listener sends nothing within
// timeout (a stopped process's socket still accepts connections): the
// socket is removed, nil. A socket on which a process answers, with any
// bytes or by closing the connection: an error wrapping ErrSocketInUse, and
// the socket is left alone. Anything else at path: an error wrapping
// ErrNotSocket. timeout <= 0 means DefaultSocketProbeTimeout.
//
// Between the probe and the caller's listen another process could take the
// path; ClaimSocket narrows that window, it cannot close it.
func ClaimSocket(path string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultSocketProbeTimeout
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("socket %s: %w", path, err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("socket path %s is %s: %w", path, kindOf(fi.Mode()), ErrNotSocket)
	}
	live, err := socketAnswers(path, timeout)
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if live {
		return fmt.Errorf("socket %s: %w", path, ErrSocketInUse)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// socketAnswers reports whether a process answers on the unix socket at
// path within timeout.
func socketAnswers(path string, timeout time.Duration) (bool, error) {
	conn, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist) {
			return false, nil // nothing listens: stale
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false, nil // a full backlog nobody drains
		}
		return false, fmt.Errorf("probe: %w", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return false, fmt.Errorf("probe: %w", err)
	}
	// A write error means the peer went away meanwhile: not an answer.
	_, _ = io.WriteString(conn, probeRequest)
	var b [1]byte
	_, err = conn.Read(b[:])
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return true, nil // bytes, or a deliberate close: a live process
	default:
		return false, nil // no reply within timeout
	}
}

// kindOf names what a file of mode m is, with its article.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a socket"
}
