package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestDamage_AfterOpen: a value damaged while the Store is open (written
// here through its own bbolt handle, as bit rot or a foreign writer would)
// is skipped by every list, named by Damaged, refused with ErrDamaged by the
// calls that ask for that one record, and quarantined by the next write
// that walks over it.
func TestDamage_AfterOpen(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	specs := []DeviceSpec{{ID: "a", Index: 0}, {ID: "b", Index: 1}, {ID: "c", Index: 2}}
	if _, err := s.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c", "a"} {
		if _, err := s.RecordAllocation(Allocation{DeviceIDs: []string{id}}); err != nil {
			t.Fatal(err)
		}
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketDevices).Put([]byte("b"), []byte("rot")); err != nil {
			return err
		}
		if err := tx.Bucket(bucketAllocations).Put(u64(2), []byte(`{"seq":2}`)); err != nil {
			return err
		}
		return tx.Bucket(bucketEvents).Put(u64(1), []byte(`"x"`))
	})
	if err != nil {
		t.Fatal(err)
	}

	devs, err := s.Devices()
	if err != nil || len(devs) != 2 {
		t.Errorf("Devices() = %+v, %v; want a and c", devs, err)
	}
	as, err := s.Allocations(AllocationFilter{Active: true})
	if err != nil || len(as) != 3 {
		t.Errorf("Allocations(active) = %d, %v; want 3", len(as), err)
	}
	if evs, err := s.HealthEvents(EventFilter{}); err != nil || len(evs) != 2 {
		t.Errorf("HealthEvents() = %d, %v; want 2", len(evs), err)
	}
	for name, call := range map[string]func() error{
		"Device":           func() error { _, err := s.Device("b"); return err },
		"SetHealth":        func() error { _, _, err := s.SetHealth("b", false, "x", CauseAdmin); return err },
		"Allocation":       func() error { _, err := s.Allocation(2); return err },
		"UpdateAllocation": func() error { _, err := s.UpdateAllocation(2, func(*Allocation) error { return nil }); return err },
	} {
		if err := call(); !errors.Is(err, ErrDamaged) {
			t.Errorf("%s on a damaged record: err = %v, want ErrDamaged", name, err)
		}
	}
	got := damagedNames(t, s)
	want := []string{"allocations/2 in place", "devices/b in place", "health_events/1 in place"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Damaged() = %v, want %v", got, want)
	}
	if st, err := s.Stats(); err != nil || st.Damaged != 3 || st.Devices != 2 {
		t.Errorf("Stats() = %+v, %v", st, err)
	}

	// Reconcile walks the devices: b goes to quarantine and is added again.
	rep, err := s.Reconcile(specs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep, ReconcileReport{Added: []string{"b"}, Recreated: []string{"b"}, Configured: 3}) {
		t.Errorf("Reconcile report = %+v", rep)
	}
	got = damagedNames(t, s)
	want = []string{"devices/b quarantined", "allocations/2 in place", "health_events/1 in place"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after Reconcile, Damaged() = %v, want %v", got, want)
	}
}

func damagedNames(t *testing.T, s *Store) []string {
	t.Helper()
	dmg, err := s.Damaged()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dmg {
		where := " in place"
		if !d.Quarantined.IsZero() {
			where = " quarantined"
			if time.Since(d.Quarantined) > time.Minute {
				t.Errorf("%s/%s quarantined at %v", d.Bucket, d.Key, d.Quarantined)
			}
		}
		out = append(out, d.Bucket+"/"+d.Key+where)
	}
	return out
}

