package e2e_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// deviceTaints returns the taints of device id in node's pool of the driver (nil, false while the pool
// is incomplete or lacks the device).
func deviceTaints(t *testing.T, node *cluster.Node, id string) ([]resourcev1.DeviceTaint, bool) {
	t.Helper()
	pool, err := node.ResourcePool(t.Context(), cluster.DRADriverName)
	if err != nil {
		return nil, false
	}
	for _, d := range pool.Devices {
		if d.Name == id {
			return d.Taints, true
		}
	}
	return nil, false
}

// waitDeviceTaints polls the pool every 10 ms until ok accepts device id's taints; it returns how long
// that took.
func waitDeviceTaints(t *testing.T, node *cluster.Node, id string, ok func([]resourcev1.DeviceTaint) bool) time.Duration {
	t.Helper()
	start := time.Now()
	err := cluster.Poll(t.Context(), 30*time.Second, 10*time.Millisecond, func() (bool, string, error) {
		taints, found := deviceTaints(t, node, id)
		return found && ok(taints), fmt.Sprintf("device %s taints %+v (found %v)", id, taints, found), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// claimDeviceResourceIDs returns the resource ids the kubelet may give device id of the claim's request
// cluster.ClaimName in a pod's allocatedResourcesStatus: the first CDI device id Prepare returned for
// the device, else <driver>/<pool>/<device>. The driver names its claim-level CDI device
// (k8s.<driver>/claim=<uid>-<request>) on the first device of each request only, so that device's
// health shows under the CDI id, the others' under their names.
func claimDeviceResourceIDs(rc *resourcev1.ResourceClaim, id string) []string {
	return []string{
		fmt.Sprintf("%s/%s/%s", cluster.DRADriverName, rc.Status.Allocation.Devices.Results[0].Pool, id),
		fmt.Sprintf("k8s.%s/claim=%s-%s", cluster.DRADriverName, rc.UID, cluster.ClaimName),
	}
}

// podResourceHealth returns the health (and message) the pod's status gives one of the resource ids
// (containerStatuses[].allocatedResourcesStatus); "" if absent.
func podResourceHealth(pod *corev1.Pod, ids []string) (corev1.ResourceHealthStatus, string) {
	for _, cs := range pod.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, r := range rs.Resources {
				if slices.Contains(ids, string(r.ResourceID)) {
					msg := ""
					if r.Message != nil {
						msg = *r.Message
					}
					return r.Health, msg
				}
			}
		}
	}
	return "", ""
}

// waitPodResourceHealth waits until the pod's status gives one of the resource ids the health want.
func waitPodResourceHealth(t *testing.T, c *cluster.Cluster, pod *corev1.Pod, id []string, want corev1.ResourceHealthStatus) (*corev1.Pod, time.Duration) {
	t.Helper()
	start := time.Now()
	var got *corev1.Pod
	err := cluster.Poll(t.Context(), 60*time.Second, 50*time.Millisecond, func() (bool, string, error) {
		p, err := c.Client.CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		got = p
		h, msg := podResourceHealth(p, id)
		var all []string
		for _, cs := range p.Status.ContainerStatuses {
			all = append(all, fmt.Sprintf("%+v", cs.AllocatedResourcesStatus))
		}
		return h == want, fmt.Sprintf("%v: %q %q; allocatedResourcesStatus %v", id, h, msg, all), nil
	})
	if err != nil {
		t.Fatalf("pod %s: %v", pod.Name, err)
	}
	return got, time.Since(start)
}

// TestDRA_Health: a pod holds fake-1 through a claim (CEL selector on the index attribute); `health set
// fake-1 unhealthy --reason "XID 79"` puts the device taint gpu.unicore.mcyou.cc/xid=79:NoSchedule on
// fake-1 in the slice (figure: health set → taint visible, goal ≤ 1 s, logged, not asserted); the pod
// keeps running and its status shows fake-1 Unhealthy with the reason
// (containerStatuses[].allocatedResourcesStatus, ResourceHealthStatus, the reason with
// ResourceHealthStatusMessage; each part skipped, naming the gate, when the kubelet has it off; the kubelet names the entry by the first CDI id the driver returned
// for the device, see claimDeviceResourceIDs); once that pod is gone, a 3-GPU claim gets the other three and a
// claim for fake-1 stays unschedulable; `health set fake-1 healthy` removes the taint and the waiting
// claim is allocated fake-1 and its pod runs.
func TestDRA_Health(t *testing.T) {
	parallelDRA(t)
	c := needCluster(t)
	if on, err := c.FeatureEnabled(t.Context(), "DRADeviceTaints"); err != nil || !on {
		t.Skipf("feature gate DRADeviceTaints is off in the API server (%v)", err)
	}
	node, p := draNode(t, c, "vgpu-e2e-dra-health", cluster.PluginOptions{}, 4)
	const sick = "fake-1"
	one := claimTemplate("dra-health-fake-1", 1, "", indexIs(1))
	// The holder's claim is a ResourceClaim named as the pod's claim: a v1.34 kubelet fills
	// allocatedResourcesStatus only for a claim whose ResourceClaim has the name of the container's
	// claim (it compares the two), never for one from a template.
	held := cluster.NewResourceClaim(metav1.NamespaceDefault, cluster.ClaimName, draClassName, 1)
	setClaimSpec(&held.Spec, "", indexIs(1))
	applyDRA(t, c, one, held)
	podA, rcA, devs, _ := claimPodRun(t, c, node, "dra-health-holder", cluster.PodClaim{ResourceClaimName: held.Name}, draScript)
	if !slices.Equal(devs, []string{sick}) {
		t.Fatalf("claim %s allocated %v, want [%s]", rcA.Name, devs, sick)
	}
	healthStatus, err := node.KubeletFeatureEnabled(t.Context(), "ResourceHealthStatus")
	if err != nil {
		t.Fatal(err)
	}
	if healthStatus {
		_, took := waitPodResourceHealth(t, c, podA, claimDeviceResourceIDs(rcA, sick), corev1.ResourceHealthStatusHealthy)
		t.Logf("timing: pod running -> its status shows %s Healthy: %s", sick, took.Round(time.Millisecond))
	}

	set := time.Now()
	if out, err := p.CLI(t.Context(), "health", "set", sick, "unhealthy", "--reason", "XID 79"); err != nil {
		t.Fatalf("health set: %v\n%s", err, out)
	}
	waitDeviceTaints(t, node, sick, func(ts []resourcev1.DeviceTaint) bool { return len(ts) > 0 })
	t.Logf("timing: health set %s unhealthy -> taint in its ResourceSlice: %s (goal <= 1 s)", sick, time.Since(set).Round(time.Millisecond))
	taints, _ := deviceTaints(t, node, sick)
	if len(taints) != 1 || taints[0].Key != cluster.DRADriverName+"/xid" || taints[0].Value != "79" || taints[0].Effect != resourcev1.DeviceTaintEffectNoSchedule {
		t.Errorf("device %s taints %+v, want one %s/xid=79:NoSchedule", sick, taints, cluster.DRADriverName)
	}
	for _, id := range []string{"fake-0", "fake-2", "fake-3"} {
		if ts, _ := deviceTaints(t, node, id); len(ts) != 0 {
			t.Errorf("healthy device %s has taints %+v", id, ts)
		}
	}
	if healthStatus {
		got, took := waitPodResourceHealth(t, c, podA, claimDeviceResourceIDs(rcA, sick), corev1.ResourceHealthStatusUnhealthy)
		_, msg := podResourceHealth(got, claimDeviceResourceIDs(rcA, sick))
		t.Logf("timing: health set -> pod status shows %s Unhealthy (%q): %s after the taint", sick, msg, took.Round(time.Millisecond))
		// The message only with ResourceHealthStatusMessage (v1.36 on; v1.34 has no such gate).
		if withMsg, err := node.KubeletFeatureEnabled(t.Context(), "ResourceHealthStatusMessage"); err == nil && withMsg {
			if !strings.Contains(msg, "XID 79") {
				t.Errorf("pod %s: %s unhealthy with message %q, want the reason XID 79", podA.Name, sick, msg)
			}
		} else {
			t.Logf("the message not checked: feature gate ResourceHealthStatusMessage is off in the kubelet (%v)", err)
		}
	} else {
		t.Logf("skipped: the pod status's allocatedResourcesStatus: feature gate ResourceHealthStatus is off in the kubelet")
	}
	checkClaimPodRunning(t, c, podA, []string{sick})
	if err := c.DeletePod(t.Context(), 40*time.Second, podA.Namespace, podA.Name); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), 30*time.Second, held); err != nil {
		t.Fatal(err)
	}

	three := claimTemplate("dra-health-three", 3, "")
	applyDRA(t, c, three)
	podB, _, devsB, _ := claimPodRun(t, c, node, "dra-health-three", cluster.PodClaim{ResourceClaimTemplateName: three.Name}, draScript)
	if !slices.Equal(devsB, []string{"fake-0", "fake-2", "fake-3"}) {
		t.Errorf("3-GPU claim while %s is tainted: %v, want the other three", sick, devsB)
	}
	podC := claimPodSubmit(t, c, node, "dra-health-wait", cluster.PodClaim{ResourceClaimTemplateName: one.Name}, draScript)
	cond, err := c.WaitPodUnschedulable(t.Context(), 30*time.Second, podC.Namespace, podC.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a claim for tainted %s: unschedulable: %s", sick, cond.Message)

	healed := time.Now()
	if out, err := p.CLI(t.Context(), "health", "set", sick, "healthy"); err != nil {
		t.Fatalf("health set: %v\n%s", err, out)
	}
	waitDeviceTaints(t, node, sick, func(ts []resourcev1.DeviceTaint) bool { return len(ts) == 0 })
	t.Logf("timing: health set %s healthy -> taint gone from its ResourceSlice: %s", sick, time.Since(healed).Round(time.Millisecond))
	running, err := c.WaitPodPhase(t.Context(), time.Minute, podC.Namespace, podC.Name, corev1.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: health set healthy -> the waiting pod runs: %s", time.Since(healed).Round(time.Millisecond))
	if ids := podIDs(t, c, running); !slices.Equal(ids, []string{sick}) {
		t.Errorf("pod %s: %s=%v, want [%s]", running.Name, cluster.EnvIDs, ids, sick)
	}
	checkClaimPodRunning(t, c, podB, devsB)
}

// checkClaimPodRunning checks that a claim pod runs in its first container (no restart) and still
// prints ids.
func checkClaimPodRunning(t *testing.T, c *cluster.Cluster, pod *corev1.Pod, ids []string) {
	t.Helper()
	got, err := c.Client.CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("pod %s: phase %s, want Running", pod.Name, got.Status.Phase)
	}
	for _, cs := range got.Status.ContainerStatuses {
		if cs.RestartCount != 0 || cs.State.Running == nil {
			t.Errorf("pod %s container %s: restarts %d, running %v", pod.Name, cs.Name, cs.RestartCount, cs.State.Running != nil)
		}
	}
	if now := podIDs(t, c, got); !slices.Equal(now, ids) {
		t.Errorf("pod %s: devices %v, want %v", pod.Name, now, ids)
	}
}
