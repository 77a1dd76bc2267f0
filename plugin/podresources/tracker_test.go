package podresources_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/podresources"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

const res = "unicore.mcyou.cc/gpu"

// The polling intervals of every test Tracker.
const (
	slow    = 5 * time.Second
	fast    = 100 * time.Millisecond
	linger  = 2 * time.Second // FastAfterRelease
	abandon = time.Minute
)

var _ podresources.Clock = (*storetest.Clock)(nil)

// fixture is a real store, a scripted PodResources socket, a Tracker on a
// fake clock, and a client for Sync.
type fixture struct {
	st     *store.Store
	pr     *plugintest.PodResources
	tr     *podresources.Tracker
	clock  *storetest.Clock
	client podresourcesapi.PodResourcesListerClient
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{st: storetest.MustOpen(t, store.Options{}), clock: storetest.NewClock(t, time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))}
	var specs []store.DeviceSpec
	for i := range 4 {
		specs = append(specs, store.DeviceSpec{ID: "fake-" + string(rune('0'+i)), Index: i})
	}
	if _, err := f.st.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(plugintest.ShortTempDir(t), "kubelet.sock")
	f.pr = plugintest.StartPodResources(t, sock)
	f.tr = mustTracker(t, f.st, sock, f.clock, zerolog.New(zerolog.NewTestWriter(t)))
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.client = podresourcesapi.NewPodResourcesListerClient(conn)
	return f
}

func mustTracker(t *testing.T, st podresources.Store, sock string, clock podresources.Clock, log zerolog.Logger) *podresources.Tracker {
	t.Helper()
	tr, err := podresources.New(podresources.Config{Socket: sock, ResourceName: res, Store: st, Interval: slow, FastInterval: fast,
		FastAfterRelease: linger, AbandonAfter: abandon, Clock: clock, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// run starts the Tracker's Run loop and returns once its first poll is done
// and it waits on the clock. The loop ends with the test.
func (f *fixture) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.tr.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	f.clock.WaitTimers(1)
}

// notify calls Notify, as the plugin does after recording an allocation,
// and waits until Run polls within a fast interval.
func (f *fixture) notify(t *testing.T) {
	t.Helper()
	f.tr.Notify()
	soon := f.clock.Now().Add(fast)
	plugintest.WaitFor(t, 10*time.Second, "the next poll within a fast interval", func() bool {
		d := f.clock.Deadlines()
		return len(d) == 1 && !d[0].After(soon)
	})
}

// step moves the clock by d and waits until Run has polled (if it was due)
// and waits again.
func (f *fixture) step(d time.Duration) {
	f.clock.Advance(d)
	f.clock.WaitTimers(1)
}

// stepUntil steps by fast until cond holds, at most max; it returns the
// clock's time then.
func (f *fixture) stepUntil(t *testing.T, max time.Duration, what string, cond func() bool) time.Time {
	t.Helper()
	for end := f.clock.Now().Add(max); !cond(); f.step(fast) {
		if f.clock.Now().After(end) {
			t.Fatalf("no %s within %s of fake time", what, max)
		}
	}
	return f.clock.Now()
}

// lists counts the List calls while the clock is stepped by fast for d.
func (f *fixture) lists(d time.Duration) int {
	before := f.pr.Lists()
	for end := f.clock.Now().Add(d); f.clock.Now().Before(end); {
		f.step(fast / 2)
	}
	return f.pr.Lists() - before
}

func (f *fixture) allocate(t *testing.T, ids ...string) uint64 {
	t.Helper()
	a, err := f.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Time: f.clock.Now()})
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
	f.clock.Advance(5 * time.Second)
	f.sync(t)
	a := f.record(t, seq)
	if holder(a) != "held ml/trainer/main" || !a.HeldSince.Equal(f.clock.Now()) {
		t.Fatalf("after the pod appeared: %s since %v", holder(a), a.HeldSince)
	}
	f.clock.Advance(time.Hour)
	f.sync(t) // still held: no change, no abandonment
	if b := f.record(t, seq); holder(b) != holder(a) || !b.HeldSince.Equal(a.HeldSince) {
		t.Fatalf("a second sync changed the record: %s since %v", holder(b), b.HeldSince)
	}
	f.pr.DeletePod("ml", "trainer")
	f.clock.Advance(time.Second)
	f.sync(t)
	if a := f.record(t, seq); a.State != store.StateReleased || !a.ReleasedAt.Equal(f.clock.Now()) || a.Pod != "trainer" {
		t.Fatalf("after the pod went: %s released %v", holder(a), a.ReleasedAt)
	}
}

