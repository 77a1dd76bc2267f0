package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// exampleDir makes a scratch directory for an example; examples have no
// testing.T and its TempDir.
func exampleDir() (string, func()) {
	dir, err := os.MkdirTemp("", "store-example-")
	if err != nil {
		panic(err)
	}
	return dir, func() { os.RemoveAll(dir) }
}

// exampleClock is a fixed clock so that the output is stable.
func exampleClock() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }

// The plugin's life with the store: reconcile the configured devices at
// start, record what Allocate answered, mark a device unhealthy.
func Example() {
	dir, cleanup := exampleDir()
	defer cleanup()

	s, err := store.Open(filepath.Join(dir, "state.db"), store.Options{Now: exampleClock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	rep, err := s.Reconcile([]store.DeviceSpec{
		{ID: "fake-0", Index: 0, NUMA: 0},
		{ID: "fake-1", Index: 1, NUMA: 0},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("added:", rep.Added)

	a, err := s.RecordAllocation(store.Allocation{
		DeviceIDs: []string{"fake-1"},
		Envs:      map[string]string{"VIRTUAL_GPU_IDS": "fake-1"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := json.Marshal(a)
	fmt.Println(string(out))

	d, changed, err := s.SetHealth("fake-0", false, "ecc errors", store.CauseFaultInjection)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.ID, "healthy:", d.Healthy, "changed:", changed)
	// Output:
	// added: [fake-0 fake-1]
	// {"seq":1,"time":"2026-03-01T12:00:00Z","device_ids":["fake-1"],"envs":{"VIRTUAL_GPU_IDS":"fake-1"},"state":"allocated"}
	// fake-0 healthy: false changed: true
}

// Devices no longer configured are flagged removed, never deleted, and come
// back with the health they had.
func ExampleStore_Reconcile() {
	dir, cleanup := exampleDir()
	defer cleanup()
	s, err := store.Open(filepath.Join(dir, "state.db"), store.Options{Now: exampleClock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	four := []store.DeviceSpec{{ID: "fake-0", Index: 0}, {ID: "fake-1", Index: 1}, {ID: "fake-2", Index: 2, NUMA: 1}, {ID: "fake-3", Index: 3, NUMA: 1}}
	for _, config := range [][]store.DeviceSpec{four, four[:2], four} {
		rep, err := s.Reconcile(config)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("added %v removed %v restored %v\n", rep.Added, rep.Removed, rep.Restored)
	}
	// Output:
	// added [fake-0 fake-1 fake-2 fake-3] removed [] restored []
	// added [] removed [fake-2 fake-3] restored []
	// added [] removed [] restored [fake-2 fake-3]
}

// A caller can reconcile the configured devices, each with the UUID it
// derives, and record a configuration change itself when the configuration
// differs from the newest stored one (ReconcileConfig does both in one
// transaction). A device keeps the first UUID stored for it.
func ExampleStore_RecordConfigChange() {
	dir, cleanup := exampleDir()
	defer cleanup()
	s, err := store.Open(filepath.Join(dir, "state.db"), store.Options{Now: exampleClock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	start := func(node, profile string, n int) {
		specs := make([]store.DeviceSpec, n)
		for i := range specs {
			id := fmt.Sprintf("fake-%d", i)
			specs[i] = store.DeviceSpec{ID: id, Index: i, UUID: "GPU-" + node + "-" + id} // the caller's derivation
		}
		rep, err := s.Reconcile(specs)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, c := range rep.UUIDConflicts {
			fmt.Println("kept", c.Stored, "for", c.ID, "not", c.Given)
		}
		now := store.ConfigEvent{Profile: profile, Why: store.WhyNodeLabel, Machine: "workstation-4gpu"}.FromReport(rep)
		last, err := s.ConfigEvents(store.ConfigFilter{Limit: 1})
		if err != nil {
			fmt.Println(err)
			return
		}
		if len(last) == 1 && last[0].SameConfig(now) {
			return
		}
		if len(last) == 1 {
			now.PreviousProfile = last[0].Profile
		}
		if _, err := s.RecordConfigChange(now); err != nil {
			fmt.Println(err)
		}
	}
	start("node-a", "four", 4)
	start("node-a", "four", 4) // a restart: nothing to record
	start("node-b", "two", 2)  // renamed node, another profile

	evs, _ := s.ConfigEvents(store.ConfigFilter{})
	for _, e := range evs {
		fmt.Printf("%d %q after %q: %d devices, added %v, removed %v\n", e.Seq, e.Profile, e.PreviousProfile, e.Devices, e.Added, e.Removed)
	}
	d, _ := s.Device("fake-3")
	fmt.Println(d.ID, d.UUID, "removed:", d.Removed)
	// Output:
	// kept GPU-node-a-fake-0 for fake-0 not GPU-node-b-fake-0
	// kept GPU-node-a-fake-1 for fake-1 not GPU-node-b-fake-1
	// 2 "two" after "four": 2 devices, added [], removed [fake-2 fake-3]
	// 1 "four" after "": 4 devices, added [fake-0 fake-1 fake-2 fake-3], removed []
	// fake-3 GPU-node-a-fake-3 removed: true
}

// At every start and every live change the plugin reconciles the
// configured devices and records the change in one transaction, so that a
// crash cannot leave a device change without its event; a start with the
// configuration in force records nothing.
func ExampleStore_ReconcileConfig() {
	dir, cleanup := exampleDir()
	defer cleanup()
	s, err := store.Open(filepath.Join(dir, "state.db"), store.Options{Now: exampleClock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	apply := func(profile string, n int) {
		specs := make([]store.DeviceSpec, n)
		for i := range specs {
			specs[i] = store.DeviceSpec{ID: fmt.Sprintf("fake-%d", i), Index: i}
		}
		c, err := s.ReconcileConfig(specs, store.ConfigEvent{Profile: profile, Why: store.WhyFileChanged, Machine: "workstation-4gpu"}, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		e := c.Event
		fmt.Printf("recorded %v: %d %q after %q, added %v, removed %v, restored %v\n", c.Recorded, e.Seq, e.Profile, e.PreviousProfile, e.Added, e.Removed, e.Restored)
	}
	apply("four", 4)
	apply("four", 4) // a restart
	apply("two", 2)
	apply("four", 4)
	// Output:
	// recorded true: 1 "four" after "", added [fake-0 fake-1 fake-2 fake-3], removed [], restored []
	// recorded false: 1 "four" after "", added [fake-0 fake-1 fake-2 fake-3], removed [], restored []
	// recorded true: 2 "two" after "four", added [], removed [fake-2 fake-3], restored []
	// recorded true: 3 "four" after "two", added [], removed [], restored [fake-2 fake-3]
}

// The lifecycle reconciler fills in who holds an allocation.
func ExampleStore_UpdateAllocation() {
	dir, cleanup := exampleDir()
	defer cleanup()
	s, err := store.Open(filepath.Join(dir, "state.db"), store.Options{Now: exampleClock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	if _, err := s.Reconcile([]store.DeviceSpec{{ID: "fake-0"}}); err != nil {
		fmt.Println(err)
		return
	}
	a, err := s.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	a, err = s.UpdateAllocation(a.Seq, func(a *store.Allocation) error {
		a.State, a.Namespace, a.Pod, a.Container = store.StateHeld, "default", "vgpu-demo", "demo"
		a.HeldSince = exampleClock().Add(2 * time.Second)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(a.Seq, a.State, a.Namespace+"/"+a.Pod+"/"+a.Container, a.HeldSince.Format(time.RFC3339))

	active, _ := s.Allocations(store.AllocationFilter{DeviceID: "fake-0", Active: true})
	fmt.Println("active on fake-0:", len(active))
	// Output:
	// 1 held default/vgpu-demo/demo 2026-03-01T12:00:02Z
	// active on fake-0: 1
}

// Keep the history bounded; run Prune periodically.
func ExampleStore_Prune() {
	dir, cleanup := exampleDir()
	defer cleanup()
	s, err := store.Open(filepath.Join(dir, "state.db"), store.Options{Now: exampleClock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	if _, err := s.Reconcile([]store.DeviceSpec{{ID: "fake-0"}}); err != nil { // one health event
		fmt.Println(err)
		return
	}
	for range 5 {
		if _, err := s.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}}); err != nil {
			fmt.Println(err)
			return
		}
	}
	r, err := s.Prune(context.Background(), store.PruneOptions{MaxRecords: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	kept, _ := s.Allocations(store.AllocationFilter{})
	fmt.Println("deleted", r.Allocations, "kept", kept[0].Seq, kept[1].Seq)
	// Output:
	// deleted 3 kept 5 4
}

// The DRA driver records the claims it prepares: Prepare is idempotent, so
// the kubelet's retry (or a restarted driver) gets the stored record back;
// Unprepare marks it unprepared, and a claim prepared again gets a new
// record.
func ExampleStore_RecordClaimPrepared() {
	dir, cleanup := exampleDir()
	defer cleanup()
	s, err := store.Open(filepath.Join(dir, "state.db"), store.Options{Now: exampleClock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	if _, err := s.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0}, {ID: "fake-1", Index: 1}}); err != nil {
		fmt.Println(err)
		return
	}
	c := store.Claim{
		UID: "6e1f5b0c-2d7a-4c39-9f0e-8b3a1d2c4e5f", Namespace: "default", Name: "trainer-gpus",
		DeviceIDs:   []string{"fake-0", "fake-1"},
		Envs:        map[string]string{"VIRTUAL_GPU_IDS": "fake-0,fake-1"},
		ReservedFor: []store.ClaimConsumer{{Resource: store.ConsumerPods, Name: "trainer", UID: "0b8e2c4a-9d1f-4e3b-a6c5-7f2d8e9a0b1c"}},
	}
	stored, created, err := s.RecordClaimPrepared(c)
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := json.Marshal(stored)
	fmt.Println(created, string(out))

	again, created, _ := s.RecordClaimPrepared(c) // the kubelet retries
	fmt.Println(created, again.Seq)

	if _, changed, err := s.RecordClaimUnprepared(c.UID, time.Time{}); err != nil || !changed {
		fmt.Println(changed, err)
		return
	}
	if _, _, err := s.RecordClaimPrepared(c); err != nil { // prepared again: record 2
		fmt.Println(err)
		return
	}
	all, _ := s.Claims(store.ClaimFilter{DeviceID: "fake-1"})
	for _, c := range all {
		fmt.Println(c.Seq, c.Namespace+"/"+c.Name, "prepared:", c.Prepared())
	}
	prepared, _ := s.PreparedClaims()
	fmt.Println("prepared:", len(prepared))
	// Output:
	// true {"seq":1,"uid":"6e1f5b0c-2d7a-4c39-9f0e-8b3a1d2c4e5f","namespace":"default","name":"trainer-gpus","device_ids":["fake-0","fake-1"],"envs":{"VIRTUAL_GPU_IDS":"fake-0,fake-1"},"reserved_for":[{"resource":"pods","name":"trainer","uid":"0b8e2c4a-9d1f-4e3b-a6c5-7f2d8e9a0b1c"}],"prepared_at":"2026-03-01T12:00:00Z"}
	// false 1
	// 2 default/trainer-gpus prepared: true
	// 1 default/trainer-gpus prepared: false
	// prepared: 1
}

// A damaged file is refused with ErrCorrupt; MoveAside keeps it for
// inspection and the next Open starts fresh.
func ExampleMoveAside() {
	dir, cleanup := exampleDir()
	defer cleanup()
	path := filepath.Join(dir, "state.db")
	if err := os.WriteFile(path, []byte("not a bbolt file"), 0o600); err != nil {
		fmt.Println(err)
		return
	}

	opts := store.Options{RecoveryHint: "start with -state-move-aside to move it aside and start fresh"}
	_, err := store.Open(path, opts)
	fmt.Println(errors.Is(err, store.ErrCorrupt))
	fmt.Println(strings.ReplaceAll(err.Error(), dir, "DIR"))

	moved, err := store.MoveAside(path, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(filepath.Base(moved))

	s, err := store.Open(path, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	fmt.Println("fresh store opened")
	// Output:
	// true
	// open state "DIR/state.db": state file is corrupt: no valid meta page: invalid database; start with -state-move-aside to move it aside and start fresh
	// state.db.corrupt-20260301T120000Z
	// fresh store opened
}
