package e2e_test

import (
	"context"
	"encoding/json"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// metricsPort is the port the DaemonSet's -metrics-address and probes use.
const metricsPort = 9400

// TestDaemonSetPod (issue 8): the plugin runs as a container from the pod template of
// deploy/base/daemonset.yaml, unchanged (args, env, hostPaths, probes, security context: root, all
// capabilities dropped, read-only root filesystem), in an image built from bin/virtual-gpu-device-plugin
// the way the Dockerfile lays it out. Its readiness probe turns it Ready, the Node shows 4 devices, the
// demo pod gets its devices from it, and after its container is killed the kubelet starts a new one
// that keeps the state file (history and the running pod's record), as does a plugin pod deleted and
// gone (dump reads the file on the host side of the hostPath).
//
// Differences from a DaemonSet on a real node: the test creates the template's pod itself, bound to the
// first node with spec.nodeName (the cluster has a DaemonSet controller and a scheduler, but this test
// is about the pod template on one node; TestInClusterAPI runs a real DaemonSet); there is no CNI, so
// the pod uses hostNetwork (the probes reach :9400 on the node's address); the hostPaths resolve in the
// node's kubelet's and containerd's mount namespace, where /var/lib/kubelet/device-plugins,
// /var/lib/kubelet/pod-resources and /var/lib/virtual-gpu are bind mounts of the node's temp dirs.
func TestDaemonSetPod(t *testing.T) {
	c := needCluster(t)
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	repo := filepath.Dir(moduleDir)
	ds := loadDaemonSet(t, filepath.Join(repo, "deploy", "base", "daemonset.yaml"))
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
	for k, v := range tmpl.Spec.NodeSelector {
		if err := c.SetNodeLabel(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.SetNodeLabel(ctx, k, ""); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
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

func loadDaemonSet(t *testing.T, path string) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatalf("decode %s: %v", path, err)
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
