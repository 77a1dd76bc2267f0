package store_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

func configSeqs(evs []store.ConfigEvent) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func mustConfig(t testing.TB, s *store.Store, e store.ConfigEvent) store.ConfigEvent {
	t.Helper()
	got, err := s.RecordConfigChange(e)
	if err != nil {
		t.Fatalf("record config change %+v: %v", e, err)
	}
	return got
}

// configHistory reconciles three configurations, recording each as an
// event from the report: four devices (seq 1), two (seq 2, fake-2 and
// fake-3 removed), three (seq 3, fake-2 restored).
func configHistory(t *testing.T) (*store.Store, *clock, time.Time) {
	t.Helper()
	c := newClock()
	s := storetest.MustOpen(t, store.Options{Now: c.Now})
	var mid time.Time
	for i, step := range []struct {
		n       int
		profile string
		why     string
	}{{4, "", store.WhyFlags}, {2, "small", store.WhyNodeLabel}, {3, "medium", store.WhyFileChanged}} {
		rep, err := s.Reconcile(specs(step.n))
		if err != nil {
			t.Fatal(err)
		}
		prev := ""
		if i > 0 {
			last, err := s.ConfigEvents(store.ConfigFilter{Limit: 1})
			if err != nil || len(last) != 1 {
				t.Fatalf("newest config event: %v, %v", last, err)
			}
			prev = last[0].Profile
		}
		mustConfig(t, s, store.ConfigEvent{Profile: step.profile, PreviousProfile: prev, Why: step.why,
			ResourceName: "unicore.mcyou.cc/gpu", Machine: "dgx1-volta"}.FromReport(rep))
		if i == 0 {
			mid = c.Now()
		}
	}
	return s, c, mid
}

