package agent

import (
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// ActiveIndex knows which allocation records may be active, so that
// what needs the active records at every scrape and every second (the
// telemetry's holders, the load sockets) reads those records alone rather
// than decode the whole history: the store keeps no index of active
// records, and -history-max-records keeps up to 100,000 (a walk of 10,000
// costs some 60 ms). A record is active from when the recorder stores it
// (Add) until the lifecycle tracker marks it released or abandoned, and
// never active again; one seen inactive, pruned or damaged is forgotten.
// Its methods are safe for concurrent use.
type ActiveIndex struct {
	st *store.Store

	mu   sync.Mutex
	seqs map[uint64]bool
}

var _ telemetry.Allocations = (*ActiveIndex)(nil)

// NewActiveIndex reads the active records of st once.
func NewActiveIndex(st *store.Store) (*ActiveIndex, error) {
	recs, err := st.Allocations(store.AllocationFilter{Active: true})
	if err != nil {
		return nil, err
	}
	a := &ActiveIndex{st: st, seqs: make(map[uint64]bool, len(recs))}
	for _, r := range recs {
		a.seqs[r.Seq] = true
	}
	return a, nil
}

// Add notes a record the recorder just stored.
func (a *ActiveIndex) Add(seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seqs[seq] = true
}

// Allocations returns the records f selects, newest first. A filter of the
// active records alone (Active, nothing else) reads the records known to
// be active, one by one; any other goes to the store.
func (a *ActiveIndex) Allocations(f store.AllocationFilter) ([]store.Allocation, error) {
	if !f.Active || f.DeviceID != "" || !f.Since.IsZero() || f.Limit != 0 {
		return a.st.Allocations(f)
	}
	a.mu.Lock()
	seqs := slices.Sorted(maps.Keys(a.seqs))
	a.mu.Unlock()
	out := make([]store.Allocation, 0, len(seqs))
	var gone []uint64
	for _, seq := range slices.Backward(seqs) {
		r, err := a.st.Allocation(seq)
		switch {
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrDamaged):
			gone = append(gone, seq) // pruned, or skipped as the store's lists skip it
		case err != nil:
			return nil, err
		case !r.Active():
			gone = append(gone, seq)
		default:
			out = append(out, r)
		}
	}
	if len(gone) > 0 {
		a.mu.Lock()
		for _, seq := range gone {
			delete(a.seqs, seq)
		}
		a.mu.Unlock()
	}
	return out, nil
}
