package store_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// sharedSpecs returns the specs of n GPUs fake-0 … fake-(n-1) of which the
// GPUs in shared are shared as r replicas fake-<i>::<j>, as the plugin
// configures them: every GPU, then the replicas of the shared ones.
func sharedSpecs(n, r int, shared ...int) []store.DeviceSpec {
	out := specs(n)
	for i := range out {
		out[i].UUID = fmt.Sprintf("GPU-%d", i)
	}
	for _, i := range shared {
		for j := range r {
			out = append(out, store.DeviceSpec{ID: fmt.Sprintf("fake-%d::%d", i, j), Index: i, NUMA: i / 2, GPU: fmt.Sprintf("fake-%d", i), Replica: j})
		}
	}
	return out
}

// ids returns the ids of devs that are not removed, in order.
func liveIDs(devs []store.Device) []string {
	var out []string
	for _, d := range devs {
		if !d.Removed {
			out = append(out, d.ID)
		}
	}
	return out
}

// TestReconcile_Replicas walks a store through sharing on, a change of the
// replica count, sharing off and on again: replica ids are added, flagged
// removed when they vanish and restored when they come back; the GPUs stay
// configured throughout and keep their UUIDs and health, which their
// replicas share.
func TestReconcile_Replicas(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{Now: newClock().Now})
	steps := []struct {
		name   string
		config []store.DeviceSpec
		want   store.ReconcileReport
		live   []string
		events int // health events after the step
	}{
		{"whole GPUs", sharedSpecs(2, 0),
			store.ReconcileReport{Added: []string{"fake-0", "fake-1"}, Configured: 2},
			[]string{"fake-0", "fake-1"}, 2},
		{"shared as 3: replicas added without health events", sharedSpecs(2, 3, 0, 1),
			store.ReconcileReport{Added: []string{"fake-0::0", "fake-0::1", "fake-0::2", "fake-1::0", "fake-1::1", "fake-1::2"}, Configured: 8, SharedGPUs: 2},
			[]string{"fake-0", "fake-0::0", "fake-0::1", "fake-0::2", "fake-1", "fake-1::0", "fake-1::1", "fake-1::2"}, 2},
		{"2 replicas, GPU 1 whole: vanished replicas removed", sharedSpecs(2, 2, 0),
			store.ReconcileReport{Removed: []string{"fake-0::2", "fake-1::0", "fake-1::1", "fake-1::2"}, Configured: 4, SharedGPUs: 1},
			[]string{"fake-0", "fake-0::0", "fake-0::1", "fake-1"}, 2},
		{"sharing off", sharedSpecs(2, 0),
			store.ReconcileReport{Removed: []string{"fake-0::0", "fake-0::1"}, Configured: 2},
			[]string{"fake-0", "fake-1"}, 2},
		{"3 again: restored", sharedSpecs(2, 3, 0, 1),
			store.ReconcileReport{Restored: []string{"fake-0::0", "fake-0::1", "fake-0::2", "fake-1::0", "fake-1::1", "fake-1::2"}, Configured: 8, SharedGPUs: 2},
			[]string{"fake-0", "fake-0::0", "fake-0::1", "fake-0::2", "fake-1", "fake-1::0", "fake-1::1", "fake-1::2"}, 2},
	}
	for _, st := range steps {
		rep, err := s.Reconcile(st.config)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !reflect.DeepEqual(rep, st.want) {
			t.Errorf("%s: report = %+v\nwant %+v", st.name, rep, st.want)
		}
		devs, err := s.Devices()
		if err != nil {
			t.Fatal(err)
		}
		if got := liveIDs(devs); !slices.Equal(got, st.live) {
			t.Errorf("%s: configured devices %v, want %v (a GPU first, its replicas by number)", st.name, got, st.live)
		}
		if evs, _ := s.HealthEvents(store.EventFilter{}); len(evs) != st.events {
			t.Errorf("%s: %d health events, want %d", st.name, len(evs), st.events)
		}
		if e := (store.ConfigEvent{}).FromReport(rep); e.Devices != len(st.live)-rep.SharedGPUs {
			t.Errorf("%s: ConfigEvent.Devices = %d, want the advertised %d", st.name, e.Devices, len(st.live)-rep.SharedGPUs)
		}
	}
	devs, _ := s.Devices()
	for _, d := range devs {
		switch {
		case d.IsReplica() && (d.UUID != "" || d.Index != int(d.GPU[len("fake-")]-'0') || d.NUMA != 0):
			t.Errorf("replica %+v: want no UUID, its GPU's index and NUMA node", d)
		case !d.IsReplica() && d.UUID != "GPU-"+d.ID[len("fake-"):]:
			t.Errorf("GPU %+v lost its UUID", d)
		}
	}
}

