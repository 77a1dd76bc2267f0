package store_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// TestReconcile walks one store through a sequence of configurations.
func TestReconcile(t *testing.T) {
	c := newClock()
	s := storetest.MustOpen(t, store.Options{Now: c.Now})
	spec := func(id string, index, numa int) store.DeviceSpec {
		return store.DeviceSpec{ID: id, Index: index, NUMA: numa}
	}
	type dev struct {
		id      string
		index   int
		healthy bool
		removed bool
	}
	steps := []struct {
		name   string
		before func(t *testing.T)
		config []store.DeviceSpec
		want   store.ReconcileReport
		devs   []dev
	}{
		{
			name:   "first start adds all, healthy",
			config: []store.DeviceSpec{spec("a", 0, 0), spec("b", 1, 0), spec("c", 2, 1)},
			want:   store.ReconcileReport{Added: []string{"a", "b", "c"}, Configured: 3},
			devs:   []dev{{"a", 0, true, false}, {"b", 1, true, false}, {"c", 2, true, false}},
		},
		{
			name: "same config changes nothing and keeps health",
			before: func(t *testing.T) {
				mustSetHealth(t, s, "b", false, "ecc")
				mustSetHealth(t, s, "c", false, "thermal")
			},
			config: []store.DeviceSpec{spec("c", 2, 1), spec("a", 0, 0), spec("b", 1, 0)},
			want:   store.ReconcileReport{Configured: 3},
			devs:   []dev{{"a", 0, true, false}, {"b", 1, false, false}, {"c", 2, false, false}},
		},
		{
			name:   "vanished device is flagged removed, not deleted",
			config: []store.DeviceSpec{spec("a", 0, 0), spec("b", 1, 0)},
			want:   store.ReconcileReport{Removed: []string{"c"}, Configured: 2},
			devs:   []dev{{"a", 0, true, false}, {"b", 1, false, false}, {"c", 2, false, true}},
		},
		{
			name:   "removed device may not be configured: stays removed",
			config: []store.DeviceSpec{spec("a", 0, 0), spec("b", 1, 0)},
			want:   store.ReconcileReport{Configured: 2},
			devs:   []dev{{"a", 0, true, false}, {"b", 1, false, false}, {"c", 2, false, true}},
		},
		{
			name:   "re-appearing device restored with its health, new one added",
			config: []store.DeviceSpec{spec("a", 0, 0), spec("b", 1, 0), spec("c", 2, 1), spec("d", 3, 1)},
			want:   store.ReconcileReport{Added: []string{"d"}, Restored: []string{"c"}, Configured: 4},
			devs:   []dev{{"a", 0, true, false}, {"b", 1, false, false}, {"c", 2, false, false}, {"d", 3, true, false}},
		},
		{
			name:   "index and NUMA changes reported",
			config: []store.DeviceSpec{spec("a", 1, 0), spec("b", 0, 0), spec("c", 2, 1), spec("d", 3, 0)},
			want: store.ReconcileReport{Changed: []store.DeviceChange{
				{ID: "a", OldIndex: 0, NewIndex: 1, OldNUMA: 0, NewNUMA: 0},
				{ID: "b", OldIndex: 1, NewIndex: 0, OldNUMA: 0, NewNUMA: 0},
				{ID: "d", OldIndex: 3, NewIndex: 3, OldNUMA: 1, NewNUMA: 0},
			}, Configured: 4},
			devs: []dev{{"b", 0, false, false}, {"a", 1, true, false}, {"c", 2, false, false}, {"d", 3, true, false}},
		},
		{
			name:   "empty config removes all",
			config: nil,
			want:   store.ReconcileReport{Removed: []string{"a", "b", "c", "d"}},
			devs:   []dev{{"b", 0, false, true}, {"a", 1, true, true}, {"c", 2, false, true}, {"d", 3, true, true}},
		},
	}
	for _, step := range steps {
		if step.before != nil {
			step.before(t)
		}
		got, err := s.Reconcile(step.config)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if !reflect.DeepEqual(got, step.want) {
			t.Errorf("%s: report = %+v, want %+v", step.name, got, step.want)
		}
		if got.Empty() != step.want.Empty() {
			t.Errorf("%s: Empty() = %v", step.name, got.Empty())
		}
		devs, err := s.Devices()
		if err != nil {
			t.Fatal(err)
		}
		var gotDevs []dev
		for _, d := range devs {
			gotDevs = append(gotDevs, dev{d.ID, d.Index, d.Healthy, d.Removed})
			if d.Removed == d.RemovedAt.IsZero() {
				t.Errorf("%s: %s removed=%v but removed_at=%v", step.name, d.ID, d.Removed, d.RemovedAt)
			}
		}
		if !reflect.DeepEqual(gotDevs, step.devs) {
			t.Errorf("%s: devices = %+v, want %+v", step.name, gotDevs, step.devs)
		}
	}
}

