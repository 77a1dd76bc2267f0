package dra

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra/endpoint"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

const (
	uidA = "0b0d5b3e-8f57-4c39-9a8c-2a1d8f1e0a01"
	uidB = "0b0d5b3e-8f57-4c39-9a8c-2a1d8f1e0a02"
	uidC = "0b0d5b3e-8f57-4c39-9a8c-2a1d8f1e0a03"
	uidD = "0b0d5b3e-8f57-4c39-9a8c-2a1d8f1e0a04"
)

func mustPrepare(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) []kubeletplugin.Device {
	t.Helper()
	devs, err := d.Prepare(context.Background(), c)
	if err != nil {
		t.Fatalf("Prepare(%s): %v", c.Name, err)
	}
	return devs
}

// TestPrepare_Container: a prepared claim's CDI device gives its container
// what a device-plugin container of the same GPUs gets: the ids in device
// order, the UUIDs, the topology variables, nvidia-smi and the status
// directory; the claim is in the store with its pod.
func TestPrepare_Container(t *testing.T) {
	r := newRig(t, "dgx-a100")
	devs := mustPrepare(t, r.d, claimOf(uidA, "two", result("gpus", "fake-3"), result("gpus", "fake-1")))
	if len(devs) != 2 || devs[0].DeviceName != "fake-3" || devs[1].DeviceName != "fake-1" {
		t.Fatalf("answer %+v: want fake-3 and fake-1, as allocated", devs)
	}
	want := "k8s." + endpoint.DefaultDriverName + "/claim=" + uidA + "-gpus"
	if !slices.Equal(devs[0].CDIDeviceIDs, []string{want}) || len(devs[1].CDIDeviceIDs) != 0 {
		t.Errorf("CDI ids %q, %q: want %q on the first device only (the kubelet passes every id to the runtime)", devs[0].CDIDeviceIDs, devs[1].CDIDeviceIDs, want)
	}
	for _, d := range devs {
		if d.PoolName != testNode || !slices.Equal(d.Requests, []string{"gpus"}) {
			t.Errorf("%s: pool %q, requests %q", d.DeviceName, d.PoolName, d.Requests)
		}
	}
	spec := r.inject(devs)
	env := envOf(spec)
	served := plugintest.Served(t, r.st, r.set.GPUs)
	both := []gpuset.Device{served[1], served[3]}
	wantEnv := r.set.View.Env(both)
	c, err := r.set.View.Claim(gpuset.UUIDs(r.stored()), both)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.Envs {
		wantEnv[k] = v
	}
	if env["VIRTUAL_GPU_IDS"] != "fake-1,fake-3" {
		t.Errorf("VIRTUAL_GPU_IDS=%q, want fake-1,fake-3 (device order)", env["VIRTUAL_GPU_IDS"])
	}
	if u := env["VIRTUAL_GPU_UUIDS"]; strings.Count(u, "GPU-") != 2 {
		t.Errorf("VIRTUAL_GPU_UUIDS=%q, want the two GPUs' UUIDs", u)
	}
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("%s=%q in the container, want %q (as a device-plugin container)", k, env[k], v)
		}
	}
	var mounts []string
	for _, m := range spec.Mounts {
		mounts = append(mounts, m.Destination)
	}
	for _, m := range []string{"/usr/bin/nvidia-smi", "/run/virtual-gpu"} {
		if !slices.Contains(mounts, m) {
			t.Errorf("mounts %q: no %s", mounts, m)
		}
	}
	rec, err := r.st.Claim(uidA)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Prepared() || rec.Namespace != "default" || rec.Name != "two" || !slices.Equal(rec.DeviceIDs, []string{"fake-1", "fake-3"}) ||
		len(rec.ReservedFor) != 1 || rec.ReservedFor[0].Name != "two-pod" || rec.Envs["VIRTUAL_GPU_IDS"] != "fake-1,fake-3" {
		t.Errorf("record %+v", rec)
	}
}

// TestPrepare_DeviceNodes: with -device-nodes, the container gets each of
// its GPUs' /dev/nvidia<minor> and the shared nodes once.
func TestPrepare_DeviceNodes(t *testing.T) {
	r := newRig(t, "dgx-a100")
	cfg := r.set.Config
	cfg.View.DeviceNodes = true
	set, err := agent.NewSet(cfg, testNode)
	if err != nil {
		t.Fatal(err)
	}
	r.set = set
	r.d = r.newDriver()
	spec := r.inject(mustPrepare(t, r.d, claimOf(uidA, "nodes", result("gpus", "fake-2"), result("gpus", "fake-5"))))
	m := set.GPUs.Machine()
	var got []string
	for _, d := range spec.Linux.Devices {
		got = append(got, d.Path)
	}
	slices.Sort(got)
	want := []string{"/dev/nvidia-uvm", "/dev/nvidia" + strconv.Itoa(m.MinorNumber(2)), "/dev/nvidia" + strconv.Itoa(m.MinorNumber(5)), "/dev/nvidiactl"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("device nodes %q, want %q", got, want)
	}
}

