package lifecycle_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/lifecycle"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

const res = "unicore.mcyou.cc/gpu"

// fixture is a real store, a scripted PodResources socket, a Tracker with a
// settable clock, and a client for Sync.
type fixture struct {
	st     *store.Store
	pr     *plugintest.PodResources
	tr     *lifecycle.Tracker
	client podresourcesapi.PodResourcesListerClient
	now    time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{st: storetest.MustOpen(t, store.Options{}), now: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}
	var specs []store.DeviceSpec
	for i := range 4 {
		specs = append(specs, store.DeviceSpec{ID: "fake-" + string(rune('0'+i)), Index: i})
	}
	if _, err := f.st.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "vgpu-pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	f.pr = plugintest.StartPodResources(t, sock)
	f.tr = mustTracker(t, f.st, sock, func() time.Time { return f.now }, zerolog.New(zerolog.NewTestWriter(t)))
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.client = podresourcesapi.NewPodResourcesListerClient(conn)
	return f
}

func mustTracker(t *testing.T, st lifecycle.Store, sock string, now func() time.Time, log zerolog.Logger) *lifecycle.Tracker {
	t.Helper()
	tr, err := lifecycle.New(lifecycle.Config{Socket: sock, ResourceName: res, Store: st, Interval: 10 * time.Millisecond, AbandonAfter: time.Minute, Now: now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func (f *fixture) allocate(t *testing.T, ids ...string) uint64 {
	t.Helper()
	a, err := f.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Time: f.now})
	if err != nil {
		t.Fatal(err)
	}
	return a.Seq
}

func (f *fixture) sync(t *testing.T) {
	t.Helper()
	if err := f.tr.Sync(context.Background(), f.client); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func (f *fixture) record(t *testing.T, seq uint64) store.Allocation {
	t.Helper()
	a, err := f.st.Allocation(seq)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func holder(a store.Allocation) string {
	return a.State + " " + a.Namespace + "/" + a.Pod + "/" + a.Container
}

func TestTracker_HeldThenReleased(t *testing.T) {
	f := newFixture(t)
	seq := f.allocate(t, "fake-1", "fake-0")
	f.pr.SetPod("default", "other", "example.com/nic", plugintest.Container{Name: "c", IDs: []string{"fake-0", "fake-1"}}) // not our resource
	f.sync(t)
	if a := f.record(t, seq); a.State != store.StateAllocated {
		t.Fatalf("before any holder: %s", holder(a))
	}
	f.pr.SetPod("ml", "trainer", res, plugintest.Container{Name: "main", IDs: []string{"fake-0", "fake-1"}})
	f.now = f.now.Add(5 * time.Second)
	f.sync(t)
	a := f.record(t, seq)
	if holder(a) != "held ml/trainer/main" || !a.HeldSince.Equal(f.now) {
		t.Fatalf("after the pod appeared: %s since %v", holder(a), a.HeldSince)
	}
	f.now = f.now.Add(time.Hour)
	f.sync(t) // still held: no change, no abandonment
	if b := f.record(t, seq); holder(b) != holder(a) || !b.HeldSince.Equal(a.HeldSince) {
		t.Fatalf("a second sync changed the record: %s since %v", holder(b), b.HeldSince)
	}
	f.pr.DeletePod("ml", "trainer")
	f.now = f.now.Add(time.Second)
	f.sync(t)
	if a := f.record(t, seq); a.State != store.StateReleased || !a.ReleasedAt.Equal(f.now) || a.Pod != "trainer" {
		t.Fatalf("after the pod went: %s released %v", holder(a), a.ReleasedAt)
	}
}

func TestTracker_Abandoned(t *testing.T) {
	f := newFixture(t)
	seq := f.allocate(t, "fake-2")
	f.now = f.now.Add(59 * time.Second)
	f.sync(t)
	if a := f.record(t, seq); a.State != store.StateAllocated {
		t.Fatalf("before the timeout: %s", a.State)
	}
	f.now = f.now.Add(time.Second)
	f.sync(t)
	if a := f.record(t, seq); a.State != store.StateAbandoned || a.Pod != "" {
		t.Fatalf("after the timeout: %s", holder(a))
	}
}

func TestTracker_NewPodTakesOverTheSameDevices(t *testing.T) {
	f := newFixture(t)
	first := f.allocate(t, "fake-3")
	f.pr.SetPod("ns", "a", res, plugintest.Container{Name: "c", IDs: []string{"fake-3"}})
	f.sync(t)
	// Pod a ends and pod b gets the same device before the next poll.
	f.now = f.now.Add(time.Second)
	second := f.allocate(t, "fake-3")
	f.pr.DeletePod("ns", "a")
	f.pr.SetPod("ns", "b", res, plugintest.Container{Name: "c", IDs: []string{"fake-3"}})
	f.sync(t)
	if a := f.record(t, first); a.State != store.StateReleased || a.Pod != "a" {
		t.Errorf("first record: %s", holder(a))
	}
	if b := f.record(t, second); holder(b) != "held ns/b/c" {
		t.Errorf("second record: %s", holder(b))
	}
}

func TestTracker_KubeletRestart_KeepsHolds(t *testing.T) {
	f := newFixture(t)
	seq := f.allocate(t, "fake-0")
	f.pr.SetPod("ns", "p", res, plugintest.Container{Name: "c", IDs: []string{"fake-0"}})
	f.sync(t)
	f.pr.Stop() // the kubelet restarts: the socket is gone
	f.now = f.now.Add(time.Hour)
	if err := f.tr.Sync(context.Background(), f.client); err == nil {
		t.Fatal("Sync succeeded without a PodResources server")
	}
	if a := f.record(t, seq); holder(a) != "held ns/p/c" {
		t.Fatalf("a failed List changed the record: %s", holder(a))
	}
	f.pr.Start()
	deadline := time.Now().Add(10 * time.Second)
	for f.tr.Sync(context.Background(), f.client) != nil { // the client reconnects
		if time.Now().After(deadline) {
			t.Fatal("no successful Sync after the socket came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a := f.record(t, seq); holder(a) != "held ns/p/c" {
		t.Fatalf("after the kubelet came back: %s", holder(a))
	}
}

func TestTracker_PluginRestart_ClosesWhatEndedMeanwhile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := storetest.MustOpenPath(t, path, store.Options{})
	if _, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0}, {ID: "fake-1", Index: 1}}); err != nil {
		t.Fatal(err)
	}
	gone, _ := st.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}})
	stays, _ := st.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-1"}})
	for _, seq := range []uint64{gone.Seq, stays.Seq} {
		if _, err := st.UpdateAllocation(seq, func(a *store.Allocation) error {
			a.State, a.Namespace, a.Pod, a.Container, a.HeldSince = store.StateHeld, "ns", "p"+string(rune('0'+seq)), "c", time.Now()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The plugin was down; meanwhile the first pod ended.
	sock := filepath.Join(shortDir(t), "pr.sock")
	pr := plugintest.StartPodResources(t, sock)
	pr.SetPod("ns", "p"+string(rune('0'+stays.Seq)), res, plugintest.Container{Name: "c", IDs: []string{"fake-1"}})
	tr := mustTracker(t, st, sock, nil, zerolog.Nop())
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := tr.Sync(context.Background(), podresourcesapi.NewPodResourcesListerClient(conn)); err != nil {
		t.Fatal(err)
	}
	if a, _ := st.Allocation(gone.Seq); a.State != store.StateReleased {
		t.Errorf("record of the pod that ended: %s", a.State)
	}
	if a, _ := st.Allocation(stays.Seq); a.State != store.StateHeld {
		t.Errorf("record of the pod that runs: %s", a.State)
	}
}

func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "vgpu-pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestTracker_Run_SocketAbsentThenPresent(t *testing.T) {
	st := storetest.MustOpen(t, store.Options{})
	if _, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0}}); err != nil {
		t.Fatal(err)
	}
	seq, _ := st.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}})
	sock := filepath.Join(shortDir(t), "pr.sock")
	var logs plugintest.LogBuffer
	tr := mustTracker(t, st, sock, nil, zerolog.New(&logs))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, func() bool { return logs.Count("lifecycle tracking is off") == 1 }, "the off message")
	pr := plugintest.StartPodResources(t, sock)
	pr.SetPod("ns", "p", res, plugintest.Container{Name: "c", IDs: []string{"fake-0"}})
	waitFor(t, func() bool { a, _ := st.Allocation(seq.Seq); return a.State == store.StateHeld }, "the record held")
	waitFor(t, func() bool { return logs.Count("lifecycle tracking is on") == 1 }, "the on message")
	if n := logs.Count("lifecycle tracking is off"); n != 1 {
		t.Errorf("the off message was logged %d times, want once", n)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNew_BadConfig(t *testing.T) {
	st := storetest.MustOpen(t, store.Options{})
	for _, cfg := range []lifecycle.Config{
		{Socket: "relative.sock", ResourceName: res, Store: st},
		{Socket: "/x.sock", Store: st},
		{Socket: "/x.sock", ResourceName: res},
	} {
		if _, err := lifecycle.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