func TestRecordConfigChange(t *testing.T) {
	s, _, _ := configHistory(t)
	evs, err := s.ConfigEvents(store.ConfigFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
	want := []store.ConfigEvent{
		{Seq: 3, Profile: "medium", PreviousProfile: "small", Why: store.WhyFileChanged, ResourceName: "unicore.mcyou.cc/gpu",
			Machine: "dgx1-volta", Devices: 3, Restored: []string{"fake-2"}},
		{Seq: 2, Profile: "small", Why: store.WhyNodeLabel, ResourceName: "unicore.mcyou.cc/gpu",
			Machine: "dgx1-volta", Devices: 2, Removed: []string{"fake-2", "fake-3"}},
		{Seq: 1, Why: store.WhyFlags, ResourceName: "unicore.mcyou.cc/gpu",
			Machine: "dgx1-volta", Devices: 4, Added: []string{"fake-0", "fake-1", "fake-2", "fake-3"}},
	}
	var newer time.Time
	for i := range evs {
		if evs[i].Time.IsZero() || evs[i].Time.Location() != time.UTC || (i > 0 && !evs[i].Time.Before(newer)) {
			t.Errorf("event %d: time %v: want set, UTC, older than the one before", evs[i].Seq, evs[i].Time)
		}
		newer, evs[i].Time = evs[i].Time, time.Time{}
	}
	if !reflect.DeepEqual(evs, want) {
		t.Errorf("ConfigEvents() =\n%+v\nwant\n%+v", evs, want)
	}

	// A given time is kept (in UTC); the caller's slices are copied.
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	added := []string{"fake-0"}
	got := mustConfig(t, s, store.ConfigEvent{Time: at, Why: "test", Added: added, Seq: 99})
	added[0] = "changed"
	if got.Seq != 4 || !got.Time.Equal(at) || got.Time.Location() != time.UTC || got.Added[0] != "fake-0" {
		t.Errorf("recorded %+v: want seq 4 (not the given 99), the given time in UTC, its own copy of the ids", got)
	}
	got.Added[0] = "mine"
	if again, _ := s.ConfigEvents(store.ConfigFilter{Limit: 1}); again[0].Added[0] != "fake-0" {
		t.Errorf("the returned event shares its ids with the store: %v", again[0].Added)
	}
}

func TestConfigEvents_Filters(t *testing.T) {
	s, _, mid := configHistory(t)
	for _, tc := range []struct {
		name string
		f    store.ConfigFilter
		want []uint64
	}{
		{"all, newest first", store.ConfigFilter{}, []uint64{3, 2, 1}},
		{"device added", store.ConfigFilter{DeviceID: "fake-0"}, []uint64{1}},
		{"device added, removed and restored", store.ConfigFilter{DeviceID: "fake-2"}, []uint64{3, 2, 1}},
		{"device added and removed", store.ConfigFilter{DeviceID: "fake-3"}, []uint64{2, 1}},
		{"since", store.ConfigFilter{Since: mid}, []uint64{3, 2}},
		{"limit", store.ConfigFilter{Limit: 1}, []uint64{3}},
		{"device and limit", store.ConfigFilter{DeviceID: "fake-3", Limit: 1}, []uint64{2}},
		{"unknown device", store.ConfigFilter{DeviceID: "nope"}, nil},
	} {
		evs, err := s.ConfigEvents(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := configSeqs(evs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: seqs %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRecordConfigChange_Invalid(t *testing.T) {
	s, _ := mustDevices(t, 2)
	for _, tc := range []struct {
		name string
		e    store.ConfigEvent
		want error
		msg  string
	}{
		{"no why", store.ConfigEvent{Devices: 2}, store.ErrInvalid, "no why"},
		{"negative devices", store.ConfigEvent{Why: "x", Devices: -1}, store.ErrInvalid, "negative device count -1"},
		{"negative replicas", store.ConfigEvent{Why: "x", Replicas: -2}, store.ErrInvalid, "negative replicas -2"},
		{"empty id", store.ConfigEvent{Why: "x", Removed: []string{""}}, store.ErrInvalid, "empty device id in removed"},
		{"repeated id", store.ConfigEvent{Why: "x", Restored: []string{"fake-0", "fake-0"}}, store.ErrInvalid, `"fake-0" listed twice in restored`},
		{"unknown device", store.ConfigEvent{Why: "x", Added: []string{"fake-0", "fake-7"}}, store.ErrUnknownDevice, `"fake-7"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.RecordConfigChange(tc.e)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "record config change: ") {
				t.Errorf("err = %v, want %v saying %q", err, tc.want, tc.msg)
			}
			if evs, _ := s.ConfigEvents(store.ConfigFilter{}); len(evs) != 0 {
				t.Errorf("a refused event was stored: %+v", evs)
			}
		})
	}
}

func TestConfigEvent_FromReportAndSameConfig(t *testing.T) {
	rep := store.ReconcileReport{Added: []string{"a"}, Removed: []string{"b"}, Restored: []string{"c"},
		Changed: []store.DeviceChange{{ID: "d"}}, Configured: 7}
	e := store.ConfigEvent{Profile: "p", Why: store.WhyDefault, Machine: "m", Replicas: 2}.FromReport(rep)
	want := store.ConfigEvent{Profile: "p", Why: store.WhyDefault, Machine: "m", Replicas: 2, Devices: 7,
		Added: []string{"a"}, Removed: []string{"b"}, Restored: []string{"c"}}
	if !reflect.DeepEqual(e, want) {
		t.Errorf("FromReport = %+v, want %+v", e, want)
	}
	e.Added[0] = "x"
	if rep.Added[0] != "a" {
		t.Error("FromReport shares the report's slices")
	}

	base := store.ConfigEvent{Profile: "p", ResourceName: "r", Machine: "m", Devices: 4, Replicas: 2, Why: store.WhyNodeLabel}
	for _, tc := range []struct {
		name   string
		change func(*store.ConfigEvent)
		same   bool
	}{
		{"identical", func(*store.ConfigEvent) {}, true},
		{"other why, detail, time and device changes", func(e *store.ConfigEvent) {
			e.Why, e.Detail, e.Time, e.Seq, e.Added, e.PreviousProfile = store.WhyDefault, "d", time.Now(), 9, []string{"x"}, "q"
		}, true},
		{"profile", func(e *store.ConfigEvent) { e.Profile = "" }, false},
		{"resource", func(e *store.ConfigEvent) { e.ResourceName = "r2" }, false},
		{"machine", func(e *store.ConfigEvent) { e.Machine = "m2" }, false},
		{"devices", func(e *store.ConfigEvent) { e.Devices = 8 }, false},
		{"replicas", func(e *store.ConfigEvent) { e.Replicas = 0 }, false},
	} {
		o := base
		tc.change(&o)
		if got := base.SameConfig(o); got != tc.same {
			t.Errorf("%s: SameConfig = %v, want %v", tc.name, got, tc.same)
		}
	}
}

// TestConfigEvents_PersistAndReadOnly: events survive a reopen, sequence
// numbers go on, and a read-only store lists them but refuses to record.
func TestConfigEvents_PersistAndReadOnly(t *testing.T) {
	s, _, _ := configHistory(t)
	path := s.Path()
	want, _ := s.ConfigEvents(store.ConfigFilter{})
	st, err := s.Stats()
	if err != nil || st.ConfigEvents != 3 {
		t.Errorf("Stats() = %+v, %v; want 3 config events", st, err)
	}
	s.Close()

	ro := storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})
	if got, err := ro.ConfigEvents(store.ConfigFilter{}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("read-only ConfigEvents() = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ro.RecordConfigChange(store.ConfigEvent{Why: "x"}); !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("read-only RecordConfigChange: err = %v, want ErrReadOnly", err)
	}
	ro.Close()

	s = storetest.MustOpenPath(t, path, store.Options{})
	if got, err := s.ConfigEvents(store.ConfigFilter{}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("after reopen ConfigEvents() = %+v, %v; want %+v", got, err, want)
	}
	if e := mustConfig(t, s, store.ConfigEvent{Why: "x"}); e.Seq != 4 {
		t.Errorf("next seq %d, want 4", e.Seq)
	}
}

// TestOpen_DamagedConfigEvents: a damaged configuration event is reported
// read-only and quarantined read-write, like any other record; the others
// stay readable.
func TestOpen_DamagedConfigEvents(t *testing.T) {
	for _, tc := range []struct {
		name, value, reason string
	}{
		{"not JSON", "garbage", "not a JSON object"},
		{"seq mismatch", `{"seq":9,"time":"2026-03-01T12:00:00Z","why":"flags","devices":2}`, "seq 9 does not match its key 2"},
		{"no time", `{"seq":2,"why":"flags","devices":2}`, "no time"},
		{"no why", `{"seq":2,"time":"2026-03-01T12:00:00Z","devices":2}`, "no why"},
		{"negative devices", `{"seq":2,"time":"2026-03-01T12:00:00Z","why":"flags","devices":-3}`, "negative device count -3"},
		{"empty id", `{"seq":2,"time":"2026-03-01T12:00:00Z","why":"flags","devices":2,"added":[""]}`, "empty device id in added"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, _ := configHistory(t)
			path := s.Path()
			s.Close()
			storetest.Damage(t, path, "config_events", storetest.SeqKey(2), []byte(tc.value))
			for _, readOnly := range []bool{true, false} {
				s := storetest.MustOpenPath(t, path, store.Options{ReadOnly: readOnly})
				dmg, err := s.Damaged()
				if err != nil || len(dmg) != 1 || dmg[0].Bucket != "config_events" || dmg[0].Key != "2" ||
					!strings.Contains(dmg[0].Reason, tc.reason) || dmg[0].Quarantined.IsZero() == !readOnly {
					t.Errorf("read-only %v: Damaged() = %+v, %v; want config_events/2 (%s)", readOnly, dmg, err, tc.reason)
				}
				if evs, err := s.ConfigEvents(store.ConfigFilter{}); err != nil || !reflect.DeepEqual(configSeqs(evs), []uint64{3, 1}) {
					t.Errorf("read-only %v: ConfigEvents() = %v, %v; want 3 1", readOnly, configSeqs(evs), err)
				}
				s.Close()
			}
			rawView(t, path, func(tx *bolt.Tx) error {
				if v := tx.Bucket([]byte("config_events")).Get(storetest.SeqKey(2)); v != nil {
					t.Errorf("damaged event still in place: %q", v)
				}
				return nil
			})
		})
	}
}

// TestReconcileConfig: the device change and its configuration event are
// stored together; the event's device part is the report, its previous
// profile the newest stored event's; a start with the configuration in
// force records nothing; a failing check commits neither.
func TestReconcileConfig(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{Now: newClock().Now})
	cfg := func(profile string) store.ConfigEvent {
		return store.ConfigEvent{Profile: profile, Why: store.WhyFileChanged, ResourceName: "unicore.mcyou.cc/gpu", Machine: "dgx1-volta",
			Added: []string{"ignored"}, PreviousProfile: "ignored"} // the store fills these in, and Devices when 0
	}
	type want struct {
		recorded bool
		event    store.ConfigEvent // Time and the caller's fields not compared
	}
	for _, step := range []struct {
		name    string
		devices int
		profile string
		want    want
	}{
		{"first", 4, "big", want{true, store.ConfigEvent{Seq: 1, Profile: "big", Devices: 4, Added: []string{"fake-0", "fake-1", "fake-2", "fake-3"}}}},
		{"the same again", 4, "big", want{false, store.ConfigEvent{Seq: 1, Profile: "big", Devices: 4, Added: []string{"fake-0", "fake-1", "fake-2", "fake-3"}}}},
		{"fewer", 2, "small", want{true, store.ConfigEvent{Seq: 2, Profile: "small", PreviousProfile: "big", Devices: 2, Removed: []string{"fake-2", "fake-3"}}}},
		{"more, same profile", 3, "small", want{true, store.ConfigEvent{Seq: 3, Profile: "small", PreviousProfile: "small", Devices: 3, Restored: []string{"fake-2"}}}},
		{"restart", 3, "small", want{false, store.ConfigEvent{Seq: 3, Profile: "small", PreviousProfile: "small", Devices: 3, Restored: []string{"fake-2"}}}},
	} {
		var seen []store.Device
		got, err := s.ReconcileConfig(specs(step.devices), cfg(step.profile), func(d []store.Device) error { seen = d; return nil })
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		e := got.Event
		if e.Time.IsZero() || e.Why != store.WhyFileChanged || e.Machine != "dgx1-volta" {
			t.Errorf("%s: event %+v lacks the caller's description or a time", step.name, e)
		}
		e.Time, e.Why, e.ResourceName, e.Machine = time.Time{}, "", "", ""
		if got.Recorded != step.want.recorded || !reflect.DeepEqual(e, step.want.event) {
			t.Errorf("%s: recorded %v, event %+v; want %v, %+v", step.name, got.Recorded, e, step.want.recorded, step.want.event)
		}
		if got.Report.Configured != step.devices {
			t.Errorf("%s: report %+v", step.name, got.Report)
		}
		devs, err := s.Devices()
		if err != nil || !reflect.DeepEqual(seen, devs) {
			t.Errorf("%s: check saw %+v, Devices() after = %+v, %v", step.name, seen, devs, err)
		}
	}

	// A failing check: neither the devices nor an event are stored.
	before := fileHash(t, s.Path())
	boom := errors.New("boom")
	if _, err := s.ReconcileConfig(specs(1), cfg("tiny"), func([]store.Device) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("failing check: err = %v, want it returned", err)
	}
	for name, bad := range map[string]func() error{
		"no why":    func() error { _, err := s.ReconcileConfig(specs(1), store.ConfigEvent{}, nil); return err },
		"bad specs": func() error { _, err := s.ReconcileConfig([]store.DeviceSpec{{ID: ""}}, cfg("tiny"), nil); return err },
	} {
		if err := bad(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if fileHash(t, s.Path()) != before {
		t.Error("a refused ReconcileConfig wrote to the file")
	}
	if evs, _ := s.ConfigEvents(store.ConfigFilter{}); len(evs) != 3 {
		t.Errorf("%d events after the refused changes, want 3", len(evs))
	}
}

// TestReconcileConfig_DamagedNewestEvent: a damaged newest event is
// skipped: the previous profile is the newest readable event's.
func TestReconcileConfig_DamagedNewestEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := storetest.MustOpenPath(t, path, store.Options{})
	if _, err := s.ReconcileConfig(specs(2), store.ConfigEvent{Profile: "a", Why: store.WhyDefault}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReconcileConfig(specs(3), store.ConfigEvent{Profile: "b", Why: store.WhyDefault}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("config_events")).Put([]byte{0, 0, 0, 0, 0, 0, 0, 2}, []byte("not json"))
	})
	s = storetest.MustOpenPath(t, path, store.Options{}) // moves it into quarantine
	got, err := s.ReconcileConfig(specs(3), store.ConfigEvent{Profile: "c", Why: store.WhyDefault}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Recorded || got.Event.PreviousProfile != "a" || got.Event.Seq != 3 {
		t.Errorf("after a damaged newest event: %+v, want seq 3 recorded after profile a", got)
	}
}