// TestPrepare_Requests: each request of a claim is its own CDI device, with
// its own GPUs, and a configuration for one request reaches only it.
func TestPrepare_Requests(t *testing.T) {
	r := newRig(t, "dgx-a100")
	c := claimOf(uidA, "two-requests", result("a", "fake-0"), result("b/big", "fake-4"), result("b/big", "fake-5"))
	withConfig(c, `{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"ROLE":"any"}}`)
	withConfig(c, `{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"ROLE":"trainer","NCCL_DEBUG":"INFO"}}`, "b")
	devs := mustPrepare(t, r.d, c)
	if len(devs) != 3 {
		t.Fatalf("answer %+v", devs)
	}
	byRequest := map[string][]kubeletplugin.Device{}
	for _, d := range devs {
		byRequest[d.Requests[0]] = append(byRequest[d.Requests[0]], d)
	}
	a, b := envOf(r.inject(byRequest["a"])), envOf(r.inject(byRequest["b/big"]))
	if a["VIRTUAL_GPU_IDS"] != "fake-0" || a["ROLE"] != "any" || a["NCCL_DEBUG"] != "" {
		t.Errorf("request a's container: %v", a)
	}
	if b["VIRTUAL_GPU_IDS"] != "fake-4,fake-5" || b["ROLE"] != "trainer" || b["NCCL_DEBUG"] != "INFO" {
		t.Errorf("request b's container: %v", b)
	}
}

// TestPrepare_Idempotent: the kubelet's retries, before and after a
// restart, get the same answer and change nothing; a spec that went
// missing is written again as it was.
func TestPrepare_Idempotent(t *testing.T) {
	r := newRig(t, "dgx-a100")
	c := claimOf(uidA, "again", result("gpus", "fake-0"), result("gpus", "fake-1"))
	first := mustPrepare(t, r.d, c)
	path := r.d.specs.Path(uidA)
	spec, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	check := func(d *Driver, what string) {
		t.Helper()
		if got := mustPrepare(t, d, c); !equalDevices(got, first) {
			t.Errorf("%s: answer %+v, want %+v", what, got, first)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != string(spec) {
			t.Errorf("%s: spec changed (%v)", what, err)
		}
		claims, err := r.st.Claims(store.ClaimFilter{})
		if err != nil || len(claims) != 1 {
			t.Errorf("%s: %d claim records (%v), want 1", what, len(claims), err)
		}
	}
	check(r.d, "again")
	restarted := r.newDriver()
	check(restarted, "after a restart")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	check(restarted, "with the spec gone")
}

func equalDevices(a, b []kubeletplugin.Device) bool {
	return slices.EqualFunc(a, b, func(x, y kubeletplugin.Device) bool {
		return x.DeviceName == y.DeviceName && x.PoolName == y.PoolName && slices.Equal(x.Requests, y.Requests) && slices.Equal(x.CDIDeviceIDs, y.CDIDeviceIDs)
	})
}

// TestPrepare_Refused: a claim the driver cannot serve fails with an error
// that says why, and leaves nothing behind: no record, no spec.
func TestPrepare_Refused(t *testing.T) {
	const good = `{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"A":"1"}}`
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		is    error
		says  []string
	}{
		{"device the node does not have", claimOf(uidB, "gone", result("gpus", "fake-0"), result("gpus", "fake-9")), ErrNotServed,
			[]string{"default/gone", `"fake-9"`, "fake-0 … fake-7 (8 devices)"}},
		{"another pool", claimOf(uidB, "elsewhere", resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: endpoint.DefaultDriverName, Pool: "node-b", Device: "fake-0"}),
			ErrNotServed, []string{`pool "node-b"`, testNode}},
		{"unknown field", withConfig(claimOf(uidB, "typo", result("gpus", "fake-0")), `{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","evn":{"A":"1"}}`),
			ErrInvalidConfig, []string{"default/typo", `unknown field "evn"`, "opaque config 0 (from the claim)"}},
		{"another kind", withConfig(claimOf(uidB, "kind", result("gpus", "fake-0")), `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`),
			ErrInvalidConfig, []string{`"resource.nvidia.com/v1beta1"`, "gpu.unicore.mcyou.cc/v1alpha1"}},
		{"the driver's own variable", withConfig(claimOf(uidB, "own", result("gpus", "fake-0")), `{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"VIRTUAL_GPU_IDS":"fake-7"}}`),
			ErrInvalidConfig, []string{"VIRTUAL_GPU_IDS is set by the driver"}},
		{"second config bad", withConfig(withConfig(claimOf(uidB, "second", result("gpus", "fake-0")), good), `{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"1X":"1"}}`),
			ErrInvalidConfig, []string{"opaque config 1", `"1X" is not a variable name`}},
		{"device held by another claim", claimOf(uidB, "second-claim", result("gpus", "fake-2")), ErrInUse,
			[]string{`"fake-2"`, "default/first (uid " + uidA + ")"}},
		{"not allocated", func() *resourceapi.ResourceClaim {
			c := claimOf(uidB, "pending")
			c.Status.Allocation = nil
			return c
		}(), ErrNoAllocation, []string{"default/pending"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "dgx-a100")
			mustPrepare(t, r.d, claimOf(uidA, "first", result("gpus", "fake-2")))
			_, err := r.d.Prepare(context.Background(), tc.claim)
			if !errors.Is(err, tc.is) {
				t.Fatalf("Prepare: %v, want %v", err, tc.is)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if _, err := r.st.Claim(uidB); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("a record of the refused claim: %v", err)
			}
			if ok, err := r.d.specs.Exists(uidB); ok || err != nil {
				t.Errorf("a spec of the refused claim: %v, %v", ok, err)
			}
		})
	}
}

