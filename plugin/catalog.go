package plugin

import (
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// PreferFunc chooses size devices from available, including every device
// of mustInclude, and returns their ids in any order. The Server has
// validated the request before calling it: both lists hold known, distinct
// devices of the current catalog sorted by Index, mustInclude ⊆ available,
// 0 < size <= len(available), len(mustInclude) <= size, and size is within
// the catalog's Limit. It must return exactly size distinct ids of available
// devices, every one of mustInclude among them; the Server checks that (a
// broken answer is codes.Internal) because the kubelet does not. An error
// reaches the kubelet as codes.InvalidArgument. It must be safe for
// concurrent use.
type PreferFunc func(available, mustInclude []gpuset.Device, size int) ([]string, error)

// PreferByIndex adapts a policy over device indices (an allocator.Policy
// bound to its machine, where a device's Index is its GPU index) to a
// PreferFunc: f gets the Index of each device and its chosen indices are
// mapped back to ids. An index f returns that is not one of available's is
// an error wrapping ErrInvalidChoice.
func PreferByIndex(f func(available, mustInclude []int, size int) ([]int, error)) PreferFunc {
	return func(available, mustInclude []gpuset.Device, size int) ([]string, error) {
		chosen, err := f(Indices(available), Indices(mustInclude), size)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(chosen))
		for i, idx := range chosen {
			// available is sorted by Index.
			pos, found := slices.BinarySearchFunc(available, idx, func(d gpuset.Device, idx int) int { return d.Index - idx })
			if !found {
				return nil, fmt.Errorf("index %d is not an available device: %w", idx, ErrInvalidChoice)
			}
			ids[i] = available[pos].ID
		}
		return ids, nil
	}
}

// EnvFunc returns extra environment variables for a container that gets
// devs (sorted by Index). They are stored with the allocation record, and
// the answer carries the stored ones. It may set [EnvIDs], which then
// replaces the device ids Allocate would put there (a catalog of GPU
// replicas lists their physical GPUs); it must be deterministic in the
// devices and safe for concurrent use.
type EnvFunc func(devs []gpuset.Device) map[string]string

// EnvByIndex adapts a function of device indices (such as
// topology.Machine.ContainerEnv, where a device's Index is its GPU index)
// to an EnvFunc.
func EnvByIndex(f func(indices []int) map[string]string) EnvFunc {
	return func(devs []gpuset.Device) map[string]string { return f(Indices(devs)) }
}

// Indices returns the Index of each device, in order.
func Indices(devs []gpuset.Device) []int {
	out := make([]int, len(devs))
	for i, d := range devs {
		out[i] = d.Index
	}
	return out
}

// Limit bounds the devices one container may get. The zero value sets no
// bound.
type Limit struct {
	// Max is the most devices one container request of Allocate or
	// GetPreferredAllocation may ask for; 0 means no limit. A larger
	// request is refused with codes.InvalidArgument before anything is
	// recorded; the kubelet then fails the pod's admission
	// (UnexpectedAdmissionError) and the refusal's message, which names
	// Rule, reaches the pod's status and events.
	Max int
	// Rule names the setting that imposes Max, for the refusal's message,
	// e.g. "sharing.timeSlicing.failRequestsGreaterThanOne"; "" says "the
	// device plugin's limit".
	Rule string
}

// Catalog is everything the Server answers for: the advertised devices and
// how to place, describe and bound allocations of them. A Server holds one
// Catalog at a time and swaps it whole ([Server.SetCatalog]); every RPC
// uses the one catalog it started with. Devices and Prefer are required.
// The Server copies Devices; the functions must be safe for concurrent use
// and stay usable while an RPC that began under this catalog runs.
type Catalog struct {
	// Devices are the advertised devices; ids must be non-empty and unique,
	// indices unique. Their Healthy and Reason are the initial health.
	Devices []gpuset.Device
	// Prefer chooses preferred allocations: [PreferByIndex] over an
	// allocator.Policy, or a policy over replicas (allocator.SharedPolicy)
	// that maps the devices' ids to replicas itself.
	Prefer PreferFunc
	// Env adds environment variables to Allocate answers; they are stored
	// with the record. nil adds none.
	Env EnvFunc
	// Respond builds the rest of each container's answer from its stored
	// record; nil answers the stored environment only.
	Respond RespondFunc
	// Limit bounds the devices per container; the zero value sets none.
	Limit Limit
}

