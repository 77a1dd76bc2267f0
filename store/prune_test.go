package store_test

import (
	"context"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

func TestPrune_Bounds(t *testing.T) {
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	// Ten allocations an hour apart (seq 1..10 at base+0h..9h), seq 3 and 8
	// still held; one health event (the device added) at base. Now is
	// base+9h30m.
	fill := func(t *testing.T) *store.Store {
		s := storetest.MustOpen(t, store.Options{Now: func() time.Time { return base }})
		if _, err := s.Reconcile(specs(1)); err != nil { // health event 1 at base
			t.Fatal(err)
		}
		for i := range 10 {
			at := base.Add(time.Duration(i) * time.Hour)
			state := store.StateReleased
			if i == 2 || i == 7 {
				state = store.StateHeld
			}
			mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: at, State: state})
		}
		return s
	}
	now := base.Add(9*time.Hour + 30*time.Minute)

	for _, tc := range []struct {
		name       string
		o          store.PruneOptions
		wantAllocs []uint64 // kept, newest first
		wantEvents int      // of 1 (reconcile) kept
		wantN      int      // allocations and events deleted
	}{
		{"zero options prune nothing", store.PruneOptions{}, []uint64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 1, 0},
		{"max records", store.PruneOptions{MaxRecords: 4}, []uint64{10, 9, 8, 7}, 1, 6},
		{"max records, batch 1", store.PruneOptions{MaxRecords: 4, Batch: 1}, []uint64{10, 9, 8, 7}, 1, 6},
		{"max records, batch 4", store.PruneOptions{MaxRecords: 4, Batch: 4}, []uint64{10, 9, 8, 7}, 1, 6},
		{"max records above count", store.PruneOptions{MaxRecords: 50}, []uint64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 1, 0},
		{"max age", store.PruneOptions{MaxAge: 3 * time.Hour, Now: now}, []uint64{10, 9, 8}, 0, 8},
		{"max age and records, records tighter", store.PruneOptions{MaxAge: 3 * time.Hour, MaxRecords: 2, Now: now, Batch: 3}, []uint64{10, 9}, 0, 9},
		{"max age and records, age tighter", store.PruneOptions{MaxAge: time.Hour, MaxRecords: 5, Now: now}, []uint64{10}, 0, 10},
		{"keep active", store.PruneOptions{MaxRecords: 4, KeepActive: true, Batch: 2}, []uint64{10, 9, 8, 3}, 1, 6},
		{"keep active, age", store.PruneOptions{MaxAge: time.Hour, KeepActive: true, Now: now}, []uint64{10, 8, 3}, 0, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fill(t)
			n, err := s.Prune(t.Context(), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantN {
				t.Errorf("Prune deleted %d, want %d", n, tc.wantN)
			}
			got, _ := s.Allocations(store.AllocationFilter{})
			if !reflect.DeepEqual(seqs(got), tc.wantAllocs) {
				t.Errorf("kept %v, want %v", seqs(got), tc.wantAllocs)
			}
			if evs, _ := s.HealthEvents(store.EventFilter{}); len(evs) != tc.wantEvents {
				t.Errorf("kept %d health events, want %d", len(evs), tc.wantEvents)
			}
			// Sequence numbers are not reused after pruning.
			if a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}}); a.Seq != 11 {
				t.Errorf("next seq %d, want 11", a.Seq)
			}
		})
	}
}

func TestPrune_Invalid(t *testing.T) {
	s, _ := mustDevices(t, 1)
	for _, o := range []store.PruneOptions{{MaxRecords: -1}, {MaxAge: -time.Second}, {MaxRecords: 1, Batch: -1}} {
		if _, err := s.Prune(t.Context(), o); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", o, err)
		}
	}
}

func TestPrune_Canceled(t *testing.T) {
	s, _ := mustDevices(t, 1)
	store.SetNoSyncForTest(s)
	for range 50 {
		mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	n, err := s.Prune(ctx, store.PruneOptions{MaxRecords: 1, Batch: 10})
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("Prune with canceled context = %d, %v", n, err)
	}
}

// TestPrune_FileSizePlateaus records an endless-looking stream of
// allocations, pruning every 500 to keep 1000: bbolt reuses the freed pages,
// so the file stops growing between the middle and the end of the stream.
// The same stream without pruning breaks that bound.
func TestPrune_FileSizePlateaus(t *testing.T) {
	total := 20000
	if raceEnabled {
		total = 6000
	}
	const (
		keep       = 1000
		pruneEvery = 500
	)
	// record writes n records and returns the file size after n/2 and n.
	record := func(s *store.Store, n int, prune bool) (sizeAtHalf, sizeAtEnd int64) {
		for i := 1; i <= n; i++ {
			mustRecord(t, s, store.Allocation{
				DeviceIDs: []string{"fake-0", "fake-1"},
				Envs:      map[string]string{"VIRTUAL_GPU_IDS": "fake-0,fake-1"},
				Namespace: "default", Pod: "inference-7f9c6d5b8-xk2lp", Container: "server",
			})
			if prune && i%pruneEvery == 0 {
				if _, err := s.Prune(t.Context(), store.PruneOptions{MaxRecords: keep, Batch: 100}); err != nil {
					t.Fatal(err)
				}
			}
			if i == n/2 || i == n {
				st, err := s.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if i == n/2 {
					sizeAtHalf = st.FileSize
				} else {
					sizeAtEnd = st.FileSize
				}
			}
		}
		return sizeAtHalf, sizeAtEnd
	}
	pageSize := int64(os.Getpagesize())
	plateaus := func(half, end int64) bool { return end <= half+pageSize }

	s, _ := mustDevices(t, 2)
	store.SetNoSyncForTest(s) // sizes, not durability, are measured here
	half, end := record(s, total, true)
	st, _ := s.Stats()
	t.Logf("pruned:   file %8d bytes after %5d records, %8d after %5d (data %d bytes, %d records kept)",
		half, total/2, end, total, st.DataSize, st.Allocations)
	if st.Allocations != keep {
		t.Errorf("%d records kept, want %d", st.Allocations, keep)
	}
	if !plateaus(half, end) {
		t.Errorf("file grew from %d to %d bytes between %d and %d records: pruned pages are not reused", half, end, total/2, total)
	}

	// The control: without pruning the same bound fails.
	u, _ := mustDevices(t, 2)
	store.SetNoSyncForTest(u)
	uHalf, uEnd := record(u, total, false)
	t.Logf("unpruned: file %8d bytes after %5d records, %8d after %5d", uHalf, total/2, uEnd, total)
	if plateaus(uHalf, uEnd) {
		t.Errorf("unpruned file also stayed at %d bytes: the bound proves nothing", uEnd)
	}
}
