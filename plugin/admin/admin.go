// Package admin is the running plugin's local control surface: a small
// HTTP/JSON API on a unix socket (mode 0600, next to the state file) that
// `virtual-gpu-device-plugin dump` and `health` talk to while the plugin
// holds the state file.
//
// Routes (all JSON; errors are {"error": "..."} with a 4xx/5xx status):
//
//	GET /v1/devices                                   []store.Device
//	GET /v1/allocations?device=&since=&limit=&active= []store.Allocation, newest first
//	GET /v1/events?device=&since=&limit=              []store.HealthEvent, newest first
//	PUT /v1/devices/{id}/health {"healthy":b,"reason":s}  store.Device after the change
//
// since is RFC 3339; limit a non-negative integer; active true or false.
//
// [Server] serves it; [Client] calls it and, like *store.Store, satisfies
// [Source], so dump reads the same way from a running plugin or from a file.
package admin

import (
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Source is what dump reads. *store.Store (opened read-only) and *Client
// both implement it.
type Source interface {
	Devices() ([]store.Device, error)
	Allocations(store.AllocationFilter) ([]store.Allocation, error)
	HealthEvents(store.EventFilter) ([]store.HealthEvent, error)
}

var (
	_ Source = (*store.Store)(nil)
	_ Source = (*Client)(nil)
)

// HealthFunc changes a device's health in the running plugin (stored and
// sent to the kubelet). It returns an error wrapping an ErrUnknownDevice
// (plugin's or store's) for an unknown id.
type HealthFunc func(id string, healthy bool, reason string) error

// healthRequest is the body of PUT /v1/devices/{id}/health.
type healthRequest struct {
	Healthy *bool  `json:"healthy"`
	Reason  string `json:"reason,omitempty"`
}

// errorBody is every error answer.
type errorBody struct {
	Error string `json:"error"`
}

// DefaultTimeout bounds one Client call.
const DefaultTimeout = 5 * time.Second