// A replica has its GPU's health: readers return the GPU's, SetHealth
// refuses a replica and names the GPU, and a GPU's health change is one
// event under the GPU's id.
func TestReplicas_HealthIsTheGPUs(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{Now: newClock().Now})
	if _, err := s.Reconcile(sharedSpecs(2, 2, 0, 1)); err != nil {
		t.Fatal(err)
	}
	mustSetHealth(t, s, "fake-1", false, "XID 79")
	gpu, err := s.Device("fake-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"fake-1::0", "fake-1::1"} {
		d, err := s.Device(id)
		if err != nil || d.Healthy || d.Reason != "XID 79" || !d.Since.Equal(gpu.Since) || d.GPU != "fake-1" {
			t.Errorf("Device(%s) = %+v, %v; want fake-1's health", id, d, err)
		}
	}
	devs, _ := s.Devices()
	for _, d := range devs {
		if want := !strings.HasPrefix(d.ID, "fake-1"); d.Healthy != want {
			t.Errorf("%s healthy = %v, want %v", d.ID, d.Healthy, want)
		}
	}
	_, _, err = s.SetHealth("fake-1::0", true, "", store.CauseAdmin)
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), `"fake-1::0" is replica 0 of GPU "fake-1"`) {
		t.Errorf("SetHealth of a replica: %v, want ErrInvalid naming the GPU", err)
	}
	evs, _ := s.HealthEvents(store.EventFilter{})
	if len(evs) != 3 || evs[0].DeviceID != "fake-1" {
		t.Errorf("health events %+v, want fake-1's change on top of two device-added", evs)
	}
	// Sharing off: the GPUs are still the same records, with their health.
	if _, err := s.Reconcile(sharedSpecs(2, 0)); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Device("fake-1"); d.Healthy || d.Removed {
		t.Errorf("fake-1 after sharing off = %+v, want unhealthy, configured", d)
	}
}

// An allocation of replicas records their GPUs, in device order without
// repeats; a GPU's id selects the allocations of its replicas; an
// allocation of GPUs records none.
func TestRecordAllocation_GPUIDs(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{Now: newClock().Now})
	if _, err := s.Reconcile(sharedSpecs(4, 2, 0, 2, 3)); err != nil {
		t.Fatal(err)
	}
	a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0::0", "fake-0::1", "fake-1", "fake-3::1"}, GPUIDs: []string{"ignored"}})
	if want := []string{"fake-0", "fake-1", "fake-3"}; !slices.Equal(a.GPUIDs, want) || !slices.Equal(a.GPUs(), want) {
		t.Errorf("GPUIDs = %v, GPUs() = %v; want %v", a.GPUIDs, a.GPUs(), want)
	}
	whole := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-1"}})
	if whole.GPUIDs != nil || !slices.Equal(whole.GPUs(), []string{"fake-1"}) {
		t.Errorf("whole GPU: GPUIDs = %v, GPUs() = %v", whole.GPUIDs, whole.GPUs())
	}
	for id, want := range map[string][]uint64{"fake-0": {a.Seq}, "fake-0::1": {a.Seq}, "fake-3": {a.Seq}, "fake-1": {whole.Seq, a.Seq}, "fake-2": nil} {
		got, err := s.Allocations(store.AllocationFilter{DeviceID: id})
		if err != nil || !slices.Equal(seqs(got), want) {
			t.Errorf("Allocations(DeviceID %s) = %v, %v; want %v", id, seqs(got), err, want)
		}
	}
	back, err := s.Allocation(a.Seq)
	if err != nil || !slices.Equal(back.GPUIDs, a.GPUIDs) {
		t.Errorf("read back %+v, %v", back, err)
	}
	// The record resolves after sharing is off: the replicas are removed, not deleted.
	if _, err := s.Reconcile(sharedSpecs(4, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateAllocation(a.Seq, func(a *store.Allocation) error { a.State = store.StateReleased; return nil }); err != nil {
		t.Errorf("update after sharing off: %v", err)
	}
}

func TestReconcile_InvalidReplicas(t *testing.T) {
	s, _ := mustDevices(t, 2)
	gpu := func(id string, index int) store.DeviceSpec { return store.DeviceSpec{ID: id, Index: index} }
	rep := func(id, gpu string, index, n int) store.DeviceSpec {
		return store.DeviceSpec{ID: id, Index: index, GPU: gpu, Replica: n}
	}
	for _, tc := range []struct {
		name   string
		config []store.DeviceSpec
		msg    string
	}{
		{"GPU not configured", []store.DeviceSpec{gpu("g0", 0), rep("r", "g1", 1, 0)}, `its GPU "g1" is not a GPU`},
		{"GPU is a replica", []store.DeviceSpec{gpu("g0", 0), rep("r0", "g0", 0, 0), rep("r1", "r0", 0, 1)}, `its GPU "r0" is not a GPU`},
		{"index not its GPU's", []store.DeviceSpec{gpu("g0", 0), rep("r", "g0", 1, 0)}, `has index 1, its GPU "g0" 0`},
		{"replica number twice", []store.DeviceSpec{gpu("g0", 0), rep("a", "g0", 0, 1), rep("b", "g0", 0, 1)}, "both replica 1"},
		{"negative replica number", []store.DeviceSpec{gpu("g0", 0), rep("a", "g0", 0, -1)}, "negative replica number"},
		{"replica number without GPU", []store.DeviceSpec{{ID: "g0", Index: 0, Replica: 2}}, "no GPU"},
		{"replica with a UUID", []store.DeviceSpec{gpu("g0", 0), {ID: "a", Index: 0, GPU: "g0", UUID: "GPU-a"}}, "UUID of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Reconcile(tc.config)
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want ErrInvalid with %q", err, tc.msg)
			}
			if devs, _ := s.Devices(); len(devs) != 2 || devs[0].Removed {
				t.Errorf("invalid config changed devices: %+v", devs)
			}
		})
	}
}

