package e2e_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// The MIG resources and labels of the mixed strategy (README, "MIG partitions").
const (
	mig1g          corev1.ResourceName = "unicore.mcyou.cc/mig-1g.10gb"
	mig2g          corev1.ResourceName = "unicore.mcyou.cc/mig-2g.20gb"
	mig3g          corev1.ResourceName = "unicore.mcyou.cc/mig-3g.40gb"
	migConfigLabel                     = "unicore.mcyou.cc/mig.config"
	migStateLabel                      = "unicore.mcyou.cc/mig.config.state"
)

// halfMixed is a mig-parted file whose layout half-mixed partitions the first four GPUs of an 8-GPU
// H100 node (four 1g.10gb and one 3g.40gb each) and leaves the others whole (the plugin's own tests
// use it too).
const halfMixed = "../cmd/virtual-gpu-device-plugin/testdata/mig-half-mixed.yaml"

// migScript prints what the container was told of its devices and sleeps.
const migScript = `echo "shared: ids=${VIRTUAL_GPU_IDS} visible=${NVIDIA_VISIBLE_DEVICES}"; sleep infinity`

// TestMIGMixed: an H100 node under the mixed strategy serves the whole GPUs and one resource per
// MIG profile, each registered on its own socket; pods asking mig-1g.10gb: 2 and mig-3g.40gb: 1 run
// and their containers get their MIG devices (as the kubelet's PodResources API has them, and their
// MIG UUIDs in NVIDIA_VISIBLE_DEVICES); a layout
// change by the node label while idle registers the new layout's resources and relabels the node;
// a layout the product cannot hold is refused (state failed) and the one in force stays.
func TestMIGMixed(t *testing.T) {
	c := needCluster(t)
	node := c.Node
	cleanNodeLabels(t, node)
	file, err := filepath.Abs(halfMixed)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	plugin := startPluginN(t, c, cluster.PluginOptions{Topology: "hgx-h100", Args: []string{
		"-mig-strategy=mixed", "-mig-config-file=" + file, "-mig-config=half-mixed", "-visible-devices-env",
		"-node-name=" + node.Name, "-kubeconfig=" + c.Kubeconfig, "-label-node"}}, 4)
	for r, n := range map[corev1.ResourceName]int64{mig1g: 16, mig3g: 4} {
		if _, err := node.WaitNodeResource(t.Context(), 30*time.Second, r, n, n); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("timing: plugin start -> node serves 3 resources (4 GPUs, 16 mig-1g.10gb, 4 mig-3g.40gb): %s", time.Since(start).Round(time.Millisecond))

	small := runPod(t, c, migPod("mig-small", mig1g, 2))
	big := runPod(t, c, migPod("mig-big", mig3g, 1))
	for _, tc := range []struct {
		pod      *corev1.Pod
		resource corev1.ResourceName
		n        int
		profile  string
	}{{small, mig1g, 2, "-mig-1g10gb-"}, {big, mig3g, 1, "-mig-3g40gb-"}} {
		devs := podSharedDevices(t, c, tc.pod, string(tc.resource))
		if len(devs) != tc.n {
			t.Fatalf("pod %s holds %v of %s, want %d", tc.pod.Name, devs, tc.resource, tc.n)
		}
		for _, d := range devs {
			if !strings.Contains(d, tc.profile) {
				t.Errorf("pod %s holds %s, not a %s MIG device", tc.pod.Name, d, tc.profile)
			}
		}
		env := podSharedEnv(t, c, tc.pod)
		log, err := c.WaitPodLog(t.Context(), 30*time.Second, tc.pod.Namespace, tc.pod.Name, "main", "visible=")
		if err != nil {
			t.Fatal(err)
		}
		_, visible, _ := strings.Cut(log, "visible=")
		visible = strings.TrimSpace(strings.SplitN(visible, "\n", 2)[0])
		if uuids := strings.Split(visible, ","); len(uuids) != tc.n || !strings.HasPrefix(uuids[0], "MIG-") {
			t.Errorf("pod %s: NVIDIA_VISIBLE_DEVICES=%s, want its %d MIG UUIDs", tc.pod.Name, visible, tc.n)
		}
		got := strings.Split(env.ids, ",")
		slices.Sort(got)
		if !slices.Equal(got, devs) {
			t.Errorf("pod %s: VIRTUAL_GPU_IDS=%s, the kubelet gave it %v", tc.pod.Name, env.ids, devs)
		}
	}
	for _, p := range []*corev1.Pod{small, big} {
		if err := c.DeletePod(t.Context(), time.Minute, p.Namespace, p.Name); err != nil {
			t.Fatal(err)
		}
	}

	// Idle: a layout by label. all-balanced partitions every GPU (2g, 1g, 1g, 3g): no whole GPU.
	start = time.Now()
	if err := node.SetNodeLabel(t.Context(), migConfigLabel, "all-balanced"); err != nil {
		t.Fatal(err)
	}
	for r, n := range map[corev1.ResourceName]int64{mig1g: 16, mig2g: 8, mig3g: 8} {
		if _, err := node.WaitNodeResource(t.Context(), 30*time.Second, r, n, n); err != nil {
			t.Fatal(err)
		}
	}
	waitNodeLabels(t, node, map[string]string{migStateLabel: "success", "unicore.mcyou.cc/mig.strategy": "mixed",
		"unicore.mcyou.cc/mig-2g.20gb.count": "8", "unicore.mcyou.cc/gpu.count": "0"})
	t.Logf("timing: mig.config label all-balanced -> node serves the new layout and is relabelled: %s", time.Since(start).Round(time.Millisecond))

	// A layout the H100 cannot hold (1g.5gb is an A100 40GB profile): refused, all-balanced stays.
	if err := node.SetNodeLabel(t.Context(), migConfigLabel, "all-1g.5gb"); err != nil {
		t.Fatal(err)
	}
	waitNodeLabels(t, node, map[string]string{migStateLabel: "failed"})
	if _, alloc, err := node.NodeResource(t.Context(), mig2g); err != nil || alloc != 8 {
		t.Errorf("mig-2g.20gb allocatable %d (%v) after a refused layout, want 8", alloc, err)
	}
	if !strings.Contains(plugin.Tail(200), `invalid node label `+migConfigLabel+`=\"all-1g.5gb\"`) {
		t.Errorf("no log line refusing the layout:\n%s", plugin.Tail(20))
	}
}

// waitNodeLabels waits until node has every label of want.
func waitNodeLabels(t *testing.T, node *cluster.Node, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := node.Get(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		missing := map[string]string{}
		for k, v := range want {
			if n.Labels[k] != v {
				missing[k] = n.Labels[k]
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s labels: want %v, have %v", node.Name, want, missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// migPod is a pod asking for n devices of resource that prints its environment (migScript, in the
// shape podSharedEnv reads).
func migPod(name string, resource corev1.ResourceName, n int64) *corev1.Pod {
	pod := sharedPod(name, resource, n)
	pod.Spec.Containers[0].Command[len(pod.Spec.Containers[0].Command)-1] = migScript
	return pod
}