// catalogState is an immutable, validated Catalog with its index. The
// Server replaces it whole; a health change makes a new one sharing byID.
type catalogState struct {
	devices []gpuset.Device // sorted by Index; never modified once published
	byID    map[string]int  // id -> position in devices; shared by health changes
	prefer  PreferFunc
	env     EnvFunc
	respond RespondFunc
	limit   Limit
}

// newCatalogState validates c and indexes a copy of its devices.
func newCatalogState(c Catalog) (*catalogState, error) {
	switch {
	case len(c.Devices) == 0:
		return nil, ErrNoDevices
	case c.Prefer == nil:
		return nil, ErrNoPreferFunc
	case c.Limit.Max < 0:
		return nil, fmt.Errorf("limit of %d devices per container: %w", c.Limit.Max, ErrInvalidLimit)
	}
	devices := slices.Clone(c.Devices)
	slices.SortFunc(devices, func(a, b gpuset.Device) int { return a.Index - b.Index })
	byID := make(map[string]int, len(devices))
	for i, d := range devices {
		if d.ID == "" {
			return nil, fmt.Errorf("device at index %d: %w", d.Index, ErrEmptyID)
		}
		if _, dup := byID[d.ID]; dup {
			return nil, fmt.Errorf("device %s: %w", topology.QuoteID(d.ID), ErrDuplicateDevice)
		}
		if i > 0 && devices[i-1].Index == d.Index {
			return nil, fmt.Errorf("devices %s and %s share index %d: %w", topology.QuoteID(devices[i-1].ID), topology.QuoteID(d.ID), d.Index, ErrDuplicateDevice)
		}
		if d.Healthy {
			devices[i].Reason = ""
		}
		byID[d.ID] = i
	}
	return &catalogState{devices: devices, byID: byID, prefer: c.Prefer, env: c.Env, respond: c.Respond, limit: c.Limit}, nil
}

// catalog returns the Catalog this state holds, with a copy of its devices.
func (c *catalogState) catalog() Catalog {
	return Catalog{Devices: slices.Clone(c.devices), Prefer: c.prefer, Env: c.env, Respond: c.respond, Limit: c.limit}
}

// withHealth returns a copy of c in which the devices at positions have
// the given health.
func (c *catalogState) withHealth(positions []int, healthy bool, reason string) *catalogState {
	next := *c
	next.devices = slices.Clone(c.devices)
	for _, pos := range positions {
		next.devices[pos].Healthy, next.devices[pos].Reason = healthy, reason
	}
	return &next
}

// checkLimit refuses a request of n devices above the catalog's Limit with
// an InvalidArgument status.
func (c *catalogState) checkLimit(n int) error {
	if c.limit.Max == 0 || n <= c.limit.Max {
		return nil
	}
	rule := c.limit.Rule
	if rule == "" {
		rule = "the device plugin's limit"
	}
	return status.Errorf(codes.InvalidArgument, "%d devices requested, more than the %d per container that %s allows", n, c.limit.Max, rule)
}

// diff counts the ids of next missing from c (added) and those of c missing
// from next (removed).
func (c *catalogState) diff(next *catalogState) (added, removed int) {
	for id := range next.byID {
		if _, ok := c.byID[id]; !ok {
			added++
		}
	}
	for id := range c.byID {
		if _, ok := next.byID[id]; !ok {
			removed++
		}
	}
	return added, removed
}
