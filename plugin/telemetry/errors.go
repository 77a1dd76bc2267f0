package telemetry

import "errors"

// Sentinel errors returned (wrapped, with context) by this package. Compare
// with errors.Is; the messages name what was wrong and may change. A GPU
// index the exporter does not know is store.ErrUnknownDevice (wrapped), the
// project's one unknown-device sentinel.
var (
	// ErrInvalidConfig means New refused its Config; the message names the
	// field and the rule it breaks.
	ErrInvalidConfig = errors.New("invalid telemetry config")

	// ErrUnknownModel means ParseModel was given a load model name that is
	// none of Models; the message lists the valid names.
	ErrUnknownModel = errors.New("unknown telemetry load model")

	// ErrInvalidOverride means SetOverride refused an override: no value
	// set, a utilization outside 0..100 or not a number, memory outside
	// 0..the GPU's memory, or a time to live outside 0..MaxOverrideTTL. The
	// message names the field, its value and the allowed range.
	ErrInvalidOverride = errors.New("invalid telemetry override")

	// ErrNotHolder means SetOverride named a container that does not hold
	// the GPU now: only a holder may drive its GPU's load.
	ErrNotHolder = errors.New("container does not hold the GPU")
)
