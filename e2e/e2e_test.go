package e2e_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// suiteNodes is the number of nodes of the suite's cluster. Single-node scenarios use the first
// (c.Node, whose methods the cluster promotes) and bind their pods to it; the others see a second
// kubelet idle beside it.
const suiteNodes = 2

// The suite shares one cluster, started in TestMain; each test starts its own plugin process.
var (
	testCluster *cluster.Cluster
	skipReason  string // non-empty: every test skips with it
	pluginBin   string
	pluginErr   error
	moduleDir   string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	switch {
	case runtime.GOOS != "linux":
		skipReason = "e2e: needs Linux (runs a real kubelet, containerd and runc)"
	case os.Geteuid() != 0:
		skipReason = "e2e: needs root (mount namespaces, containerd, kubelet); run as root: cd e2e && go test ./..."
	case testing.Short():
		skipReason = "e2e: skipped in -short mode (starts a real cluster)"
	}
	if skipReason != "" {
		return m.Run()
	}
	if d := testDeadline(); d > 0 && d < 20*time.Minute {
		fmt.Fprintf(os.Stderr, "e2e: note: -timeout %s; a first run builds the Kubernetes binaries (several minutes): use -timeout 30m\n", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	if moduleDir, err = cluster.ModuleDir(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	// The plugin first: a plugin that does not build fails the tests without waiting for a cluster.
	binDir, err := os.MkdirTemp("", "vgpu-e2e-plugin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if pluginBin, pluginErr = cluster.PluginBinary(ctx, moduleDir, binDir, cluster.StderrLogger{}); pluginErr != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", pluginErr)
	}
	start := time.Now()
	testCluster, err = cluster.Start(ctx, cluster.Options{ModuleDir: moduleDir, Nodes: make([]cluster.NodeOptions, suiteNodes)})
	if errors.Is(err, cluster.ErrUnsupported) {
		skipReason = err.Error()
		return m.Run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: start cluster: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: cluster up in %s (binary build %s)\n", time.Since(start).Round(time.Millisecond), testCluster.Binaries.BuildTaken.Round(time.Second))
	// Ctrl-C: stop the cluster before exiting (a go test -timeout panic is covered by Pdeathsig).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "e2e: %s: stopping the cluster\n", sig)
		testCluster.Stop()
		os.Exit(130)
	}()
	defer func() {
		t := time.Now()
		testCluster.Stop()
		fmt.Fprintf(os.Stderr, "e2e: cluster stopped in %s\n", time.Since(t).Round(time.Millisecond))
	}()
	return m.Run()
}

func testDeadline() time.Duration {
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil {
			return d
		}
	}
	return 0
}

// needCluster skips the test when the suite cannot run here and dumps the cluster's log tails if the
// test fails.
func needCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	c := testCluster
	t.Cleanup(func() {
		if t.Failed() {
			c.DumpLogTails(t, 40)
		}
	})
	return c
}

// startPlugin starts a plugin process and waits until the Node shows 4 devices in capacity and
// allocatable. At cleanup it stops the plugin with SIGTERM (it must exit 0) unless the test already
// stopped it, and waits until the kubelet has noticed (allocatable 0), so the next test starts clean.
func startPlugin(t *testing.T, c *cluster.Cluster, opts cluster.PluginOptions) *cluster.Plugin {
	t.Helper()
	return startPluginN(t, c, opts, 4)
}

// startPluginN is startPlugin for a plugin that advertises n devices.
func startPluginN(t *testing.T, c *cluster.Cluster, opts cluster.PluginOptions, n int64) *cluster.Plugin {
	t.Helper()
	return startNodePlugin(t, c, c.Node, opts, n)
}

