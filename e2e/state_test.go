package e2e_test

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// TestStateSurvivesKill (issue 5): a plugin killed with SIGKILL and started again on the same state file
// keeps its health and history. fake-3 is made unhealthy before the kill; after the restart the Node
// settles at capacity 4 and allocatable 3 (never 4: the first device list already has fake-3 unhealthy),
// `dump -o json` against the restarted plugin still has the allocation record of the pod that ran
// before the kill, and that pod runs on, in the same container.
func TestStateSurvivesKill(t *testing.T) {
	c := needCluster(t)
	first := startPlugin(t, c, cluster.PluginOptions{})
	if _, err := first.CLI(t.Context(), "health", "set", "fake-3", "unhealthy", "--reason", "e2e"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitNodeResource(t.Context(), 10*time.Second, cluster.ResourceName, 4, 3); err != nil {
		t.Fatal(err)
	}
	before := runPod(t, c, gpuPod("before-state-kill", 2))
	ids := podDevices(t, c, before, 2)
	if slices.Contains(ids, "fake-3") {
		t.Fatalf("pod got the unhealthy fake-3: %v", ids)
	}
	dumpBefore, err := first.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	allocBefore := findAllocation(dumpBefore, ids)
	if allocBefore == nil {
		t.Fatalf("no allocation record of %v before the kill: %+v", ids, dumpBefore.Allocations)
	}
	ctrBefore := cluster.ContainerID(before, "main")

	watch := watchAllocatable(t, c)
	killed := time.Now()
	first.KillHard()
	second, _, pushed := restartPlugin(t, c, first.StatePath)
	// A stale 3 from before the kill may still show, and the kubelet may drop to 0 when it handles the
	// old stream's end: wait until 4/3 holds for 2 s (several node status updates).
	at, err := c.WaitNodeResourceStable(t.Context(), 30*time.Second, 2*time.Second, 4, 3)
	if err != nil {
		t.Fatalf("after the restart on the same state: %v (plugin log %s)", err, second.LogPath)
	}
	t.Logf("timing: SIGKILL -> kubelet got the restarted plugin's device list: %s, -> node capacity 4 allocatable 3 for good: %s",
		pushed.Sub(killed).Round(time.Millisecond), at.Sub(killed).Round(time.Millisecond))
	seen := watch()
	if regs, err := second.FindLog("registered with kubelet"); err == nil {
		t.Logf("restarted plugin registered %d time(s)", len(regs))
	}
	t.Logf("node allocatable from the kill on (changes only): %v", seen)
	if slices.Contains(seen, 4) {
		t.Errorf("node allocatable was 4 after the restart (%v): the unhealthy fake-3 was reported healthy", seen)
	}

	after, err := second.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after.Source.Type != "plugin" {
		t.Errorf("dump source %+v, want the restarted plugin's admin socket", after.Source)
	}
	if d := after.Device("fake-3"); d == nil || d.Healthy || d.Reason != "e2e" {
		t.Errorf("after the restart fake-3 is %+v, want unhealthy with reason e2e", d)
	}
	if a := after.Allocation(allocBefore.Seq); a == nil || !slices.Equal(a.SortedIDs(), ids) {
		t.Errorf("after the restart allocation record %d is %+v, want the pod's %v", allocBefore.Seq, a, ids)
	}
	if len(after.Allocations) < len(dumpBefore.Allocations) {
		t.Errorf("history shrank across the restart: %d allocation records before, %d after", len(dumpBefore.Allocations), len(after.Allocations))
	}
	found := false
	for _, e := range after.HealthEvents {
		found = found || (e.DeviceID == "fake-3" && !e.Healthy && e.Reason == "e2e")
	}
	if !found {
		t.Errorf("after the restart no health event fake-3 unhealthy (e2e): %+v", after.HealthEvents)
	}

	checkStillRunning(t, c, before, ids)
	now, err := c.Client.CoreV1().Pods(before.Namespace).Get(t.Context(), before.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id := cluster.ContainerID(now, "main"); id != ctrBefore {
		t.Errorf("pod %s: container %s before the kill, %s after", before.Name, ctrBefore, id)
	}
}

// watchAllocatable samples the Node's allocatable ResourceName every 50 ms until the returned function
// is called, which returns the values seen, consecutive repeats collapsed.
func watchAllocatable(t *testing.T, c *cluster.Cluster) func() []int64 {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan []int64)
	go func() {
		var seen []int64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, alloc, err := c.NodeResource(ctx, cluster.ResourceName); err == nil && (len(seen) == 0 || seen[len(seen)-1] != alloc) {
				seen = append(seen, alloc)
			}
			select {
			case <-ctx.Done():
				done <- seen
				return
			case <-tick.C:
			}
		}
	}()
	var seen []int64
	stopped := false
	stop := func() []int64 {
		if !stopped {
			stopped = true
			cancel()
			seen = <-done
		}
		return seen
	}
	t.Cleanup(func() { stop() })
	return stop
}
