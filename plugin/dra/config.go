package dra

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
