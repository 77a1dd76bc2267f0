package dra

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
	resourceapi "k8s.io/api/resource/v1"
)

// TestPrepare_MIG: a claim allocated a MIG device prepares it: its id in
// VIRTUAL_GPU_IDS, its GPU's UUID (the status file nvidia-smi reads) and
// device node, the claim in the store holding the MIG device, whose record
// is its GPU's; a device sharing a memory slice with it, or its GPU whole,
// is refused for another claim (ErrInUse) while one beside it is not, after
// a restart too; Unprepare removes it, and the overlapping one prepares.
func TestPrepare_MIG(t *testing.T) {
	r := newMIGRig(t, plugintest.Machine(t, "hgx-h100"), "all-enabled")
	cfg := r.set.Config
	cfg.View.DeviceNodes = true
	set, err := agent.NewSet(cfg, testNode)
	if err != nil {
		t.Fatal(err)
	}
	r.set = set
	r.d = r.newDriver()
	ctx := context.Background()
	three := topology.MIGID(0, "3g.40gb", 4)
	devs := mustPrepare(t, r.d, claimOf(uidA, "mig", result("gpu", three)))
	if len(devs) != 1 || devs[0].DeviceName != three || len(devs[0].CDIDeviceIDs) != 1 {
		t.Fatalf("answer %+v: want %s with its CDI device", devs, three)
	}
	spec := r.inject(devs)
	env := envOf(spec)
	stored := r.stored()
	uuids := gpuset.UUIDs(stored)
	var migRec store.Device
	for _, d := range stored {
		if d.ID == three {
			migRec = d
		}
	}
	if migRec.GPU != "fake-0" || migRec.MIG != "3g.40gb" || !strings.HasPrefix(migRec.UUID, "MIG-") {
		t.Fatalf("store record of %s: %+v; want a 3g.40gb of fake-0 with a MIG UUID", three, migRec)
	}
	if env["VIRTUAL_GPU_IDS"] != three || env["VIRTUAL_GPU_UUIDS"] != uuids[0] {
		t.Errorf("VIRTUAL_GPU_IDS=%q VIRTUAL_GPU_UUIDS=%q, want %s and GPU 0's %s", env["VIRTUAL_GPU_IDS"], env["VIRTUAL_GPU_UUIDS"], three, uuids[0])
	}
	var nodes []string
	for _, d := range spec.Linux.Devices {
		nodes = append(nodes, d.Path)
	}
	if !slices.Contains(nodes, "/dev/nvidia0") || slices.Contains(nodes, "/dev/nvidia1") {
		t.Errorf("device nodes %q, want GPU 0's", nodes)
	}
	rec, err := r.st.Claim(uidA)
	if err != nil || !rec.Prepared() || !slices.Equal(rec.DeviceIDs, []string{three}) {
		t.Fatalf("claim record %+v, %v", rec, err)
	}

	beside := topology.MIGID(0, "4g.40gb", 0)
	mustPrepare(t, r.d, claimOf(uidB, "beside", result("gpu", beside)))
	for _, tc := range []struct{ uid, name, device string }{
		{uidC, "overlapping", topology.MIGID(0, "1g.10gb", 5)},
		{uidC, "whole", "fake-0"},
		{uidC, "seven", topology.MIGID(0, "7g.80gb", 0)},
	} {
		_, err := r.d.Prepare(ctx, claimOf(tc.uid, tc.name, result("gpu", tc.device)))
		if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), tc.device) || !strings.Contains(err.Error(), "default/") {
			t.Errorf("%s (%s) beside prepared %s and %s: %v; want ErrInUse naming the device and the holder", tc.name, tc.device, three, beside, err)
		}
	}
	_, err = r.d.Prepare(ctx, claimOf(uidD, "self", result("a", topology.MIGID(1, "2g.20gb", 0)), result("b", topology.MIGID(1, "1g.10gb", 1))))
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "same claim") {
		t.Errorf("a claim of two overlapping MIG devices: %v; want ErrInUse", err)
	}
	if _, err := r.st.Claim(uidD); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused claim is in the store: %v", err)
	}
	mustPrepare(t, r.d, claimOf(uidD, "other-gpu", result("gpu", topology.MIGID(1, "1g.10gb", 5))))

	// After a restart the held MIG devices still refuse overlapping ones.
	r.d = r.newDriver()
	if _, err := r.d.Prepare(ctx, claimOf(uidC, "overlapping", result("gpu", topology.MIGID(0, "1g.10gb", 5)))); !errors.Is(err, ErrInUse) {
		t.Errorf("after a restart, overlapping %s: %v; want ErrInUse", three, err)
	}
	if err := r.d.Unprepare(ctx, uidA, "default/mig", "test"); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.d.specs.Exists(uidA); err != nil || ok {
		t.Errorf("spec of the unprepared claim: exists %v, %v", ok, err)
	}
	if rec, err := r.st.Claim(uidA); err != nil || rec.Prepared() {
		t.Errorf("unprepared claim record %+v, %v", rec, err)
	}
	mustPrepare(t, r.d, claimOf(uidC, "overlapping", result("gpu", topology.MIGID(0, "1g.10gb", 5))))
}

// The driver tells DriverConfig.Changed of a claim of MIG devices once
// it is prepared and once it is unprepared (the container view makes a
// partitionable GPU's MIG devices exist then), and nothing of a claim of
// whole GPUs or of a refused one.
func TestPrepare_MIGChanged(t *testing.T) {
	r := newMIGRig(t, plugintest.Machine(t, "hgx-h100"), "all-enabled")
	ctx := context.Background()
	three := topology.MIGID(0, "3g.40gb", 4)
	res, err := r.d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{
		claimOf(uidA, "mig", result("gpu", three)),
		claimOf(uidB, "whole", result("gpu", "fake-1")),
		claimOf(uidC, "overlapping", result("gpu", "fake-0")),
	})
	if err != nil || res[uidA].Err != nil || res[uidB].Err != nil || res[uidC].Err == nil {
		t.Fatalf("prepare: %v, %+v", err, res)
	}
	if want := [][]string{{three}}; !reflect.DeepEqual(r.changed, want) {
		t.Errorf("told %v after prepare, want %v", r.changed, want)
	}
	for _, uid := range []string{uidA, uidA, uidB} {
		if err := r.d.Unprepare(ctx, uid, "default/x", "test"); err != nil {
			t.Fatal(err)
		}
	}
	if want := [][]string{{three}, {three}}; !reflect.DeepEqual(r.changed, want) {
		t.Errorf("told %v after unprepare (twice, and a whole GPU), want %v", r.changed, want)
	}
}
