package e2e_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// Lifecycle tracking runs fast in this test: PodResources every 500 ms, abandoned after 5 s.
const (
	reconcileInterval = 500 * time.Millisecond
	abandonAfter      = 5 * time.Second
	// releaseBound is "within a few reconcile intervals" (issue 7).
	releaseBound = 4 * reconcileInterval
)

// TestLifecycle (issue 7): the demo pod's allocation record in `dump -o json` names its namespace, pod
// and container ("held") while it runs; deleting the pod records the release (state "released",
// released_at) within a few reconcile intervals; and allocations whose pod the kubelet rejected at
// admission after calling Allocate end "abandoned", never "held".
//
// How a real kubelet (v1.36) calls Allocate and then rejects the pod: its admit handlers run in the order
// sysctls, topology manager (which calls the device manager's Allocate for every container in turn, init
// containers first), then the general predicates (resources, node selector, host ports, taints). So
//   - a pod whose first container asks for 1 device and whose second asks for more than are left gets
//     Allocate for the first container, then fails in the device manager for the second
//     (UnexpectedAdmissionError "Requested: 4, Available: 3");
//   - a pod asking for 1 device and more CPU than the node has gets Allocate, then fails the resource
//     predicate (OutOfcpu). (An impossible amount of an extended resource the node does not know at all
//     is dropped from the check, so that does not fail.)
func TestLifecycle(t *testing.T) {
	c := needCluster(t)
	plugin := startPlugin(t, c, cluster.PluginOptions{Args: []string{
		"-reconcile-interval=" + reconcileInterval.String(), "-abandon-after=" + abandonAfter.String(),
	}})
	running := runPod(t, c, demoPod(t))
	runningAt := time.Now()
	ids := podDevices(t, c, running, 2)

	var seq uint64
	held, err := plugin.WaitDump(t.Context(), 20*time.Second, 100*time.Millisecond, func(d *cluster.DumpDoc) (bool, string, error) {
		a := findAllocation(d, ids)
		if a == nil {
			return false, fmt.Sprintf("no record of %v", ids), nil
		}
		seq = a.Seq
		return a.State == "held", fmt.Sprintf("record %+v", *a), nil
	})
	if err != nil {
		t.Fatalf("demo pod's allocation never held: %v", err)
	}
	t.Logf("timing: demo pod running -> its record held in dump: %s", time.Since(runningAt).Round(time.Millisecond))
	a := held.Allocation(seq)
	if a.Namespace != running.Namespace || a.Pod != running.Name || a.Container != "demo" || a.HeldSince.IsZero() || !a.ReleasedAt.IsZero() {
		t.Errorf("held record %+v, want %s/%s container demo, held_since set, no released_at", *a, running.Namespace, running.Name)
	}
	for _, id := range ids {
		if d := held.Device(id); d == nil || d.Holder == nil || d.Holder.Seq != seq || d.Holder.Pod != running.Name || d.Holder.State != "held" {
			t.Errorf("device %s: %+v, want holder %s (record %d, held)", id, d, running.Name, seq)
		}
	}

	deleteStart := time.Now()
	if err := c.DeletePod(t.Context(), 40*time.Second, running.Namespace, running.Name); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	released, err := plugin.WaitDump(t.Context(), 20*time.Second, 100*time.Millisecond, func(d *cluster.DumpDoc) (bool, string, error) {
		a := d.Allocation(seq)
		if a == nil {
			return false, "", fmt.Errorf("record %d vanished from the history", seq)
		}
		return a.State == "released", fmt.Sprintf("record %+v", *a), nil
	})
	if err != nil {
		t.Fatalf("demo pod's deletion not recorded: %v", err)
	}
	seenAt := time.Now()
	r := released.Allocation(seq)
	if r.ReleasedAt.IsZero() || r.Pod != running.Name || r.ReleasedAt.Before(r.HeldSince) {
		t.Errorf("released record %+v, want released_at set after held_since, pod %s kept", *r, running.Name)
	}
	t.Logf("timing: delete demo pod -> gone from the API server: %s; released_at - gone: %s; gone -> release seen in dump: %s",
		gone.Sub(deleteStart).Round(time.Millisecond), r.ReleasedAt.Sub(gone).Round(time.Millisecond), seenAt.Sub(gone).Round(time.Millisecond))
	if late := r.ReleasedAt.Sub(gone); late > releaseBound {
		t.Errorf("release recorded %s after the pod was gone, want <= %s (a few %s reconcile intervals)", late.Round(time.Millisecond), releaseBound, reconcileInterval)
	}

	// Pods the kubelet rejects after Allocate.
	logged := func() []cluster.PluginLogLine {
		l, err := plugin.FindLog("allocated")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	twoContainers := cluster.NewPod("rejected-second-container", 1, "sleep infinity")
	second := twoContainers.Spec.Containers[0]
	second.Name = "second"
	second.Resources = gpuResources(4)
	twoContainers.Spec.Containers = append(twoContainers.Spec.Containers, second)
	outOfCPU := cluster.NewPod("rejected-out-of-cpu", 1, "sleep infinity")
	outOfCPU.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1000")

	var rejected []uint64 // record sequence numbers, found through the plugin's "allocated" log lines
	for _, tc := range []struct {
		pod        *corev1.Pod
		wantReason string
		wantMsg    string
	}{
		{twoContainers, "UnexpectedAdmissionError", "Requested: 4, Available: 3"},
		{outOfCPU, "OutOfcpu", "cpu"},
	} {
		before := len(logged())
		pod := createPod(t, c, tc.pod)
		failed, err := c.WaitPodPhase(t.Context(), time.Minute, pod.Namespace, pod.Name, corev1.PodFailed)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s rejected: %s: %s", pod.Name, failed.Status.Reason, failed.Status.Message)
		if failed.Status.Reason != tc.wantReason || !strings.Contains(failed.Status.Message, tc.wantMsg) {
			t.Errorf("%s: rejected with %q %q, want %s mentioning %q", pod.Name, failed.Status.Reason, failed.Status.Message, tc.wantReason, tc.wantMsg)
		}
		now := logged()
		if len(now) != before+1 {
			t.Fatalf("%s: plugin answered %d Allocate calls, want 1 (for the first container): %v", pod.Name, len(now)-before, now[before:])
		}
		got := now[len(now)-1].Strings("ids")
		d, err := plugin.Dump(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		// The newest record is this Allocate's.
		if len(d.Allocations) == 0 || !slices.Equal(d.Allocations[0].SortedIDs(), slices.Sorted(slices.Values(got))) {
			t.Fatalf("%s: newest record %+v, want the allocation of %v", pod.Name, d.Allocations, got)
		}
		rejected = append(rejected, d.Allocations[0].Seq)
	}

	// A rejected pod's record ends abandoned: no pod ever held it. Or, when a PodResources List fell in
	// the moment between the kubelet's Allocate and its rejection (the kubelet lists the pods it is
	// admitting, with their devices), held by that very pod and then released when the kubelet dropped
	// it. Never held by another pod, never left active.
	names := map[uint64]string{rejected[0]: twoContainers.Name, rejected[1]: outOfCPU.Name}
	var wrongHolder []string
	ended, err := plugin.WaitDump(t.Context(), abandonAfter+20*time.Second, 200*time.Millisecond, func(d *cluster.DumpDoc) (bool, string, error) {
		var states []string
		done := true
		for _, s := range rejected {
			a := d.Allocation(s)
			if a == nil {
				return false, "", fmt.Errorf("record %d vanished", s)
			}
			if a.Pod != "" && a.Pod != names[s] {
				wrongHolder = append(wrongHolder, fmt.Sprintf("%+v", *a))
			}
			states = append(states, fmt.Sprintf("%d:%s", s, a.State))
			done = done && (a.State == "abandoned" || a.State == "released" && a.Pod == names[s])
		}
		return done, strings.Join(states, " "), nil
	})
	if err != nil {
		t.Fatalf("allocations of rejected pods not ended: %v", err)
	}
	if len(wrongHolder) > 0 {
		t.Errorf("an allocation of a rejected pod was held by another pod: %v", wrongHolder)
	}
	for _, s := range rejected {
		a := ended.Allocation(s)
		if a.State == "released" {
			t.Logf("record %d (%v) of %s: held by it while the kubelet admitted it, released at %s", s, a.DeviceIDs, names[s], a.ReleasedAt.Format("15:04:05.000"))
			continue
		}
		t.Logf("timing: record %d (%v) allocated at %s, abandoned at %s: after %s (abandon-after %s)",
			s, a.DeviceIDs, a.Time.Format("15:04:05.000"), a.ReleasedAt.Format("15:04:05.000"), a.ReleasedAt.Sub(a.Time).Round(time.Millisecond), abandonAfter)
		if a.ReleasedAt.IsZero() || a.ReleasedAt.Sub(a.Time) < abandonAfter {
			t.Errorf("record %d abandoned at %s, allocated at %s: want released_at set, at least %s later", s, a.ReleasedAt, a.Time, abandonAfter)
		}
	}
}

// gpuResources asks for n devices of the plugin's resource.
func gpuResources(n int64) corev1.ResourceRequirements {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	return corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{cluster.ResourceName: q},
		Requests: corev1.ResourceList{cluster.ResourceName: q},
	}
}
