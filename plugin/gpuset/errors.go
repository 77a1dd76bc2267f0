package gpuset

import "errors"

// ErrInvalidChoice means an allocation policy chose a device that was not
// available: a bug of the policy, which the kubelet would not notice.
var ErrInvalidChoice = errors.New("invalid preferred allocation")

// ErrMIG wraps the refusals of a MIG configuration a set cannot serve: a
// layout the strategy does not allow (two profiles with single, a GPU
// with MIG off), MIG devices with time-slicing, a layout leaving no
// device to advertise. The wrapping error names the layout, the GPU and
// the profile.
var ErrMIG = errors.New("MIG configuration not served")
