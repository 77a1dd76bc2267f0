package gpuset

import "errors"

// ErrInvalidChoice means an allocation policy chose a device that was not
// available: a bug of the policy, which the kubelet would not notice.
var ErrInvalidChoice = errors.New("invalid preferred allocation")