// Replica records that make no sense are damaged records: quarantined at
// Open, the rest of the devices kept.
func TestOpen_DamagedReplicaRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := storetest.MustOpenPath(t, path, store.Options{})
	if _, err := s.Reconcile(sharedSpecs(1, 1, 0)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	bad := map[string]string{
		"self":     `{"id":"self","index":0,"numa":0,"healthy":true,"since":"2026-01-01T00:00:00Z","gpu":"self"}`,
		"negative": `{"id":"negative","index":0,"numa":0,"healthy":true,"since":"2026-01-01T00:00:00Z","gpu":"fake-0","replica":-1}`,
		"orphan":   `{"id":"orphan","index":0,"numa":0,"healthy":true,"since":"2026-01-01T00:00:00Z","replica":3}`,
	}
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		for k, v := range bad {
			if err := tx.Bucket([]byte("devices")).Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	s = storetest.MustOpenPath(t, path, store.Options{})
	dmg, err := s.Damaged()
	if err != nil || len(dmg) != len(bad) {
		t.Errorf("Damaged() = %+v, %v; want the %d bad replica records", dmg, err, len(bad))
	}
	if devs, _ := s.Devices(); !slices.Equal(liveIDs(devs), []string{"fake-0", "fake-0::0"}) {
		t.Errorf("devices %v, want fake-0 and its replica", liveIDs(devs))
	}
}

// TestOpen_MigratesV3: a version-3 file is read as it is, and read-write
// gets the current version with every record as it was.
func TestOpen_MigratesV3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := storetest.MustOpenPath(t, path, store.Options{Now: newClock().Now})
	if _, err := s.Reconcile(sharedSpecs(2, 0)); err != nil {
		t.Fatal(err)
	}
	mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-1"}})
	before, err := s.Devices()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), binary.BigEndian.AppendUint64(nil, 3))
	})
	s = storetest.MustOpenPath(t, path, store.Options{})
	if v, migrated := s.MigratedFrom(); v != 3 || !migrated || s.SchemaVersion() != store.SchemaVersion {
		t.Errorf("MigratedFrom() = %d, %v, SchemaVersion() = %d; want 3, true, %d", v, migrated, s.SchemaVersion(), store.SchemaVersion)
	}
	after, err := s.Devices()
	if err != nil || !reflect.DeepEqual(after, before) {
		t.Errorf("devices after migration %+v, %v; want %+v", after, err, before)
	}
	if all, err := s.Allocations(store.AllocationFilter{}); err != nil || len(all) != 1 || all[0].GPUIDs != nil {
		t.Errorf("allocations after migration %+v, %v", all, err)
	}
	if _, err := s.Reconcile(sharedSpecs(2, 2, 1)); err != nil {
		t.Errorf("sharing after migration: %v", err)
	}
}
