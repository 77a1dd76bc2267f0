package agent

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// TestActiveIndex: the index lists what the store's walk lists: the
// active records at start and those added since, newest first, without the
// released, the abandoned and the pruned; other filters go to the store.
func TestActiveIndex(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0"}, {ID: "fake-1", Index: 1}}); err != nil {
		t.Fatal(err)
	}
	record := func(state string) uint64 {
		t.Helper()
		a, err := st.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}})
		if err != nil {
			t.Fatal(err)
		}
		if state != store.StateAllocated {
			if _, err := st.UpdateAllocation(a.Seq, func(x *store.Allocation) error {
				x.State, x.Namespace, x.Pod, x.Container = state, "ns", "p", "c"
				if state != store.StateHeld {
					x.ReleasedAt = time.Now()
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		return a.Seq
	}
	held, _, pending := record(store.StateHeld), record(store.StateReleased), record(store.StateAllocated)
	idx, err := NewActiveIndex(st)
	if err != nil {
		t.Fatal(err)
	}
	seqsOf := func(list func(store.AllocationFilter) ([]store.Allocation, error), f store.AllocationFilter) []uint64 {
		t.Helper()
		recs, err := list(f)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, r := range recs {
			out = append(out, r.Seq)
		}
		return out
	}
	seqs := func(f store.AllocationFilter) []uint64 { t.Helper(); return seqsOf(idx.Allocations, f) }
	walk := func() []uint64 { t.Helper(); return seqsOf(st.Allocations, store.AllocationFilter{Active: true}) }
	if got := seqs(store.AllocationFilter{Active: true}); !slices.Equal(got, []uint64{pending, held}) || !slices.Equal(got, walk()) {
		t.Errorf("at start: %v, want %v (the store's walk: %v)", got, []uint64{pending, held}, walk())
	}
	added := record(store.StateAllocated)
	idx.Add(added)
	if _, err := st.UpdateAllocation(pending, func(x *store.Allocation) error {
		x.State, x.ReleasedAt = store.StateAbandoned, time.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := seqs(store.AllocationFilter{Active: true}); !slices.Equal(got, []uint64{added, held}) || !slices.Equal(got, walk()) {
		t.Errorf("after an add and an abandon: %v, want %v (the store's walk: %v)", got, []uint64{added, held}, walk())
	}
	if _, err := st.Prune(t.Context(), store.PruneOptions{MaxRecords: 1}); err != nil {
		t.Fatal(err)
	}
	if got := seqs(store.AllocationFilter{Active: true}); !slices.Equal(got, walk()) {
		t.Errorf("after a prune: %v, the store's walk %v", got, walk())
	}
	if got := seqs(store.AllocationFilter{}); len(got) != len(mustAllocations(t, st)) {
		t.Errorf("all records: %v, want the store's", got)
	}
}

func mustAllocations(t *testing.T, st *store.Store) []store.Allocation {
	t.Helper()
	recs, err := st.Allocations(store.AllocationFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
