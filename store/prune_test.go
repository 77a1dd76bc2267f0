package store_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

func TestPrune_Bounds(t *testing.T) {
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	// Ten allocations an hour apart (seq 1..10 at base+0h..9h), seq 3 and 8
	// still held, the others released when recorded; one health event (the
	// device added) at base. Now is base+9h30m.
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
		want       store.PruneResult
	}{
		{"zero options prune nothing", store.PruneOptions{},
			[]uint64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 1, store.PruneResult{}},
		{"max records: inactive first", store.PruneOptions{MaxRecords: 4},
			[]uint64{10, 9, 8, 3}, 1, store.PruneResult{Allocations: 6}},
		{"max records, batch 1", store.PruneOptions{MaxRecords: 4, Batch: 1},
			[]uint64{10, 9, 8, 3}, 1, store.PruneResult{Allocations: 6}},
		{"max records, batch 4", store.PruneOptions{MaxRecords: 4, Batch: 4},
			[]uint64{10, 9, 8, 3}, 1, store.PruneResult{Allocations: 6}},
		{"max records above count", store.PruneOptions{MaxRecords: 50},
			[]uint64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 1, store.PruneResult{}},
		{"max records below the active ones: oldest active goes last", store.PruneOptions{MaxRecords: 1, Batch: 3},
			[]uint64{8}, 1, store.PruneResult{Allocations: 9, ActiveAllocations: 1}},
		{"max age spares active records", store.PruneOptions{MaxAge: 3 * time.Hour, Now: now},
			[]uint64{10, 9, 8, 3}, 0, store.PruneResult{Allocations: 6, HealthEvents: 1}},
		{"max age and records, records tighter", store.PruneOptions{MaxAge: 3 * time.Hour, MaxRecords: 2, Now: now, Batch: 3},
			[]uint64{8, 3}, 0, store.PruneResult{Allocations: 8, HealthEvents: 1}},
		{"max age and records, age tighter", store.PruneOptions{MaxAge: time.Hour, MaxRecords: 5, Now: now},
			[]uint64{10, 8, 3}, 0, store.PruneResult{Allocations: 7, HealthEvents: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fill(t)
			got, err := s.Prune(t.Context(), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Prune = %+v, want %+v", got, tc.want)
			}
			kept, _ := s.Allocations(store.AllocationFilter{})
			if !reflect.DeepEqual(seqs(kept), tc.wantAllocs) {
				t.Errorf("kept %v, want %v", seqs(kept), tc.wantAllocs)
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

// TestPrune_ActiveNeverAhead: active records are kept even when they are
// the oldest, as long as inactive ones can go instead; the age limit never
// touches them.
func TestPrune_ActiveNeverAhead(t *testing.T) {
	s, c := mustDevices(t, 1) // one health event
	for i := range 10 {
		a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}})
		if i >= 5 { // 1-5 stay held, 6-10 are released at once
			release(t, s, a.Seq, c.Now())
		} else if _, err := s.UpdateAllocation(a.Seq, func(a *store.Allocation) error { a.State = store.StateHeld; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Prune(t.Context(), store.PruneOptions{MaxRecords: 5, MaxAge: time.Nanosecond, Now: c.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := s.Allocations(store.AllocationFilter{})
	if !reflect.DeepEqual(seqs(kept), []uint64{5, 4, 3, 2, 1}) || r.ActiveAllocations != 0 {
		t.Errorf("kept %v (result %+v), want the five active records 5..1", seqs(kept), r)
	}
}

// TestPrune_AgeCountsFromRelease: an allocation held for longer than MaxAge
// and released just now is recent history; one released long ago goes, even
// when it was recorded later.
func TestPrune_AgeCountsFromRelease(t *testing.T) {
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	s := storetest.MustOpen(t, store.Options{Now: func() time.Time { return base }})
	if _, err := s.Reconcile(specs(1)); err != nil {
		t.Fatal(err)
	}
	long := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: base})                                                     // held 100h
	short := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: base.Add(time.Hour)})                                     // released at 2h
	unknown := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: base.Add(99 * time.Hour), State: store.StateAbandoned}) // no ReleasedAt: its Time
	release(t, s, long.Seq, base.Add(100*time.Hour))
	release(t, s, short.Seq, base.Add(2*time.Hour))

	if _, err := s.Prune(t.Context(), store.PruneOptions{MaxAge: 10 * time.Hour, Now: base.Add(101 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	kept, _ := s.Allocations(store.AllocationFilter{})
	if want := []uint64{unknown.Seq, long.Seq}; !reflect.DeepEqual(seqs(kept), want) {
		t.Errorf("kept %v, want %v", seqs(kept), want)
	}
}

// TestPrune_MaxBytes bounds allocation records and health events together,
// oldest inactive first across both kinds.
func TestPrune_MaxBytes(t *testing.T) {
	s, c := mustDevices(t, 2) // health events 1, 2
	for i := range 40 {
		a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Envs: map[string]string{"VIRTUAL_GPU_IDS": "fake-0"}})
		if i%3 != 0 {
			release(t, s, a.Seq, c.Now())
		}
		if i%4 == 0 {
			mustSetHealth(t, s, "fake-1", i%8 == 0, "flap")
		}
	}
	before, _ := s.Stats()
	limit := before.HistoryBytes / 2
	r, err := s.Prune(t.Context(), store.PruneOptions{MaxBytes: limit, Batch: 7})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := s.Stats()
	t.Logf("history %d -> %d bytes (limit %d), pruned %+v", before.HistoryBytes, after.HistoryBytes, limit, r)
	if after.HistoryBytes > limit || after.HistoryBytes < limit-400 {
		t.Errorf("history is %d bytes, want at most %d and not far below", after.HistoryBytes, limit)
	}
	if r.ActiveAllocations != 0 || r.Allocations == 0 || r.HealthEvents == 0 {
		t.Errorf("Prune = %+v: want inactive records of both kinds deleted, no active ones", r)
	}
	// Everything deleted is older than every inactive record kept.
	allocs, _ := s.Allocations(store.AllocationFilter{})
	events, _ := s.HealthEvents(store.EventFilter{})
	var oldestKept time.Time
	for _, a := range allocs {
		if !a.Active() && (oldestKept.IsZero() || a.ReleasedAt.Before(oldestKept)) {
			oldestKept = a.ReleasedAt
		}
	}
	if e := events[len(events)-1]; e.Time.Before(oldestKept) {
		oldestKept = e.Time
	}
	for seq := uint64(1); seq <= 40; seq++ {
		a, err := s.Allocation(seq)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if !a.Active() && a.ReleasedAt.Before(oldestKept) {
			t.Errorf("record %d, released %v, kept though newer records went", seq, a.ReleasedAt)
		}
	}
	if want := 40 - r.Allocations; len(allocs) != want {
		t.Errorf("%d records kept, want %d", len(allocs), want)
	}
}

// TestPrune_TrackingOff: with the lifecycle tracker off every record stays
// allocated, and the count and byte limits still bound the history, oldest
// first (health events, inactive, before any allocation record).
func TestPrune_TrackingOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    func(st store.Stats) store.PruneOptions
	}{
		{"count", func(store.Stats) store.PruneOptions { return store.PruneOptions{MaxRecords: 20} }},
		{"bytes", func(st store.Stats) store.PruneOptions { return store.PruneOptions{MaxBytes: st.HistoryBytes / 3} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := mustDevices(t, 1) // one health event
			for range 60 {
				mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}})
			}
			before, _ := s.Stats()
			o := tc.o(before)
			r, err := s.Prune(t.Context(), o)
			if err != nil {
				t.Fatal(err)
			}
			after, _ := s.Stats()
			if r.ActiveAllocations == 0 || r.ActiveAllocations != r.Allocations {
				t.Errorf("Prune = %+v: want only active records deleted", r)
			}
			if (o.MaxRecords > 0 && after.Allocations != o.MaxRecords) || (o.MaxBytes > 0 && after.HistoryBytes > o.MaxBytes) {
				t.Errorf("after Prune(%+v): %+v", o, after)
			}
			kept, _ := s.Allocations(store.AllocationFilter{})
			if kept[0].Seq != 60 || kept[len(kept)-1].Seq != uint64(61-len(kept)) {
				t.Errorf("kept %v, want the newest", seqs(kept))
			}
			if o.MaxBytes > 0 && after.HealthEvents != 0 {
				t.Errorf("%d health events kept: the inactive event should go before active records", after.HealthEvents)
			}
		})
	}
}

