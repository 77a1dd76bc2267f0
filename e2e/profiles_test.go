package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// The node labels of the plugin (its README, "Node pools"): the operator's profile label, and the
// GPU labels it writes with -label-node.
const (
	profileLabel   = "unicore.mcyou.cc/device-plugin.config"
	gpuLabelPrefix = "unicore.mcyou.cc/gpu."
	// migLabelPrefix starts the MIG labels: the operator's layout label, its state and GFD's MIG labels.
	migLabelPrefix = "unicore.mcyou.cc/mig"
	productLabel   = gpuLabelPrefix + "product"
)

// e2eProfiles are the profiles of the scenarios' -config directory, with the GPUs each advertises.
var e2eProfiles = map[string]struct {
	body string
	gpus int64
}{
	"dgx-a100":         {"version: v1\nflags:\n  topology: dgx-a100\n", 8},
	"workstation-4gpu": {"version: v1\nflags:\n  topology: workstation-4gpu\n", 4},
	"hgx-h100":         {"version: v1\nflags:\n  topology: hgx-h100\n", 8},
	"default-2":        {"version: v1\nflags:\n  devices: 2\n", 2},
}

// writeProfiles writes e2eProfiles into a new directory, as a mounted ConfigMap holds them.
func writeProfiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, p := range e2eProfiles {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(p.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// profilePluginOptions runs the plugin for node with the profiles of dir (-config-default=default-2),
// its node name, the cluster's kubeconfig and -label-node (unless nodeName is false: no API access).
func profilePluginOptions(c *cluster.Cluster, node *cluster.Node, dir string, nodeName bool) cluster.PluginOptions {
	args := []string{"-config=" + dir, "-config-default=default-2"}
	if nodeName {
		args = append(args, "-node-name="+node.Name, "-kubeconfig="+c.Kubeconfig, "-label-node")
	}
	return cluster.PluginOptions{Devices: -1, Args: args}
}

// cleanNodeLabels removes the profile label, every GPU label and every MIG label of node, at the test's end (after its
// plugins stopped: register it before them).
func cleanNodeLabels(t *testing.T, node *cluster.Node) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := node.Get(ctx)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for k := range n.Labels {
			if k == profileLabel || strings.HasPrefix(k, gpuLabelPrefix) || strings.HasPrefix(k, migLabelPrefix) {
				if err := node.SetNodeLabel(ctx, k, ""); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			}
		}
	})
}

// relabel sets node's profile label and returns how long until the Node showed want devices (capacity
// and allocatable).
func relabel(t *testing.T, node *cluster.Node, profile string, want int64) time.Duration {
	t.Helper()
	start := time.Now()
	if err := node.SetNodeLabel(t.Context(), profileLabel, profile); err != nil {
		t.Fatal(err)
	}
	if _, err := node.WaitNodeResource(t.Context(), 30*time.Second, cluster.ResourceName, want, want); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// productValue is the GPU product label value of a preset's GPUs: the product name with spaces as
// dashes, as GPU feature discovery writes it.
func productValue(t *testing.T, preset string) string {
	t.Helper()
	m, err := topology.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(m.GPUModel().Product), "-")
}

