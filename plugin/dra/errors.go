package dra

import "errors"

// Errors of the DRA driver; the errors returned wrap one of them.
var (
	// ErrNotServed is a claim's device this node does not serve now: of
	// another pool, or a device the configuration in force lacks (a
	// profile change removed it).
	ErrNotServed = errors.New("device not served by this node")
	// ErrInUse is a claim's device prepared for another claim already, or
	// one that cannot be used with a device prepared for another claim or
	// with another of the claim's own: a MIG device and its GPU whole, two
	// MIG devices sharing a memory slice.
	ErrInUse = errors.New("device prepared for another claim")
	// ErrInvalidConfig is an opaque configuration of the driver that
	// cannot be read: another API version or kind, an unknown field, a
	// bad value.
	ErrInvalidConfig = errors.New("invalid opaque configuration")
	// ErrNoAllocation is a claim without an allocation on this node for
	// the driver.
	ErrNoAllocation = errors.New("claim not allocated to this driver")
)
