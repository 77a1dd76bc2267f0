package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// sharingConfig resolves the serve flags args, with a -config file of
// body when it is not empty.
func sharingConfig(t testing.TB, body string, args ...string) *options.Config {
	t.Helper()
	if body != "" {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-config="+path)
	}
	o, err := options.Parse(append(args, "-numa-report=always"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := o.Load()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// catalogOf builds the agent's set of cfg and its device-plugin catalog
// from a real store.
func catalogOf(t testing.TB, cfg *options.Config) (*agent.Set, plugin.Catalog) {
	t.Helper()
	set, err := agent.NewSet(cfg.Config, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.MustOpen(t, store.Options{})
	if _, err := st.Reconcile(set.GPUs.Specs()); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := plugin.CatalogOf(set, stored)
	if err != nil {
		t.Fatal(err)
	}
	return set, cat
}

// partlyShared shares GPUs 0 and 2 of four as two replicas each, packed,
// one device per container.
const partlyShared = `version: v1
flags:
  devices: 4
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
    - name: unicore.mcyou.cc/gpu
      devices: [0, fake-2]
      replicas: 2
`

// TestSet_SharedLabelsAndEvent: the labels and the history's
// description of a configuration say how its GPUs are shared.
func TestSet_SharedLabelsAndEvent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      *options.Config
		resource string
		devices  int
	}{
		{"all shared", sharingConfig(t, "", "-topology=dgx1-volta", "-replicas=4"), "unicore.mcyou.cc/gpu", 32},
		{"partly shared", sharingConfig(t, partlyShared), "unicore.mcyou.cc/gpu", 6},
		{"renamed", sharingConfig(t, "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: unicore.mcyou.cc/gpu\n      replicas: 2\n", "-devices=2"),
			"unicore.mcyou.cc/gpu.shared", 4},
		{"not shared", sharingConfig(t, "", "-devices=3"), "unicore.mcyou.cc/gpu", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := agent.NewSet(tc.cfg.Config, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			sh := tc.cfg.GPUs.Sharing
			wantReplicas := 0
			if sh.Enabled() {
				wantReplicas = sh.Replicas
			}
			if set.Event().Replicas != wantReplicas || set.Event().Devices != tc.devices || set.Event().ResourceName != tc.resource {
				t.Errorf("event %+v, want %d replicas, %d devices, %s", set.Event(), wantReplicas, tc.devices, tc.resource)
			}
			if set.Labels().Replicas != wantReplicas || set.Labels().Renamed != sh.Renamed {
				t.Errorf("labels %+v", set.Labels())
			}
		})
	}
}

// TestBinary_Sharing: 2 GPUs × 4 replicas served to the stand-in kubelet:
// 8 replicas with their GPU's NUMA node, packed placement, the container's
// GPUs and replicas, a GPU's health on all its replicas (a replica's
// refused), the dump's per-GPU view; then 2 replicas (vanished replicas
// recorded removed) and sharing off, the GPU's health kept throughout.
func TestBinary_Sharing(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t, "-devices=2", "-replicas=4", "-shared-devices-allocation-policy=packed", "-numa-report=always")
	l := plugintest.NextList(t, reg, 10*time.Second)
	if got := ids(l); !slices.Equal(got, topologyReplicaIDs(2, 4)) {
		t.Fatalf("list %v", got)
	}
	for _, d := range l.Devices {
		if nodes := d.GetTopology().GetNodes(); len(nodes) != 1 || nodes[0].ID != 0 {
			t.Errorf("%s topology %v, want NUMA node 0 (its GPU's)", d.ID, nodes)
		}
	}
	avail := ids(l)
	for i, want := range []string{"fake-0::0", "fake-0::1", "fake-0::2"} {
		resp, err := reg.Client.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, []string{want}) {
			t.Errorf("pod %d: preferred %v, want [%s] (packed)", i, got, want)
		}
		envs := allocate(t, reg, want)
		if envs[plugin.EnvIDs] != "fake-0" || envs[gpuset.EnvReplicas] != want || envs[topology.EnvNUMANodes] != "0" {
			t.Errorf("pod %d env %v", i, envs)
		}
		avail = slices.DeleteFunc(avail, func(id string) bool { return id == want })
	}

	if _, errOut, code := cli(t, "health", "set", "fake-1::2", "unhealthy", "-state="+n.state); code == 0 ||
		!strings.Contains(errOut, "fake-1::2 is replica 2 of fake-1: health is per GPU; set fake-1 (all its replicas follow)") {
		t.Errorf("health set of a replica: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli(t, "health", "set", "fake-1", "unhealthy", "--reason", "XID 79", "-state="+n.state); code != 0 {
		t.Fatalf("health set fake-1: exit %d: %s", code, errOut)
	}
	h := listHealth(plugintest.NextList(t, reg, 10*time.Second))
	for _, id := range topologyReplicaIDs(2, 4) {
		if want := map[bool]string{true: pluginapi.Unhealthy, false: pluginapi.Healthy}[strings.HasPrefix(id, "fake-1::")]; h[id] != want {
			t.Errorf("%s = %s, want %s", id, h[id], want)
		}
	}

	doc := n.dump(t)
	gpu0 := doc.Devices[0]
	if gpu0.ID != "fake-0" || gpu0.Replicas == nil || gpu0.Replicas.Total != 4 || gpu0.Replicas.InUse != 3 || len(gpu0.Replicas.Holders) != 3 {
		t.Errorf("fake-0 in the dump: %+v replicas %+v", gpu0, gpu0.Replicas)
	}
	if gpu0.ReportedNUMANode == nil || *gpu0.ReportedNUMANode != 0 {
		t.Errorf("fake-0 reported NUMA node %v", gpu0.ReportedNUMANode)
	}
	if a := doc.Allocations[0]; !slices.Equal(a.DeviceIDs, []string{"fake-0::2"}) || !slices.Equal(a.GPUIDs, []string{"fake-0"}) {
		t.Errorf("newest allocation %+v", a)
	}
	if e := doc.HealthEvents[0]; e.DeviceID != "fake-1" || e.Healthy {
		t.Errorf("newest health event %+v, want fake-1's", e)
	}
	if e := doc.ConfigEvents[0]; e.Replicas != 4 || e.Devices != 8 || len(e.Added) != 10 {
		t.Errorf("config event %+v, want 4 replicas, 8 devices, 10 added (2 GPUs, 8 replicas)", e)
	}
	table, _, _ := cli(t, "dump", "-state="+n.state)
	if got := strings.Join(plugintest.Fields(t, table, "fake-0 "), " "); !strings.Contains(got, " 3/4 #1 (allocated),#2 (allocated),#3 (allocated)") &&
		!strings.Contains(got, " 3/4 #3 (allocated),#2 (allocated),#1 (allocated)") {
		t.Errorf("dump table fake-0 = %q", got)
	}
	p.stop(t)

	// Two replicas: the vanished ones are recorded removed.
	p, reg = n.start(t, "-devices=2", "-replicas=2", "-numa-report=always")
	if got := ids(plugintest.NextList(t, reg, 10*time.Second)); !slices.Equal(got, []string{"fake-0::0", "fake-0::1", "fake-1::0(Unhealthy)", "fake-1::1(Unhealthy)"}) {
		t.Errorf("list with 2 replicas: %v", got)
	}
	doc = n.dump(t)
	if e := doc.ConfigEvents[0]; e.Replicas != 2 || e.Devices != 4 || !slices.Equal(e.Removed, []string{"fake-0::2", "fake-0::3", "fake-1::2", "fake-1::3"}) {
		t.Errorf("config event %+v", e)
	}
	for _, d := range doc.Devices {
		if d.ID == "fake-0::2" && (!d.Removed || d.Holder == nil) {
			t.Errorf("fake-0::2 = %+v, want removed and still held by its allocation", d)
		}
	}
	p.stop(t)

	// Sharing off: the GPUs themselves, fake-1 still unhealthy.
	_, reg = n.start(t, "-devices=2", "-numa-report=always")
	if got := ids(plugintest.NextList(t, reg, 10*time.Second)); !slices.Equal(got, []string{"fake-0", "fake-1(Unhealthy)"}) {
		t.Errorf("list without sharing: %v", got)
	}
	envs := allocate(t, reg, "fake-0")
	if _, ok := envs[gpuset.EnvReplicas]; ok || envs[plugin.EnvIDs] != "fake-0" {
		t.Errorf("whole GPU env %v", envs)
	}
}

// failRequestsGreaterThanOne refuses a container of two replicas with a
// message naming the setting, as the kubelet shows it in the pod's status.
func TestBinary_Sharing_FailRequestsGreaterThanOne(t *testing.T) {
	n := newNode(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(partlyShared), 0o644); err != nil {
		t.Fatal(err)
	}
	_, reg := n.start(t, "-config="+path)
	plugintest.NextList(t, reg, 10*time.Second)
	_, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-0::0", "fake-2::0"}}},
	})
	if err == nil || !strings.Contains(err.Error(), "2 devices requested, more than the 1 per container that sharing.timeSlicing.failRequestsGreaterThanOne allows") {
		t.Errorf("Allocate of 2: %v", err)
	}
	if envs := allocate(t, reg, "fake-2::1"); envs[plugin.EnvIDs] != "fake-2" {
		t.Errorf("Allocate of 1: %v", envs)
	}
}

