package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestKWOKArgs(t *testing.T) {
	got := kwokArgs("/bin/kwok", "/tmp/kc", []string{"/s/a.yaml", "/s/b.yaml"})
	want := []string{"/bin/kwok",
		"--kubeconfig=/tmp/kc",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.244.0.0/16",
		"--node-ip=10.1.0.1",
		"--node-lease-duration-seconds=40",
		"-c", "/s/a.yaml", "-c", "/s/b.yaml",
	}
	if !slices.Equal(got, want) {
		t.Errorf("kwokArgs =\n%q\nwant\n%q", got, want)
	}
}

// TestWriteKWOKStages checks that the embedded stages are the five kwokctl's defaults with leases
// are, each a Stage of the right resource.
func TestWriteKWOKStages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kwok")
	paths, err := writeKWOKStages(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantKinds := map[string]string{
		"node-heartbeat-with-lease": "Node", "node-initialize": "Node",
		"pod-complete": "Pod", "pod-delete": "Pod", "pod-ready": "Pod",
	}
	var names []string
	for _, p := range paths {
		if filepath.Dir(p) != dir {
			t.Errorf("stage %s not in %s", p, dir)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				ResourceRef struct{ Kind string } `json:"resourceRef"`
			}
		}
		if err := yaml.Unmarshal(b, &st); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if st.Kind != "Stage" || strings.TrimSuffix(filepath.Base(p), ".yaml") != st.Metadata.Name {
			t.Errorf("%s: kind %q name %q, want a Stage named as the file", p, st.Kind, st.Metadata.Name)
		}
		if want := wantKinds[st.Metadata.Name]; st.Spec.ResourceRef.Kind != want {
			t.Errorf("stage %s for %q, want %q", st.Metadata.Name, st.Spec.ResourceRef.Kind, want)
		}
		names = append(names, st.Metadata.Name)
	}
	if want := []string{"node-heartbeat-with-lease", "node-initialize", "pod-complete", "pod-delete", "pod-ready"}; !slices.Equal(names, want) {
		t.Errorf("stages %q, want %q", names, want)
	}
}

func TestNewKWOKNode(t *testing.T) {
	n, err := NewKWOKNode(KWOKNode{Name: "kwok-0", Labels: map[string]string{"zone": "a", KWOKNodeLabel: KWOKNodeLabelValue}})
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "kwok-0" || n.Annotations[KWOKNodeAnnotation] != "fake" {
		t.Errorf("name %q annotations %v, want kwok-0 with %s=fake", n.Name, n.Annotations, KWOKNodeAnnotation)
	}
	for k, v := range map[string]string{"type": "kwok", "kubernetes.io/hostname": "kwok-0", "kubernetes.io/os": "linux", "zone": "a"} {
		if n.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Labels["kubernetes.io/arch"] == "" {
		t.Error("no kubernetes.io/arch label")
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].ToString() != "kwok.x-k8s.io/node=fake:NoSchedule" {
		t.Errorf("taints %v, want kwok.x-k8s.io/node=fake:NoSchedule", n.Spec.Taints)
	}
	for _, rl := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		if rl.Cpu().String() != "32" || rl.Memory().String() != "256Gi" || rl.Pods().String() != "110" {
			t.Errorf("resources %v, want cpu 32, memory 256Gi, pods 110", rl)
		}
	}
	// The two maps are the node's own: changing one (a GPU count) leaves the other and the next node.
	n.Status.Allocatable[corev1.ResourceCPU] = *n.Status.Allocatable.Pods()
	if m, _ := NewKWOKNode(KWOKNode{Name: "kwok-1"}); m.Status.Allocatable.Cpu().String() != "32" || n.Status.Capacity.Cpu().String() != "32" {
		t.Error("NewKWOKNode shares its resource maps")
	}

	for _, bad := range []KWOKNode{
		{Name: "Not_DNS"},
		{Name: "kwok-0", Labels: map[string]string{"bad key!": "x"}},
		{Name: "kwok-0", Labels: map[string]string{"ok": "bad value!"}},
		{Name: "kwok-0", Labels: map[string]string{"type": "real"}},
		{Name: "kwok-0", Labels: map[string]string{"kubernetes.io/hostname": "other"}},
	} {
		if _, err := NewKWOKNode(bad); err == nil {
			t.Errorf("NewKWOKNode(%+v) accepted", bad)
		}
	}
}

func TestKWOKNodesSeen(t *testing.T) {
	ready := func(name string, taints ...corev1.Taint) corev1.Node {
		n := corev1.Node{}
		n.Name = name
		n.Spec.Taints = taints
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		return n
	}
	notReady := ready("b")
	notReady.Status.Conditions[0].Status = corev1.ConditionUnknown
	nodes := []corev1.Node{ready("a"), notReady, ready("c", corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})}

	if n, seen := kwokNodesSeen(nodes, []string{"a"}); n != 0 || seen != "" {
		t.Errorf("a: %d not ready (%s), want 0", n, seen)
	}
	n, seen := kwokNodesSeen(nodes, []string{"a", "b", "c", "d"})
	if n != 3 || !strings.Contains(seen, "3 of 4") || !strings.Contains(seen, "node b: not Ready") {
		t.Errorf("a-d: %d not ready (%s), want 3, naming b first", n, seen)
	}
	if n, seen := kwokNodesSeen(nodes, []string{"c"}); n != 1 || !strings.Contains(seen, "taint node.kubernetes.io/not-ready") {
		t.Errorf("c: %d (%s), want 1 for the not-ready taint", n, seen)
	}
	if n, seen := kwokNodesSeen(nodes, []string{"d"}); n != 1 || !strings.Contains(seen, "no such Node") {
		t.Errorf("d: %d (%s), want 1 missing", n, seen)
	}
}

func TestNewKWOKPod(t *testing.T) {
	pod := NewKWOKPod("p")
	if pod.Spec.NodeSelector["type"] != "kwok" || len(pod.Spec.Tolerations) != 1 {
		t.Fatalf("node selector %v tolerations %v", pod.Spec.NodeSelector, pod.Spec.Tolerations)
	}
	node, err := NewKWOKNode(KWOKNode{Name: "kwok-0"})
	if err != nil {
		t.Fatal(err)
	}
	tol, taint := pod.Spec.Tolerations[0], node.Spec.Taints[0]
	if tol.Key != taint.Key || tol.Operator != corev1.TolerationOpEqual || tol.Value != taint.Value || tol.Effect != taint.Effect {
		t.Errorf("toleration %+v does not tolerate the node's taint %v", pod.Spec.Tolerations[0], node.Spec.Taints[0])
	}
	// TolerateKWOK keeps what the pod had.
	other := NewPod("q", 1, "true")
	other.Spec.NodeSelector = map[string]string{"zone": "a"}
	TolerateKWOK(other)
	if other.Spec.NodeSelector["zone"] != "a" || other.Spec.NodeSelector["type"] != "kwok" {
		t.Errorf("node selector %v, want zone=a and type=kwok", other.Spec.NodeSelector)
	}
}

func TestKWOKRateArgs(t *testing.T) {
	var c Cluster
	if got := c.kwokRateArgs(100); got != nil {
		t.Errorf("without kwok: %q, want none", got)
	}
	c.KWOKBinaries.KWOK = "/bin/kwok"
	if got, want := c.kwokRateArgs(100), []string{"--kube-api-qps=100", "--kube-api-burst=200"}; !slices.Equal(got, want) {
		t.Errorf("with kwok: %q, want %q", got, want)
	}
}