// TestProfilesTwoNodes: node pools from one set of profiles. Node A is labelled for the dgx-a100
// profile (8 GPUs), node B for workstation-4gpu (4), before their plugins start (each a process with
// -config=<profiles> -node-name -kubeconfig -label-node against the real API server). The scheduler
// places a pod asking for 8 on A, and one asking for 2 with a node affinity on B's GPU product label
// (which B's plugin wrote) on B; a pod asking for 16 stays Pending with the scheduler's reason.
// Relabelling B to hgx-h100 and back, five times each way, changes B's allocatable without a restart
// (timed: label patch -> Node capacity and allocatable); the pod on B keeps running and its
// allocation, and every change, is in B's dump. A label naming no profile is one error in B's log and
// changes nothing; a plugin started on a node with such a label serves the -config-default profile.
func TestProfilesTwoNodes(t *testing.T) {
	c := needCluster(t)
	if len(c.Nodes) < 2 {
		t.Skipf("needs 2 nodes, the cluster has %d", len(c.Nodes))
	}
	a, b := c.Nodes[0], c.Nodes[1]
	cleanNodeLabels(t, a)
	cleanNodeLabels(t, b)
	dir := writeProfiles(t)
	for node, profile := range map[*cluster.Node]string{a: "dgx-a100", b: "workstation-4gpu"} {
		if err := node.SetNodeLabel(t.Context(), profileLabel, profile); err != nil {
			t.Fatal(err)
		}
	}
	startNodePlugin(t, c, a, profilePluginOptions(c, a, dir, true), 8)
	pb := startNodePlugin(t, c, b, profilePluginOptions(c, b, dir, true), 4)

	// Each plugin writes its node's GPU labels.
	start := time.Now()
	for node, preset := range map[*cluster.Node]string{a: "dgx-a100", b: "workstation-4gpu"} {
		want := productValue(t, preset)
		if err := cluster.Poll(t.Context(), 30*time.Second, 50*time.Millisecond, func() (bool, string, error) {
			n, err := node.Get(t.Context())
			if err != nil {
				return false, err.Error(), nil
			}
			return n.Labels[productLabel] == want && n.Labels[gpuLabelPrefix+"profile"] == preset,
				fmt.Sprintf("%s=%q", productLabel, n.Labels[productLabel]), nil
		}); err != nil {
			t.Fatalf("node %s: %v", node.Name, err)
		}
	}
	t.Logf("timing: both nodes have their GPU labels %s after their plugins were ready", time.Since(start).Round(time.Millisecond))
	wantProduct := productValue(t, "workstation-4gpu")

	eight := submitPod(t, c, gpuPod("profiles-eight", 8))
	if _, node, err := c.WaitPodScheduled(t.Context(), time.Minute, eight.Namespace, eight.Name); err != nil {
		t.Fatal(err)
	} else if node != a {
		t.Errorf("pod asking for 8 placed on %s, want %s", node.Name, a.Name)
	}
	onB := gpuPod("profiles-two-on-b", 2)
	onB.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: productLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{wantProduct}}},
		}}},
	}}
	two := submitPod(t, c, onB)
	if _, node, err := c.WaitPodScheduled(t.Context(), time.Minute, two.Namespace, two.Name); err != nil {
		t.Fatal(err)
	} else if node != b {
		t.Errorf("pod with affinity %s=%s placed on %s, want %s", productLabel, wantProduct, node.Name, b.Name)
	}
	running, err := c.WaitPodPhase(t.Context(), time.Minute, two.Namespace, two.Name, corev1.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	twoIDs := podDevices(t, c, running, 2)
	tooBig := submitPod(t, c, gpuPod("profiles-sixteen", 16))
	cond, err := c.WaitPodUnschedulable(t.Context(), time.Minute, tooBig.Namespace, tooBig.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scheduler: %s: %s", cond.Reason, cond.Message)
	if !strings.Contains(cond.Message, "Insufficient "+cluster.ResourceName) {
		t.Errorf("PodScheduled message %q lacks Insufficient %s", cond.Message, cluster.ResourceName)
	}

	// Relabel B: hgx-h100 (8) and back (4), five times each way.
	var toBig, toSmall []time.Duration
	for range 5 {
		toBig = append(toBig, relabel(t, b, "hgx-h100", 8))
		toSmall = append(toSmall, relabel(t, b, "workstation-4gpu", 4))
	}
	t.Logf("timing: label change -> new Node capacity/allocatable, 4 -> 8 GPUs: median %s (%s)", median(toBig).Round(time.Millisecond), roundAll(toBig))
	t.Logf("timing: label change -> new Node capacity/allocatable, 8 -> 4 GPUs: median %s (%s)", median(toSmall).Round(time.Millisecond), roundAll(toSmall))
	checkStillRunning(t, c, running, twoIDs)
	if reg, err := pb.FindLog("registered with kubelet"); err != nil || len(reg) != 1 {
		t.Errorf("B's plugin registered %d times (err %v), want once: a profile change keeps the registration", len(reg), err)
	}

	doc, err := pb.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if held := doc.AllocationsOf(two.Namespace, two.Name, "main"); len(held) != 1 || held[0].State != "held" || !slices.Equal(held[0].SortedIDs(), twoIDs) {
		t.Errorf("B's dump: the allocation of %s = %+v, want held %v", two.Name, held, twoIDs)
	}
	var labelled []string
	for _, e := range doc.ConfigEvents {
		if e.Why == "node-label" {
			labelled = append(labelled, e.Profile)
		}
	}
	if len(labelled) != 11 || labelled[0] != "workstation-4gpu" || labelled[1] != "hgx-h100" {
		t.Errorf("B's node-label events (newest first) = %v, want 11: the start and 10 changes", labelled)
	}
	for _, id := range []string{"fake-4", "fake-7"} {
		if d := doc.Device(id); d == nil || !d.Removed || !strings.HasPrefix(d.UUID, "GPU-") {
			t.Errorf("B's dump: device %s = %+v, want removed, with its UUID kept", id, d)
		}
	}

	// A label naming no profile: one error, B keeps workstation-4gpu.
	if err := b.SetNodeLabel(t.Context(), profileLabel, "no-such-profile"); err != nil {
		t.Fatal(err)
	}
	const notApplied = "configuration not applied: the configuration in force stays"
	lines, err := pb.WaitLog(t.Context(), 30*time.Second, notApplied, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("B's plugin: %v", lines[0])
	if msg, _ := lines[0]["error"].(string); !strings.Contains(msg, `"no-such-profile"`) || lines[0]["profile_in_force"] != "workstation-4gpu" {
		t.Errorf("error line = %v", lines[0])
	}
	if err := b.NodeAllocatableStays(t.Context(), 2*time.Second, 4); err != nil {
		t.Error(err)
	}
	if again, _ := pb.FindLog(notApplied); len(again) != 1 {
		t.Errorf("%d error lines, want 1", len(again))
	}

	// A plugin starting on a node whose label names no profile serves the -config-default one.
	stopPlugin(t, c, pb)
	restarted := startNodePlugin(t, c, b, func() cluster.PluginOptions {
		o := profilePluginOptions(c, b, dir, true)
		o.StatePath = pb.StatePath
		return o
	}(), e2eProfiles["default-2"].gpus)
	if lines, err := restarted.WaitLog(t.Context(), 10*time.Second, notApplied, 1); err != nil {
		t.Error(err)
	} else if lines[0]["profile_in_force"] != "default-2" {
		t.Errorf("error line at start = %v", lines[0])
	}
}

// TestProfilesWatchRSS measures the memory the API watch adds: the plugin's VmRSS with -node-name
// (watching its Node, applying 20 label changes, writing its GPU labels) over the same plugin without
// -node-name (no API client; the same 20 label changes mean nothing to it).
func TestProfilesWatchRSS(t *testing.T) {
	c := needCluster(t)
	node := c.Node
	cleanNodeLabels(t, node)
	dir := writeProfiles(t)
	measure := func(withNodeName bool) int64 {
		t.Helper()
		if err := node.SetNodeLabel(t.Context(), profileLabel, "workstation-4gpu"); err != nil {
			t.Fatal(err)
		}
		want := e2eProfiles["default-2"].gpus
		if withNodeName {
			want = 4
		}
		p := startNodePlugin(t, c, node, profilePluginOptions(c, node, dir, withNodeName), want)
		for i := range 20 {
			profile, gpus := "hgx-h100", int64(8)
			if i%2 == 1 {
				profile, gpus = "workstation-4gpu", 4
			}
			if !withNodeName {
				gpus = want
			}
			relabel(t, node, profile, gpus)
		}
		rss := vmRSS(t, p.PID())
		stopPlugin(t, c, p)
		return rss
	}
	with := measure(true)
	without := measure(false)
	t.Logf("figure: plugin VmRSS after 20 label changes: with -node-name (API watch) %d KiB, without %d KiB: ratio %.2f",
		with, without, float64(with)/float64(without))
}

// vmRSS reads a process's resident set size in KiB from /proc/<pid>/status.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kib
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// median returns the median of ds (the lower middle for an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// roundAll formats ds rounded to milliseconds.
func roundAll(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond).String()
	}
	return strings.Join(out, " ")
}
