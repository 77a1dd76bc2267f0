package faults

import "errors"

var (
	// ErrBadPlan means a fault plan could not be parsed; the message says
	// which fault and what was expected.
	ErrBadPlan = errors.New("bad fault plan")
	// ErrUnknownDevice means a fault names a device the plugin does not have.
	ErrUnknownDevice = errors.New("fault names an unknown device")
)