// TestServe_SharingLive: a profile that starts sharing, renamed by default,
// is applied live: registered again under <resource>.shared with the
// replicas, the GPU labels say so, and the history records the change;
// back to the whole GPUs, the replicas are recorded removed.
func TestServe_SharingLive(t *testing.T) {
	n := newLiveNode(t)
	n.writeProfile(t, "shared", "version: v1\nflags:\n  topology: workstation-4gpu\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"+
		"    resources:\n    - name: unicore.mcyou.cc/gpu\n      replicas: 2\n")
	api := newFakeAPI(nil)
	reg := n.start(t, api, "-label-node")
	plugintest.NextList(t, reg, 10*time.Second)

	api.setLabel(kube.ConfigLabel, "shared")
	again := n.kubelet.WaitRegistration(10 * time.Second)
	if again.Request.ResourceName != options.DefaultResourceName+".shared" {
		t.Fatalf("registered again as %q, want the .shared name", again.Request.ResourceName)
	}
	if got := ids(plugintest.NextList(t, again, 10*time.Second)); !slices.Equal(got, topologyReplicaIDs(4, 2)) {
		t.Errorf("shared list = %v", got)
	}
	s := n.waitEvents(t, 2)
	if e := s.ConfigEvents[0]; e.Replicas != 2 || e.Devices != 8 || e.Profile != "shared" || len(e.Added) != 8 {
		t.Errorf("sharing's event = %+v", e)
	}
	plugintest.WaitFor(t, 10*time.Second, "the GPU labels of sharing", func() bool {
		l := api.nodeLabels()
		return l[kube.LabelReplicas] == "2" && l[kube.LabelSharingStrategy] == kube.SharingTimeSlicing &&
			!strings.HasSuffix(l[kube.LabelProduct], "-SHARED") // renamed: GFD's rule keeps the product
	})

	api.setLabel(kube.ConfigLabel, "")
	back := n.kubelet.WaitRegistration(10 * time.Second)
	if got := ids(plugintest.NextList(t, back, 10*time.Second)); back.Request.ResourceName != options.DefaultResourceName || !slices.Equal(got, fakeIDs(4)) {
		t.Errorf("back: %s %v", back.Request.ResourceName, got)
	}
	s = n.waitEvents(t, 3)
	if e := s.ConfigEvents[0]; e.Replicas != 0 || len(e.Removed) != 8 {
		t.Errorf("back to whole GPUs: event %+v, want the 8 replicas removed", e)
	}
	plugintest.WaitFor(t, 10*time.Second, "the GPU labels of whole GPUs", func() bool {
		return api.nodeLabels()[kube.LabelReplicas] == "1"
	})
}

