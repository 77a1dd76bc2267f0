package main

import (
	"context"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// TestBinary_MIGSingle: with -mig-strategy=single the plugin registers the
// GPUs' resource with the MIG devices of the layout, prefers MIG devices
// on one GPU, hands a container its MIG ids and keeps their UUIDs and the
// layout in the state file.
func TestBinary_MIGSingle(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t, "-topology=hgx-h100", "-mig-strategy=single", "-mig-config=all-3g.40gb")
	if reg.Request.ResourceName != "unicore.mcyou.cc/gpu" {
		t.Errorf("registered %q", reg.Request.ResourceName)
	}
	l := plugintest.NextList(t, reg, 10*time.Second)
	var ids []string
	for _, d := range l.Devices {
		ids = append(ids, d.ID)
	}
	if len(ids) != 16 || ids[0] != "fake-0-mig-3g40gb-0" || ids[1] != "fake-0-mig-3g40gb-4" {
		t.Fatalf("advertised %d devices %v: want 16, fake-0-mig-3g40gb-0 first", len(ids), ids)
	}
	resp, err := reg.Client.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"fake-0-mig-3g40gb-0", "fake-1-mig-3g40gb-0", "fake-1-mig-3g40gb-4", "fake-2-mig-3g40gb-4"}, AllocationSize: 2,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(sortedIDs(got), []string{"fake-1-mig-3g40gb-0", "fake-1-mig-3g40gb-4"}) {
		t.Errorf("preferred %v: want both MIG devices of fake-1", got)
	}
	env := allocate(t, reg, "fake-1-mig-3g40gb-4")
	if env["VIRTUAL_GPU_IDS"] != "fake-1-mig-3g40gb-4" {
		t.Errorf("VIRTUAL_GPU_IDS = %q", env["VIRTUAL_GPU_IDS"])
	}
	p.stop(t)
	st, err := store.Open(n.state, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d, err := st.Device("fake-1-mig-3g40gb-4")
	if err != nil || !strings.HasPrefix(d.UUID, "MIG-") || d.GPU != "fake-1" || d.MIG != "3g.40gb" {
		t.Errorf("stored MIG device %+v, %v", d, err)
	}
	events, err := st.ConfigEvents(store.ConfigFilter{Limit: 1})
	if err != nil || len(events) != 1 || events[0].MIGLayout != "all-3g.40gb" || events[0].MIGStrategy != "single" || events[0].Devices != 16 {
		t.Errorf("config event %+v, %v", events, err)
	}
	allocs, err := st.Allocations(store.AllocationFilter{DeviceID: "fake-1"})
	if err != nil || len(allocs) != 1 || !slices.Equal(allocs[0].GPUIDs, []string{"fake-1"}) {
		t.Errorf("allocations under fake-1: %+v, %v", allocs, err)
	}
}

