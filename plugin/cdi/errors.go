package cdi

import "errors"

// Sentinel errors of this package, returned wrapped with context; compare
// with errors.Is.
var (
	// ErrInvalidConfig means a Config cannot make a valid CDI spec: no GPUs,
	// a device id that is not a valid CDI device name, two GPUs with the same
	// id or minor number, a path that is not absolute and clean, two edits
	// for the same container path. The wrapping error names the culprit.
	ErrInvalidConfig = errors.New("invalid CDI config")

	// ErrDeviceNode means a host device node that should back a container's
	// device node is missing or is not a character or block device. The
	// wrapping error names the GPU (or shared node), both paths and, for a
	// missing node, wraps fs.ErrNotExist too.
	ErrDeviceNode = errors.New("no host device node")

	// ErrInvalidSpec means the CDI library refused the spec Build made (it
	// should not happen for a Config Build accepted).
	ErrInvalidSpec = errors.New("invalid CDI spec")
)