func TestReconcile_Invalid(t *testing.T) {
	s, _ := mustDevices(t, 2)
	for _, tc := range []struct {
		name   string
		config []store.DeviceSpec
	}{
		{"empty id", []store.DeviceSpec{{ID: "", Index: 0}}},
		{"duplicate id", []store.DeviceSpec{{ID: "x", Index: 0}, {ID: "x", Index: 1}}},
		{"duplicate index", []store.DeviceSpec{{ID: "x", Index: 0}, {ID: "y", Index: 0}}},
		{"negative index", []store.DeviceSpec{{ID: "x", Index: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Reconcile(tc.config); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
			if devs, _ := s.Devices(); len(devs) != 2 || devs[0].Removed {
				t.Errorf("invalid config changed devices: %+v", devs)
			}
		})
	}
}

func mustSetHealth(t *testing.T, s *store.Store, id string, healthy bool, reason string) {
	t.Helper()
	if _, _, err := s.SetHealth(id, healthy, reason, store.CauseAdmin); err != nil {
		t.Fatal(err)
	}
}

func TestSetHealth(t *testing.T) {
	s, c := mustDevices(t, 2)
	added := c.Now() // the clock is past the devices' Since

	for _, tc := range []struct {
		name        string
		healthy     bool
		reason      string
		cause       string
		wantChanged bool
	}{
		{"unhealthy", false, "ecc", store.CauseFaultInjection, true},
		{"same again", false, "ecc", store.CauseFaultInjection, false},
		{"new reason", false, "thermal", store.CauseAdmin, true},
		{"healthy", true, "", store.CauseAdmin, true},
		{"healthy again", true, "", store.CauseAdmin, false},
	} {
		before, _ := s.HealthEvents(store.EventFilter{DeviceID: "fake-1"})
		d, changed, err := s.SetHealth("fake-1", tc.healthy, tc.reason, tc.cause)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if changed != tc.wantChanged || d.Healthy != tc.healthy || d.Reason != tc.reason || d.ID != "fake-1" {
			t.Errorf("%s: got %+v changed=%v", tc.name, d, changed)
		}
		after, _ := s.HealthEvents(store.EventFilter{DeviceID: "fake-1"})
		if n := len(after) - len(before); (n == 1) != tc.wantChanged || n > 1 {
			t.Errorf("%s: %d new events, changed=%v", tc.name, n, tc.wantChanged)
		}
		if tc.wantChanged {
			e := after[0]
			if e.Healthy != tc.healthy || e.Reason != tc.reason || e.Cause != tc.cause || !e.Time.Equal(d.Since) || !d.Since.After(added) {
				t.Errorf("%s: event %+v, device %+v", tc.name, e, d)
			}
		}
	}
	if _, _, err := s.SetHealth("fake-9", false, "x", store.CauseAdmin); !errors.Is(err, store.ErrUnknownDevice) {
		t.Errorf("unknown device: err = %v, want ErrUnknownDevice", err)
	}
	if _, err := s.Device("fake-9"); !errors.Is(err, store.ErrUnknownDevice) {
		t.Errorf("Device(unknown): err = %v, want ErrUnknownDevice", err)
	}
	if d, err := s.Device("fake-0"); err != nil || !d.Healthy || d.Index != 0 {
		t.Errorf("Device(fake-0) = %+v, %v", d, err)
	}
}

func TestHealth_PersistsAcrossReopen(t *testing.T) {
	s, _ := mustDevices(t, 3)
	d, _, err := s.SetHealth("fake-2", false, "ecc", store.CauseAdmin)
	if err != nil {
		t.Fatal(err)
	}
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = storetest.MustOpenPath(t, path, store.Options{})
	// The plugin reconciles at every start: health survives.
	if rep, err := s.Reconcile(specs(3)); err != nil || !rep.Empty() {
		t.Fatalf("reconcile after restart: %+v, %v", rep, err)
	}
	devs, err := s.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if got := devs[2]; got != d {
		t.Errorf("after reopen %+v, want %+v", got, d)
	}
	evs, err := s.HealthEvents(store.EventFilter{DeviceID: "fake-2", Limit: 1})
	if err != nil || len(evs) != 1 || evs[0].Healthy || evs[0].Reason != "ecc" {
		t.Errorf("HealthEvents = %+v, %v", evs, err)
	}
}

func TestHealthEvents_Filters(t *testing.T) {
	s, c := mustDevices(t, 2) // two "device added" events, seq 1 and 2
	mid := c.Now()
	mustSetHealth(t, s, "fake-0", false, "a") // 3
	mustSetHealth(t, s, "fake-1", false, "b") // 4
	mustSetHealth(t, s, "fake-0", true, "")   // 5

	for _, tc := range []struct {
		name string
		f    store.EventFilter
		want []uint64
	}{
		{"all, newest first", store.EventFilter{}, []uint64{5, 4, 3, 2, 1}},
		{"device", store.EventFilter{DeviceID: "fake-0"}, []uint64{5, 3, 1}},
		{"since", store.EventFilter{Since: mid}, []uint64{5, 4, 3}},
		{"limit", store.EventFilter{Limit: 2}, []uint64{5, 4}},
		{"device and limit", store.EventFilter{DeviceID: "fake-1", Limit: 1}, []uint64{4}},
		{"unknown device", store.EventFilter{DeviceID: "nope"}, nil},
	} {
		evs, err := s.HealthEvents(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, e := range evs {
			got = append(got, e.Seq)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: seqs %v, want %v", tc.name, got, tc.want)
		}
	}
	first, _ := s.HealthEvents(store.EventFilter{DeviceID: "fake-1"})
	if e := first[len(first)-1]; e.Cause != store.CauseReconcile || !e.Healthy || e.Time.Location() != time.UTC {
		t.Errorf("device-added event = %+v", e)
	}
}

// TestReconcile_UUID walks one store through the life of device UUIDs: set
// once from the specs, kept across restarts, a renamed node and removal, and
// assigned later to a device that had none.
func TestReconcile_UUID(t *testing.T) {
	c := newClock()
	s := storetest.MustOpen(t, store.Options{Now: c.Now})
	path := s.Path()
	on := func(node string, ids ...string) []store.DeviceSpec {
		out := make([]store.DeviceSpec, len(ids))
		for i, id := range ids {
			out[i] = store.DeviceSpec{ID: id, Index: i, UUID: ""}
			if node != "" {
				out[i].UUID = "GPU-" + node + "-" + id
			}
		}
		return out
	}
	steps := []struct {
		name    string
		reopen  bool
		config  []store.DeviceSpec
		want    store.ReconcileReport
		uuids   map[string]string // every stored device's UUID after the step
		nothing bool              // the report is Empty
	}{
		{
			name:   "first start stores the given UUIDs",
			config: on("a", "fake-0", "fake-1"),
			want:   store.ReconcileReport{Added: []string{"fake-0", "fake-1"}, Configured: 2},
			uuids:  map[string]string{"fake-0": "GPU-a-fake-0", "fake-1": "GPU-a-fake-1"},
		},
		{
			name:   "restart with the same node changes nothing",
			reopen: true, config: on("a", "fake-0", "fake-1"),
			want:    store.ReconcileReport{Configured: 2},
			uuids:   map[string]string{"fake-0": "GPU-a-fake-0", "fake-1": "GPU-a-fake-1"},
			nothing: true,
		},
		{
			name:   "renamed node: stored UUIDs kept, conflicts reported",
			config: on("b", "fake-0", "fake-1"),
			want: store.ReconcileReport{UUIDConflicts: []store.UUIDConflict{
				{ID: "fake-0", Stored: "GPU-a-fake-0", Given: "GPU-b-fake-0"},
				{ID: "fake-1", Stored: "GPU-a-fake-1", Given: "GPU-b-fake-1"},
			}, Configured: 2},
			uuids:   map[string]string{"fake-0": "GPU-a-fake-0", "fake-1": "GPU-a-fake-1"},
			nothing: true,
		},
		{
			name:   "specs without UUIDs keep the stored ones",
			config: on("", "fake-0", "fake-1"),
			want:   store.ReconcileReport{Configured: 2},
			uuids:  map[string]string{"fake-0": "GPU-a-fake-0", "fake-1": "GPU-a-fake-1"}, nothing: true,
		},
		{
			name:   "a removed device keeps its UUID; one added without a UUID has none",
			config: on("", "fake-0", "fake-2"),
			want:   store.ReconcileReport{Added: []string{"fake-2"}, Removed: []string{"fake-1"}, Configured: 2},
			uuids:  map[string]string{"fake-0": "GPU-a-fake-0", "fake-1": "GPU-a-fake-1", "fake-2": ""},
		},
		{
			name:   "restored under a renamed node: the same UUID; a device without one gets it",
			config: on("b", "fake-0", "fake-2", "fake-1"),
			want: store.ReconcileReport{Restored: []string{"fake-1"}, UUIDsAssigned: []string{"fake-2"},
				UUIDConflicts: []store.UUIDConflict{
					{ID: "fake-0", Stored: "GPU-a-fake-0", Given: "GPU-b-fake-0"},
					{ID: "fake-1", Stored: "GPU-a-fake-1", Given: "GPU-b-fake-1"},
				},
				Changed:    []store.DeviceChange{{ID: "fake-1", OldIndex: 1, NewIndex: 2}},
				Configured: 3},
			uuids: map[string]string{"fake-0": "GPU-a-fake-0", "fake-1": "GPU-a-fake-1", "fake-2": "GPU-b-fake-2"},
		},
		{
			name:   "an assigned UUID is stored like any other",
			reopen: true, config: on("c", "fake-0", "fake-2", "fake-1"),
			want: store.ReconcileReport{UUIDConflicts: []store.UUIDConflict{
				{ID: "fake-0", Stored: "GPU-a-fake-0", Given: "GPU-c-fake-0"},
				{ID: "fake-1", Stored: "GPU-a-fake-1", Given: "GPU-c-fake-1"},
				{ID: "fake-2", Stored: "GPU-b-fake-2", Given: "GPU-c-fake-2"},
			}, Configured: 3},
			uuids:   map[string]string{"fake-0": "GPU-a-fake-0", "fake-1": "GPU-a-fake-1", "fake-2": "GPU-b-fake-2"},
			nothing: true,
		},
	}
	for _, step := range steps {
		if step.reopen {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = storetest.MustOpenPath(t, path, store.Options{Now: c.Now})
		}
		got, err := s.Reconcile(step.config)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if !reflect.DeepEqual(got, step.want) {
			t.Errorf("%s: report = %+v\nwant %+v", step.name, got, step.want)
		}
		if got.Empty() != step.nothing {
			t.Errorf("%s: Empty() = %v, want %v", step.name, got.Empty(), step.nothing)
		}
		devs, err := s.Devices()
		if err != nil {
			t.Fatal(err)
		}
		uuids := map[string]string{}
		for _, d := range devs {
			uuids[d.ID] = d.UUID
			if one, err := s.Device(d.ID); err != nil || one.UUID != d.UUID {
				t.Errorf("%s: Device(%s) = %+v, %v; Devices() says UUID %q", step.name, d.ID, one, err, d.UUID)
			}
		}
		if !reflect.DeepEqual(uuids, step.uuids) {
			t.Errorf("%s: UUIDs = %v, want %v", step.name, uuids, step.uuids)
		}
	}
}

// TestReconcile_DuplicateUUID: two specs with one UUID are refused whole.
func TestReconcile_DuplicateUUID(t *testing.T) {
	s, _ := mustDevices(t, 2)
	_, err := s.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0, UUID: "GPU-x"}, {ID: "fake-1", Index: 1, UUID: "GPU-x"}})
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), `"fake-0" and "fake-1" share UUID "GPU-x"`) {
		t.Fatalf("err = %v, want ErrInvalid naming both devices and the UUID", err)
	}
	devs, _ := s.Devices()
	for _, d := range devs {
		if d.UUID != "" {
			t.Errorf("refused specs stored UUID %q for %s", d.UUID, d.ID)
		}
	}
}