func TestTracker_Abandoned(t *testing.T) {
	f := newFixture(t)
	seq := f.allocate(t, "fake-2")
	f.clock.Advance(59 * time.Second)
	f.sync(t)
	if a := f.record(t, seq); a.State != store.StateAllocated {
		t.Fatalf("before the timeout: %s", a.State)
	}
	f.clock.Advance(time.Second)
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
	f.clock.Advance(time.Second)
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
	f.clock.Advance(time.Hour)
	if err := f.tr.Sync(context.Background(), f.client); err == nil {
		t.Fatal("Sync succeeded without a PodResources server")
	}
	if a := f.record(t, seq); holder(a) != "held ns/p/c" {
		t.Fatalf("a failed List changed the record: %s", holder(a))
	}
	f.pr.Start()
	plugintest.WaitFor(t, 10*time.Second, "a successful Sync after the socket came back", func() bool {
		return f.tr.Sync(context.Background(), f.client) == nil // the client reconnects
	})
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
	sock := filepath.Join(plugintest.ShortTempDir(t), "pr.sock")
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

func TestTracker_Run_SocketAbsentThenPresent(t *testing.T) {
	st := storetest.MustOpen(t, store.Options{})
	if _, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0}}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(plugintest.ShortTempDir(t), "pr.sock")
	var logs plugintest.LogBuffer
	f := &fixture{st: st, clock: storetest.NewClock(t, time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))}
	f.tr = mustTracker(t, st, sock, f.clock, zerolog.New(&logs))
	seq := f.allocate(t, "fake-0")
	f.run(t)
	f.step(slow)
	if n := logs.Count("lifecycle tracking is off"); n != 1 {
		t.Fatalf("after two failed polls the off message was logged %d times, want once", n)
	}
	pr := plugintest.StartPodResources(t, sock)
	pr.SetPod("ns", "p", res, plugintest.Container{Name: "c", IDs: []string{"fake-0"}})
	plugintest.WaitFor(t, 10*time.Second, "the record held", func() bool {
		f.step(slow) // the client reconnects in real time
		return f.record(t, seq).State == store.StateHeld
	})
	if n := logs.Count("lifecycle tracking is on"); n != 1 {
		t.Errorf("the on message was logged %d times, want once", n)
	}
	if n := logs.Count("lifecycle tracking is off"); n != 1 {
		t.Errorf("the off message was logged %d times, want once", n)
	}
}

// TestTracker_Run_Notify_ClaimsWithinFastIntervals: a pod that appears
// shortly after Allocate is recorded within a few fast polls, not at the
// next slow one.
func TestTracker_Run_Notify_ClaimsWithinFastIntervals(t *testing.T) {
	f := newFixture(t)
	f.run(t)
	f.step(time.Second)
	allocated := f.clock.Now()
	seq := f.allocate(t, "fake-1")
	f.notify(t)
	f.step(fast)
	f.step(fast) // the container is not there yet
	f.pr.SetPod("ml", "trainer", res, plugintest.Container{Name: "main", IDs: []string{"fake-1"}})
	f.stepUntil(t, slow, "holder", func() bool { return f.record(t, seq).State == store.StateHeld })
	if a := f.record(t, seq); a.HeldSince.Sub(allocated) > 3*fast {
		t.Errorf("held %s after Allocate, the pod appeared after %s: want at the next fast poll (%s later)", a.HeldSince.Sub(allocated), 2*fast, fast)
	}
}