// A fault names a GPU and takes all its replicas down, as one change.
func TestBinary_Sharing_FaultTakesTheReplicas(t *testing.T) {
	n := newNode(t)
	_, reg := n.start(t, "-devices=2", "-replicas=3", "-faults=down:fake-1:after=50ms")
	var got []string
	plugintest.WaitFor(t, 10*time.Second, "fake-1's replicas down", func() bool {
		got = ids(plugintest.NextList(t, reg, 10*time.Second))
		return slices.Contains(got, "fake-1::0(Unhealthy)")
	})
	if want := []string{"fake-0::0", "fake-0::1", "fake-0::2", "fake-1::0(Unhealthy)", "fake-1::1(Unhealthy)", "fake-1::2(Unhealthy)"}; !slices.Equal(got, want) {
		t.Errorf("list %v, want %v (one message)", got, want)
	}
	if e := n.dump(t).HealthEvents[0]; e.DeviceID != "fake-1" || e.Cause != store.CauseFaultInjection {
		t.Errorf("health event %+v, want fake-1's, by fault injection", e)
	}
}

// BenchmarkGetPreferred_Replicas measures GetPreferredAllocation through
// the Server on a real socket, the catalog's mapping included, at 1,024
// replica devices (128 GPUs × 8, half of the replicas in use as the
// kubelet leaves them out of available) against 128 whole GPUs in the
// same run.
func BenchmarkGetPreferred_Replicas(b *testing.B) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"whole/gpus=128", []string{"-devices=128"}},
		{"replicas/128x8", []string{"-devices=128", "-replicas=8"}},
		{"replicas/128x8/packed", []string{"-devices=128", "-replicas=8", "-shared-devices-allocation-policy=packed"}},
		{"replicas/8x128", []string{"-devices=8", "-replicas=128"}},
	} {
		_, cat := catalogOf(b, sharingConfig(b, "", tc.args...))
		srv, err := plugin.NewServer(plugin.ServerConfig{Catalog: cat})
		if err != nil {
			b.Fatal(err)
		}
		client := serveForBench(b, srv)
		var avail []string
		for i, d := range cat.Devices {
			if len(cat.Devices) == 128 || i%3 != 0 { // replicas: about a third in use
				avail = append(avail, d.ID)
			}
		}
		for _, size := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/size=%d", tc.name, size), func(b *testing.B) {
				req := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
					{AvailableDeviceIDs: avail, AllocationSize: int32(size)}}}
				for b.Loop() {
					if _, err := client.GetPreferredAllocation(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func topologyReplicaIDs(gpus, r int) []string {
	m, err := topology.Generic(gpus)
	if err != nil {
		panic(err)
	}
	return m.ReplicaIDs(r)
}