func release(t *testing.T, s *store.Store, seq uint64, at time.Time) {
	t.Helper()
	if _, err := s.UpdateAllocation(seq, func(a *store.Allocation) error {
		a.State, a.ReleasedAt = store.StateReleased, at
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestPrune_Invalid(t *testing.T) {
	s, _ := mustDevices(t, 1)
	for _, o := range []store.PruneOptions{{MaxRecords: -1}, {MaxAge: -time.Second}, {MaxRecords: 1, Batch: -1}, {MaxBytes: -1}} {
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
	r, err := s.Prune(ctx, store.PruneOptions{MaxRecords: 1, Batch: 10})
	if !errors.Is(err, context.Canceled) || r != (store.PruneResult{}) {
		t.Errorf("Prune with canceled context = %+v, %v", r, err)
	}
}

// TestPrune_FileSizePlateaus records an endless-looking stream of
// allocations that all stay active (as with the lifecycle tracker off),
// pruning every 500 to a count or a byte limit: bbolt reuses the freed
// pages, so the file stops growing between the middle and the end of the
// stream. The same stream without pruning breaks that bound.
func TestPrune_FileSizePlateaus(t *testing.T) {
	total := 20000
	if raceEnabled {
		total = 6000
	}
	const (
		keep       = 1000
		keepBytes  = 192 << 10 // about 850 records: the data stays well inside the 512 KiB file the count case needs
		pruneEvery = 500
	)
	// record writes n records and returns the file size after n/2 and n.
	record := func(s *store.Store, n int, o *store.PruneOptions) (sizeAtHalf, sizeAtEnd int64) {
		for i := 1; i <= n; i++ {
			mustRecord(t, s, store.Allocation{
				DeviceIDs: []string{"fake-0", "fake-1"},
				Envs:      map[string]string{"VIRTUAL_GPU_IDS": "fake-0,fake-1"},
				Namespace: "default", Pod: "inference-7f9c6d5b8-xk2lp", Container: "server",
			})
			if o != nil && i%pruneEvery == 0 {
				if _, err := s.Prune(t.Context(), *o); err != nil {
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

	for _, tc := range []struct {
		name string
		o    store.PruneOptions
		ok   func(st store.Stats) bool
	}{
		{"count", store.PruneOptions{MaxRecords: keep, Batch: 100}, func(st store.Stats) bool { return st.Allocations == keep }},
		{"bytes", store.PruneOptions{MaxBytes: keepBytes, Batch: 100}, func(st store.Stats) bool {
			return st.HistoryBytes <= keepBytes && st.HistoryBytes > keepBytes-1000
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := mustDevices(t, 2)
			store.SetNoSyncForTest(s) // sizes, not durability, are measured here
			half, end := record(s, total, &tc.o)
			st, _ := s.Stats()
			t.Logf("pruned:   file %8d bytes after %5d records, %8d after %5d (data %d bytes, %d records, %d bytes of history kept)",
				half, total/2, end, total, st.DataSize, st.Allocations, st.HistoryBytes)
			if !tc.ok(st) {
				t.Errorf("kept %+v, over the limit %+v", st, tc.o)
			}
			if !plateaus(half, end) {
				t.Errorf("file grew from %d to %d bytes between %d and %d records: pruned pages are not reused", half, end, total/2, total)
			}
		})
	}

	// The control: without pruning the same bound fails.
	u, _ := mustDevices(t, 2)
	store.SetNoSyncForTest(u)
	uHalf, uEnd := record(u, total, nil)
	t.Logf("unpruned: file %8d bytes after %5d records, %8d after %5d", uHalf, total/2, uEnd, total)
	if plateaus(uHalf, uEnd) {
		t.Errorf("unpruned file also stayed at %d bytes: the bound proves nothing", uEnd)
	}
}

// TestOpen_FixesInactiveIndex: the index of inactive records that Prune
// walks is derived data; Open brings it back in step with the records when
// it is not (entries lost, or pointing nowhere), and a v1 file gets it built.
func TestOpen_FixesInactiveIndex(t *testing.T) {
	indexKeys := func(t *testing.T, path string) []uint64 {
		t.Helper()
		var out []uint64
		rawView(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("inactive_allocations")).ForEach(func(k, _ []byte) error {
				out = append(out, binary.BigEndian.Uint64(k[8:]))
				return nil
			})
		})
		slices.Sort(out)
		return out
	}
	path := historyFile(t) // records 2, 4, 6 released
	if got := indexKeys(t, path); !reflect.DeepEqual(got, []uint64{2, 4, 6}) {
		t.Fatalf("index of a sound file = %v, want 2 4 6", got)
	}
	for _, tc := range []struct {
		name   string
		damage func(tx *bolt.Tx) error
	}{
		{"entries lost", func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket([]byte("inactive_allocations")); err != nil {
				return err
			}
			_, err := tx.CreateBucket([]byte("inactive_allocations"))
			return err
		}},
		{"entries pointing nowhere", func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("inactive_allocations"))
			if err := b.Put(append(seqKey(1), seqKey(99)...), []byte{}); err != nil {
				return err
			}
			return b.Put([]byte("odd"), []byte{})
		}},
		{"version 1 file", func(tx *bolt.Tx) error {
			for _, name := range []string{"inactive_allocations", "quarantine"} {
				if err := tx.DeleteBucket([]byte(name)); err != nil {
					return err
				}
			}
			return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), seqKey(1))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "state.db")
			data, _ := os.ReadFile(path)
			write(t, p, data)
			rawUpdate(t, p, tc.damage)
			s := storetest.MustOpenPath(t, p, store.Options{})
			s.Close()
			if got := indexKeys(t, p); !reflect.DeepEqual(got, []uint64{2, 4, 6}) {
				t.Errorf("index after Open = %v, want 2 4 6", got)
			}
			s = storetest.MustOpenPath(t, p, store.Options{})
			if r, err := s.Prune(t.Context(), store.PruneOptions{MaxRecords: 3}); err != nil || r.ActiveAllocations != 0 {
				t.Errorf("Prune = %+v, %v", r, err)
			}
			if kept, _ := s.Allocations(store.AllocationFilter{}); !reflect.DeepEqual(seqs(kept), []uint64{5, 3, 1}) {
				t.Errorf("kept %v, want the active 5 3 1", seqs(kept))
			}
		})
	}
}

