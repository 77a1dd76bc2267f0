package view_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// filesOf is the host files of set over a real state file that has set's
// devices, in a temporary directory, with their view config and store.
func filesOf(t *testing.T, set *gpuset.Set) (*view.Files, view.Config, *store.Store) {
	t.Helper()
	dir := t.TempDir()
	st := storetest.MustOpenPath(t, filepath.Join(dir, "state.db"), store.Options{})
	plugintest.Served(t, st, set)
	cfg := plugintest.ViewConfig(dir)
	f, err := view.NewFiles(cfg, st, "", "node-a", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return f, cfg, st
}

// The status file of a MIG-enabled GPU carries its MIG devices of the
// layout in force, with their stored UUIDs, in GPU instance id order, the
// ids a real H100 gives the all-balanced placements.
func TestFiles_MIGStatus(t *testing.T) {
	set := plugintest.MIGSet(t, "hgx-h100", gpuset.MIG{Strategy: gpuset.MIGStrategyMixed, Layout: "all-balanced"})
	f, cfg, st := filesOf(t, set)
	f.Publish(view.New(cfg, set))
	stored, err := st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	uuids := gpuset.UUIDs(stored)
	g, err := status.Read(os.DirFS(cfg.StatusDir), uuids[0])
	if err != nil {
		t.Fatal(err)
	}
	if !g.MIGEnabled {
		t.Fatal("GPU 0: migEnabled false, want true")
	}
	var got []string
	for _, d := range g.MIGDevices {
		got = append(got, d.Profile+"@"+strings.Join([]string{strconv.Itoa(d.PlacementStart), strconv.Itoa(d.PlacementSize)}, ":")+" GI "+strconv.Itoa(d.GPUInstanceID))
		if want := topology.DeriveMIGUUID("node-a", d.ID); d.UUID != want {
			t.Errorf("%s: UUID %s, want the stored %s", d.ID, d.UUID, want)
		}
	}
	// nvidia-smi -L of a real H100 (driver 590.48.01) in this layout lists 3g.40gb (GI 2), 2g.20gb (GI 3), 1g.10gb (GI 9, 10).
	want := []string{"3g.40gb@4:4 GI 2", "2g.20gb@0:2 GI 3", "1g.10gb@2:1 GI 9", "1g.10gb@3:1 GI 10"}
	if !slices.Equal(got, want) {
		t.Errorf("GPU 0 MIG devices %v, want %v", got, want)
	}
	if d := g.MIGDevices[0]; d.ProfileID != 9 || d.MemoryMiB != 40448 || d.Multiprocessors != 60 || d.CopyEngines != 3 || d.Decoders != 3 || d.JPEGs != 3 {
		t.Errorf("3g.40gb: %+v, want profile id 9, 40448 MiB, 60 SMs, 3 CE, 3 DEC, 3 JPG", d)
	}
}

// A GPU without MIG has no MIG devices in its status file.
func TestFiles_NoMIG(t *testing.T) {
	set, err := gpuset.New(plugintest.GPUConfig(t, "hgx-h100", gpuset.Sharing{}), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	f, cfg, _ := filesOf(t, set)
	f.Publish(view.New(cfg, set))
	g, err := status.Read(os.DirFS(cfg.StatusDir), topology.DeriveUUID("node-a", "fake-0"))
	if err != nil {
		t.Fatal(err)
	}
	if g.MIGEnabled || len(g.MIGDevices) != 0 {
		t.Errorf("MIG %v, devices %v; want off, none", g.MIGEnabled, g.MIGDevices)
	}
}

// A container of MIG devices gets NVIDIA_VISIBLE_DEVICES of their MIG
// UUIDs, as NVIDIA's plugin sets it, and VIRTUAL_GPU_UUIDS of their GPUs
// (the status files that describe them).
func TestView_AnswerMIG(t *testing.T) {
	set := plugintest.MIGSet(t, "hgx-h100", gpuset.MIG{Strategy: gpuset.MIGStrategySingle, Layout: "all-3g.40gb"})
	cfg := plugintest.ViewConfig(t.TempDir())
	cfg.VisibleDevicesEnv = true
	v := view.New(cfg, set)
	stored := make([]store.Device, 0, len(set.Specs()))
	for _, sp := range set.Specs() {
		stored = append(stored, store.Device{ID: sp.ID, Index: sp.Index, NUMA: sp.NUMA, Healthy: true, UUID: sp.UUID, GPU: sp.GPU, Replica: sp.Replica, MIG: sp.MIG})
	}
	ids := []string{topology.MIGID(1, "3g.40gb", 0), topology.MIGID(1, "3g.40gb", 4), topology.MIGID(2, "3g.40gb", 4)}
	spec := answerFor(t, v, stored, ids...)
	var want []string
	for _, id := range ids {
		want = append(want, topology.DeriveMIGUUID("node-a", id))
	}
	if got := spec.Envs["NVIDIA_VISIBLE_DEVICES"]; got != strings.Join(want, ",") {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %s, want %s", got, strings.Join(want, ","))
	}
	gpuUUIDs := topology.DeriveUUID("node-a", "fake-1") + "," + topology.DeriveUUID("node-a", "fake-2")
	if got := spec.Envs[status.EnvUUIDs]; got != gpuUUIDs {
		t.Errorf("%s = %s, want the GPUs' %s", status.EnvUUIDs, got, gpuUUIDs)
	}

	// The node renamed since: the stored UUIDs are kept, and the answer
	// names them (the status files do), not those the set derives now.
	kept := "MIG-00000000-1111-2222-3333-444444444444"
	for i := range stored {
		if stored[i].ID == ids[0] {
			stored[i].UUID = kept
		}
	}
	spec = answerFor(t, v.WithStored(stored), stored, ids[0])
	if got := spec.Envs["NVIDIA_VISIBLE_DEVICES"]; got != kept {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %s, want the stored %s", got, kept)
	}
	if got := answerFor(t, v, stored, ids[0]).Envs["NVIDIA_VISIBLE_DEVICES"]; got != want[0] {
		t.Errorf("WithStored changed the view it was called on: %s", got)
	}
}

// Through DRA (a partitionable set) a MIG device exists for containers
// while a prepared claim holds it: the status file of its GPU lists the
// placements prepared claims hold, and none once the claim is unprepared.
func TestFiles_MIGStatusPartitionable(t *testing.T) {
	set := plugintest.MIGSet(t, "hgx-h100", gpuset.MIG{Layout: "all-enabled", Partitionable: true})
	f, vc, st := filesOf(t, set)
	v := view.New(vc, set)
	stored, err := st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	uuids := gpuset.UUIDs(stored)
	migOf := func(gpu int) []string {
		t.Helper()
		g, err := status.Read(os.DirFS(vc.StatusDir), uuids[gpu])
		if err != nil {
			t.Fatal(err)
		}
		if !g.MIGEnabled {
			t.Fatalf("GPU %d: migEnabled false", gpu)
		}
		var out []string
		for _, d := range g.MIGDevices {
			out = append(out, d.ID+" GI "+strconv.Itoa(d.GPUInstanceID))
		}
		return out
	}
	f.Publish(v)
	if got := migOf(1); len(got) != 0 {
		t.Errorf("GPU 1 with no claim lists %v: the 25 placements are offers, not devices", got)
	}
	if _, _, err := st.RecordClaimPrepared(store.Claim{UID: "uid-1", Namespace: "default", Name: "mig", DeviceIDs: []string{"fake-1-mig-3g40gb-4", "fake-1-mig-2g20gb-0"}}); err != nil {
		t.Fatal(err)
	}
	f.Publish(v)
	if got, want := migOf(1), []string{"fake-1-mig-3g40gb-4 GI 2", "fake-1-mig-2g20gb-0 GI 3"}; !slices.Equal(got, want) {
		t.Errorf("GPU 1 with a prepared claim lists %v, want %v", got, want)
	}
	if got := migOf(0); len(got) != 0 {
		t.Errorf("GPU 0 lists %v, another GPU's claim", got)
	}
	if _, _, err := st.RecordClaimUnprepared("uid-1", time.Time{}); err != nil {
		t.Fatal(err)
	}
	f.Publish(v)
	if got := migOf(1); len(got) != 0 {
		t.Errorf("GPU 1 after the claim was unprepared lists %v", got)
	}
}
