package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// fakeSysfs makes a sysfs root whose host has the given NUMA nodes.
func fakeSysfs(t *testing.T, nodes ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, n := range nodes {
		if err := os.MkdirAll(filepath.Join(root, "devices", "system", "node", n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// numaOf returns each device's reported NUMA node, -1 for none.
func numaOf(l *pluginapi.ListAndWatchResponse) []int64 {
	var out []int64
	for _, d := range l.Devices {
		n := int64(-1)
		if nodes := d.GetTopology().GetNodes(); len(nodes) == 1 {
			n = nodes[0].ID
		}
		out = append(out, n)
	}
	return out
}

// TestBinary_NUMAReport proves the wiring of -numa-report and -sysfs-root
// (the policy itself is table-tested in topology, TestMachine_ReportNUMA):
// in auto mode on a host with only node 0, the devices of node 1 report none,
// and the plugin says so once.
func TestBinary_NUMAReport(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t, "-numa-report=auto", "-sysfs-root="+fakeSysfs(t, "node0"))
	// generic-4: fake-0,1 on node 0; fake-2,3 on node 1.
	if got, want := numaOf(plugintest.NextList(t, reg, 10*time.Second)), []int64{0, 0, -1, -1}; !slices.Equal(got, want) {
		t.Errorf("reported NUMA nodes = %v, want %v", got, want)
	}
	line := p.logs.waitLine(t, "the host lacks some topology NUMA nodes")
	if !strings.Contains(line, `"host_numa_nodes":[0]`) || !strings.Contains(line, `"not_reported":[1]`) {
		t.Errorf("log line %s: want host node 0 and node 1 not reported", line)
	}
}

func TestBinary_TopologyPreferredAndEnv(t *testing.T) {
	n := newNode(t)
	_, reg := n.start(t, "-topology=workstation-4gpu", "-numa-report=always")
	ctx := context.Background()
	// fake-2 must be in; its NVLink partner is fake-3, the lowest index would add fake-0.
	resp, err := reg.Client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"fake-0", "fake-1", "fake-2", "fake-3"}, MustIncludeDeviceIDs: []string{"fake-2"}, AllocationSize: 2,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, []string{"fake-2", "fake-3"}) {
		t.Errorf("preferred = %v, want the NVLinked pair [fake-2 fake-3]", got)
	}
	env := allocate(t, reg, "fake-3", "fake-2")
	want := map[string]string{
		"VIRTUAL_GPU_IDS":        "fake-2,fake-3",
		"VIRTUAL_GPU_TOPOLOGY":   "workstation-4gpu",
		"VIRTUAL_GPU_NUMA_NODES": "0,0",
		"VIRTUAL_GPU_LINKS":      "NV4", // positions 0 and 1: fake-2 and fake-3
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

// TestBinary_Allocate1024_Small allocates all 1,024 devices of the default
// generic layout through real gRPC with the client's default limits (as the
// kubelet's): every variable stays under 64 KiB (Linux refuses a container
// whose environment string passes 128 KiB) and the whole answer under 128
// KiB (gRPC's default limit is 4 MiB), leaving room for more variables.
func TestBinary_Allocate1024_Small(t *testing.T) {
	const devices = 1024
	n := newNode(t)
	_, reg := n.start(t, "-devices=1024")
	list := plugintest.NextList(t, reg, 10*time.Second)
	if len(list.Devices) != devices {
		t.Fatalf("listed %d devices, want %d", len(list.Devices), devices)
	}
	ids := make([]string, 0, devices)
	for _, d := range list.Devices {
		ids = append(ids, d.ID)
	}
	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env := resp.ContainerResponses[0].Envs
	for k, v := range env {
		t.Logf("%s: %d bytes", k, len(v))
		if len(v) >= 64<<10 {
			t.Errorf("%s is %d bytes, want < 64 KiB", k, len(v))
		}
	}
	size := proto.Size(resp)
	t.Logf("Allocate answer for %d devices: %d bytes", devices, size)
	if size >= 128<<10 {
		t.Errorf("Allocate answer is %d bytes, want < 128 KiB", size)
	}
	links, err := topology.ParseLinks(env[topology.EnvLinks], devices)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p, q int
		want string
	}{{0, 1, "PIX"}, {0, 2, "PHB"}, {510, 511, "PIX"}, {511, 512, "SYS"}, {1022, 1023, "PIX"}} {
		if got := links.Label(c.p, c.q); got != c.want {
			t.Errorf("positions %d,%d are %s, want %s", c.p, c.q, got, c.want)
		}
	}
}

func TestBinary_TopologyLowestIndexPolicy(t *testing.T) {
	n := newNode(t)
	_, reg := n.start(t, "-topology=workstation-4gpu", "-allocation-policy=lowest-index")
	resp, err := reg.Client.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"fake-0", "fake-1", "fake-2", "fake-3"}, MustIncludeDeviceIDs: []string{"fake-2"}, AllocationSize: 2,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, []string{"fake-0", "fake-2"}) {
		t.Errorf("lowest-index preferred = %v, want [fake-0 fake-2]", got)
	}
}

func TestBinary_TopologyBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: virtual-gpu.unicore.mcyou.cc/v1\nkind: Topology\nnumaNodes:\n  - gpus: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A named pipe once hung start-up forever (open blocks) and ignored SIGTERM.
	fifo := filepath.Join(t.TempDir(), "node.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"devices contradict preset", []string{"-topology=dgx2", "-devices=4"}, "dgx2"},
		{"named pipe", []string{"-topology=" + fifo}, "is a named pipe (FIFO): not a regular file"},
		{"unknown preset", []string{"-topology=dgx9"}, "dgx9"},
		{"bad file", []string{"-topology=" + bad}, bad + ":4"},
		{"bad policy", []string{"-allocation-policy=random"}, `invalid -allocation-policy="random"`},
		{"bad numa report", []string{"-numa-report=sometimes"}, `invalid -numa-report="sometimes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := cli(t, append(tt.args, "-state="+filepath.Join(t.TempDir(), "s.db"))...)
			if code != 2 || !strings.Contains(errOut, tt.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, %q; want exit 2 and one line containing %q", code, errOut, tt.want)
			}
		})
	}
}

func TestBinary_MachineChanged_Reconciled(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t, "-devices=4")
	allocate(t, reg, "fake-3")
	p.stop(t)

	p, reg = n.start(t, "-devices=2")
	if l := plugintest.NextList(t, reg, 10*time.Second); len(l.Devices) != 2 {
		t.Fatalf("with -devices=2 the kubelet sees %d devices", len(l.Devices))
	}
	p.logs.waitLine(t, "reconciled stored devices")
	doc := n.dump(t)
	if len(doc.Devices) != 4 || !doc.Devices[3].Removed || doc.Devices[1].Removed {
		t.Errorf("devices after shrinking: %+v", doc.Devices)
	}
	if len(doc.Allocations) != 1 || doc.Allocations[0].DeviceIDs[0] != "fake-3" {
		t.Errorf("history after shrinking: %+v", doc.Allocations)
	}
	p.stop(t)

	_, reg = n.start(t, "-devices=6")
	if l := plugintest.NextList(t, reg, 10*time.Second); len(l.Devices) != 6 {
		t.Fatalf("with -devices=6 the kubelet sees %d devices", len(l.Devices))
	}
}
