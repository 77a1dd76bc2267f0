package status

import "errors"

// Sentinel errors returned (wrapped) by this package; compare with errors.Is.
// A missing status file is reported with an error wrapping fs.ErrNotExist.
var (
	// ErrInvalidStatus reports a status document that cannot be used: bad
	// JSON, a malformed UUID, a value out of range, a file larger than
	// MaxFileBytes. The wrapping error names the file and the field.
	ErrInvalidStatus = errors.New("invalid GPU status")

	// ErrUnsupportedVersion reports a status document of another apiVersion
	// or kind than this package reads (APIVersion, Kind).
	ErrUnsupportedVersion = errors.New("unsupported GPU status version")

	// ErrInvalidUUID reports a string that is not a GPU UUID in NVIDIA's
	// format, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lower-case hex).
	ErrInvalidUUID = errors.New("invalid GPU UUID")
)
