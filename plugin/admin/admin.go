// Package admin is the running plugin's local control surface: a small
// HTTP/JSON API on a unix socket (mode 0600, next to the state file) that
// `virtual-gpu-device-plugin dump` and `health` talk to while the plugin
// holds the state file.
//
// Routes (JSON; errors are {"error": "..."} with a 4xx/5xx status):
//
//	GET /v1/snapshot?device=&since=&limit=&active=&devicesOnly=   a Snapshot
//	PUT /v1/devices/{id}/health {"healthy":b,"reason":s}           a devices-only Snapshot of that device
//
// since is RFC 3339; limit a non-negative integer; active and devicesOnly
// true or false; each parameter at most once, and not empty (leave device
// out for every device). The health body is one JSON object, each key once
// (as encoding/json matches keys: without regard to case), and nothing
// after it; reason is only for healthy:false. A path with an empty, . or
// .. segment (PUT /v1/devices//health) is 404, not a redirect. An unknown device is 404 and the message
// lists the valid ids. Health is per GPU: the replica of a shared GPU is
// 400, and the message names its GPU. A snapshot shows per shared GPU its
// replicas in use out of its total and their holders (Device.Replicas), and
// the claims the DRA driver prepared next to the device plugin's
// allocations: as a device's holder while prepared, and in the history
// (Snapshot.Claims), selected by the same parameters.
//
// The wire format is the package's own types (Snapshot and the types it
// holds), not the store's: the store may change its records, the API only
// adds fields. [Read] builds a Snapshot from a [Source]; the command uses it
// too, to read the state file the same way while no plugin runs.
//
// [Server] serves the API; [Client] calls it.
package admin

import (
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Source is what a Snapshot is read from: the plugin's open store, or the
// state file opened read-only.
type Source interface {
	// Devices returns every stored device, in index order.
	Devices() ([]store.Device, error)
	// Allocations returns the allocation records f selects, newest first.
	Allocations(f store.AllocationFilter) ([]store.Allocation, error)
	// Claims returns the claim records (of the DRA driver) f selects,
	// newest first.
	Claims(f store.ClaimFilter) ([]store.Claim, error)
	// HealthEvents returns the health events f selects, newest first.
	HealthEvents(f store.EventFilter) ([]store.HealthEvent, error)
	// ConfigEvents returns the configuration events f selects, newest
	// first.
	ConfigEvents(f store.ConfigFilter) ([]store.ConfigEvent, error)
	// DamagedRecords returns the records the store set aside as damaged;
	// nil when none.
	DamagedRecords() ([]DamagedRecord, error)
}

// HealthFunc changes a device's health in the running plugin (stored and
// sent to the kubelet). It returns an error wrapping store.ErrUnknownDevice
// for an id the plugin does not serve.
type HealthFunc func(id string, healthy bool, reason string) error

// healthRequest is the body of PUT /v1/devices/{id}/health.
type healthRequest struct {
	Healthy *bool  `json:"healthy"`
	Reason  string `json:"reason,omitempty"`
}

// errorBody is every error answer.
type errorBody struct {
	Error string `json:"error"`
	// NotSimulated marks the simulator's answer for a node it does not
	// simulate (now): its state file may still be read (ErrNotSimulated).
	NotSimulated bool `json:"notSimulated,omitempty"`
}

// DefaultTimeout bounds one Client call when NewClient is given none.
const DefaultTimeout = 5 * time.Second
