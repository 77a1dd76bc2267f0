package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// The names the simulated nodes are published under: the plugin's defaults.
const (
	gpuResource   = "unicore.mcyou.cc/gpu"
	draDriver     = "gpu.unicore.mcyou.cc"
	profileLabel  = "unicore.mcyou.cc/device-plugin.config"
	nvlinkDomain  = draDriver + "/nvlinkDomain"
	scaleNodesEnv = "VGPU_SIM_NODES"
)

// simProfiles are the profiles of the run: 8 generic GPUs under the device plugin (the default),
// a DGX A100 under DRA.
var simProfiles = map[string]string{
	"gpu8":    "version: v1\nflags:\n  devices: 8\n",
	"dgx-dra": "version: v1\nflags:\n  topology: dgx-a100\n  kubeletAPI: dra\n",
}

// simulatorDeployment is the simulator's Deployment as kustomize ships it.
const simulatorDeployment = "../../deploy/components/simulate/deployment.yaml"

// simEnv is the simulator's environment as its Deployment sets it (deploy/components/simulate): the
// container's values, and a limit read from its resources (GOMEMLIMIT from limits.memory), so that the
// figures are the shipped process's. $VGPU_SIM_GOMEMLIMIT and $VGPU_SIM_GOGC replace those two, to
// measure other settings.
func simEnv(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(simulatorDeployment)
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		t.Fatalf("%s: %v", simulatorDeployment, err)
	}
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%s: %d containers, want 1", simulatorDeployment, n)
	}
	c := d.Spec.Template.Spec.Containers[0]
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			ref := e.ValueFrom.ResourceFieldRef
			if ref == nil || ref.Resource != "limits.memory" || c.Resources.Limits.Memory().IsZero() {
				t.Fatalf("%s: env %s: only a resourceFieldRef of a set limits.memory is read here", simulatorDeployment, e.Name)
			}
			v = strconv.FormatInt(c.Resources.Limits.Memory().Value(), 10)
		}
		if o := os.Getenv("VGPU_SIM_" + e.Name); o != "" && (e.Name == "GOMEMLIMIT" || e.Name == "GOGC") {
			v = o
		}
		env = append(env, e.Name+"="+v)
	}
	t.Logf("simulator environment (%s): %s", simulatorDeployment, strings.Join(env, " "))
	return env
}

func needPlugin(t *testing.T) string {
	t.Helper()
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	return pluginBin
}

// scaleNodes is the number of simulated nodes: $VGPU_SIM_NODES (make scale: 1000), default 20;
// half are device-plugin nodes, half DRA.
func scaleNodes(t *testing.T) int {
	t.Helper()
	v := os.Getenv(scaleNodesEnv)
	if v == "" {
		return 20
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 4 || n%2 != 0 {
		t.Fatalf("%s=%q: want an even number of at least 4", scaleNodesEnv, v)
	}
	return n
}

// fastClient is a client of the cluster with a rate limit for thousands of pods.
func fastClient(t *testing.T, c *cluster.Cluster) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// parallel calls fn(i) for i in [0,n) with 32 goroutines; the first error fails the test.
func parallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range min(32, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
}

// deletePods deletes the n pods named <prefix>-<i> and waits until they and the claims made for
// them are gone: their devices are free again.
func deletePods(t *testing.T, cs kubernetes.Interface, ns, prefix string, n int) {
	t.Helper()
	ctx := t.Context()
	parallel(t, n, func(i int) error {
		err := cs.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("%s-%d", prefix, i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	// mine counts the names of pods or claims made for them (<pod>-<claim>-<suffix>).
	mine := func(names []string) int {
		return len(slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, prefix+"-") }))
	}
	if err := cluster.Poll(ctx, 5*time.Minute, 500*time.Millisecond, func() (bool, string, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		claims, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var podNames, claimNames []string
		for _, p := range pods.Items {
			podNames = append(podNames, p.Name)
		}
		for _, c := range claims.Items {
			claimNames = append(claimNames, c.Name)
		}
		left, held := mine(podNames), mine(claimNames)
		return left == 0 && held == 0, fmt.Sprintf("%d %s pods, %d of their claims left", left, prefix, held), nil
	}); err != nil {
		t.Fatalf("deleting the %s pods: %v", prefix, err)
	}
}

// metric returns the value of an unlabelled sample of the simulator's /metrics.
func metric(t *testing.T, s *cluster.Simulator, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := fmt.Fprint(&b, ""); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no sample %s in /metrics", name)
	return 0
}

// procStats returns the process's resident memory (bytes) and CPU time used so far.
func procStats(t *testing.T, pid int) (rss, rssFile int64, cpu time.Duration) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			rss = kb << 10
		}
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			rssFile = kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat)[strings.LastIndexByte(string(stat), ')')+2:])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return rss, rssFile, time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
}

