package agent_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// TestAgent_SetHealth_GPUWithoutMIGDevices: a MIG-enabled GPU whose layout
// gives it no MIG device advertises nothing (single strategy, the other
// GPUs' MIG devices advertised), but its health is stored all the same,
// without a panic on the empty member list; the same health again records
// nothing.
func TestAgent_SetHealth_GPUWithoutMIGDevices(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	st := storetest.MustOpenPath(t, filepath.Join(dir, "state.db"), store.Options{})
	cfg, err := mig.ParseConfig("test", strings.NewReader("version: v1\nmig-configs:\n  gpu0-empty:\n"+
		"    - devices: [0]\n      mig-enabled: true\n      mig-devices: {}\n"+
		"    - devices: [1, 2, 3, 4, 5, 6, 7]\n      mig-enabled: true\n      mig-devices: {3g.40gb: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := agent.Config{Profile: "mig", GPUs: plugintest.GPUConfig(t, "hgx-h100", gpuset.Sharing{}), View: plugintest.ViewConfig(dir)}
	c.View.NvidiaSMI = false
	c.GPUs = plugintest.WithMIG(t, c.GPUs, cfg, gpuset.MIG{Strategy: gpuset.MIGStrategySingle, Layout: "gpu0-empty"})
	src := &source{fallback: "mig", profiles: map[string]agent.Config{"mig": c}}
	log := zerolog.Nop()
	ag := agent.New(agent.Options{Store: st, Source: src, Identity: "node-a", Logger: log})
	if _, _, err := ag.Begin(); err != nil {
		t.Fatal(err)
	}
	files, err := view.NewFiles(c.View, st, "", "node-a", log)
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{st: st}
	if err := ag.Start(context.Background(), agent.Parts{Files: files, Faults: faults.NewRunner(ag.HealthSetter(store.CauseFaultInjection), log),
		Targets: []agent.Target{&target{j: j}}, Observer: observer{j}}); err != nil {
		t.Fatal(err)
	}
	j.take() // the start's observations
	if n := len(ag.Devices()); n != 14 {
		t.Fatalf("%d devices advertised, want 14 (GPU 0 none)", n)
	}
	if err := ag.SetHealth("fake-0", false, "XID 79", store.CauseAdmin); err != nil {
		t.Fatal(err)
	}
	if d, err := st.Device("fake-0"); err != nil || d.Healthy || d.Reason != "XID 79" {
		t.Errorf("stored fake-0 = %+v, %v; want unhealthy, XID 79", d, err)
	}
	if got := j.take(); !slices.Equal(got, []string{"target fake-0  stored-healthy=no", "observed fake-0 admin"}) {
		t.Errorf("journal %q", got)
	}
	if err := ag.SetHealth("fake-0", false, "XID 79", store.CauseAdmin); err != nil {
		t.Fatal(err)
	}
	if got := j.take(); len(got) != 0 {
		t.Errorf("the same health again: %q, want nothing", got)
	}
	events, err := st.HealthEvents(store.EventFilter{DeviceID: "fake-0"})
	if err != nil || len(events) != 2 { // added, then XID 79
		t.Errorf("fake-0's health events %+v, %v; want 2", events, err)
	}
}
