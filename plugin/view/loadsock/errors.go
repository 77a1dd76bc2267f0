package loadsock

import "errors"

// Sentinel errors of this package; compare with errors.Is.
var (
	// ErrRefused is wrapped by every *Refusal: a request the plugin (or
	// ParseRequest, or Send before sending) refused. errors.As gives the
	// cause.
	ErrRefused = errors.New("load request refused")
)