type nodeSummary struct {
	Node       string `json:"node"`
	Profile    string `json:"profile"`
	KubeletAPI string `json:"kubeletAPI"`
	Devices    int    `json:"devices"`
	Allocated  int    `json:"allocated"`
	Free       int    `json:"free"`
	Unhealthy  int    `json:"unhealthy"`
}

// TestSimulate_Cluster is the scale test, small in make test (20 nodes) and at 1,000 nodes in make
// scale: half the nodes are 8-GPU device-plugin nodes, half DGX A100s under DRA, all KWOK's, given
// their GPUs by one simulate process. It checks every node's capacity or slices against its
// profile, fills the device-plugin half with one-GPU pods, schedules as many one-GPU claims onto
// the DRA half as it has nodes (the like-for-like throughput) and deletes them, fills the DRA half
// with 8-GPU claims that must share an NVLink domain, then asks for more than is left: the extra
// pods stay Pending with the scheduler's reason. No device is allocated twice, every claim's devices
// meet its constraint, and the simulator's history adds up. It runs the simulator with the
// Deployment's environment (simEnv) and logs the figures: publish time, scheduling throughput, RSS
// and CPU, API requests at rest, health-change latency.
func TestSimulate_Cluster(t *testing.T) {
	c := needCluster(t)
	bin := needPlugin(t)
	ctx := t.Context()
	cs := fastClient(t, c)
	total := scaleNodes(t)
	half := total / 2

	profiles := t.TempDir()
	for name, body := range simProfiles {
		if err := os.WriteFile(filepath.Join(profiles, name+".yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ns := fmt.Sprintf("sim-%d", total)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	// The nodes first, then the simulator: the time to publish them all is its start's.
	nodes := make([]cluster.KWOKNode, 0, total)
	dpNodes, draNodes := make([]string, half), make([]string, half)
	for i := range half {
		dpNodes[i], draNodes[i] = fmt.Sprintf("dp-%d", i), fmt.Sprintf("dra-%d", i)
		dpLabels := map[string]string{profileLabel: "gpu8"}
		if i == 0 {
			dpLabels[profileLabel] = "no-such-profile" // the default applies: gpu8
		}
		nodes = append(nodes, cluster.KWOKNode{Name: dpNodes[i], Labels: dpLabels},
			cluster.KWOKNode{Name: draNodes[i], Labels: map[string]string{profileLabel: "dgx-dra"}})
	}
	names := append(append([]string(nil), dpNodes...), draNodes...)
	t0 := time.Now()
	if err := c.AddKWOKNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = c.DeleteKWOKNodes(ctx, time.Minute, names)
	})
	if err := c.WaitKWOKNodesReady(ctx, 5*time.Minute, names); err != nil {
		t.Fatal(err)
	}
	t.Logf("figure: %d KWOK nodes created and Ready in %s", total, time.Since(t0).Round(time.Millisecond))

	class := cluster.NewDeviceClass("sim-gpu", draDriver)
	if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	big := cluster.NewResourceClaimTemplate(ns, "gpu8", class.Name, 8)
	big.Spec.Spec.Devices.Constraints = []resourcev1.DeviceConstraint{{MatchAttribute: ptr(resourcev1.FullyQualifiedName(nvlinkDomain))}}
	small := cluster.NewResourceClaimTemplate(ns, "gpu1", class.Name, 1)
	for _, tpl := range []*resourcev1.ResourceClaimTemplate{big, small} {
		if _, err := cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t0 = time.Now()
	sim, err := c.StartSimulator(ctx, cluster.SimulatorOptions{Binary: bin,
		Args: []string{"-config=" + profiles, "-config-default=gpu8", "-log-level=info"}, Env: simEnv(t)})
	if err != nil {
		t.Fatal(err)
	}
	waitPublished(t, cs, dpNodes, draNodes, time.Minute+time.Duration(total)*200*time.Millisecond)
	published := time.Since(t0)
	t.Logf("figure: simulate start -> capacity of %d device-plugin nodes and slices of %d DRA nodes published: %s", half, half, published.Round(time.Millisecond))
	lines, err := sim.LogLines()
	if err != nil {
		t.Fatal(err)
	}
	unknown := 0
	for _, l := range lines {
		if l["node"] == "dp-0" && strings.Contains(fmt.Sprint(l["error"]), "no-such-profile") {
			unknown++
		}
	}
	if unknown != 1 {
		t.Errorf("the unknown profile of dp-0 logged %d times, want once", unknown)
	}

	// The device-plugin half: one-GPU pods fill it; one more stays Pending.
	dpPods := half * 8
	dpRate := schedule(t, cs, ns, "dp", dpPods, func(pod *corev1.Pod) {
		q := *resource.NewQuantity(1, resource.DecimalSI)
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{gpuResource: q}, Requests: corev1.ResourceList{gpuResource: q}}
	}, 1, "Insufficient "+gpuResource)
	// The DRA half, like for like first: one-GPU claims, one per DRA node, against the extended
	// resource's one-GPU pods; then they go, and the half is empty again.
	oneRate := schedule(t, cs, ns, "one", half, claimPod("gpu1"), 0, "")
	deletePods(t, cs, ns, "one", half)
	// 8-GPU claims fill it; one-GPU claims (four per node, as many as the cluster has GPUs again)
	// stay Pending.
	draRate := schedule(t, cs, ns, "big", half, claimPod("gpu8"), 0, "")
	schedule(t, cs, ns, "small", 0, claimPod("gpu1"), total*2, "cannot allocate all claims")
	t.Logf("figure: scheduling throughput, one GPU a pod: extended resource %.1f pods/s, DRA %.1f pods/s: DRA/extended = %.2f; "+
		"DRA with 8-GPU claims under matchAttribute: %.1f pods/s (%.0f GPUs/s)", dpRate, oneRate, oneRate/dpRate, draRate, draRate*8)

	checkClaims(t, cs, ns, half)
	checkHistory(t, sim, ctx, total, dpPods+half*8)

	// The API server restarted mid-run: the simulator resumes with no slice written twice and no
	// history lost, and follows what changes after.
	t0 = time.Now()
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("figure: kube-apiserver restarted in %s", time.Since(t0).Round(time.Millisecond))
	for i := range 8 {
		if err := cs.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("dp-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The pod left Pending takes one of the GPUs freed.
	extra := fmt.Sprintf("dp-%d", dpPods)
	if err := cluster.Poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, extra, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", "not bound", err
	}); err != nil {
		t.Fatalf("pod %s after 8 GPUs were freed: %v", extra, err)
	}
	checkHistory(t, sim, ctx, total, dpPods-8+1+half*8)
	for _, n := range draNodes {
		if got, err := slicesOf(ctx, cs, n); err != nil || got != 8 {
			t.Errorf("node %s after the API server's restart: %d devices in its slices (%v), want 8", n, got, err)
		}
	}

	// Health on a simulated node: allocatable drops, or the device gets its taint.
	t0 = time.Now()
	if out, err := sim.CLI(ctx, "health", "set", "--node", dpNodes[1], "fake-3", "unhealthy", "--reason", "XID 79"); err != nil {
		t.Fatalf("health set: %v\n%s", err, out)
	}
	waitAllocatable(t, cs, dpNodes[1], 7)
	t.Logf("figure: health set -> allocatable 8 -> 7 on %s: %s", dpNodes[1], time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	if out, err := sim.CLI(ctx, "health", "set", "--node", draNodes[1], "fake-3", "unhealthy", "--reason", "XID 79"); err != nil {
		t.Fatalf("health set: %v\n%s", err, out)
	}
	waitTaint(t, cs, draNodes[1], "fake-3")
	t.Logf("figure: health set -> device taint in the slice of %s: %s", draNodes[1], time.Since(t0).Round(time.Millisecond))

	// At rest: no writes, and no requests but the watches' renewals.
	rest := 10 * time.Second
	if total >= 200 {
		rest = time.Minute
	}
	before, patches := metric(t, sim, "virtual_gpu_simulate_api_requests_total"), metric(t, sim, "virtual_gpu_simulate_status_patches_total")
	sliceWrites := metric(t, sim, "virtual_gpu_simulate_slice_writes_total")
	time.Sleep(rest) // a measurement window, not a wait for a condition
	after, patches2 := metric(t, sim, "virtual_gpu_simulate_api_requests_total"), metric(t, sim, "virtual_gpu_simulate_status_patches_total")
	perNodeMin := (after - before) / float64(total) / rest.Minutes()
	t.Logf("figure: at rest for %s: %.0f API requests (%.4f per node per minute), %.0f status patches", rest, after-before, perNodeMin, patches2-patches)
	if patches2 != patches {
		t.Errorf("status patches at rest: %v -> %v, want none", patches, patches2)
	}
	if w := metric(t, sim, "virtual_gpu_simulate_slice_writes_total"); w != sliceWrites {
		t.Errorf("slice writes at rest: %v -> %v, want none", sliceWrites, w)
	}
	t.Logf("figure: writes: %.0f status patches, %.0f ResourceSlice writes in all (%d nodes)", patches2, sliceWrites, total)
	rss, rssFile, cpu := procStats(t, sim.PID())
	heap := metric(t, sim, "go_memstats_heap_inuse_bytes")
	t.Logf("figure: simulate at %d nodes: RSS %.1f MiB (of it mapped files %.1f MiB; Go heap in use %.1f MiB), CPU %.1f s since its start (%s ago)",
		total, float64(rss)/(1<<20), float64(rssFile)/(1<<20), heap/(1<<20), cpu.Seconds(), time.Since(sim.Started).Round(time.Second))

	// A DRA node deleted while its slices are being written: none stays behind.
	flash := "dra-flash"
	if err := c.AddKWOKNodes(ctx, []cluster.KWOKNode{{Name: flash, Labels: map[string]string{profileLabel: "dgx-dra"}}}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Poll(ctx, time.Minute, 5*time.Millisecond, func() (bool, string, error) {
		out, err := sim.CLI(ctx, "dump", "--node", flash, "-o", "json")
		return err == nil, out, nil
	}); err != nil {
		t.Fatalf("%s not simulated: %v", flash, err)
	}
	if err := c.DeleteKWOKNodes(ctx, time.Minute, []string{flash}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Poll(ctx, time.Minute, 200*time.Millisecond, func() (bool, string, error) {
		n, err := slicesOf(ctx, cs, flash)
		if err != nil {
			return false, "", err
		}
		out, err := sim.CLI(ctx, "dump", "--nodes", "-o", "json")
		if err != nil {
			return false, "", err
		}
		return n == 0 && !strings.Contains(out, flash), fmt.Sprintf("%d devices in slices; simulated: %v", n, strings.Contains(out, flash)), nil
	}); err != nil {
		t.Fatalf("slices of %s, deleted while they were written: %v", flash, err)
	}
	// Its history stays: dump reads its state file.
	if out, err := sim.CLI(ctx, "dump", "--node", flash); err != nil || !strings.Contains(out, flash+".db") {
		t.Errorf("dump --node %s after it was deleted: %v\n%s", flash, err, out)
	}

	// A DRA node deleted: its slices go with it (owned by the Node); the simulator drops it.
	gone := draNodes[half-1]
	if err := c.DeleteKWOKNodes(ctx, time.Minute, []string{gone}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Poll(ctx, time.Minute, 200*time.Millisecond, func() (bool, string, error) {
		n, err := slicesOf(ctx, cs, gone)
		return err == nil && n == 0, fmt.Sprintf("%d devices in slices", n), err
	}); err != nil {
		t.Fatalf("slices of deleted node %s: %v", gone, err)
	}
}

func ptr[T any](v T) *T { return &v }

// attribute returns a device's attribute by its fully qualified name: one in the driver's domain
// may be written without it.
func attribute(d resourcev1.Device, name string) (resourcev1.DeviceAttribute, bool) {
	if a, ok := d.Attributes[resourcev1.QualifiedName(name)]; ok {
		return a, true
	}
	a, ok := d.Attributes[resourcev1.QualifiedName(strings.TrimPrefix(name, draDriver+"/"))]
	return a, ok
}

// claimPod returns a pod builder using one claim of template tpl.
func claimPod(tpl string) func(*corev1.Pod) {
	return func(pod *corev1.Pod) {
		pc := corev1.PodResourceClaim{Name: cluster.ClaimName, ResourceClaimTemplateName: &tpl}
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{pc}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: cluster.ClaimName}}
	}
}

// schedule submits fit pods named <prefix>-<i> (shaped by shape), which must all be bound, then
// extra more, which must all stay Pending with reason in their PodScheduled message; it returns the
// rate the fitting ones were bound at (pods per second from the first submission to the last bind).
func schedule(t *testing.T, cs kubernetes.Interface, ns, prefix string, fit int, shape func(*corev1.Pod), extra int, reason string) float64 {
	t.Helper()
	ctx := t.Context()
	submit := func(from, n int) {
		parallel(t, n, func(i int) error {
			pod := cluster.NewKWOKPod(fmt.Sprintf("%s-%d", prefix, from+i))
			pod.Namespace = ns
			shape(pod)
			_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			return err
		})
	}
	count := func() (bound int, pending []corev1.Pod, err error) {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, nil, err
		}
		for _, p := range list.Items {
			if !strings.HasPrefix(p.Name, prefix+"-") {
				continue
			}
			if p.Spec.NodeName != "" {
				bound++
			} else {
				pending = append(pending, p)
			}
		}
		return bound, pending, nil
	}
	var rate float64
	if fit > 0 {
		t0 := time.Now()
		submit(0, fit)
		if err := cluster.Poll(ctx, 10*time.Minute, 250*time.Millisecond, func() (bool, string, error) {
			bound, _, err := count()
			return bound == fit, fmt.Sprintf("%d of %d bound", bound, fit), err
		}); err != nil {
			t.Fatalf("%s pods: %v", prefix, err)
		}
		took := time.Since(t0)
		rate = float64(fit) / took.Seconds()
		t.Logf("figure: %d %s pods submitted and bound in %s: %.1f pods/s", fit, prefix, took.Round(time.Millisecond), rate)
	}
	if extra == 0 {
		return rate
	}
	submit(fit, extra)
	if err := cluster.Poll(ctx, 10*time.Minute, time.Second, func() (bool, string, error) {
		bound, pending, err := count()
		if err != nil {
			return false, "", err
		}
		if bound > fit {
			return false, "", fmt.Errorf("%d %s pods bound, want %d: the cluster should be full", bound, prefix, fit)
		}
		why := 0
		for _, p := range pending {
			if cond := cluster.PodScheduled(&p); cond != nil && cond.Reason == corev1.PodReasonUnschedulable && strings.Contains(cond.Message, reason) {
				why++
			}
		}
		return why == extra, fmt.Sprintf("%d of %d extra %s pods Pending with %q", why, extra, prefix, reason), nil
	}); err != nil {
		t.Fatal(err)
	}
	return rate
}

// waitPublished waits until every device-plugin node reports 8 GPUs and every DRA node's slices hold
// its 8 GPUs, each with its NVLink domain, owned by the Node.
func waitPublished(t *testing.T, cs kubernetes.Interface, dpNodes, draNodes []string, timeout time.Duration) {
	t.Helper()
	ctx := t.Context()
	if err := cluster.Poll(ctx, timeout, 500*time.Millisecond, func() (bool, string, error) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		want := map[string]bool{}
		for _, n := range dpNodes {
			want[n] = true
		}
		ok := 0
		for _, n := range list.Items {
			c, a := n.Status.Capacity[gpuResource], n.Status.Allocatable[gpuResource]
			if want[n.Name] && c.Value() == 8 && a.Value() == 8 {
				ok++
			}
		}
		if ok < len(dpNodes) {
			return false, fmt.Sprintf("%d of %d device-plugin nodes with 8 GPUs", ok, len(dpNodes)), nil
		}
		slices, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		devices := map[string]int{}
		for _, s := range slices.Items {
			if s.Spec.Driver != draDriver || s.Spec.NodeName == nil {
				continue
			}
			owned := len(s.OwnerReferences) == 1 && s.OwnerReferences[0].Kind == "Node" && s.OwnerReferences[0].Name == *s.Spec.NodeName
			for _, d := range s.Spec.Devices {
				if _, ok := attribute(d, nvlinkDomain); owned && ok {
					devices[*s.Spec.NodeName]++
				}
			}
		}
		full := 0
		for _, n := range draNodes {
			if devices[n] == 8 {
				full++
			}
		}
		return full == len(draNodes), fmt.Sprintf("%d of %d DRA nodes with 8 owned devices in slices", full, len(draNodes)), nil
	}); err != nil {
		t.Fatal(err)
	}
}

// checkClaims: the 8-GPU claims are allocated, the one-GPU ones are not (the cluster is full), no
// device is in two claims, and every claim's devices share one NVLink domain by the slices.
func checkClaims(t *testing.T, cs kubernetes.Interface, ns string, wantBig int) {
	t.Helper()
	ctx := t.Context()
	slices, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	domain := map[string]string{}
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if a, ok := attribute(d, nvlinkDomain); ok && a.StringValue != nil {
				domain[s.Spec.Pool.Name+"/"+d.Name] = *a.StringValue
			} else if ok && a.IntValue != nil {
				domain[s.Spec.Pool.Name+"/"+d.Name] = strconv.FormatInt(*a.IntValue, 10)
			}
		}
	}
	claims, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	allocated := 0
	for _, cl := range claims.Items {
		if cl.Status.Allocation == nil {
			continue
		}
		allocated++
		domains := map[string]bool{}
		for _, r := range cl.Status.Allocation.Devices.Results {
			key := r.Pool + "/" + r.Device
			if other, ok := held[key]; ok {
				t.Errorf("device %s allocated to %s and %s", key, other, cl.Name)
			}
			held[key] = cl.Name
			domains[r.Pool+"="+domain[key]] = true
		}
		if len(cl.Status.Allocation.Devices.Results) == 8 && len(domains) != 1 {
			t.Errorf("claim %s: devices in %d NVLink domains, want one: %v", cl.Name, len(domains), domains)
		}
	}
	if allocated != wantBig {
		t.Errorf("%d claims allocated, want %d (the 8-GPU ones)", allocated, wantBig)
	}
}

