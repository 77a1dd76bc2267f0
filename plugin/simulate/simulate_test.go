package simulate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate/scope"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

const (
	gpu    = "unicore.mcyou.cc/gpu"
	driver = "gpu.unicore.mcyou.cc"
)

// source is a profiles directory in memory: profiles by name, fallback
// the one of a node without the label.
type source struct {
	fallback string
	profiles map[string]agent.Config
}

func (s *source) Fallback() agent.Choice {
	return agent.Choice{Config: s.profiles[s.fallback], Why: store.WhyDefault}
}
func (s *source) Profiles() bool { return true }
func (s *source) Select(sel agent.Selection) (agent.Choice, error) {
	if sel.Profile == "" {
		return s.Fallback(), nil
	}
	c, ok := s.profiles[sel.Profile]
	if !ok {
		return agent.Choice{}, errors.New("no profile " + sel.Profile)
	}
	return agent.Choice{Config: c, Why: store.WhyNodeLabel, Detail: "label=" + sel.Profile}, nil
}
func (s *source) Reload() error { return nil }
func (s *source) Dir() string   { return "profiles" }

func profile(t testing.TB, name, machine string, api agent.KubeletAPI) agent.Config {
	t.Helper()
	return agent.Config{Profile: name, KubeletAPI: api, GPUs: plugintest.GPUConfig(t, machine, gpuset.Sharing{})}
}

// rig is a Simulator running against a fake API server.
type rig struct {
	t      testing.TB
	stop   func() // ends the Simulator's Run (also at cleanup)
	client *fake.Clientset
	sim    *simulate.Simulator
	dir    string
	logs   *plugintest.LogBuffer
}

func startRig(t testing.TB, objs ...any) *rig {
	t.Helper()
	client := fake.NewClientset()
	client.Resources = []*metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "resourceclaims"}, {Name: "resourceslices"}}}}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Node:
			if _, err := client.CoreV1().Nodes().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	src := &source{fallback: "eight", profiles: map[string]agent.Config{
		"eight": profile(t, "eight", "dgx-a100", agent.KubeletAPIDevicePlugin),
		"four":  profile(t, "four", "generic-4", agent.KubeletAPIDevicePlugin),
		"dra":   profile(t, "dra", "dgx-a100", agent.KubeletAPIDRA),
		"faulty": func() agent.Config {
			c := profile(t, "faulty", "generic-4", agent.KubeletAPIDevicePlugin)
			fs, err := faults.Parse("down:fake-0:after=50ms")
			if err != nil {
				t.Fatal(err)
			}
			c.Faults = faults.Plan{Text: "down:fake-0:after=50ms", Faults: fs}
			return c
		}(),
		"mig": func() agent.Config {
			c := profile(t, "mig", "hgx-h100", agent.KubeletAPIDevicePlugin)
			c.GPUs = plugintest.WithMIG(t, c.GPUs, nil, gpuset.MIG{Strategy: gpuset.MIGStrategyMixed, Layout: "all-1g.10gb"})
			return c
		}(),
	}}
	sel, err := scope.ParseSelector(scope.DefaultSelector)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logs := &plugintest.LogBuffer{}
	sim, err := simulate.New(simulate.Config{Client: client, Source: src, Selector: sel, StateDir: dir, DriverName: driver,
		Retry: 50 * time.Millisecond, Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return &rig{t: t, stop: stop, client: client, sim: sim, dir: dir, logs: logs}
}

func kwokNode(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labels,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32")}}}
}

// eventually waits up to 10 s for cond, failing with what it says last.
func (r *rig) eventually(what string, cond func() (bool, string)) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not within 10 s; last: %s\nlogs:\n%s", what, got, r.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *rig) node(name string) *corev1.Node {
	r.t.Helper()
	n, err := r.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// waitGPUs waits until node name reports capacity and allocatable of
// resource.
func (r *rig) waitGPUs(name, res string, capacity, allocatable int64) {
	r.t.Helper()
	r.eventually(name+" "+res, func() (bool, string) {
		n := r.node(name)
		c, a := n.Status.Capacity[corev1.ResourceName(res)], n.Status.Allocatable[corev1.ResourceName(res)]
		return c.Value() == capacity && a.Value() == allocatable, "capacity " + c.String() + " allocatable " + a.String()
	})
}

func (r *rig) summary(name string) admin.NodeSummary {
	r.t.Helper()
	nodes, err := r.sim.Nodes()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Node == name {
			return n
		}
	}
	return admin.NodeSummary{}
}

func (r *rig) call(method, path string, body any) (int, string) {
	r.t.Helper()
	var b bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&b).Encode(body)
	}
	rec := httptest.NewRecorder()
	r.sim.Handler().ServeHTTP(rec, httptest.NewRequest(method, path, &b))
	return rec.Code, rec.Body.String()
}

