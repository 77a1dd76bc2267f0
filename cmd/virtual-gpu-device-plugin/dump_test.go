package main

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// TestBinary_Dump_UUIDsAndConfigEvents: dump reads device UUIDs and the
// configuration history from a stopped plugin's state file, in every
// format, and --device, --since and --limit select the events.
func TestBinary_Dump_UUIDsAndConfigEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	specs := []store.DeviceSpec{{ID: "fake-0", Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000"},
		{ID: "fake-1", Index: 1, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000"}}
	first := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	for i, step := range []struct {
		config  []store.DeviceSpec
		profile string
	}{{specs, "two"}, {specs[:1], "one"}} {
		rep, err := st.Reconcile(step.config)
		if err == nil {
			_, err = st.RecordConfigChange(store.ConfigEvent{Time: first.Add(time.Duration(i) * time.Hour), Profile: step.profile,
				Why: store.WhyNodeLabel, Machine: "workstation-4gpu"}.FromReport(rep))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	n := &node{state: path}

	doc := n.dump(t)
	if len(doc.Devices) != 2 || doc.Devices[0].UUID != specs[0].UUID || doc.Devices[1].UUID != specs[1].UUID || !doc.Devices[1].Removed {
		t.Errorf("devices = %+v, want both UUIDs, fake-1 removed", doc.Devices)
	}
	seqs := func(evs []admin.ConfigEvent) (out []uint64) {
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	if got := seqs(doc.ConfigEvents); !reflect.DeepEqual(got, []uint64{2, 1}) || doc.ConfigEvents[0].PreviousProfile != "" ||
		!reflect.DeepEqual(doc.ConfigEvents[0].Removed, []string{"fake-1"}) {
		t.Errorf("configEvents = %+v, want 2 (removed fake-1) then 1", doc.ConfigEvents)
	}
	for _, tc := range []struct {
		args []string
		want []uint64
	}{
		{[]string{"--device", "fake-0"}, []uint64{1}},
		{[]string{"--device", "fake-1"}, []uint64{2, 1}},
		{[]string{"--limit", "1"}, []uint64{2}},
		{[]string{"--since", first.Add(30 * time.Minute).Format(time.RFC3339)}, []uint64{2}},
	} {
		if got := seqs(n.dump(t, tc.args...).ConfigEvents); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("dump %v: config events %v, want %v", tc.args, got, tc.want)
		}
	}
	wide, errOut, code := cli(t, "dump", "-o", "wide", "-state="+path)
	if code != 0 {
		t.Fatalf("dump -o wide: %s", errOut)
	}
	if got := plugintest.Fields(t, wide, "fake-1 "); got[2] != specs[1].UUID {
		t.Errorf("fake-1 wide = %v, want its UUID", got)
	}
	_, configs, _ := strings.Cut(wide, "CONFIG EVENT")
	if got := strings.Join(plugintest.Fields(t, configs, "2 "), " "); got != "2 2026-11-30T08:00:00Z one - node-label - - workstation-4gpu 1 - removed fake-1" {
		t.Errorf("wide config event 2 = %q", got)
	}
	list, errOut, code := cli(t, "health", "list", "-o", "wide", "--no-headers", "-state="+path)
	if code != 0 || plugintest.Fields(t, list, "fake-0 ")[2] != specs[0].UUID {
		t.Errorf("health list -o wide: %s\n%s", errOut, list)
	}
}
