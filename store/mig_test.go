package store_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// migSpecs returns the specs of two GPUs with UUIDs and, on fake-0, the
// MIG devices of profile at the given starts, each with a UUID of its own.
func migSpecs(profile string, starts ...int) []store.DeviceSpec {
	out := sharedSpecs(2, 0)
	for _, s := range starts {
		id := "fake-0-mig-" + profile + "-" + string(rune('0'+s))
		out = append(out, store.DeviceSpec{ID: id, Index: 0, NUMA: 0, UUID: "MIG-" + id, GPU: "fake-0", Replica: s, MIG: profile})
	}
	return out
}

// TestReconcile_MIGDevices walks a store through two MIG layouts of one
// GPU and back: MIG devices are stored with their own UUIDs and profile,
// have their GPU's health, are refused by SetHealth, are flagged removed
// when the layout drops them and restored with the same UUID when it
// places them again; an allocation of them lists their GPU.
func TestReconcile_MIGDevices(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{Now: newClock().Now})
	first := migSpecs("3g40gb", 0, 4)
	if _, err := s.Reconcile(first); err != nil {
		t.Fatal(err)
	}
	d, err := s.Device("fake-0-mig-3g40gb-4")
	if err != nil || d.UUID != "MIG-fake-0-mig-3g40gb-4" || d.MIG != "3g40gb" || d.GPU != "fake-0" || d.Replica != 4 || !d.IsMIG() {
		t.Fatalf("stored MIG device = %+v, %v", d, err)
	}
	if _, _, err := s.SetHealth("fake-0-mig-3g40gb-4", false, "x", store.CauseAdmin); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("SetHealth of a MIG device = %v, want ErrInvalid (health is its GPU's)", err)
	}
	if _, _, err := s.SetHealth("fake-0", false, "XID 79", store.CauseAdmin); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Device("fake-0-mig-3g40gb-0"); d.Healthy || d.Reason != "XID 79" {
		t.Errorf("MIG device of an unhealthy GPU = %+v, want its GPU's health", d)
	}
	a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0-mig-3g40gb-0"}})
	if !slices.Equal(a.GPUIDs, []string{"fake-0"}) {
		t.Errorf("allocation of a MIG device lists GPUs %v, want [fake-0]", a.GPUIDs)
	}

	rep, err := s.Reconcile(migSpecs("1g10gb", 0, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Removed, []string{"fake-0-mig-3g40gb-0", "fake-0-mig-3g40gb-4"}) || len(rep.Added) != 3 {
		t.Errorf("layout change: %+v", rep)
	}
	rep, err = s.Reconcile(first)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Restored, []string{"fake-0-mig-3g40gb-0", "fake-0-mig-3g40gb-4"}) || len(rep.UUIDConflicts) != 0 {
		t.Errorf("layout back: %+v", rep)
	}
	if d, _ := s.Device("fake-0-mig-3g40gb-4"); d.UUID != "MIG-fake-0-mig-3g40gb-4" || d.Removed {
		t.Errorf("restored MIG device = %+v", d)
	}
}

func TestReconcile_MIGSpecErrors(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{})
	noGPU := append(sharedSpecs(1, 0), store.DeviceSpec{ID: "fake-0-mig-1g10gb-0", UUID: "MIG-x", MIG: "1g.10gb"})
	if _, err := s.Reconcile(noGPU); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("MIG device without a GPU: %v, want ErrInvalid", err)
	}
	dupUUID := append(sharedSpecs(1, 0), store.DeviceSpec{ID: "fake-0-mig-1g10gb-0", UUID: "GPU-0", GPU: "fake-0", MIG: "1g.10gb"})
	if _, err := s.Reconcile(dupUUID); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("MIG device with its GPU's UUID: %v, want ErrInvalid", err)
	}
}

// TestReconcileConfig_AdvertisedCount: a caller that advertises other than
// every configured GPU and replica (MIG devices kept for a layout but the
// GPUs advertised whole) says how many it advertises, and the event keeps
// it; without a count the report's is taken.
func TestReconcileConfig_AdvertisedCount(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{})
	e := store.ConfigEvent{Why: store.WhyFileChanged, MIGStrategy: "none", MIGLayout: "all-balanced", Devices: 2}
	got, err := s.ReconcileConfig(migSpecs("3g40gb", 0, 4), e, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Event.Devices != 2 || got.Event.MIGLayout != "all-balanced" || got.Event.MIGStrategy != "none" {
		t.Errorf("event %+v: want the 2 devices advertised and the MIG layout", got.Event)
	}
	e.Devices, e.MIGStrategy = 0, "mixed"
	if got, err = s.ReconcileConfig(migSpecs("3g40gb", 0, 4), e, nil); err != nil || !got.Recorded || got.Event.Devices != 3 {
		t.Errorf("another strategy = %+v, %v; want recorded, the report's 3 devices (fake-1 and the two MIG devices)", got, err)
	}
}