// TestTracker_Run_ShortPod_HeldThenReleased: a 2-second job that starts and
// ends between two slow polls is recorded held and then released, never
// abandoned.
func TestTracker_Run_ShortPod_HeldThenReleased(t *testing.T) {
	f := newFixture(t)
	f.run(t)
	f.step(time.Second)
	seq := f.allocate(t, "fake-0", "fake-1")
	f.notify(t)
	f.pr.SetPod("batch", "job-x", res, plugintest.Container{Name: "main", IDs: []string{"fake-1", "fake-0"}})
	started := f.clock.Now()
	f.stepUntil(t, time.Second, "holder", func() bool { return f.record(t, seq).State == store.StateHeld })
	for f.clock.Now().Before(started.Add(2 * time.Second)) {
		f.step(fast)
	}
	f.pr.DeletePod("batch", "job-x")
	gone := f.clock.Now()
	f.stepUntil(t, slow+fast, "release", func() bool { return f.record(t, seq).State != store.StateHeld })
	a := f.record(t, seq)
	if holder(a) != "released batch/job-x/main" {
		t.Fatalf("record = %s, want released by batch/job-x/main", holder(a))
	}
	if d := a.HeldSince.Sub(started); d < 0 || d > 2*fast {
		t.Errorf("held_since %s after the pod appeared, want within %s", d, 2*fast)
	}
	if d := a.ReleasedAt.Sub(gone); d < 0 || d > slow {
		t.Errorf("released_at %s after the pod went, want within one slow interval (%s)", d, slow)
	}
}

// TestTracker_Run_IdleNode_OneListPerInterval: a node whose pods run on
// costs the kubelet one List per slow interval, as it did before fast
// polling.
func TestTracker_Run_IdleNode_OneListPerInterval(t *testing.T) {
	f := newFixture(t)
	seq := f.allocate(t, "fake-2")
	f.pr.SetPod("ns", "server", res, plugintest.Container{Name: "c", IDs: []string{"fake-2"}})
	f.run(t)
	if a := f.record(t, seq); a.State != store.StateHeld {
		t.Fatalf("after the first poll: %s", holder(a))
	}
	const window = 10 * time.Minute
	n := f.lists(window)
	t.Logf("%d Lists in %s of fake time (%.1f a minute)", n, window, float64(n)/window.Minutes())
	if want := int(window / slow); n < want-1 || n > want {
		t.Errorf("%d Lists in %s idle, want %d (one per %s)", n, window, want, slow)
	}
}

// TestTracker_Run_FastOnlyWhileWaiting: an allocation no pod claims is
// polled fast until it is abandoned, then slowly again; a release is
// followed by FastAfterRelease of fast polls.
func TestTracker_Run_FastOnlyWhileWaiting(t *testing.T) {
	f := newFixture(t)
	f.run(t)
	seq := f.allocate(t, "fake-3")
	f.notify(t)
	n := f.lists(abandon + fast)
	if a := f.record(t, seq); a.State != store.StateAbandoned {
		t.Fatalf("after %s unclaimed: %s", abandon, holder(a))
	}
	if want := int(abandon / fast); n < want*9/10 || n > want+2 {
		t.Errorf("%d Lists while waiting %s for a holder, want about %d (one per %s)", n, abandon, want, fast)
	}
	if n := f.lists(time.Minute); n > int(time.Minute/slow)+1 {
		t.Errorf("%d Lists in the minute after abandoning, want at most %d", n, int(time.Minute/slow)+1)
	}

	held := f.allocate(t, "fake-2")
	f.notify(t)
	f.pr.SetPod("ns", "p", res, plugintest.Container{Name: "c", IDs: []string{"fake-2"}})
	f.stepUntil(t, time.Second, "holder", func() bool { return f.record(t, held).State == store.StateHeld })
	f.pr.DeletePod("ns", "p")
	f.stepUntil(t, slow+fast, "release", func() bool { return f.record(t, held).State == store.StateReleased })
	if n, want := f.lists(linger), int(linger/fast); n < want*9/10 || n > want+2 {
		t.Errorf("%d Lists in the %s after a release, want about %d", n, linger, want)
	}
	if n := f.lists(time.Minute); n > int(time.Minute/slow)+1 {
		t.Errorf("%d Lists in the minute after that, want at most %d", n, int(time.Minute/slow)+1)
	}
}

