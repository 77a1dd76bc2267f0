package store_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

func TestRecordAllocation(t *testing.T) {
	s, _ := mustDevices(t, 4)
	in := store.Allocation{
		DeviceIDs: []string{"fake-2", "fake-3"},
		Envs:      map[string]string{"VIRTUAL_GPU_IDS": "fake-2,fake-3"},
	}
	got := mustRecord(t, s, in)
	if got.Seq != 1 || got.State != store.StateAllocated || got.Time.IsZero() || got.Time.Location() != time.UTC {
		t.Errorf("stored %+v: want seq 1, state allocated, time set in UTC", got)
	}
	// The caller's value and the returned one are independent copies.
	got.Envs["VIRTUAL_GPU_IDS"] = "changed"
	in.DeviceIDs[0] = "changed"
	back, err := s.Allocation(1)
	if err != nil {
		t.Fatal(err)
	}
	if back.Envs["VIRTUAL_GPU_IDS"] != "fake-2,fake-3" || back.DeviceIDs[0] != "fake-2" {
		t.Errorf("read back %+v", back)
	}

	// A given time is kept (in UTC); sequence numbers grow.
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600))
	second := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: at})
	if second.Seq != 2 || !second.Time.Equal(at) || second.Time.Location() != time.UTC {
		t.Errorf("second record %+v", second)
	}

	for _, tc := range []struct {
		name string
		a    store.Allocation
		want error
	}{
		{"no devices", store.Allocation{}, store.ErrInvalid},
		{"empty id", store.Allocation{DeviceIDs: []string{""}}, store.ErrInvalid},
		{"repeated id", store.Allocation{DeviceIDs: []string{"fake-0", "fake-0"}}, store.ErrInvalid},
		{"bad state", store.Allocation{DeviceIDs: []string{"fake-0"}, State: "borrowed"}, store.ErrInvalid},
		{"unknown device", store.Allocation{DeviceIDs: []string{"fake-0", "fake-9"}}, store.ErrUnknownDevice},
	} {
		if _, err := s.RecordAllocation(tc.a); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if all, _ := s.Allocations(store.AllocationFilter{}); len(all) != 2 {
		t.Errorf("rejected records were stored: %d records", len(all))
	}
}

