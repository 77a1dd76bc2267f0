package e2e_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// TestDRA_MixedNodes: two kinds of GPU node in one cluster: the suite's first node (containerd 1.6)
// with the plugin as a device plugin (4 GPUs, the extended resource unicore.mcyou.cc/gpu) and a
// containerd 2 node with the plugin as its DRA driver (4 GPUs, the shipped DeviceClass with
// extendedResourceName unicore.mcyou.cc/gpu). The harness runs no Deployment controller, so the
// "Deployment" is six pods of one template submitted without a node: two ask for one GPU through a
// ResourceClaimTemplate, four through the extended resource (limits unicore.mcyou.cc/gpu: 1), as a
// Deployment's pods would. All run, spread over both nodes: the claim pods on the DRA node, the
// extended-resource pods on the device-plugin node (devices from its PodResources) or, served through
// DRA, on the DRA node (a claim of the scheduler's, named in extendedResourceClaimStatus); no GPU is
// given twice on a node.
func TestDRA_MixedNodes(t *testing.T) {
	c := needCluster(t)
	if on, err := c.FeatureEnabled(t.Context(), "DRAExtendedResource"); err != nil || !on {
		t.Skipf("feature gate DRAExtendedResource is off in the API server (%v)", err)
	}
	startPlugin(t, c, cluster.PluginOptions{})
	draNodeN, _ := draNode(t, c, "vgpu-e2e-dra-mixed", cluster.PluginOptions{}, 4)
	tmpl := claimTemplate("dra-mixed-one", 1, "")
	applyDRA(t, c, tmpl)

	type member struct {
		pod   *corev1.Pod
		claim bool
		start time.Time
	}
	var pods []member
	for i := range 6 {
		var pod *corev1.Pod
		claim := i < 2
		if claim {
			pod = cluster.NewClaimPod(fmt.Sprintf("dra-mixed-%d", i), cluster.PodClaim{ResourceClaimTemplateName: tmpl.Name}, gpuScript)
		} else {
			pod = cluster.NewPod(fmt.Sprintf("dra-mixed-%d", i), 1, gpuScript)
		}
		pod.Labels = map[string]string{"app": "dra-mixed"}
		start := time.Now()
		created, err := c.SubmitPod(t.Context(), pod)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deletePodAtCleanup(t, c, created) })
		pods = append(pods, member{created, claim, start})
	}
	perNode := map[string][]string{}
	count := map[string]int{}
	for _, m := range pods {
		running, err := c.WaitPodPhase(t.Context(), time.Minute, m.pod.Namespace, m.pod.Name, corev1.PodRunning)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(m.start)
		nodeName := running.Spec.NodeName
		count[nodeName]++
		var ids []string
		via := "device plugin"
		switch {
		case m.claim:
			via = "claim template"
			if nodeName != draNodeN.Name {
				t.Errorf("claim pod %s on %s, want the DRA node %s", running.Name, nodeName, draNodeN.Name)
			}
			rc, err := c.WaitPodClaim(t.Context(), 10*time.Second, running.Namespace, running.Name, cluster.ClaimName, cluster.ClaimAllocated)
			if err != nil {
				t.Fatal(err)
			}
			ids = cluster.AllocatedDevices(rc)
		case nodeName == draNodeN.Name:
			via = "extended resource through DRA"
			st := running.Status.ExtendedResourceClaimStatus
			if st == nil {
				t.Fatalf("pod %s on the DRA node without extendedResourceClaimStatus", running.Name)
			}
			rc, err := c.Client.ResourceV1().ResourceClaims(running.Namespace).Get(t.Context(), st.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ids = cluster.AllocatedDevices(rc)
		case nodeName == c.Name:
			ids = podDevices(t, c, running, 1)
		default:
			t.Errorf("pod %s on node %s, which has no GPUs", running.Name, nodeName)
		}
		if got := podIDs(t, c, running); !slices.Equal(got, ids) {
			t.Errorf("pod %s: %s=%v, want %v", running.Name, cluster.EnvIDs, got, ids)
		}
		for _, id := range ids {
			if slices.Contains(perNode[nodeName], id) {
				t.Errorf("node %s: %s given twice", nodeName, id)
			}
			perNode[nodeName] = append(perNode[nodeName], id)
		}
		t.Logf("pod %s (%s): node %s, GPUs %v, created -> Running %s", running.Name, via, nodeName, ids, took.Round(time.Millisecond))
	}
	t.Logf("pods per node: %v", count)
	if count[c.Name] == 0 || count[draNodeN.Name] == 0 {
		t.Errorf("pods per node %v: want both the device-plugin node %s and the DRA node %s used", count, c.Name, draNodeN.Name)
	}
}

// TestDRA_PodStartRatio measures pod created → Running for one-GPU pods through the device-plugin API and
// through DRA on the same containerd 2 node, both placed by the scheduler: the plugin runs there twice,
// as a device plugin (unicore.mcyou.cc/gpu) and as the DRA driver (a DeviceClass without
// extendedResourceName, so the two never serve one request). Three pods of each, alternating, each
// deleted before the next; it logs both medians and their ratio (a figure, not asserted).
func TestDRA_PodStartRatio(t *testing.T) {
	parallelDRA(t)
	c := needCluster(t)
	node := addContainerd2Node(t, c, "vgpu-e2e-dra-ratio")
	startNodePlugin(t, c, node, cluster.PluginOptions{}, 4)
	startDRAPlugin(t, c, node, cluster.PluginOptions{}, 4)
	class := cluster.NewDeviceClass("e2e-dra-ratio.unicore.mcyou.cc", cluster.DRADriverName)
	applyDRA(t, c, class)
	tmpl := cluster.NewResourceClaimTemplate(metav1.NamespaceDefault, "dra-ratio-one", class.Name, 1)
	applyDRA(t, c, tmpl)
	const n = 3
	var dp, dra []time.Duration
	for i := range 2 * n {
		useDRA := i%2 == 1
		var pod *corev1.Pod
		if useDRA {
			pod = cluster.NewClaimPod(fmt.Sprintf("dra-ratio-dra-%d", i/2), cluster.PodClaim{ResourceClaimTemplateName: tmpl.Name}, gpuScript)
		} else {
			pod = cluster.NewPod(fmt.Sprintf("dra-ratio-dp-%d", i/2), 1, gpuScript)
		}
		start := time.Now()
		created, err := node.SchedulePod(t.Context(), pod)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deletePodAtCleanup(t, c, created) })
		if _, err := c.WaitPodPhase(t.Context(), time.Minute, created.Namespace, created.Name, corev1.PodRunning); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if ids := podIDs(t, c, created); len(ids) != 1 {
			t.Errorf("pod %s: %s=%v, want one GPU", created.Name, cluster.EnvIDs, ids)
		}
		if useDRA {
			dra = append(dra, took)
		} else {
			dp = append(dp, took)
		}
		if err := c.DeletePod(t.Context(), 40*time.Second, created.Namespace, created.Name); err != nil {
			t.Fatal(err)
		}
	}
	med := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	t.Logf("timing: pod created -> Running, device plugin %v (median %s), DRA %v (median %s): DRA/device-plugin %.2f",
		dp, med(dp).Round(time.Millisecond), dra, med(dra).Round(time.Millisecond), float64(med(dra))/float64(med(dp)))
}