// TestPrune_ConfigEvents: configuration events are history under the limits
// of the other kinds (count per kind, bytes of all kinds together, age),
// oldest first across kinds, and the newest event is always kept.
func TestPrune_ConfigEvents(t *testing.T) {
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	now := base.Add(4*time.Hour + 30*time.Minute)
	// Health event 1 (the device added) at base; configuration events 1..5
	// at base-1h, +1h, +2h, +3h, +4h; allocation 1 released at base+30m,
	// allocation 2 held since base+10m.
	fill := func(t *testing.T) *store.Store {
		s := storetest.MustOpen(t, store.Options{Now: func() time.Time { return base }})
		if _, err := s.Reconcile(specs(1)); err != nil {
			t.Fatal(err)
		}
		for _, h := range []int{-1, 1, 2, 3, 4} {
			mustConfig(t, s, store.ConfigEvent{Time: base.Add(time.Duration(h) * time.Hour), Why: store.WhyFlags, Devices: 1})
		}
		mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: base.Add(30 * time.Minute), State: store.StateReleased})
		mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: base.Add(10 * time.Minute), State: store.StateHeld})
		return s
	}
	for _, tc := range []struct {
		name        string
		o           func(st store.Stats) store.PruneOptions
		wantConfigs []uint64
		want        store.PruneResult
	}{
		{"count per kind", func(store.Stats) store.PruneOptions { return store.PruneOptions{MaxRecords: 2} },
			[]uint64{5, 4}, store.PruneResult{ConfigEvents: 3}},
		{"count 1 keeps the newest", func(store.Stats) store.PruneOptions { return store.PruneOptions{MaxRecords: 1} },
			[]uint64{5}, store.PruneResult{Allocations: 1, ConfigEvents: 4}},
		{"age", func(store.Stats) store.PruneOptions { return store.PruneOptions{MaxAge: 2 * time.Hour, Now: now} },
			[]uint64{5, 4}, store.PruneResult{Allocations: 1, HealthEvents: 1, ConfigEvents: 3}},
		{"age spares the newest", func(store.Stats) store.PruneOptions {
			return store.PruneOptions{MaxAge: time.Nanosecond, Now: now.Add(24 * time.Hour)}
		}, []uint64{5}, store.PruneResult{Allocations: 1, HealthEvents: 1, ConfigEvents: 4}},
		{"bytes: the oldest record of any kind goes first", func(st store.Stats) store.PruneOptions {
			return store.PruneOptions{MaxBytes: st.HistoryBytes - 1}
		}, []uint64{5, 4, 3, 2}, store.PruneResult{ConfigEvents: 1}},
		{"bytes: everything but the newest event, active records last", func(store.Stats) store.PruneOptions {
			return store.PruneOptions{MaxBytes: 1, Batch: 2}
		}, []uint64{5}, store.PruneResult{Allocations: 2, ActiveAllocations: 1, HealthEvents: 1, ConfigEvents: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fill(t)
			st, err := s.Stats()
			if err != nil || st.ConfigEvents != 5 || st.HealthEvents != 1 || st.Allocations != 2 {
				t.Fatalf("Stats() = %+v, %v", st, err)
			}
			got, err := s.Prune(t.Context(), tc.o(st))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Prune = %+v, want %+v", got, tc.want)
			}
			evs, _ := s.ConfigEvents(store.ConfigFilter{})
			if seqs := configSeqs(evs); !reflect.DeepEqual(seqs, tc.wantConfigs) {
				t.Errorf("kept config events %v, want %v", seqs, tc.wantConfigs)
			}
			after, _ := s.Stats()
			if after.ConfigEvents != len(tc.wantConfigs) || after.HistoryBytes >= st.HistoryBytes {
				t.Errorf("Stats() after = %+v; want %d config events and fewer bytes than %d", after, len(tc.wantConfigs), st.HistoryBytes)
			}
			if e := mustConfig(t, s, store.ConfigEvent{Why: store.WhyFlags}); e.Seq != 6 {
				t.Errorf("next seq %d, want 6", e.Seq)
			}
		})
	}
}
