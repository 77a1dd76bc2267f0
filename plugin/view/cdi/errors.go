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

	// ErrInvalidKind means a resource name or Kind does not make a valid
	// CDI kind: the vendor or class breaks the CDI library's naming rules.
	// The wrapping error names the part and the rule.
	ErrInvalidKind = errors.New("invalid CDI kind")

	// ErrForeignSpec means the spec file a Writer would replace was
	// written by another owner (its owner mark names another), or has no
	// owner mark and its Owner does not adopt it. The Writer leaves it
	// alone; the wrapping error names the file and its owner.
	ErrForeignSpec = errors.New("the CDI spec belongs to another owner")

	// ErrInvalidSpec means the CDI library refused the spec Build made (it
	// should not happen for a Config Build accepted).
	ErrInvalidSpec = errors.New("invalid CDI spec")
)
