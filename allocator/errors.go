package allocator

import "errors"

// Sentinel errors of invalid requests. Policies return them wrapped with the
// offending id or number; callers test them with errors.Is. The plugin maps
// every one of them to gRPC InvalidArgument.
var (
	// ErrNilMachine reports a request without a machine.
	ErrNilMachine = errors.New("no machine")

	// ErrInvalidSize reports an allocation size of zero or less.
	ErrInvalidSize = errors.New("allocation size must be positive")

	// ErrNotEnoughDevices reports an allocation size larger than the number
	// of available devices.
	ErrNotEnoughDevices = errors.New("not enough available devices")

	// ErrNotAvailable reports a must-include device that is not among the
	// available devices.
	ErrNotAvailable = errors.New("must-include device not available")

	// ErrTooManyMustInclude reports more must-include devices than the
	// allocation size.
	ErrTooManyMustInclude = errors.New("more must-include devices than the allocation size")

	// ErrIndexOutOfRange reports a device index that is not a GPU of the
	// machine.
	ErrIndexOutOfRange = errors.New("device index out of range")

	// ErrInvalidReplicas reports a replicas-per-GPU count of a shared
	// request outside 1..topology.MaxReplicas.
	ErrInvalidReplicas = errors.New("replicas per GPU out of range")

	// ErrDuplicate reports a device listed twice in available or in
	// must-include.
	ErrDuplicate = errors.New("duplicate device")
)