// TestTracker_Run_ListFails_ChangesNothing: while the kubelet is away no
// hold is released and no waiting allocation abandoned, however long it
// takes; when it is back the records are brought up to date.
func TestTracker_Run_ListFails_ChangesNothing(t *testing.T) {
	f := newFixture(t)
	seq := f.allocate(t, "fake-0")
	f.pr.SetPod("ns", "p", res, plugintest.Container{Name: "c", IDs: []string{"fake-0"}})
	f.run(t)
	before := f.record(t, seq)
	f.pr.Stop()
	waiting := f.allocate(t, "fake-1")
	f.notify(t)
	for range 2 * abandon / slow {
		f.step(slow)
	}
	if a := f.record(t, seq); holder(a) != holder(before) || !a.HeldSince.Equal(before.HeldSince) {
		t.Errorf("held record after failed Lists: %s since %v, want %s since %v", holder(a), a.HeldSince, holder(before), before.HeldSince)
	}
	if a := f.record(t, waiting); a.State != store.StateAllocated {
		t.Errorf("waiting record after failed Lists: %s, want allocated", holder(a))
	}
	f.pr.SetPod("ns", "q", res, plugintest.Container{Name: "c", IDs: []string{"fake-1"}})
	f.pr.Start()
	plugintest.WaitFor(t, 10*time.Second, "the waiting record held", func() bool {
		f.step(slow) // the client reconnects in real time
		return f.record(t, waiting).State == store.StateHeld
	})
	if a := f.record(t, seq); holder(a) != holder(before) || !a.HeldSince.Equal(before.HeldSince) {
		t.Errorf("held record after the kubelet came back: %s since %v", holder(a), a.HeldSince)
	}
}

func TestNew_BadConfig(t *testing.T) {
	st := storetest.MustOpen(t, store.Options{})
	for _, cfg := range []podresources.Config{
		{Socket: "relative.sock", ResourceName: res, Store: st},
		{Socket: "/x.sock", Store: st},
		{Socket: "/x.sock", ResourceName: res},
	} {
		if _, err := podresources.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestTracker_FollowResourceName_KeepsEarlierHolders: after the plugin's
// resource name changed, a container that got its device under the old
// name still holds it (its record stays held until it ends), and a
// container of the new name claims its record; devices of names never
// followed are not ours.
func TestTracker_FollowResourceName_KeepsEarlierHolders(t *testing.T) {
	const renamed = "unicore.mcyou.cc/gpu-a100"
	f := newFixture(t)
	old := f.allocate(t, "fake-0")
	f.pr.SetPod("ns", "old", res, plugintest.Container{Name: "c", IDs: []string{"fake-0"}})
	f.sync(t)
	if a := f.record(t, old); holder(a) != "held ns/old/c" {
		t.Fatalf("before the rename: %s", holder(a))
	}

	f.tr.FollowResourceName(renamed)
	f.tr.FollowResourceName(renamed) // again: no change
	f.clock.Advance(time.Second)
	renamedSeq := f.allocate(t, "fake-1")
	f.pr.SetPod("ns", "new", renamed, plugintest.Container{Name: "c", IDs: []string{"fake-1"}})
	f.pr.SetPod("ns", "foreign", "example.com/gpu", plugintest.Container{Name: "c", IDs: []string{"fake-2"}})
	foreign := f.allocate(t, "fake-2")
	f.sync(t)
	if a := f.record(t, old); holder(a) != "held ns/old/c" {
		t.Errorf("the old name's holder after the rename: %s", holder(a))
	}
	if a := f.record(t, renamedSeq); holder(a) != "held ns/new/c" {
		t.Errorf("the new name's holder: %s", holder(a))
	}
	if a := f.record(t, foreign); a.State != store.StateAllocated {
		t.Errorf("a device held under a name never followed: %s", holder(a))
	}

	f.pr.DeletePod("ns", "old")
	f.sync(t)
	if a := f.record(t, old); a.State != store.StateReleased {
		t.Errorf("after the old name's pod ended: %s", holder(a))
	}
}
