package e2e_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/chart"
	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// metricsPort is the port the DaemonSet's -metrics-address and probes use (9400 is the GPU
// telemetry's, dcgm-exporter's port).
const metricsPort = 9401

// TestDaemonSetPod: the plugin runs as a container from the pod template of the DaemonSet of
// deploy/base as kustomize builds it, unchanged (args, env, service account, hostPaths, probes,
// security context: root, all capabilities dropped, read-only root filesystem), in an image built
// from bin/virtual-gpu-device-plugin the way the Dockerfile lays it out. The base's ServiceAccount
// and RBAC are applied first (the ServiceAccount admission plugin refuses a pod whose service account
// does not exist), and the pod gets that account's token. Its readiness probe turns it Ready, the
// Node shows 4 devices, the demo pod gets its devices from it, and after its container is killed the
// kubelet starts a new one that keeps the state file (history and the running pod's record), as does
// a plugin pod deleted and gone (dump reads the file on the host side of the hostPath).
//
// Differences from a DaemonSet on a real node: the test creates the template's pod itself, bound to the
// first node with spec.nodeName (the cluster has a DaemonSet controller and a scheduler, but this test
// is about the pod template on one node; TestHelmDaemonSet runs a real DaemonSet); there is no CNI, so
// the pod uses hostNetwork (the probes reach :9401 on the node's address); the hostPaths resolve in the
// node's kubelet's and containerd's mount namespace, where /var/lib/kubelet/device-plugins,
// /var/lib/kubelet/pod-resources and /var/lib/virtual-gpu are bind mounts of the node's temp dirs.
func TestDaemonSetPod(t *testing.T) {
	c := needCluster(t)
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	repo := filepath.Dir(moduleDir)
	objs, err := chart.Kustomize(filepath.Join(repo, "deploy", "base"))
	if err != nil {
		t.Fatal(err)
	}
	var ds *appsv1.DaemonSet
	var others []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			ds = typedDaemonSet(t, o)
			continue
		}
		others = append(others, o)
	}
	if ds == nil {
		t.Fatal("deploy/base has no DaemonSet")
	}
	// The service account and its RBAC, before the pod that uses them; deleted after it.
	applyObjects(t, c, others)
	tmpl := ds.Spec.Template
	if len(tmpl.Spec.Containers) != 1 {
		t.Fatalf("daemonset: %d containers, want 1", len(tmpl.Spec.Containers))
	}
	ctrName := tmpl.Spec.Containers[0].Name

	// The image, as the Dockerfile builds it: the static binary at its path, the same entrypoint.
	entrypoint := dockerfileEntrypoint(t, filepath.Join(repo, "Dockerfile"))
	image := tmpl.Spec.Containers[0].Image
	start := time.Now()
	if err := c.ImportBinaryImage(normalizeImage(image), pluginBin, entrypoint[0], entrypoint); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: image %s (%s at %s) built and imported: %s", image, filepath.Base(pluginBin), entrypoint[0], time.Since(start).Round(time.Millisecond))

	// hostNetwork: the metrics port is the node's. Keep the template's 9400 when it is free, else move
	// the port consistently (the flag and the containerPort; the probes name the port).
	if l, err := net.Listen("tcp", fmt.Sprintf(":%d", metricsPort)); err == nil {
		l.Close()
	} else {
		port, err := cluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("port %d is taken on this host (%v): using %d for the metrics address, the containerPort and the probes", metricsPort, err, port)
		movePort(t, &tmpl.Spec, metricsPort, port)
	}

	// The template's nodeSelector opts nodes in by label.
	labelNode(t, c.Node, tmpl.Spec.NodeSelector)
	spec := *tmpl.Spec.DeepCopy()
	spec.HostNetwork = true // no CNI in this cluster
	pluginPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-e2e", Namespace: ds.Namespace, Labels: tmpl.Labels, Annotations: tmpl.Annotations},
		Spec:       spec,
	}
	created := createPluginPod(t, c, pluginPod)
	start = time.Now()
	ready, err := c.WaitPod(t.Context(), 90*time.Second, created.Namespace, created.Name, podRunningReady)
	if err != nil {
		t.Fatalf("plugin pod not ready: %v", err)
	}
	t.Logf("timing: plugin pod create -> Ready (readiness probe /readyz): %s", time.Since(start).Round(time.Millisecond))
	if ready.Spec.ServiceAccountName != tmpl.Spec.ServiceAccountName || !hasServiceAccountToken(ready) {
		t.Errorf("plugin pod runs as service account %q, token volume %v: want the base's %q with its token",
			ready.Spec.ServiceAccountName, hasServiceAccountToken(ready), tmpl.Spec.ServiceAccountName)
	}
	if _, err := c.WaitNodeResource(t.Context(), 30*time.Second, cluster.ResourceName, 4, 4); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: plugin pod create -> node allocatable 4: %s", time.Since(start).Round(time.Millisecond))
	// The read-only pod-resources hostPath reaches the kubelet's PodResources API.
	if _, err := c.WaitPodLog(t.Context(), 15*time.Second, created.Namespace, created.Name, ctrName, "lifecycle tracking is on"); err != nil {
		t.Errorf("containerized plugin: lifecycle tracking did not start: %v", err)
	}

	demo := runPod(t, c, demoPod(t))
	ids := podDevices(t, c, demo, 2)
	statePath := filepath.Join(c.VirtualGPUDir, "state.db")
	adminSocket := filepath.Join(c.VirtualGPUDir, "admin.sock")
	dump := func() *cluster.DumpDoc {
		t.Helper()
		d, err := cluster.DumpState(t.Context(), pluginBin, "-state="+statePath, "-admin-socket="+adminSocket)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := dump()
	if d.Source.Type != "plugin" {
		t.Errorf("dump through the hostPath's admin socket: source %+v, want the running plugin", d.Source)
	}
	rec := findAllocation(d, ids)
	if rec == nil {
		t.Fatalf("the containerized plugin has no record of the demo pod's %v: %+v", ids, d.Allocations)
	}

	// Kill the plugin's container: the kubelet starts a new one (restartPolicy Always) on the same state.
	oldID := cluster.ContainerID(ready, ctrName)
	killed := time.Now()
	if err := c.KillContainer(t.Context(), oldID); err != nil {
		t.Fatal(err)
	}
	restarted, err := c.WaitPod(t.Context(), 90*time.Second, created.Namespace, created.Name, func(p *corev1.Pod) (bool, error) {
		id := cluster.ContainerID(p, ctrName)
		ok, _ := podRunningReady(p)
		return ok && id != "" && id != oldID, nil
	})
	if err != nil {
		t.Fatalf("no new plugin container after the kill: %v", err)
	}
	t.Logf("timing: plugin container SIGKILL -> new container Ready: %s (restarts %d)", time.Since(killed).Round(time.Millisecond), restarted.Status.ContainerStatuses[0].RestartCount)
	if reg, err := c.WaitKubeletLog(t.Context(), 30*time.Second, kubeletGotRegister, killed); err != nil {
		t.Errorf("the new plugin container did not register: %v", err)
	} else {
		t.Logf("timing: plugin container SIGKILL -> kubelet got Register: %s", reg.Time.Sub(killed).Round(time.Millisecond))
	}
	if _, err := c.WaitNodeResource(t.Context(), 30*time.Second, cluster.ResourceName, 4, 4); err != nil {
		t.Fatal(err)
	}
	checkStillRunning(t, c, demo, ids)
	d = dump()
	if a := d.Allocation(rec.Seq); a == nil || !slices.Equal(a.SortedIDs(), ids) {
		t.Errorf("after the container restart record %d is %+v, want the demo pod's %v", rec.Seq, a, ids)
	}
	after := runPod(t, c, gpuPod("after-plugin-container-kill", 2))
	afterIDs := podDevices(t, c, after, 2)
	if !disjoint(ids, afterIDs) {
		t.Errorf("new pod got %v, overlapping the demo pod's %v", afterIDs, ids)
	}

	// Delete the plugin pod: the state file stays on the node.
	if err := c.DeletePod(t.Context(), 60*time.Second, created.Namespace, created.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitNodeAllocatable(t.Context(), 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	d = dump()
	if d.Source.Type != "file" {
		t.Errorf("dump with no plugin running: source %+v, want the state file", d.Source)
	}
	for _, want := range [][]string{ids, afterIDs} {
		if findAllocation(d, want) == nil {
			t.Errorf("state file %s has no record of %v after the plugin pod is gone: %+v", statePath, want, d.Allocations)
		}
	}
}

// createPluginPod creates the plugin pod and, at cleanup, deletes it and waits until the kubelet has
// noticed the plugin is gone (allocatable 0), so the next test starts clean.
func createPluginPod(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.CreatePod(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.DeletePod(ctx, 60*time.Second, created.Namespace, created.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if _, err := c.WaitNodeAllocatable(ctx, 30*time.Second, 0); err != nil {
			t.Errorf("cleanup: after the plugin pod is gone: %v", err)
		}
	})
	return created
}

func podRunningReady(p *corev1.Pod) (bool, error) {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false, fmt.Errorf("%w: phase %s %s", cluster.ErrPodPhase, p.Status.Phase, p.Status.Message)
	}
	return p.Status.Phase == corev1.PodRunning && cluster.PodReady(p), nil
}

// typedDaemonSet decodes a rendered DaemonSet strictly.
func typedDaemonSet(t *testing.T, o *unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	b, err := json.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatalf("decode DaemonSet %s: %v", o.GetName(), err)
	}
	return &ds
}

