package plugin

import "errors"

// Sentinel errors of this package, returned wrapped with context; compare
// with errors.Is. An unknown device id is store.ErrUnknownDevice, the one
// sentinel of the project for it.
var (
	// ErrNoDevices means a Server was configured without devices.
	ErrNoDevices = errors.New("no devices")
	// ErrNoPreferFunc means a Server was configured without a PreferFunc.
	ErrNoPreferFunc = errors.New("no preferred-allocation policy")
	// ErrEmptyID means a configured device has an empty id.
	ErrEmptyID = errors.New("empty device id")
	// ErrDuplicateDevice means two configured devices share an id or index.
	ErrDuplicateDevice = errors.New("duplicate device")
	// ErrInvalidChoice means a PreferFunc returned a set that breaks the
	// GetPreferredAllocation contract.
	ErrInvalidChoice = errors.New("invalid preferred allocation")
	// ErrNotSocket means the plugin's socket path exists and is not a unix
	// socket, so the Runner refuses to remove it.
	ErrNotSocket = errors.New("exists and is not a unix socket")
	// ErrSocketInUse means a process answers on a socket path the plugin
	// was asked to listen on: another plugin, the kubelet, or any other
	// program. The plugin never removes such a socket.
	ErrSocketInUse = errors.New("another process is listening on it")
	// ErrServerNotAnswering means the freshly started gRPC server did not
	// answer the Runner's own GetDevicePluginOptions call.
	ErrServerNotAnswering = errors.New("device plugin server does not answer")
)
