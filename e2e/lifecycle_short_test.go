package e2e_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// TestLifecycleShortPods: with the default PodResources interval (-reconcile-interval=5s), a new
// allocation's holder is recorded within 1 s of its container's creation (median of 5, the bound asserted;
// the kubelet lists a container's devices from admission on, so the holder is often recorded before the
// runtime has created the container: a negative lag),
// a 2-second job is recorded held and then released (never abandoned), and an idle node with a running
// pod costs the kubelet's PodResources API no more than one List per interval (counted by the kubelet's
// own pod_resources_endpoint_requests_list metric).
func TestLifecycleShortPods(t *testing.T) {
	c := needCluster(t)
	plugin := startPlugin(t, c, cluster.PluginOptions{}) // the defaults: 5 s interval, abandoned after 1 m

	const pods = 5
	var lags []time.Duration
	for i := range pods {
		pod := runPod(t, c, cluster.NewPod(fmt.Sprintf("lag-%d", i), 1, "echo "+cluster.AssignedPrefix+"${VIRTUAL_GPU_IDS}; sleep 3600"))
		ids := podDevices(t, c, pod, 1)
		created, err := c.ContainerCreatedAt(t.Context(), cluster.ContainerID(pod, "main"))
		if err != nil {
			t.Fatal(err)
		}
		d, err := plugin.WaitDump(t.Context(), 20*time.Second, 50*time.Millisecond, func(d *cluster.DumpDoc) (bool, string, error) {
			a := findAllocation(d, ids)
			return a != nil && a.State == "held" && a.Pod == pod.Name, fmt.Sprintf("record %+v", a), nil
		})
		if err != nil {
			t.Fatalf("pod %s never held: %v", pod.Name, err)
		}
		lag := findAllocation(d, ids).HeldSince.Sub(created)
		t.Logf("timing: pod %s container created -> holder recorded: %s", pod.Name, lag.Round(time.Millisecond))
		lags = append(lags, lag)
		deletePodAtCleanup(t, c, pod)
	}
	slices.Sort(lags)
	median := lags[pods/2]
	t.Logf("timing: container created -> holder recorded: median %s of %v", median.Round(time.Millisecond), lags)
	if median > time.Second {
		t.Errorf("median container created -> holder recorded = %s, want <= 1s", median)
	}

	// A 2-second job: held while it runs, released when it ends, never abandoned.
	job := createPod(t, c, cluster.NewPod("two-second-job", 1, "sleep 2"))
	if _, err := c.WaitPodPhase(t.Context(), time.Minute, job.Namespace, job.Name, corev1.PodSucceeded); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	d, err := plugin.WaitDump(t.Context(), 20*time.Second, 100*time.Millisecond, func(d *cluster.DumpDoc) (bool, string, error) {
		as := d.AllocationsOf(job.Namespace, job.Name, "main")
		return len(as) == 1 && as[0].State == "released", fmt.Sprintf("records %+v", as), nil
	})
	if err != nil {
		t.Fatalf("the 2-second job's record: %v", err)
	}
	a := d.AllocationsOf(job.Namespace, job.Name, "main")[0]
	if a.HeldSince.IsZero() || a.ReleasedAt.Before(a.HeldSince) {
		t.Errorf("job record %+v, want held_since set and released_at after it", a)
	}
	t.Logf("timing: 2-second job held %s after Allocate, released %s after held; seen released %s after the pod succeeded",
		a.HeldSince.Sub(a.Time).Round(time.Millisecond), a.ReleasedAt.Sub(a.HeldSince).Round(time.Millisecond), time.Since(ended).Round(time.Millisecond))
	for _, r := range d.Allocations {
		if r.State == "abandoned" {
			t.Errorf("record %d abandoned: %+v", r.Seq, r)
		}
	}

	// Idle: one pod holds a device, nothing is pending: Lists at the slow interval only. The fast
	// polling after the job's release lasts a few seconds: wait it out first.
	runPod(t, c, cluster.NewPod("idle-holder", 1, "sleep 3600"))
	if _, err := plugin.WaitDump(t.Context(), 20*time.Second, 100*time.Millisecond, func(d *cluster.DumpDoc) (bool, string, error) {
		as := d.AllocationsOf("default", "idle-holder", "main")
		return len(as) == 1 && as[0].State == "held", "", nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // the fast window after a release (5 s); this is a measurement window, not a wait for a condition
	lists := map[string]string{"server_api_version": "v1"}
	before, err := c.KubeletMetric(t.Context(), "kubelet_pod_resources_endpoint_requests_list", lists)
	if err != nil {
		t.Fatal(err)
	}
	const window = 30 * time.Second
	time.Sleep(window)
	after, err := c.KubeletMetric(t.Context(), "kubelet_pod_resources_endpoint_requests_list", lists)
	if err != nil {
		t.Fatal(err)
	}
	n := after - before
	t.Logf("timing: idle node: %v PodResources Lists in %s (one per 5 s interval would be %d)", n, window, window/(5*time.Second))
	if n > float64(window/(5*time.Second))+1 {
		t.Errorf("idle node: %v Lists in %s, want at most one per 5 s interval", n, window)
	}
}