// dockerfileEntrypoint returns the exec-form ENTRYPOINT of the final stage of a Dockerfile.
func dockerfileEntrypoint(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ENTRYPOINT\s+(\[.*\])\s*$`).FindAllSubmatch(b, -1)
	if len(m) == 0 {
		t.Fatalf("%s: no exec-form ENTRYPOINT", path)
	}
	var ep []string
	if err := json.Unmarshal(m[len(m)-1][1], &ep); err != nil || len(ep) == 0 || !filepath.IsAbs(ep[0]) {
		t.Fatalf("%s: ENTRYPOINT %s: want a JSON list starting with an absolute path (%v)", path, m[len(m)-1][1], err)
	}
	return ep
}

// normalizeImage returns the fully qualified reference the CRI looks images up by
// ("unicore/x:dev" is "docker.io/unicore/x:dev").
func normalizeImage(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + ref
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return ref
	default:
		return "docker.io/" + ref
	}
}

// movePort replaces port from with to in the containers' args, containerPorts and numeric probe ports.
func movePort(t *testing.T, spec *corev1.PodSpec, from, to int) {
	t.Helper()
	for i := range spec.Containers {
		ctr := &spec.Containers[i]
		for j, a := range ctr.Args {
			ctr.Args[j] = strings.ReplaceAll(a, ":"+strconv.Itoa(from), ":"+strconv.Itoa(to))
		}
		for j := range ctr.Ports {
			if ctr.Ports[j].ContainerPort == int32(from) {
				ctr.Ports[j].ContainerPort = int32(to)
			}
		}
		for _, p := range []*corev1.Probe{ctr.LivenessProbe, ctr.ReadinessProbe, ctr.StartupProbe} {
			if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.Type == intstr.Int && p.HTTPGet.Port.IntValue() == from {
				p.HTTPGet.Port = intstr.FromInt32(int32(to))
			}
		}
	}
}

// TestHelmDaemonSet: the plugin as `helm install` deploys it. The chart is rendered with Helm's Go
// API (e2e/chart) with profiles, those of the chart's ci/profiles-values.yaml: dgx-a100 (8 GPUs,
// the default profile), workstation and shared-a100, and the metrics Service; every rendered object
// is applied to the API server (ServiceAccount, ClusterRole and binding, the profiles' ConfigMap, the
// Service, the DaemonSet). The first node alone gets the DaemonSet's opt-in label, so the DaemonSet
// controller runs one pod, there; the scheduler and the kubelet do the rest: the pod mounts the
// profiles' ConfigMap as a directory and its service account's token, turns Ready through its
// readiness probe, starts with the default profile, and the Node shows the profile's 8 devices; a
// 4-GPU pod is served. Then everything is deleted: the pods go, the devices leave the Node's
// allocatable, and no object of the release is left.
//
// Differences from a cluster with a network: no CNI, so the DaemonSet's pod template gets hostNetwork
// (the one change to the rendered objects); the metrics port is 9401 unless taken on this host,
// then a free one (metrics.port); the image is the plugin binary in an image laid out as the
// Dockerfile does, imported into the nodes (imagePullPolicy IfNotPresent, as rendered).
func TestHelmDaemonSet(t *testing.T) {
	c := needCluster(t)
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	repo := filepath.Dir(moduleDir)
	values, err := chart.ReadValues(filepath.Join(chart.Dir(repo), "ci", "profiles-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const defaultProfile, defaultGPUs = "dgx-a100", 8
	if values["defaultProfile"] != defaultProfile {
		t.Fatalf("ci/profiles-values.yaml: defaultProfile %v, want %s", values["defaultProfile"], defaultProfile)
	}
	port := metricsPort
	if l, err := net.Listen("tcp", fmt.Sprintf(":%d", port)); err == nil {
		l.Close()
	} else if port, err = cluster.FreePort(); err != nil {
		t.Fatal(err)
	}
	values["metrics"] = map[string]any{"port": port, "service": map[string]any{"enabled": true}}

	start := time.Now()
	manifests, err := chart.Template(chart.Dir(repo), values, chart.ReleaseName, chart.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := chart.Objects(manifests)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: chart rendered (%d objects): %s", len(objs), time.Since(start).Round(time.Millisecond))
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		if err := unstructured.SetNestedField(o.Object, true, "spec", "template", "spec", "hostNetwork"); err != nil {
			t.Fatal(err)
		}
		ds = typedDaemonSet(t, o)
	}
	if ds == nil {
		t.Fatal("the chart renders no DaemonSet")
	}
	tmpl := ds.Spec.Template

	entrypoint := dockerfileEntrypoint(t, filepath.Join(repo, "Dockerfile"))
	if err := c.ImportBinaryImage(normalizeImage(tmpl.Spec.Containers[0].Image), pluginBin, entrypoint[0], entrypoint); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	deleteAll := applyObjects(t, c, objs)
	t.Logf("timing: %d objects applied: %s", len(objs), time.Since(start).Round(time.Millisecond))
	// The opt-in label on the first node only: hostNetwork pods on two nodes of this one-host cluster
	// would both bind the metrics port.
	labelNode(t, c.Node, tmpl.Spec.NodeSelector)
	pods, err := c.WaitDaemonSetReady(t.Context(), 2*time.Minute, ds.Namespace, ds.Name, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: applied -> DaemonSet pod Ready (readiness probe /readyz): %s", time.Since(start).Round(time.Millisecond))
	pod := pods[0]
	if pod.Spec.NodeName != c.Name {
		t.Fatalf("DaemonSet pod on %s, want the labelled node %s", pod.Spec.NodeName, c.Name)
	}
	if !hasServiceAccountToken(&pod) || pod.Spec.ServiceAccountName != tmpl.Spec.ServiceAccountName {
		t.Errorf("pod %s: service account %q, token volume %v; want %q with its token (the plugin uses the API)",
			pod.Name, pod.Spec.ServiceAccountName, hasServiceAccountToken(&pod), tmpl.Spec.ServiceAccountName)
	}
	ctr := tmpl.Spec.Containers[0].Name
	if _, err := c.WaitPodLog(t.Context(), 15*time.Second, pod.Namespace, pod.Name, ctr, `"profile":"`+defaultProfile+`"`); err != nil {
		t.Errorf("the plugin did not start with the default profile %s: %v", defaultProfile, err)
	}
	if _, err := c.WaitNodeResource(t.Context(), 30*time.Second, cluster.ResourceName, defaultGPUs, defaultGPUs); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: applied -> node allocatable %d (profile %s): %s", defaultGPUs, defaultProfile, time.Since(start).Round(time.Millisecond))

	four := runPod(t, c, gpuPod("helm-4gpu", 4))
	podDevices(t, c, four, 4)
	if err := c.DeletePod(t.Context(), 40*time.Second, four.Namespace, four.Name); err != nil {
		t.Fatal(err)
	}

	// The pod reads its Node through the chart's service account and RBAC:
	// a profile label applies that profile live, and the plugin keeps the
	// GPU labels on its Node (patch rule).
	const profileLabel = "unicore.mcyou.cc/device-plugin.config"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.SetNodeLabel(ctx, profileLabel, "")
	})
	for _, step := range []struct {
		profile  string
		gpus     int64
		replicas string
	}{
		{"workstation", 2, "1"},
		{"shared-a100", 32, "4"},
		{"", defaultGPUs, "1"}, // label removed: the default profile again
	} {
		start = time.Now()
		if err := c.SetNodeLabel(t.Context(), profileLabel, step.profile); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitNodeResource(t.Context(), 30*time.Second, cluster.ResourceName, step.gpus, step.gpus); err != nil {
			t.Fatalf("profile label %q: %v", step.profile, err)
		}
		t.Logf("timing: profile label %q -> node allocatable %d: %s", step.profile, step.gpus, time.Since(start).Round(time.Millisecond))
		err := cluster.Poll(t.Context(), 10*time.Second, 100*time.Millisecond, func() (bool, string, error) {
			node, err := c.Get(t.Context())
			if err != nil {
				return false, "", err
			}
			l := node.Labels
			return l["unicore.mcyou.cc/gpu.replicas"] == step.replicas && l["unicore.mcyou.cc/gpu.profile"] == cmp.Or(step.profile, defaultProfile) &&
				l["unicore.mcyou.cc/gpu.product"] != "", fmt.Sprintf("labels %v", l), nil
		})
		if err != nil {
			t.Errorf("profile label %q: the plugin's GPU labels on the Node: %v", step.profile, err)
		}
	}

	start = time.Now()
	if err := deleteAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: release deleted (DaemonSet pods gone, every object gone): %s", time.Since(start).Round(time.Millisecond))
	if _, err := c.WaitNodeAllocatable(t.Context(), 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: release deleted -> node allocatable 0: %s", time.Since(start).Round(time.Millisecond))
}

// applyObjects applies objs to the API server in their order (server-side apply, as `kubectl apply
// --server-side` does) and returns a function that deletes them in the reverse order and waits until
// they are gone: a DaemonSet's pods first (DeleteDaemonSet), then each object. The test's cleanup
// calls it too, with a fresh context; it deletes what is left and is safe to call twice.
func applyObjects(t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured) func(context.Context) error {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	type applied struct {
		obj *unstructured.Unstructured
		ri  dynamic.ResourceInterface
	}
	var done []applied
	deleteAll := func(ctx context.Context) error {
		var errs []error
		for i := len(done) - 1; i >= 0; i-- {
			o, ri := done[i].obj, done[i].ri
			what := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
			if o.GetKind() == "DaemonSet" {
				if err := c.DeleteDaemonSet(ctx, time.Minute, o.GetNamespace(), o.GetName()); err != nil {
					errs = append(errs, err)
				}
			}
			background := metav1.DeletePropagationBackground
			if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &background}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete %s: %w", what, err))
				continue
			}
			err := cluster.Poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, string, error) {
				_, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return true, "", nil
				}
				return false, fmt.Sprintf("%s still there (%v)", what, err), nil
			})
			if err != nil {
				errs = append(errs, err)
			}
		}
		done = nil
		return errors.Join(errs...)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := deleteAll(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Apply(t.Context(), o.GetName(), o, metav1.ApplyOptions{FieldManager: "vgpu-e2e", Force: true}); err != nil {
			t.Fatalf("apply %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		done = append(done, applied{o, ri})
	}
	return deleteAll
}

// labelNode sets labels on node until the test ends.
func labelNode(t *testing.T, node *cluster.Node, labels map[string]string) {
	t.Helper()
	for k, v := range labels {
		if err := node.SetNodeLabel(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := node.SetNodeLabel(ctx, k, ""); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
}
