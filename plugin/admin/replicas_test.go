package admin_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// sharedFixture is a store of two GPUs: fake-0 shared as 3 replicas, fake-1
// whole (a set sharing only some GPUs), with allocations of fake-0::0, of
// fake-0::1 with fake-1, and of fake-0::2, released.
func sharedFixture(t *testing.T) *store.Store {
	t.Helper()
	st := storetest.MustOpen(t, store.Options{})
	specs := []store.DeviceSpec{{ID: "fake-0", Index: 0, UUID: "GPU-0"}, {ID: "fake-1", Index: 1, NUMA: 1, UUID: "GPU-1"}}
	for j, id := range []string{"fake-0::0", "fake-0::1", "fake-0::2"} {
		specs = append(specs, store.DeviceSpec{ID: id, Index: 0, GPU: "fake-0", Replica: j})
	}
	if _, err := st.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][]string{{"fake-0::0"}, {"fake-0::1", "fake-1"}, {"fake-0::2"}} {
		if _, err := st.RecordAllocation(store.Allocation{DeviceIDs: ids}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.UpdateAllocation(3, func(a *store.Allocation) error { a.State = store.StateReleased; return nil }); err != nil {
		t.Fatal(err)
	}
	return st
}

// A snapshot shows per shared GPU its replicas in use out of its total and
// their holders; a replica names its GPU and number; the GPU has the NUMA
// node the kubelet was told of its replicas; allocations list their GPUs.
func TestClient_Snapshot_Replicas(t *testing.T) {
	st := sharedFixture(t)
	reported := func() []gpuset.Device {
		return []gpuset.Device{{ID: "fake-0::0", NUMA: 0}, {ID: "fake-0::1", Index: 1, NUMA: 0}, {ID: "fake-0::2", Index: 2, NUMA: 0}, {ID: "fake-1", Index: 3, NUMA: 1}}
	}
	c := run(t, admin.ServerConfig{Source: source{Store: st}, Reported: reported})
	snap, err := c.Snapshot(context.Background(), admin.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range snap.Devices {
		got = append(got, d.ID)
	}
	if want := []string{"fake-0", "fake-0::0", "fake-0::1", "fake-0::2", "fake-1"}; !slices.Equal(got, want) {
		t.Fatalf("devices %v, want %v", got, want)
	}
	gpu := snap.Devices[0]
	want := &admin.ReplicaUse{Total: 3, InUse: 2, Holders: []admin.Holder{
		{Seq: 2, State: store.StateAllocated, DeviceIDs: []string{"fake-0::1"}},
		{Seq: 1, State: store.StateAllocated, DeviceIDs: []string{"fake-0::0"}},
	}}
	if !reflect.DeepEqual(gpu.Replicas, want) || gpu.Holder != nil || gpu.GPU != "" || gpu.Replica != nil || gpu.UUID != "GPU-0" {
		t.Errorf("fake-0 = %+v, replicas %+v\nwant replicas %+v, no holder of its own", gpu, gpu.Replicas, want)
	}
	if gpu.ReportedNUMANode == nil || *gpu.ReportedNUMANode != 0 {
		t.Errorf("fake-0 reported NUMA node %v, want its replicas' 0", gpu.ReportedNUMANode)
	}
	r := snap.Devices[2]
	if r.GPU != "fake-0" || r.Replica == nil || *r.Replica != 1 || r.Holder == nil || r.Holder.Seq != 2 || r.Replicas != nil || r.UUID != "" {
		t.Errorf("fake-0::1 = %+v", r)
	}
	if whole := snap.Devices[4]; whole.Replicas != nil || whole.Holder == nil || whole.Holder.Seq != 2 {
		t.Errorf("fake-1 = %+v, want held by #2, no replicas", whole)
	}
	if a := snap.Allocations[1]; a.Seq != 2 || !slices.Equal(a.GPUIDs, []string{"fake-0", "fake-1"}) {
		t.Errorf("allocation %+v, want GPUs fake-0, fake-1", a)
	}
	// A GPU's history includes its replicas' allocations.
	hist, err := c.Snapshot(context.Background(), admin.Query{DeviceID: "fake-0"})
	if err != nil || len(hist.Allocations) != 3 {
		t.Errorf("history of fake-0: %d allocations, %v; want 3", len(hist.Allocations), err)
	}
}

// Health is per GPU: a replica id is refused (400) with a message naming
// its GPU, and nothing changes; the unknown-device message lists GPUs only.
func TestClient_SetHealth_Replica(t *testing.T) {
	st := sharedFixture(t)
	called := false
	c := run(t, admin.ServerConfig{Source: source{Store: st}, Health: func(id string, healthy bool, reason string) error {
		called = true
		return storeHealth(st)(id, healthy, reason)
	}})
	_, err := c.SetHealth(context.Background(), "fake-0::2", false, "XID 79")
	if !errors.Is(err, admin.ErrRequest) || errors.Is(err, store.ErrUnknownDevice) ||
		err.Error() != "fake-0::2 is replica 2 of fake-0: health is per GPU; set fake-0 (all its replicas follow)" {
		t.Errorf("err = %v", err)
	}
	if called {
		t.Error("the plugin's health function was called for a replica")
	}
	_, err = c.SetHealth(context.Background(), "fake-9", false, "")
	if !errors.Is(err, store.ErrUnknownDevice) || !strings.HasSuffix(err.Error(), "(devices: fake-0, fake-1)") {
		t.Errorf("unknown device: %v, want the GPUs listed", err)
	}
	snap, err := c.SetHealth(context.Background(), "fake-0", false, "XID 79")
	if err != nil || len(snap.Devices) != 1 || snap.Devices[0].Healthy || snap.Devices[0].Replicas == nil {
		t.Fatalf("SetHealth(fake-0) = %+v, %v", snap, err)
	}
	full, err := c.Snapshot(context.Background(), admin.Query{DevicesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range full.Devices {
		if want := d.ID == "fake-1"; d.Healthy != want {
			t.Errorf("%s healthy = %v, want %v (a GPU's replicas have its health)", d.ID, d.Healthy, want)
		}
	}
}