// checkHistory: the simulator's summary has every node, and its allocated devices add up to what the
// bound pods and claims took, never more than a node has.
func checkHistory(t *testing.T, sim *cluster.Simulator, ctx context.Context, nodes, wantAllocated int) {
	t.Helper()
	var sums []nodeSummary
	err := cluster.Poll(ctx, 2*time.Minute, 500*time.Millisecond, func() (bool, string, error) {
		out, err := sim.CLI(ctx, "dump", "--nodes", "-o", "json")
		if err != nil {
			return false, "", fmt.Errorf("dump --nodes: %w\n%s", err, out)
		}
		if err := json.Unmarshal([]byte(out), &sums); err != nil {
			return false, "", err
		}
		got := 0
		for _, s := range sums {
			if s.Allocated > s.Devices {
				return false, "", fmt.Errorf("node %s: %d devices allocated of %d", s.Node, s.Allocated, s.Devices)
			}
			got += s.Allocated
		}
		return len(sums) == nodes && got == wantAllocated, fmt.Sprintf("%d nodes, %d devices allocated", len(sums), got), nil
	})
	if err != nil {
		t.Fatalf("history: want %d nodes, %d devices allocated: %v", nodes, wantAllocated, err)
	}
	out, err := sim.CLI(ctx, "dump", "--node", "dp-1", "--active")
	if err != nil || !strings.Contains(out, "dp-") {
		t.Errorf("dump --node dp-1: %v\n%s", err, out)
	}
}

func waitAllocatable(t *testing.T, cs kubernetes.Interface, node string, want int64) {
	t.Helper()
	ctx := t.Context()
	if err := cluster.Poll(ctx, time.Minute, 20*time.Millisecond, func() (bool, string, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		a := n.Status.Allocatable[gpuResource]
		return a.Value() == want, "allocatable " + a.String(), nil
	}); err != nil {
		t.Fatal(err)
	}
}

func waitTaint(t *testing.T, cs kubernetes.Interface, node, device string) {
	t.Helper()
	ctx := t.Context()
	if err := cluster.Poll(ctx, time.Minute, 20*time.Millisecond, func() (bool, string, error) {
		list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, "", err
		}
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				if d.Name == device && len(d.Taints) > 0 {
					return true, "", nil
				}
			}
		}
		return false, "no taint yet", nil
	}); err != nil {
		t.Fatal(err)
	}
}

// slicesOf counts the devices in the slices of node.
func slicesOf(ctx context.Context, cs kubernetes.Interface, node string) (int, error) {
	list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range list.Items {
		n += len(s.Spec.Devices)
	}
	return n, nil
}
