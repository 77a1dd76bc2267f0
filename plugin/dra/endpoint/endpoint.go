// Package endpoint names the DRA driver and says where its sockets are on
// the node: its registration socket in the kubelet's plugin registry, its
// DRA socket in its own directory under the kubelet's plugins directory.
// It is apart from package dra, and imports none of the DRA libraries, so
// that the process's options (and the suites that parse them) can name
// the driver without building it.
package endpoint

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/unixsock"
)

// Defaults of Config: the kubelet's own directories (pkg/kubelet/config)
// and the driver's name.
const (
	// DefaultDriverName is the driver's name: the domain its attributes,
	// its DeviceClass and its device taints are named under.
	DefaultDriverName = "gpu.unicore.mcyou.cc"
	// DefaultRegistryDir is where the kubelet's plugin watcher looks for
	// registration sockets.
	DefaultRegistryDir = "/var/lib/kubelet/plugins_registry"
	// DefaultPluginsDir holds one directory per kubelet plugin, named
	// after it; the driver's socket is <PluginsDir>/<DriverName>/dra.sock.
	DefaultPluginsDir = "/var/lib/kubelet/plugins"
)

// Config is what the DRA driver needs of the process's configuration:
// its name and the kubelet's directories. The options package fills it
// (-dra-driver-name, -kubelet-registry-dir, -kubelet-plugins-dir); every
// path is absolute and clean.
type Config struct {
	// DriverName is the driver's name (default DefaultDriverName): a DNS
	// subdomain in lower case.
	DriverName string
	// RegistryDir is the kubelet's plugin registration directory (default
	// DefaultRegistryDir).
	RegistryDir string
	// PluginsDir is the kubelet's plugins directory (default
	// DefaultPluginsDir).
	PluginsDir string
}

// SocketDir returns the directory of the driver's DRA socket,
// <PluginsDir>/<DriverName>.
func (c Config) SocketDir() string { return filepath.Join(c.PluginsDir, c.DriverName) }

// Socket returns the driver's DRA socket, <SocketDir>/dra.sock.
func (c Config) Socket() string { return filepath.Join(c.SocketDir(), "dra.sock") }

// RegistrationSocket returns the driver's registration socket in the
// kubelet's registry directory, <RegistryDir>/<DriverName>-reg.sock.
func (c Config) RegistrationSocket() string {
	return filepath.Join(c.RegistryDir, c.DriverName+"-reg.sock")
}

// Check refuses, before anything is written, sockets another process
// serves on (a second driver of the same name on this node) or paths that
// are not sockets; stale sockets are left to the library, which replaces
// them.
func (c Config) Check() error {
	for _, p := range []string{c.RegistrationSocket(), c.Socket()} {
		err := unixsock.Claim(p, 0)
		switch {
		case errors.Is(err, unixsock.ErrInUse):
			return fmt.Errorf("%w; stop that process, or give this driver another name (-dra-driver-name)", err)
		case errors.Is(err, unixsock.ErrNotSocket):
			return err
		}
	}
	return nil
}
