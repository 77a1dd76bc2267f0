package mig

import "errors"

// Sentinel errors returned (wrapped) by this package. Callers test them with
// errors.Is; the wrapping error names the product, the config, the layout,
// the entry, the GPU or the profile.
var (
	// ErrNoMIG reports a product that has no MIG partitions (a GPU before
	// Ampere, a workstation or consumer board) or that the model does not
	// know; the wrapping error names the product.
	ErrNoMIG = errors.New("product has no MIG support")

	// ErrInvalidConfig reports a mig-parted configuration that cannot be
	// used: malformed YAML, an unknown field, a wrong type, a missing
	// required field, an invalid profile name or device filter. Such
	// errors are *ConfigError values that unwrap to it.
	ErrInvalidConfig = errors.New("invalid mig-parted config")

	// ErrUnknownLayout reports a layout name that the configuration does not
	// have.
	ErrUnknownLayout = errors.New("unknown MIG layout")

	// ErrUnknownProfile reports a MIG profile the GPU's product does not
	// have (1g.5gb on an H100, a compute-instance profile such as
	// 1c.3g.40gb, which the model does not partition).
	ErrUnknownProfile = errors.New("unknown MIG profile")

	// ErrDoesNotFit reports MIG devices that do not fit one GPU: more
	// instances of a profile than the product allows, or placements that
	// would overlap whatever order they are placed in.
	ErrDoesNotFit = errors.New("MIG devices do not fit the GPU")

	// ErrDeviceIndex reports a devices entry naming a GPU index the node
	// does not have.
	ErrDeviceIndex = errors.New("GPU index out of range")

	// ErrNoMatchingEntry reports a layout none of whose entries applies to
	// any GPU of the node (every entry's device-filter names other
	// products).
	ErrNoMatchingEntry = errors.New("no entry of the MIG layout matches the GPUs")
)
