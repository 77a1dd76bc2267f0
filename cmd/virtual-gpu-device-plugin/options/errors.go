package options

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error of this package: a flag, variable,
// file or profile that cannot be read or breaks a rule. The command exits
// with status 2 for it at start; a caller that resolves again at run time
// keeps its current configuration and logs the error. The message names
// the flag, the variable or the file, field and line, and the rule.
var ErrInvalid = errors.New("invalid configuration")

// ErrUnknownProfile means a profile name (the node's label, or
// -config-default) names no profile of the -config directory. It comes
// wrapped together with ErrInvalid.
var ErrUnknownProfile = errors.New("unknown profile")

// invalidError is an error of this package: its message is that of err,
// and it unwraps to ErrInvalid as well as to err.
type invalidError struct{ err error }

func (e *invalidError) Error() string   { return e.err.Error() }
func (e *invalidError) Unwrap() []error { return []error{ErrInvalid, e.err} }

// invalidf returns an error wrapping ErrInvalid; %w wraps as in fmt.Errorf.
func invalidf(format string, args ...any) error {
	return &invalidError{fmt.Errorf(format, args...)}
}