func gpuPod(name, node string, n int64) *corev1.Pod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("pod-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpu: q}, Requests: corev1.ResourceList{gpu: q}}}}}}
}

// TestSimulator_DevicePlugin: a KWOK node gets its profile's GPUs and
// labels, a real node is left alone; a pod's GPUs are recorded and freed;
// health and the profile label change allocatable and capacity live.
func TestSimulator_DevicePlugin(t *testing.T) {
	real := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real-1", UID: "real"}}
	r := startRig(t, kwokNode("kwok-0", nil), real)
	r.waitGPUs("kwok-0", gpu, 8, 8)
	r.eventually("GPU labels", func() (bool, string) {
		l := r.node("kwok-0").Labels
		return l[kube.LabelCount] == "8", l[kube.LabelCount]
	})
	if n := r.node("real-1"); len(n.Status.Capacity) != 0 || len(n.Labels) != 0 {
		t.Fatalf("real node touched: %v %v", n.Status.Capacity, n.Labels)
	}

	ctx := context.Background()
	if _, err := r.client.CoreV1().Pods("default").Create(ctx, gpuPod("train", "kwok-0", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("pod's allocation", func() (bool, string) {
		s := r.summary("kwok-0")
		return s.Allocated == 2 && s.Active == 1, strings.TrimSpace(stringOf(s))
	})
	code, body := r.call(http.MethodGet, "/v1/nodes/kwok-0/v1/snapshot", nil)
	if code != http.StatusOK || !strings.Contains(body, `"pod":"train"`) {
		t.Fatalf("snapshot: %d %s", code, body)
	}

	code, body = r.call(http.MethodPut, "/v1/nodes/kwok-0/v1/devices/fake-7/health", map[string]any{"healthy": false, "reason": "XID 79"})
	if code != http.StatusOK {
		t.Fatalf("health set: %d %s", code, body)
	}
	r.waitGPUs("kwok-0", gpu, 8, 7)

	if err := r.client.CoreV1().Pods("default").Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("allocation released", func() (bool, string) {
		s := r.summary("kwok-0")
		return s.Allocated == 0 && s.Free == 7 && s.Unhealthy == 1, stringOf(s)
	})

	n := r.node("kwok-0")
	n.Labels = map[string]string{kube.ConfigLabel: "four"}
	if _, err := r.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitGPUs("kwok-0", gpu, 4, 4)

	code, body = r.call(http.MethodGet, "/v1/nodes/nope/v1/snapshot", nil)
	if code != http.StatusNotFound || !strings.Contains(body, `node \"nope\" is not simulated (simulated: kwok-0)`) {
		t.Fatalf("unknown node: %d %s", code, body)
	}
	if err := r.client.CoreV1().Nodes().Delete(ctx, "kwok-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("node dropped", func() (bool, string) {
		nodes, _ := r.sim.Nodes()
		return len(nodes) == 0, stringOf(nodes)
	})
}

// TestSimulator_DRA: a node with a DRA profile gets its ResourceSlices,
// owned by the Node, and no extended resource; a claim allocated there
// is recorded, and unprepared when it goes.
func TestSimulator_DRA(t *testing.T) {
	r := startRig(t, kwokNode("kwok-1", map[string]string{kube.ConfigLabel: "dra"}))
	ctx := context.Background()
	r.eventually("ResourceSlices", func() (bool, string) {
		list, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false, "none"
		}
		devices := 0
		for _, s := range list.Items {
			if s.Spec.NodeName == nil || *s.Spec.NodeName != "kwok-1" || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" {
				return false, "slice " + s.Name + " not the node's"
			}
			devices += len(s.Spec.Devices)
		}
		return devices == 8, stringOf(devices) + " devices"
	})
	if _, ok := r.node("kwok-1").Status.Capacity[gpu]; ok {
		t.Fatal("a DRA node got the extended resource")
	}
	// A change that changes nothing published writes nothing; a slice
	// deleted by someone is written again.
	writes := r.sim.Stats().SliceWrites
	n := r.node("kwok-1")
	n.Labels["touch"] = "1"
	if _, err := r.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("the node's change seen", func() (bool, string) {
		return r.summary("kwok-1").Node != "" && r.node("kwok-1").Labels[kube.LabelCount] == "8", ""
	})
	if got := r.sim.Stats().SliceWrites; got != writes {
		t.Errorf("slice writes %d -> %d after a change that changes no slice", writes, got)
	}
	list, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("slices: %v %v", list, err)
	}
	if err := r.client.ResourceV1().ResourceSlices().Delete(ctx, list.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("the slice written again", func() (bool, string) {
		l, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 1 && r.sim.Stats().SliceWrites > writes, stringOf(r.sim.Stats())
	})
	if gen := list.Items[0].Spec.Pool.Generation; gen != 1 {
		t.Errorf("first generation %d, want 1", gen)
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "claim-1"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: driver, Pool: "kwok-1", Device: "fake-2"}}}}}}
	if _, err := r.client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("claim recorded", func() (bool, string) {
		s := r.summary("kwok-1")
		return s.Allocated == 1 && s.Active == 1, stringOf(s)
	})
	if err := r.client.ResourceV1().ResourceClaims("default").Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("claim unprepared", func() (bool, string) {
		s := r.summary("kwok-1")
		return s.Allocated == 0 && s.Active == 0, stringOf(s)
	})
}

func stringOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestSimulator_UnknownProfile: a label naming no profile gets the
// default, and is logged once for the node, however often the node
// changes.
func TestSimulator_UnknownProfile(t *testing.T) {
	r := startRig(t, kwokNode("kwok-2", map[string]string{kube.ConfigLabel: "nope"}))
	r.waitGPUs("kwok-2", gpu, 8, 8)
	ctx := context.Background()
	for i := range 3 {
		n := r.node("kwok-2")
		n.Labels["touch"] = stringOf(i)
		if _, err := r.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.eventually("the last change seen", func() (bool, string) {
		s := r.summary("kwok-2")
		return s.Profile == "eight" && r.node("kwok-2").Labels["touch"] == "2", stringOf(s)
	})
	// The fourth node change (the labels written back) has been
	// reconciled too once the GPU labels are back in place.
	r.eventually("GPU labels", func() (bool, string) {
		return r.node("kwok-2").Labels[kube.LabelCount] == "8", ""
	})
	if n := r.logs.Count("no profile nope"); n != 1 {
		t.Fatalf("the unknown profile logged %d times, want once:\n%s", n, r.logs.String())
	}
}

// TestSimulator_NotSelected: a node that leaves the selector gets back
// what was published on it.
func TestSimulator_NotSelected(t *testing.T) {
	r := startRig(t, kwokNode("kwok-3", nil))
	r.waitGPUs("kwok-3", gpu, 8, 8)
	n := r.node("kwok-3")
	delete(n.Annotations, "kwok.x-k8s.io/node")
	if _, err := r.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.eventually("resources and labels removed", func() (bool, string) {
		n := r.node("kwok-3")
		_, has := n.Status.Capacity[gpu]
		_, cpu := n.Status.Capacity[corev1.ResourceCPU]
		return !has && cpu && n.Labels[kube.LabelCount] == "", stringOf(n.Status.Capacity)
	})
}

// TestSimulator_FaultsAndMIG: a profile's fault plan runs on each of its
// nodes (allocatable drops); the mixed MIG strategy publishes the MIG
// resources, and no whole-GPU resource while every GPU is partitioned.
func TestSimulator_FaultsAndMIG(t *testing.T) {
	r := startRig(t, kwokNode("kwok-4", map[string]string{kube.ConfigLabel: "faulty"}),
		kwokNode("kwok-5", map[string]string{kube.ConfigLabel: "mig"}))
	r.waitGPUs("kwok-4", gpu, 4, 3)
	mig := "unicore.mcyou.cc/mig-1g.10gb"
	r.waitGPUs("kwok-5", mig, 56, 56)
	if _, ok := r.node("kwok-5").Status.Capacity[gpu]; ok {
		t.Errorf("a node with every GPU partitioned reports %s", gpu)
	}
	if s := r.summary("kwok-4"); s.Unhealthy != 1 {
		t.Errorf("the fault plan's device: %s", stringOf(s))
	}
}

// TestSimulator_KubeletAPISwitch: a profile label that moves a node from
// the device plugin to DRA takes back its extended resource and publishes
// its slices; moving back deletes them.
func TestSimulator_KubeletAPISwitch(t *testing.T) {
	r := startRig(t, kwokNode("kwok-6", nil))
	r.waitGPUs("kwok-6", gpu, 8, 8)
	ctx := context.Background()
	relabel := func(profile string) {
		n := r.node("kwok-6")
		n.Labels[kube.ConfigLabel] = profile
		if _, err := r.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	slices := func() int {
		l, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	relabel("dra")
	r.eventually("DRA", func() (bool, string) {
		_, has := r.node("kwok-6").Status.Capacity[gpu]
		return !has && slices() == 1 && r.summary("kwok-6").KubeletAPI == "dra", stringOf(r.summary("kwok-6"))
	})
	relabel("eight")
	r.eventually("device plugin again", func() (bool, string) {
		c := r.node("kwok-6").Status.Capacity[gpu]
		return c.Value() == 8 && slices() == 0, stringOf(r.summary("kwok-6"))
	})
}