func sortedIDs(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// mixedLayout is a mig-parted file with a layout, half-mixed, that
// partitions the first four GPUs of a node (four 1g.10gb and one 3g.40gb
// each) and leaves the others whole; the e2e suite reads it too.
const mixedLayout = "testdata/mig-half-mixed.yaml"

// registrations waits for n registrations of the node's kubelet and
// returns them by resource name.
func (n *node) registrations(t *testing.T, count int) map[string]*plugintest.Registration {
	t.Helper()
	out := map[string]*plugintest.Registration{}
	for len(out) < count {
		r := n.kubelet.WaitRegistration(10 * time.Second)
		out[r.Request.ResourceName] = r
	}
	return out
}

// TestBinary_MIGMixed: with -mig-strategy=mixed the one process registers
// the GPUs' resource and one resource per MIG profile, each on its own
// socket with its own device list, preferred allocation and allocations in
// the history; after a kubelet restart every resource registers again.
func TestBinary_MIGMixed(t *testing.T) {
	n := newNode(t)
	file, err := filepath.Abs(mixedLayout)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-device-plugin-path=" + n.dir, "-state=" + n.state, "-pod-resources-socket=" + n.podResources(),
		"-topology=hgx-h100", "-mig-strategy=mixed", "-mig-config-file=" + file, "-mig-config=half-mixed"}
	p := startBinary(t, args...)
	regs := n.registrations(t, 3)
	want := map[string]struct {
		endpoint string
		count    int
		first    string
	}{
		"unicore.mcyou.cc/gpu":         {"virtual-gpu.sock", 4, "fake-4"},
		"unicore.mcyou.cc/mig-1g.10gb": {"virtual-gpu-mig-1g.10gb.sock", 16, "fake-0-mig-1g10gb-0"},
		"unicore.mcyou.cc/mig-3g.40gb": {"virtual-gpu-mig-3g.40gb.sock", 4, "fake-0-mig-3g40gb-4"},
	}
	for name, w := range want {
		r := regs[name]
		if r == nil {
			t.Fatalf("%s not registered: got %v", name, slices.Collect(maps.Keys(regs)))
		}
		if r.Request.Endpoint != w.endpoint {
			t.Errorf("%s on %q, want %q", name, r.Request.Endpoint, w.endpoint)
		}
		l := plugintest.NextList(t, r, 10*time.Second)
		if len(l.Devices) != w.count || l.Devices[0].ID != w.first {
			t.Errorf("%s lists %d devices from %s, want %d from %s", name, len(l.Devices), l.Devices[0].ID, w.count, w.first)
		}
	}

	small := regs["unicore.mcyou.cc/mig-1g.10gb"]
	resp, err := small.Client.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"fake-0-mig-1g10gb-0", "fake-1-mig-1g10gb-0", "fake-1-mig-1g10gb-1", "fake-2-mig-1g10gb-2"}, AllocationSize: 2,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedIDs(resp.ContainerResponses[0].DeviceIDs); !slices.Equal(got, []string{"fake-1-mig-1g10gb-0", "fake-1-mig-1g10gb-1"}) {
		t.Errorf("preferred %v: want the two of fake-1", got)
	}
	// A device of another resource is not this resource's to allocate.
	if _, err := small.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-0-mig-3g40gb-4"}}},
	}); err == nil {
		t.Error("the 1g.10gb socket allocated a 3g.40gb device")
	}
	if env := allocate(t, small, "fake-1-mig-1g10gb-0", "fake-1-mig-1g10gb-1"); env["VIRTUAL_GPU_IDS"] != "fake-1-mig-1g10gb-0,fake-1-mig-1g10gb-1" {
		t.Errorf("VIRTUAL_GPU_IDS = %q", env["VIRTUAL_GPU_IDS"])
	}
	if env := allocate(t, regs["unicore.mcyou.cc/mig-3g.40gb"], "fake-2-mig-3g40gb-4"); env["VIRTUAL_GPU_IDS"] != "fake-2-mig-3g40gb-4" {
		t.Errorf("VIRTUAL_GPU_IDS = %q", env["VIRTUAL_GPU_IDS"])
	}
	if env := allocate(t, regs["unicore.mcyou.cc/gpu"], "fake-5"); env["VIRTUAL_GPU_IDS"] != "fake-5" {
		t.Errorf("VIRTUAL_GPU_IDS = %q", env["VIRTUAL_GPU_IDS"])
	}

	// The dump shows the MIG devices under their GPU and the layout in
	// the history.
	doc := n.dump(t)
	for _, d := range doc.Devices {
		switch d.ID {
		case "fake-1":
			if u := d.MIGDevices; u == nil || u.Total != 5 || u.InUse != 2 || len(u.Holders) != 1 {
				t.Errorf("fake-1's MIG devices in the dump: %+v", u)
			}
		case "fake-1-mig-1g10gb-0":
			if d.GPU != "fake-1" || d.MIG != "1g.10gb" || d.Replica != nil || d.Holder == nil {
				t.Errorf("MIG device in the dump: %+v", d)
			}
		}
	}
	if len(doc.ConfigEvents) == 0 || doc.ConfigEvents[0].MIGLayout != "half-mixed" || doc.ConfigEvents[0].MIGStrategy != "mixed" {
		t.Errorf("config events in the dump: %+v", doc.ConfigEvents)
	}
	out, _, code := cli(t, "dump", "-state="+n.state)
	if code != 0 || !strings.Contains(out, "half-mixed (mixed)") || !regexp.MustCompile(`(?m)^fake-1\s.*\s2/5\s`).MatchString(out) {
		t.Errorf("dump (exit %d) lacks the layout or fake-1's 2/5 MIG devices in use:\n%s", code, out)
	}

	n.kubelet.Restart()
	again := n.registrations(t, 3)
	for name := range want {
		if again[name] == nil {
			t.Errorf("%s not registered again after the kubelet restart", name)
		}
	}
	p.stop(t)
	st, err := store.Open(n.state, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	allocs, err := st.Allocations(store.AllocationFilter{})
	if err != nil || len(allocs) != 3 {
		t.Fatalf("allocations %+v, %v: want 3", allocs, err)
	}
	events, err := st.ConfigEvents(store.ConfigFilter{Limit: 1})
	if err != nil || len(events) != 1 || events[0].MIGStrategy != "mixed" || events[0].MIGLayout != "half-mixed" || events[0].Devices != 24 {
		t.Errorf("config event %+v, %v", events, err)
	}
}