func TestAllocations_OrderAndFilters(t *testing.T) {
	s, c := mustDevices(t, 4)
	ids := [][]string{{"fake-0"}, {"fake-1", "fake-2"}, {"fake-0", "fake-3"}, {"fake-1"}, {"fake-0"}}
	var mid time.Time
	for i, dev := range ids {
		if i == 2 {
			mid = c.Now()
		}
		mustRecord(t, s, store.Allocation{DeviceIDs: dev})
	}
	release := func(a *store.Allocation) error {
		a.State, a.ReleasedAt = store.StateReleased, c.Now()
		return nil
	}
	for _, seq := range []uint64{1, 4} {
		if _, err := s.UpdateAllocation(seq, release); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name string
		f    store.AllocationFilter
		want []uint64
	}{
		{"all, newest first", store.AllocationFilter{}, []uint64{5, 4, 3, 2, 1}},
		{"device", store.AllocationFilter{DeviceID: "fake-0"}, []uint64{5, 3, 1}},
		{"since", store.AllocationFilter{Since: mid}, []uint64{5, 4, 3}},
		{"active", store.AllocationFilter{Active: true}, []uint64{5, 3, 2}},
		{"limit", store.AllocationFilter{Limit: 2}, []uint64{5, 4}},
		{"device, active, limit", store.AllocationFilter{DeviceID: "fake-1", Active: true, Limit: 5}, []uint64{2}},
		{"nothing", store.AllocationFilter{DeviceID: "fake-9"}, []uint64{}},
	} {
		got, err := s.Allocations(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if s := seqs(got); !reflect.DeepEqual(s, tc.want) {
			t.Errorf("%s: seqs %v, want %v", tc.name, s, tc.want)
		}
	}
}

func TestUpdateAllocation(t *testing.T) {
	s, c := mustDevices(t, 2)
	a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Envs: map[string]string{"K": "V"}})
	held := c.Now()

	got, err := s.UpdateAllocation(a.Seq, func(a *store.Allocation) error {
		a.State, a.Namespace, a.Pod, a.Container, a.HeldSince = store.StateHeld, "default", "vgpu-demo", "demo", held
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := a
	want.State, want.Namespace, want.Pod, want.Container, want.HeldSince = store.StateHeld, "default", "vgpu-demo", "demo", held
	back, _ := s.Allocation(a.Seq)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(back, want) {
		t.Errorf("updated = %+v\nread back %+v\nwant      %+v", got, back, want)
	}

	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		seq  uint64
		fn   func(*store.Allocation) error
		want error
	}{
		{"missing record", 99, func(*store.Allocation) error { return nil }, store.ErrNotFound},
		{"fn fails", a.Seq, func(a *store.Allocation) error { a.Pod = "x"; return boom }, boom},
		{"seq changed", a.Seq, func(a *store.Allocation) error { a.Seq = 7; return nil }, store.ErrInvalid},
		{"bad state", a.Seq, func(a *store.Allocation) error { a.State = "gone"; return nil }, store.ErrInvalid},
		{"devices emptied", a.Seq, func(a *store.Allocation) error { a.DeviceIDs = nil; return nil }, store.ErrInvalid},
		{"unknown device", a.Seq, func(a *store.Allocation) error { a.DeviceIDs = []string{"fake-7"}; return nil }, store.ErrUnknownDevice},
	} {
		if _, err := s.UpdateAllocation(tc.seq, tc.fn); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if back, _ := s.Allocation(a.Seq); !reflect.DeepEqual(back, want) {
		t.Errorf("failed updates changed the record: %+v", back)
	}
	if _, err := s.Allocation(99); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Allocation(99): err = %v, want ErrNotFound", err)
	}
}

