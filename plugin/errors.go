package plugin

import "errors"

// Sentinel errors of this package, returned wrapped with context; compare
// with errors.Is. An unknown device id is store.ErrUnknownDevice, the one
// sentinel of the project for it.
var (
	// ErrNoDevices means a Catalog has no devices.
	ErrNoDevices = errors.New("no devices")
	// ErrNoPreferFunc means a Catalog has no PreferFunc.
	ErrNoPreferFunc = errors.New("no preferred-allocation policy")
	// ErrEmptyID means a Catalog's device has an empty id.
	ErrEmptyID = errors.New("empty device id")
	// ErrDuplicateDevice means two devices of a Catalog share an id or
	// index.
	ErrDuplicateDevice = errors.New("duplicate device")
	// ErrInvalidLimit means a Catalog's Limit.Max is negative.
	ErrInvalidLimit = errors.New("invalid per-container device limit")
	// ErrInvalidChoice means a PreferFunc returned a set that breaks the
	// GetPreferredAllocation contract.
	ErrInvalidChoice = errors.New("invalid preferred allocation")
	// ErrInvalidResponse means a RespondFunc returned a ContainerSpec that
	// breaks its rules (a relative path, a path used twice, bad device
	// permissions or CDI name, a variable that contradicts the stored
	// record); Allocate returns it as Internal.
	ErrInvalidResponse = errors.New("invalid container response")
	// ErrServerNotAnswering means the freshly started gRPC server did not
	// answer the Runner's own GetDevicePluginOptions call.
	ErrServerNotAnswering = errors.New("device plugin server does not answer")
)
