package dra

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// sliceDevices returns the names of the devices in the published slices.
func (r *rig) sliceDevices(ctx context.Context) []string {
	var out []string
	for _, s := range r.slices(ctx) {
		for _, d := range s.Spec.Devices {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestApply: a live change of the devices (another profile) publishes the
// pool again, and a claim allocated one of the devices it removed is
// refused naming the device and the profile; a claim prepared before the
// change keeps its answer.
func TestApply(t *testing.T) {
	r := newRig(t, "generic-4")
	ctx := r.run(t)
	plugintest.WaitFor(t, 10*time.Second, "4 devices published", func() bool { return len(r.sliceDevices(ctx)) == 4 })
	before := mustPrepare(t, r.d, claimOf(uidA, "before", result("gpus", "fake-0")))

	set := r.newSet("generic-2")
	set.Config.Profile = "two"
	if err := r.d.Apply(set, r.st.Devices); err != nil {
		t.Fatal(err)
	}
	plugintest.WaitFor(t, 10*time.Second, "2 devices published", func() bool {
		return slices.Equal(r.sliceDevices(ctx), []string{"fake-0", "fake-1"})
	})
	_, err := r.d.Prepare(ctx, claimOf(uidB, "removed", result("gpus", "fake-3")))
	if !errors.Is(err, ErrNotServed) || !strings.Contains(err.Error(), `"fake-3"`) || !strings.Contains(err.Error(), `profile "two"`) {
		t.Errorf("Prepare of a removed device: %v, want ErrNotServed naming fake-3 and the profile", err)
	}
	again, err := r.d.Prepare(ctx, claimOf(uidA, "before", result("gpus", "fake-0")))
	if err != nil || len(again) != len(before) || again[0].DeviceName != "fake-0" {
		t.Errorf("the claim prepared before the change: %v, %v", again, err)
	}
}

// claims is a Claims of fixed records.
type claims []store.Claim

func (c claims) PreparedClaims() ([]store.Claim, error) { return c, nil }

// TestHolders: the telemetry's holders in DRA mode are the pods each
// prepared claim is reserved for, oldest claim first (so the newest holder
// of a shared GPU labels it), in the claim's namespace; consumers that are
// not pods hold nothing.
func TestHolders(t *testing.T) {
	h := Holders{Store: claims{ // newest first, as the store lists them
		{UID: "u2", Namespace: "team-b", Name: "new", DeviceIDs: []string{"fake-1"},
			ReservedFor: []store.ClaimConsumer{{Resource: store.ConsumerPods, Name: "b-0", UID: "p2"}, {Resource: "jobsets", Name: "x", UID: "j1"}}},
		{UID: "u1", Namespace: "team-a", Name: "old", DeviceIDs: []string{"fake-0", "fake-1"},
			ReservedFor: []store.ClaimConsumer{{Resource: store.ConsumerPods, Name: "a-0", UID: "p0"}, {Resource: store.ConsumerPods, Name: "a-1", UID: "p1"}}},
	}}
	got, err := h.Holdings()
	if err != nil {
		t.Fatal(err)
	}
	want := []telemetry.Holding{
		{Holder: telemetry.Holder{Namespace: "team-a", Pod: "a-0"}, DeviceIDs: []string{"fake-0", "fake-1"}},
		{Holder: telemetry.Holder{Namespace: "team-a", Pod: "a-1"}, DeviceIDs: []string{"fake-0", "fake-1"}},
		{Holder: telemetry.Holder{Namespace: "team-b", Pod: "b-0"}, DeviceIDs: []string{"fake-1"}},
	}
	if len(got) != len(want) {
		t.Fatalf("holdings %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Holder != want[i].Holder || !slices.Equal(got[i].DeviceIDs, want[i].DeviceIDs) {
			t.Errorf("holding %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if got, err := (Holders{}).Holdings(); got != nil || err != nil {
		t.Errorf("no store: %v, %v", got, err)
	}
}

// TestPreparedClaims_FromMemory: the driver's prepared claims (what the
// telemetry reads at every scrape) are the store's, newest first, after
// Prepare, Unprepare and a restart on the same state file.
func TestPreparedClaims_FromMemory(t *testing.T) {
	r := newRig(t, "dgx-a100")
	ctx := context.Background()
	same := func(d *Driver, want ...string) {
		t.Helper()
		got, err := d.PreparedClaims()
		if err != nil {
			t.Fatal(err)
		}
		stored, err := r.st.PreparedClaims()
		if err != nil {
			t.Fatal(err)
		}
		var uids, storedUIDs []string
		for _, c := range got {
			uids = append(uids, c.UID)
		}
		for _, c := range stored {
			storedUIDs = append(storedUIDs, c.UID)
		}
		if !slices.Equal(uids, want) || !slices.Equal(storedUIDs, want) {
			t.Errorf("prepared claims: driver %v, store %v; want %v", uids, storedUIDs, want)
		}
	}
	mustPrepare(t, r.d, claimOf(uidA, "a", result("gpus", "fake-0")))
	mustPrepare(t, r.d, claimOf(uidB, "b", result("gpus", "fake-1")))
	same(r.d, uidB, uidA)
	if err := r.d.Unprepare(ctx, uidA, "default/a", "test"); err != nil {
		t.Fatal(err)
	}
	same(r.d, uidB)
	same(r.newDriver(), uidB)
}
