package main

import (
	"context"
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
