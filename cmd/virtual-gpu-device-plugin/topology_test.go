package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
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

func TestBinary_NUMAReport(t *testing.T) {
	oneNode := fakeSysfs(t, "node0")
	tests := []struct {
		mode string
		want []int64 // generic-4: fake-0,1 on node 0; fake-2,3 on node 1
	}{
		{"auto", []int64{0, 0, -1, -1}}, // the host lacks node 1
		{"always", []int64{0, 0, 1, 1}},
		{"never", []int64{-1, -1, -1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			n := newNode(t)
			_, reg := n.start(t, "-numa-report="+tt.mode, "-sysfs-root="+oneNode)
			if got := numaOf(plugintest.NextList(t, reg, 10*time.Second)); !slices.Equal(got, tt.want) {
				t.Errorf("reported NUMA nodes = %v, want %v", got, tt.want)
			}
		})
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
		"VIRTUAL_GPU_LINKS":      "2:3=NV4",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
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
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"devices contradict preset", []string{"-topology=dgx2", "-devices=4"}, "dgx2"},
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
