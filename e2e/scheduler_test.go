package e2e_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// TestSchedulerTwoNodes: two nodes, each with its own plugin process (node A -topology=dgx-a100, 8
// GPUs; node B -topology=workstation-4gpu, 4 GPUs), and the real kube-scheduler placing pods that name
// no node. A pod asking for 8 can only go to A; a pod asking for 2 with a nodeSelector on B's
// kubernetes.io/hostname label goes to B; a pod asking for 16 fits nowhere and stays Pending with the
// scheduler's reason naming the resource ("Insufficient unicore.mcyou.cc/gpu"). The devices each pod
// got are the ones the kubelet of its own node reports.
func TestSchedulerTwoNodes(t *testing.T) {
	c := needCluster(t)
	if len(c.Nodes) < 2 {
		t.Skipf("needs 2 nodes, the cluster has %d", len(c.Nodes))
	}
	a, b := c.Nodes[0], c.Nodes[1]
	startNodePlugin(t, c, a, cluster.PluginOptions{Topology: "dgx-a100"}, 8)
	startNodePlugin(t, c, b, cluster.PluginOptions{Topology: "workstation-4gpu"}, 4)

	// schedule submits pod without a node and waits until the scheduler bound it and it runs.
	schedule := func(pod *corev1.Pod) (*corev1.Pod, *cluster.Node) {
		t.Helper()
		submitted := submitPod(t, c, pod)
		start := time.Now()
		bound, node, err := c.WaitPodScheduled(t.Context(), time.Minute, submitted.Namespace, submitted.Name)
		if err != nil {
			t.Fatal(err)
		}
		scheduledAt := time.Now()
		running, err := c.WaitPodPhase(t.Context(), time.Minute, bound.Namespace, bound.Name, corev1.PodRunning)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("timing: pod %s asking for %s submitted -> bound to %s: %s, -> running: %s", pod.Name,
			pod.Spec.Containers[0].Resources.Limits.Name(cluster.ResourceName, "0"), node.Name,
			scheduledAt.Sub(start).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		return running, node
	}

	eight, node := schedule(gpuPod("sched-eight", 8))
	if node != a {
		t.Errorf("pod asking for 8 placed on %s, want %s (the only node with 8)", node.Name, a.Name)
	}
	eightIDs := podDevices(t, c, eight, 8)

	onB := gpuPod("sched-two-on-b", 2)
	onB.Spec.NodeSelector = map[string]string{corev1.LabelHostname: b.Name}
	two, node := schedule(onB)
	if node != b {
		t.Errorf("pod with nodeSelector %s=%s placed on %s", corev1.LabelHostname, b.Name, node.Name)
	}
	twoIDs := podDevices(t, c, two, 2)
	// Each kubelet reports only its own node's pods.
	if held, err := b.HeldDeviceIDs(t.Context()); err != nil || len(held) != 2 {
		t.Errorf("node %s holds %v (err %v), want the 2 of pod %s", b.Name, held, err, two.Name)
	}
	if held, err := a.HeldDeviceIDs(t.Context()); err != nil || len(held) != 8 {
		t.Errorf("node %s holds %v (err %v), want the 8 of pod %s", a.Name, held, err, eight.Name)
	}

	start := time.Now()
	tooBig := submitPod(t, c, gpuPod("sched-sixteen", 16))
	cond, err := c.WaitPodUnschedulable(t.Context(), time.Minute, tooBig.Namespace, tooBig.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: pod asking for 16 submitted -> Unschedulable: %s", time.Since(start).Round(time.Millisecond))
	t.Logf("scheduler: %s: %s", cond.Reason, cond.Message)
	for _, want := range []string{"0/2 nodes are available", "Insufficient " + cluster.ResourceName} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("PodScheduled message %q, want it to contain %q", cond.Message, want)
		}
	}
	if got, err := c.Client.CoreV1().Pods(tooBig.Namespace).Get(t.Context(), tooBig.Name, metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if got.Status.Phase != corev1.PodPending || got.Spec.NodeName != "" {
		t.Errorf("pod asking for 16: phase %s on %q, want Pending on no node", got.Status.Phase, got.Spec.NodeName)
	}

	// The pods that run keep their devices.
	checkStillRunning(t, c, eight, eightIDs)
	checkStillRunning(t, c, two, twoIDs)
}

// submitPod creates pod without a node (the scheduler places it) and deletes it at cleanup.
func submitPod(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.SubmitPod(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePodAtCleanup(t, c, created) })
	return created
}