// TestPrune_QuarantinesDamage: Prune walking over a damaged record moves it
// into quarantine instead of deleting or tripping on it.
func TestPrune_QuarantinesDamage(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Reconcile([]DeviceSpec{{ID: "a"}}); err != nil { // event 1
		t.Fatal(err)
	}
	for range 6 {
		a, err := s.RecordAllocation(Allocation{DeviceIDs: []string{"a"}})
		if err != nil {
			t.Fatal(err)
		}
		if a.Seq%2 == 1 {
			if _, err := s.UpdateAllocation(a.Seq, func(a *Allocation) error { a.State = StateReleased; return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketAllocations).Put(u64(1), []byte("rot")); err != nil { // indexed as inactive
			return err
		}
		if err := tx.Bucket(bucketAllocations).Put(u64(2), []byte("rot")); err != nil { // active
			return err
		}
		return tx.Bucket(bucketEvents).Put(u64(1), []byte("rot"))
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Prune(t.Context(), PruneOptions{MaxRecords: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Six records, two kept: the inactive 1 (damaged), 3 and 5 go first,
	// then the oldest active, 2 (damaged). The damaged event 1 is met on the
	// way (the event count is within the limit, but events are walked).
	if r.Quarantined != 3 || r.Allocations != 2 {
		t.Errorf("Prune = %+v, want 3 quarantined", r)
	}
	kept, err := s.Allocations(AllocationFilter{})
	if err != nil || len(kept) != 2 || kept[0].Seq != 6 || kept[1].Seq != 4 {
		t.Errorf("kept %+v, %v; want 6 and 4", kept, err)
	}
	got := damagedNames(t, s)
	want := []string{"allocations/1 quarantined", "health_events/1 quarantined", "allocations/2 quarantined"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Damaged() = %v, want %v", got, want)
	}
}

// TestPrune_DropsStaleIndexEntries: index entries that point at no record,
// or at an active one, are dropped by the prune that walks over them, even
// when it deletes nothing.
func TestPrune_DropsStaleIndexEntries(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Reconcile([]DeviceSpec{{ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	active, err := s.RecordAllocation(Allocation{DeviceIDs: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	released, err := s.RecordAllocation(Allocation{DeviceIDs: []string{"a"}, State: StateReleased})
	if err != nil {
		t.Fatal(err)
	}
	ghost := released // older, so that the walk from the oldest meets it
	ghost.Seq, ghost.Time = 99, released.Time.Add(-time.Hour)
	wrongly := active
	wrongly.State = StateReleased // its key, as if it were inactive
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, k := range [][]byte{inactiveKey(ghost), inactiveKey(wrongly)} {
			if err := tx.Bucket(bucketInactive).Put(k, []byte{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Prune(t.Context(), PruneOptions{MaxRecords: 1000}); err != nil || r != (PruneResult{}) {
		t.Fatalf("Prune = %+v, %v; want nothing deleted", r, err)
	}
	var keys [][]byte
	_ = s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketInactive).ForEach(func(k, _ []byte) error {
			keys = append(keys, bytes.Clone(k))
			return nil
		})
	})
	if len(keys) != 1 || !bytes.Equal(keys[0], inactiveKey(released)) {
		t.Errorf("index after Prune = %x, want only record %d", keys, released.Seq)
	}
}

// TestConfigEvents_DamagedAfterOpen: a configuration event damaged while
// the Store is open is skipped by ConfigEvents and named by Damaged; Prune
// quarantines it when it walks over it, and never deletes the newest event.
func TestConfigEvents_DamagedAfterOpen(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Reconcile([]DeviceSpec{{ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := s.RecordConfigChange(ConfigEvent{Why: WhyFlags, Devices: 1}); err != nil {
			t.Fatal(err)
		}
	}
	err = s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketConfig).Put(u64(2), []byte(`{"seq":2}`)) })
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.ConfigEvents(ConfigFilter{})
	if err != nil || len(evs) != 3 || evs[0].Seq != 4 || evs[2].Seq != 1 {
		t.Errorf("ConfigEvents() = %+v, %v; want 4 3 1", evs, err)
	}
	if got, want := damagedNames(t, s), []string{"config_events/2 in place"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Damaged() = %v, want %v", got, want)
	}
	r, err := s.Prune(t.Context(), PruneOptions{MaxRecords: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r != (PruneResult{ConfigEvents: 2, Quarantined: 1}) {
		t.Errorf("Prune = %+v, want 2 config events deleted, 1 quarantined", r)
	}
	if got, want := damagedNames(t, s), []string{"config_events/2 quarantined"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after Prune, Damaged() = %v, want %v", got, want)
	}
	if r, err := s.Prune(t.Context(), PruneOptions{MaxRecords: 1, MaxBytes: 1, MaxAge: time.Nanosecond}); err != nil || r.ConfigEvents != 0 {
		t.Errorf("Prune beyond every limit = %+v, %v; want the newest event kept", r, err)
	}
	if evs, err := s.ConfigEvents(ConfigFilter{}); err != nil || len(evs) != 1 || evs[0].Seq != 4 {
		t.Errorf("kept %+v, %v; want the newest, 4", evs, err)
	}
}
