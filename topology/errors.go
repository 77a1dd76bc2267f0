package topology

import "errors"

// Sentinel errors returned (wrapped) by this package. Callers test them with
// errors.Is; the wrapping error adds the detail (file, line, value).
var (
	// ErrInvalidTopology reports a topology description that cannot be used:
	// a malformed YAML file or nvidia-smi matrix, an inconsistent machine, or
	// a value out of range. Parse errors are *ParseError values that unwrap
	// to it.
	ErrInvalidTopology = errors.New("invalid topology")

	// ErrInvalidDeviceCount reports a GPU count that is not in 1..MaxGPUs.
	ErrInvalidDeviceCount = errors.New("invalid device count")

	// ErrDevicesMismatch reports an explicit -devices value that differs from
	// the number of GPUs of a fixed-size topology (a preset or a file).
	ErrDevicesMismatch = errors.New("device count does not match the topology")

	// ErrUnknownTopology reports a -topology value that is neither a preset
	// name nor a readable file.
	ErrUnknownTopology = errors.New("unknown topology")

	// ErrNotRegularFile reports a -topology path that exists but is not a
	// regular file (a directory, a named pipe, a device, a socket): opening
	// a named pipe blocks until a writer comes, and the others mean nothing.
	ErrNotRegularFile = errors.New("not a regular file")

	// ErrInvalidLinks reports a VIRTUAL_GPU_LINKS value ParseLinks cannot
	// decode; the wrapping error names the entry and what was expected.
	ErrInvalidLinks = errors.New("invalid VIRTUAL_GPU_LINKS value")

	// ErrInvalidNUMAReport reports a -numa-report mode other than auto,
	// always and never.
	ErrInvalidNUMAReport = errors.New("invalid NUMA report mode")

	// ErrInvalidReplicaID reports a replica id that is malformed, not in
	// canonical form, or names a GPU or replica the machine does not have.
	ErrInvalidReplicaID = errors.New("invalid replica id")

	// ErrInvalidMIGID reports a MIG device id that is malformed or not in
	// the canonical form MIGID writes.
	ErrInvalidMIGID = errors.New("invalid MIG device id")
)