// TestAllocation_JSON pins the on-disk format (doc.go): snake_case keys,
// RFC 3339 times, holder fields omitted while unset.
func TestAllocation_JSON(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"fresh allocation", store.Allocation{Seq: 3, Time: at, DeviceIDs: []string{"fake-0"}, Envs: map[string]string{"VIRTUAL_GPU_IDS": "fake-0"}, State: store.StateAllocated},
			`{"seq":3,"time":"2026-03-01T12:00:00Z","device_ids":["fake-0"],"envs":{"VIRTUAL_GPU_IDS":"fake-0"},"state":"allocated"}`},
		{"released allocation", store.Allocation{Seq: 3, Time: at, DeviceIDs: []string{"fake-0"}, State: store.StateReleased,
			Namespace: "ns", Pod: "p", Container: "c", HeldSince: at.Add(time.Second), ReleasedAt: at.Add(time.Hour)},
			`{"seq":3,"time":"2026-03-01T12:00:00Z","device_ids":["fake-0"],"state":"released","namespace":"ns","pod":"p","container":"c","held_since":"2026-03-01T12:00:01Z","released_at":"2026-03-01T13:00:00Z"}`},
		{"device", store.Device{ID: "fake-1", Index: 1, NUMA: 0, Healthy: false, Reason: "ecc", Since: at},
			`{"id":"fake-1","index":1,"numa":0,"healthy":false,"reason":"ecc","since":"2026-03-01T12:00:00Z"}`},
		{"removed device", store.Device{ID: "fake-1", Index: 1, Healthy: true, Since: at, Removed: true, RemovedAt: at},
			`{"id":"fake-1","index":1,"numa":0,"healthy":true,"since":"2026-03-01T12:00:00Z","removed":true,"removed_at":"2026-03-01T12:00:00Z"}`},
		{"health event", store.HealthEvent{Seq: 9, Time: at, DeviceID: "fake-1", Healthy: false, Reason: "ecc", Cause: store.CauseAdmin},
			`{"seq":9,"time":"2026-03-01T12:00:00Z","device_id":"fake-1","healthy":false,"reason":"ecc","cause":"admin"}`},
	} {
		got, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// TestStore_Concurrent runs writers, readers and Prune at once (run it with
// -race): sequence numbers stay unique and every write lands.
func TestStore_Concurrent(t *testing.T) {
	s, _ := mustDevices(t, 4)
	store.SetNoSyncForTest(s)
	const writers, each = 4, 50
	var wg sync.WaitGroup
	seen := make(chan uint64, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				a, err := s.RecordAllocation(store.Allocation{DeviceIDs: []string{specs(4)[(w+i)%4].ID}})
				if err != nil {
					t.Error(err)
					return
				}
				seen <- a.Seq
				if i%10 == 0 {
					if _, _, err := s.SetHealth(specs(4)[w].ID, i%20 == 0, "flap", store.CauseFaultInjection); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := s.Allocations(store.AllocationFilter{Active: true, Limit: 10}); err != nil {
				t.Error(err)
			}
			if _, err := s.Stats(); err != nil {
				t.Error(err)
			}
			if _, err := s.Prune(t.Context(), store.PruneOptions{MaxRecords: 1000, Batch: 5}); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	close(seen)
	unique := map[uint64]bool{}
	for seq := range seen {
		if unique[seq] {
			t.Errorf("seq %d handed out twice", seq)
		}
		unique[seq] = true
	}
	if st, err := s.Stats(); err != nil || st.Allocations != writers*each {
		t.Errorf("Stats() = %+v, %v; want %d allocations", st, err, writers*each)
	}
	if err := s.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestStats(t *testing.T) {
	s, _ := mustDevices(t, 3)
	mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}})
	mustSetHealth(t, s, "fake-1", false, "x")
	if _, err := s.Reconcile(specs(2)); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// HistoryBytes counts the keys (8 bytes) and JSON values of the history.
	var history int64
	as, _ := s.Allocations(store.AllocationFilter{})
	evs, _ := s.HealthEvents(store.EventFilter{})
	for _, v := range append([]any{as[0]}, evs[0], evs[1], evs[2], evs[3]) {
		data, _ := json.Marshal(v)
		history += 8 + int64(len(data))
	}
	want := store.Stats{SchemaVersion: store.SchemaVersion, Devices: 3, RemovedDevices: 1, Allocations: 1, HealthEvents: 4,
		HistoryBytes: history, FileSize: st.FileSize, DataSize: st.DataSize}
	if st != want || st.FileSize < st.DataSize || st.DataSize <= 0 {
		t.Errorf("Stats() = %+v, want %+v", st, want)
	}
}

// TestAllocation_OldAnnotations: records written when Allocation had an
// Annotations field still decode, and a rewrite drops the field.
func TestAllocation_OldAnnotations(t *testing.T) {
	path := newFile(t)
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("devices")).Put([]byte("fake-0"),
			[]byte(`{"id":"fake-0","index":0,"numa":0,"healthy":true,"since":"2026-01-01T00:00:00Z"}`)); err != nil {
			return err
		}
		b := tx.Bucket([]byte("allocations"))
		if err := b.SetSequence(1); err != nil {
			return err
		}
		return b.Put(binary.BigEndian.AppendUint64(nil, 1), []byte(`{"seq":1,"time":"2026-01-01T00:00:00Z","device_ids":["fake-0"],`+
			`"envs":{"VIRTUAL_GPU_IDS":"fake-0"},"annotations":{"unicore.mcyou.cc/numa":"0"},"state":"allocated"}`))
	})
	s := storetest.MustOpenPath(t, path, store.Options{})
	a, err := s.Allocation(1)
	if err != nil || a.Envs["VIRTUAL_GPU_IDS"] != "fake-0" || a.State != store.StateAllocated {
		t.Fatalf("old record: %+v, %v", a, err)
	}
	if _, err := s.UpdateAllocation(1, func(a *store.Allocation) error { a.State = store.StateReleased; return nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	rawView(t, path, func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte("allocations")).Get(binary.BigEndian.AppendUint64(nil, 1)); bytes.Contains(v, []byte("annotations")) {
			t.Errorf("rewritten record still has annotations: %s", v)
		}
		return nil
	})
}
