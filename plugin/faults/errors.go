package faults

import "errors"

// ErrBadPlan means a fault plan could not be parsed or breaks a rule (see
// the package doc); the message names the fault and the rule. A plan that
// names a device the plugin lacks is refused by Check with an error wrapping
// store.ErrUnknownDevice instead.
var ErrBadPlan = errors.New("bad fault plan")