// startNodePlugin is startPluginN for the plugin of a given node. With opts.KubeletAPI
// cluster.KubeletAPIDRA it starts the plugin as that node's DRA driver and waits until the kubelet has
// registered it and its ResourceSlices show n devices (the node should run containerd 2, for CDI:
// addContainerd2Node); at cleanup it waits until the kubelet has unregistered it.
func startNodePlugin(t *testing.T, c *cluster.Cluster, node *cluster.Node, opts cluster.PluginOptions, n int64) *cluster.Plugin {
	t.Helper()
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	opts.Binary = pluginBin
	start := time.Now()
	p, err := node.StartPlugin(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPlugin(t, c, p) })
	if _, err := c.WaitPluginReady(t.Context(), p, 30*time.Second, n); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: plugin start (%s) -> node %s serves %d devices: %s", p.KubeletAPI, node.Name, n, time.Since(start).Round(time.Millisecond))
	return p
}

// stopPlugin stops p with SIGTERM (it must exit 0) unless it already exited, and waits until its
// node's kubelet noticed: a device plugin's allocatable is 0, a DRA plugin is no longer registered.
func stopPlugin(t *testing.T, c *cluster.Cluster, p *cluster.Plugin) {
	t.Helper()
	if p.Exited() {
		return
	}
	if err := p.Terminate(); err != nil {
		t.Errorf("plugin on SIGTERM: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if p.KubeletAPI == cluster.KubeletAPIDRA {
		if err := c.WaitDRAPluginUnregistered(ctx, p, 20*time.Second); err != nil {
			t.Errorf("after the plugin stopped: %v", err)
		}
		return
	}
	if _, err := p.Node.WaitNodeAllocatable(ctx, 20*time.Second, 0); err != nil {
		t.Errorf("after the plugin stopped: %v", err)
	}
}

// restartPlugin starts a new plugin on statePath (after the old one was
// killed) and waits until the kubelet got its Register call and its first
// device list; it returns the plugin and when both happened.
func restartPlugin(t *testing.T, c *cluster.Cluster, statePath string) (*cluster.Plugin, time.Time, time.Time) {
	t.Helper()
	p, err := c.StartPlugin(t.Context(), cluster.PluginOptions{Binary: pluginBin, StatePath: statePath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPlugin(t, c, p) })
	reg, err := c.WaitKubeletLog(t.Context(), 30*time.Second, kubeletGotRegister, p.Started)
	if err != nil {
		t.Fatalf("restarted plugin did not register (log %s): %v", p.LogPath, err)
	}
	pushed, err := c.WaitKubeletLog(t.Context(), 10*time.Second, kubeletGotDevices, reg.Time)
	if err != nil {
		t.Fatalf("restarted plugin sent no device list: %v", err)
	}
	return p, reg.Time, pushed.Time
}

// runPod creates pod, deletes it at cleanup and waits until it is Running.
func runPod(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created := createPod(t, c, pod)
	running, err := c.WaitPodPhase(t.Context(), time.Minute, created.Namespace, created.Name, corev1.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	return running
}

func createPod(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.CreatePod(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePodAtCleanup(t, c, created) })
	return created
}

// deletePodAtCleanup deletes pod and waits until it is gone, with a context of its own (the test's is
// cancelled at cleanup).
func deletePodAtCleanup(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if err := c.DeletePod(ctx, 40*time.Second, pod.Namespace, pod.Name); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// Lines of the kubelet's log (v1.36, -v=2): the device manager got a Register call, and got a device
// list from the plugin's ListAndWatch stream.
const (
	kubeletGotRegister = "Got registration request from device plugin with resource"
	kubeletGotDevices  = "State pushed for device plugin"
)

const gpuScript = `echo "assigned virtual gpus: ${VIRTUAL_GPU_IDS}"; sleep infinity`

// gpuPod is a pod asking for n devices that prints its VIRTUAL_GPU_IDS and sleeps.
func gpuPod(name string, n int64) *corev1.Pod {
	return cluster.NewPod(name, n, gpuScript)
}

var validID = regexp.MustCompile(`^fake-(0|[1-9][0-9]*)$`)

// podDevices returns a running pod's device ids twice: as printed by the container (from the env the
// plugin injected) and as reported by the PodResources API of the kubelet of the pod's node; it checks
// they are the same n distinct valid ids and returns them sorted.
func podDevices(t *testing.T, c *cluster.Cluster, pod *corev1.Pod, n int) []string {
	t.Helper()
	ctr := pod.Spec.Containers[0].Name
	log, err := c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, ctr, cluster.AssignedPrefix)
	if err != nil {
		t.Fatal(err)
	}
	fromEnv, err := cluster.AssignedIDs(log)
	if err != nil {
		t.Fatal(err)
	}
	fromEnv = slices.Sorted(slices.Values(fromEnv))
	if len(fromEnv) != n || len(slices.Compact(slices.Clone(fromEnv))) != n {
		t.Fatalf("pod %s: %s=%v, want %d distinct ids", pod.Name, cluster.EnvIDs, fromEnv, n)
	}
	for _, id := range fromEnv {
		if !validID.MatchString(id) {
			t.Errorf("pod %s: invalid device id %q in %v", pod.Name, id, fromEnv)
		}
	}
	node := c.NodeNamed(pod.Spec.NodeName)
	if node == nil {
		t.Fatalf("pod %s: on node %q, not one of %v", pod.Name, pod.Spec.NodeName, c.NodeNames())
	}
	fromKubelet, err := node.ContainerDeviceIDs(t.Context(), pod.Namespace, pod.Name, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fromEnv, fromKubelet) {
		t.Fatalf("pod %s: container got %s=%v but the kubelet's PodResources says %v", pod.Name, cluster.EnvIDs, fromEnv, fromKubelet)
	}
	return fromEnv
}

// checkStillRunning checks that pod runs in the same container (no restart) and still holds ids.
func checkStillRunning(t *testing.T, c *cluster.Cluster, pod *corev1.Pod, ids []string) {
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
	if now := podDevices(t, c, pod, len(ids)); !slices.Equal(now, ids) {
		t.Errorf("pod %s: devices changed from %v to %v", pod.Name, ids, now)
	}
}

func disjoint(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// TestDemo is the seed's demo: the vgpu-demo pod asking for 2 devices prints the ids the plugin
// injected, and they are the ids the kubelet allocated (PodResources) and the plugin logged.
func TestDemo(t *testing.T) {
	c := needCluster(t)
	plugin := startPlugin(t, c, cluster.PluginOptions{})
	pod, err := cluster.LoadPod(filepath.Join(moduleDir, "testdata", "vgpu-demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	running := runPod(t, c, pod)
	ids := podDevices(t, c, running, 2)
	t.Logf("timing: pod create -> running with log line: %s", time.Since(start).Round(time.Millisecond))
	log, _ := c.PodLog(t.Context(), pod.Namespace, pod.Name, "demo")
	t.Logf("kubectl logs %s: %s", pod.Name, strings.TrimSpace(log))

	allocs, err := plugin.FindLog("allocated")
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) == 0 {
		t.Fatalf("plugin logged no \"allocated\" line (log %s)", plugin.LogPath)
	}
	logged := slices.Sorted(slices.Values(allocs[len(allocs)-1].Strings("ids")))
	if !slices.Equal(logged, ids) {
		t.Errorf("plugin logged allocation %v, container got %v", logged, ids)
	}
}

// TestKubeletRestart restarts the kubelet under a running pod: the plugin registers again within 1 s of
// the new kubelet.sock, the running pod keeps its devices, and a new pod is admitted.
func TestKubeletRestart(t *testing.T) {
	c := needCluster(t)
	plugin := startPlugin(t, c, cluster.PluginOptions{})
	before := runPod(t, c, gpuPod("before-kubelet-restart", 2))
	beforeIDs := podDevices(t, c, before, 2)
	regs, err := plugin.FindLog("registered with kubelet")
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := plugin.FindLog("allocated")
	if err != nil {
		t.Fatal(err)
	}

	r, err := c.RestartKubelet(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: kubelet stopped -> new kubelet.sock: %s", r.SocketCreated.Sub(r.Stopped).Round(time.Millisecond))
	gotReq, err := c.WaitKubeletLog(t.Context(), 10*time.Second, kubeletGotRegister, r.Started)
	if err != nil {
		t.Fatalf("kubelet got no registration request (plugin log %s): %v", plugin.LogPath, err)
	}
	pushed, err := c.WaitKubeletLog(t.Context(), 10*time.Second, kubeletGotDevices, gotReq.Time)
	if err != nil {
		t.Fatalf("plugin sent no device list to the new kubelet: %v", err)
	}
	// The Node object may have kept 4 throughout (the kubelet updates it every second): this checks
	// the end state, the kubelet's log above gives the timing.
	if _, err := c.WaitNodeResource(t.Context(), 30*time.Second, cluster.ResourceName, 4, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := plugin.WaitLog(t.Context(), 5*time.Second, "registered with kubelet", len(regs)+1); err != nil {
		t.Errorf("plugin did not log its new registration: %v", err)
	}
	reRegistration := gotReq.Time.Sub(r.SocketCreated)
	t.Logf("timing: new kubelet.sock -> kubelet got Register: %s", reRegistration.Round(time.Millisecond))
	t.Logf("timing: new kubelet.sock -> kubelet got the device list (ListAndWatch): %s", pushed.Time.Sub(r.SocketCreated).Round(time.Millisecond))
	if reRegistration > time.Second {
		t.Errorf("plugin registered %s after the new kubelet.sock appeared, want <= 1s", reRegistration)
	}

	checkStillRunning(t, c, before, beforeIDs)
	// The kubelet restores the running pod's devices from its checkpoint, without a new Allocate.
	if now, _ := plugin.FindLog("allocated"); len(now) != len(allocs) {
		t.Errorf("Allocate called again after the kubelet restart: %v", now[len(allocs):])
	}
	after := runPod(t, c, gpuPod("after-kubelet-restart", 2))
	afterIDs := podDevices(t, c, after, 2)
	if !disjoint(beforeIDs, afterIDs) {
		t.Errorf("new pod got %v, overlapping the running pod's %v", afterIDs, beforeIDs)
	}
}

// TestPluginRestart kills the plugin with SIGKILL and starts it again on the same state file: the
// Node's allocatable comes back, the running pod is unaffected and a new pod is admitted. "immediately"
// restarts before the kubelet has noticed the death (the race CONTRACT.md describes); "after-noticed"
// waits until allocatable dropped to 0 first.
func TestPluginRestart(t *testing.T) {
	needCluster(t)
	for _, tc := range []struct {
		name       string
		waitNotice bool
	}{
		{"immediately", false},
		{"after-noticed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := needCluster(t)
			first := startPlugin(t, c, cluster.PluginOptions{})
			before := runPod(t, c, gpuPod("before-plugin-restart-"+tc.name, 2))
			beforeIDs := podDevices(t, c, before, 2)

			killed := time.Now()
			first.KillHard()
			if tc.waitNotice {
				at, err := c.WaitNodeAllocatable(t.Context(), 20*time.Second, 0)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("timing: SIGKILL -> node allocatable 0: %s", at.Sub(killed).Round(time.Millisecond))
			}
			second, registered, pushed := restartPlugin(t, c, first.StatePath)
			t.Logf("timing: SIGKILL -> kubelet got Register from the restarted plugin: %s, -> its device list: %s",
				registered.Sub(killed).Round(time.Millisecond), pushed.Sub(killed).Round(time.Millisecond))
			if _, err := c.WaitPluginReady(t.Context(), second, 30*time.Second, 4); err != nil {
				t.Fatalf("after the plugin restart: %v", err)
			}
			// When the kubelet handles the old stream's end after the new registration it may drop
			// the new one (CONTRACT.md), or post the old death's allocatable 0 late: the plugin must
			// end up registered, allocatable 4 for 3 s in a row within 30 s, whatever dip came first.
			if dips, err := steadyAllocatable(t, c.Node, 30*time.Second, 3*time.Second, 4); err != nil {
				t.Errorf("after the plugin restart: %v (plugin log %s)", err, second.LogPath)
			} else if len(dips) > 0 {
				t.Logf("after the plugin restart: allocatable dipped before it held (%s), then held 4", strings.Join(dips, ", "))
			}

			checkStillRunning(t, c, before, beforeIDs)
			if allocs, _ := second.FindLog("allocated"); len(allocs) != 0 {
				t.Errorf("restarted plugin got Allocate for the running pod: %v", allocs)
			}
			after := runPod(t, c, gpuPod("after-plugin-restart-"+tc.name, 2))
			afterIDs := podDevices(t, c, after, 2)
			if !disjoint(beforeIDs, afterIDs) {
				t.Errorf("new pod got %v, overlapping the running pod's %v", afterIDs, beforeIDs)
			}
		})
	}
}

// TestOverRequestRejected asks for more devices than are free: the kubelet rejects the pod at admission
// with UnexpectedAdmissionError, and the running pod keeps its devices.
func TestOverRequestRejected(t *testing.T) {
	c := needCluster(t)
	plugin := startPlugin(t, c, cluster.PluginOptions{})
	holder := runPod(t, c, gpuPod("holds-two", 2))
	holderIDs := podDevices(t, c, holder, 2)
	allocsBefore, err := plugin.FindLog("allocated")
	if err != nil {
		t.Fatal(err)
	}

	greedy := createPod(t, c, gpuPod("wants-three", 3))
	failed, err := c.WaitPodPhase(t.Context(), time.Minute, greedy.Namespace, greedy.Name, corev1.PodFailed)
	if err != nil {
		t.Fatal(err)
	}
	if failed.Status.Reason != "UnexpectedAdmissionError" {
		t.Errorf("rejected pod: reason %q (%s), want UnexpectedAdmissionError", failed.Status.Reason, failed.Status.Message)
	}
	if want := "Requested: 3, Available: 2"; !strings.Contains(failed.Status.Message, want) {
		t.Errorf("rejected pod: message %q, want it to contain %q", failed.Status.Message, want)
	}
	t.Logf("rejected: %s: %s", failed.Status.Reason, failed.Status.Message)
	if ids, err := c.ContainerDeviceIDs(t.Context(), greedy.Namespace, greedy.Name, "main"); err != nil || len(ids) != 0 {
		t.Errorf("rejected pod holds devices %v (err %v)", ids, err)
	}
	if allocs, _ := plugin.FindLog("allocated"); len(allocs) != len(allocsBefore) {
		t.Errorf("plugin was asked to allocate for the rejected pod: %v", allocs[len(allocsBefore):])
	}
	checkStillRunning(t, c, holder, holderIDs)
}

// steadyAllocatable waits until the node's allocatable of the resource has been want for hold in a
// row, at most within; it returns the other values seen on the way ("0 at 1.2s").
func steadyAllocatable(t *testing.T, c *cluster.Node, within, hold time.Duration, want int64) ([]string, error) {
	t.Helper()
	start := time.Now()
	var dips []string
	since := time.Time{}
	for time.Since(start) < within {
		_, alloc, err := c.NodeResource(t.Context(), cluster.ResourceName)
		if err != nil {
			return dips, err
		}
		switch {
		case alloc != want:
			dips = append(dips, fmt.Sprintf("%d at %s", alloc, time.Since(start).Round(time.Millisecond)))
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= hold:
			return dips, nil
		}
		select {
		case <-t.Context().Done():
			return dips, t.Context().Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return dips, fmt.Errorf("allocatable never held %d for %s within %s: %v", want, hold, within, dips)
}
