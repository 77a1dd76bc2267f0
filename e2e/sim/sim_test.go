// Package sim_test runs tests of simulated clusters: a control plane without kubelets and kwok
// playing the kubelet of fake nodes (cluster.Options.KWOK), for the plugin's simulate subcommand and
// scale tests.
package sim_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// The package shares one KWOK cluster, started in TestMain.
var (
	testCluster *cluster.Cluster
	skipReason  string // non-empty: every test skips with it
	pluginBin   string
	pluginErr   error
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	switch {
	case runtime.GOOS != "linux":
		skipReason = "sim: needs Linux (runs etcd, a kube-apiserver and kwok)"
	case os.Geteuid() != 0:
		skipReason = "sim: needs root (the harness's process registry and iptables rule); run as root: cd e2e && go test ./sim/"
	case testing.Short():
		skipReason = "sim: skipped in -short mode (starts a control plane)"
	}
	if skipReason != "" {
		return m.Run()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	moduleDir, err := cluster.ModuleDir()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sim: %v\n", err)
		return 1
	}
	binDir, err := os.MkdirTemp("", "vgpu-sim-plugin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "sim: %v\n", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if pluginBin, pluginErr = cluster.PluginBinary(ctx, moduleDir, binDir, cluster.StderrLogger{}); pluginErr != nil {
		fmt.Fprintf(os.Stderr, "sim: %v\n", pluginErr)
	}
	start := time.Now()
	testCluster, err = cluster.Start(ctx, cluster.Options{ModuleDir: moduleDir, KWOK: true})
	if errors.Is(err, cluster.ErrUnsupported) {
		skipReason = err.Error()
		return m.Run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sim: start cluster: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "sim: cluster up in %s (etcd and kwok build %s)\n", time.Since(start).Round(time.Millisecond), testCluster.KWOKBinaries.BuildTaken.Round(time.Second))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "sim: %s: stopping the cluster\n", sig)
		testCluster.Stop()
		os.Exit(130)
	}()
	defer func() {
		t := time.Now()
		testCluster.Stop()
		fmt.Fprintf(os.Stderr, "sim: cluster stopped in %s\n", time.Since(t).Round(time.Millisecond))
	}()
	return m.Run()
}

// needCluster skips the test when the package cannot run here and dumps the cluster's log tails if
// the test fails.
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

// addKWOKNodes adds n KWOK nodes called <prefix>-<i>, waits until they are Ready, and deletes them at
// cleanup; it returns their names.
func addKWOKNodes(t *testing.T, c *cluster.Cluster, prefix string, n int) []string {
	t.Helper()
	nodes := make([]cluster.KWOKNode, n)
	names := make([]string, n)
	for i := range nodes {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		nodes[i] = cluster.KWOKNode{Name: names[i], Labels: map[string]string{"vgpu-e2e/test": prefix}}
	}
	start := time.Now()
	if err := c.AddKWOKNodes(t.Context(), nodes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DeleteKWOKNodes(ctx, 30*time.Second, names); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := c.WaitKWOKNodesReady(t.Context(), time.Minute, names); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: %d kwok nodes created and Ready in %s", n, time.Since(start).Round(time.Millisecond))
	return names
}

// TestKWOK_NodesReadyPodsRun checks the harness's KWOK cluster: fake nodes go Ready with the resources
// and marks they were created with, a pod that tolerates them is scheduled on one of them and kwok
// marks it Running with an IP of its pod CIDR, and a deleted pod is gone.
func TestKWOK_NodesReadyPodsRun(t *testing.T) {
	c := needCluster(t)
	ctx := t.Context()
	names := addKWOKNodes(t, c, "kwok-ready", 5)

	node, err := c.Client.CoreV1().Nodes().Get(ctx, names[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Status.Allocatable.Cpu().String(); got != "32" {
		t.Errorf("node %s allocatable cpu %s, want 32 (kwok must keep the created status)", node.Name, got)
	}
	if got := node.Labels["vgpu-e2e/test"]; got != "kwok-ready" {
		t.Errorf("node %s label vgpu-e2e/test=%q, want kwok-ready", node.Name, got)
	}

	pod, err := c.SubmitPod(ctx, cluster.NewKWOKPod("kwok-pod"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.DeletePod(ctx, 20*time.Second, pod.Namespace, pod.Name)
	})
	start := time.Now()
	running, err := c.WaitPodPhase(ctx, time.Minute, pod.Namespace, pod.Name, corev1.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: pod created -> Running on %s: %s", running.Spec.NodeName, time.Since(start).Round(time.Millisecond))
	if !slices.Contains(names, running.Spec.NodeName) {
		t.Errorf("pod runs on %q, want one of the kwok nodes %v", running.Spec.NodeName, names)
	}
	if !cluster.PodReady(running) {
		t.Errorf("pod Running but not Ready: %+v", running.Status.Conditions)
	}
	if running.Status.PodIP == "" {
		t.Errorf("pod Running without an IP (kwok gives one from %s)", cluster.KWOKPodCIDR)
	}

	if err := c.DeletePod(ctx, 30*time.Second, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after DeletePod: get pod: %v, want NotFound", err)
	}
}