// TestPrepare_SpecFails: a CDI spec that cannot be written fails Prepare
// and takes the record back: the devices are not held.
func TestPrepare_SpecFails(t *testing.T) {
	r := newRig(t, "dgx-a100")
	cfg := r.set.Config
	cfg.View.DeviceNodes = true
	cfg.View.DeviceNodeSource = r.dir // a directory, not a device node
	set, err := agent.NewSet(cfg, testNode)
	if err != nil {
		t.Fatal(err)
	}
	r.set = set
	r.d = r.newDriver()
	if _, err := r.d.Prepare(context.Background(), claimOf(uidA, "nodes", result("gpus", "fake-0"))); !errors.Is(err, cdi.ErrDeviceNode) {
		t.Fatalf("Prepare: %v, want %v", err, cdi.ErrDeviceNode)
	}
	rec, err := r.st.Claim(uidA)
	if err != nil || rec.Prepared() {
		t.Errorf("record %+v (%v): want it unprepared", rec, err)
	}
	if held := r.d.held; len(held) != 0 {
		t.Errorf("held %v after a failed Prepare", held)
	}
}

// TestPrepare_AdminAccess: a claim with admin access gets a device another
// claim holds, and holds nothing itself: not before a restart, not after
// (its record says which devices it only monitors), not in the telemetry.
func TestPrepare_AdminAccess(t *testing.T) {
	r := newRig(t, "dgx-a100")
	res := result("gpus", "fake-1")
	admin := true
	res.AdminAccess = &admin
	mustPrepare(t, r.d, claimOf(uidB, "admin", res)) // first: a monitor of a free GPU
	mustPrepare(t, r.d, claimOf(uidA, "user", result("gpus", "fake-0")))
	res0 := result("gpus", "fake-0")
	res0.AdminAccess = &admin
	mustPrepare(t, r.d, claimOf(uidC, "admin-0", res0))
	if r.d.held["fake-0"] != uidA {
		t.Errorf("fake-0 held by %q, want the user's claim", r.d.held["fake-0"])
	}
	if rec, err := r.st.Claim(uidB); err != nil || !slices.Equal(rec.AdminDeviceIDs, []string{"fake-1"}) || rec.Holds("fake-1") {
		t.Errorf("admin claim's record %+v (%v): want fake-1 as an admin device, not held", rec, err)
	}
	restarted := r.newDriver()
	if _, ok := restarted.held["fake-1"]; ok || restarted.held["fake-0"] != uidA {
		t.Errorf("after a restart held = %v: want fake-0 by the user's claim only", restarted.held)
	}
	// A user claim of the monitored GPU is prepared after the restart.
	mustPrepare(t, restarted, claimOf(uidD, "user-1", result("gpus", "fake-1")))
	hs, err := Holders{Store: restarted}.Holdings()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Holder.Pod == "admin-pod" || h.Holder.Pod == "admin-0-pod" {
			t.Errorf("the telemetry counts the admin claim %s as a holder of %v", h.Holder.Pod, h.DeviceIDs)
		}
	}
}

// TestUnprepare: the record says when the claim was released, the spec
// is gone, the devices are free again; again, or for a claim never
// prepared, it is no error. A claim prepared before a restart unprepares
// after it.
func TestUnprepare(t *testing.T) {
	r := newRig(t, "dgx-a100")
	mustPrepare(t, r.d, claimOf(uidA, "a", result("gpus", "fake-0")))
	d := r.newDriver() // a restart
	ctx := context.Background()
	out, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: uidA}, {UID: uidB}})
	if err != nil || out[uidA] != nil || out[uidB] != nil || len(out) != 2 {
		t.Fatalf("UnprepareResourceClaims: %v, %v", out, err)
	}
	rec, err := r.st.Claim(uidA)
	if err != nil || rec.Prepared() || rec.UnpreparedAt.Before(rec.PreparedAt) {
		t.Errorf("record %+v (%v): want it unprepared", rec, err)
	}
	if ok, _ := d.specs.Exists(uidA); ok {
		t.Error("spec left after Unprepare")
	}
	if err := d.Unprepare(ctx, uidA, "default/a", "kubelet"); err != nil {
		t.Errorf("Unprepare again: %v", err)
	}
	mustPrepare(t, d, claimOf(uidB, "b", result("gpus", "fake-0"))) // free again
}
