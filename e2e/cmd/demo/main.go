// Command demo runs the seed's demo against a real cluster (one node unless -nodes says more): it
// starts etcd, a kube-apiserver, kube-scheduler, kube-controller-manager and per node containerd and a
// kubelet (building the Kubernetes binaries on first use), starts the virtual GPU device plugin for the
// first node, waits until the Node shows unicore.mcyou.cc/gpu: "4" in capacity and allocatable,
// creates the vgpu-demo pod, prints its log line ("assigned virtual gpus: fake-X,fake-Y") and tears
// everything down.
//
// Run it as root from the e2e module: `cd e2e && go run ./cmd/demo`. The plugin binary comes from
// -plugin or $VGPU_PLUGIN_BIN; without either it is built from the repository.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	pluginBin := flag.String("plugin", os.Getenv(cluster.EnvPluginBin), "plugin binary (default $"+cluster.EnvPluginBin+", else built from the repository)")
	podFile := flag.String("pod", "", "pod manifest (default <e2e>/testdata/vgpu-demo.yaml)")
	keep := flag.Bool("keep", os.Getenv(cluster.EnvKeep) == "1", "keep the cluster's temp dir (logs) after the demo")
	hold := flag.Bool("hold", false, "after the demo, keep the cluster running until interrupted (prints the kubeconfig)")
	nodes := flag.Int("nodes", 1, "nodes in the cluster (the demo runs on the first; more are useful with -hold)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := cluster.StderrLogger{}
	begin := time.Now()

	moduleDir, err := cluster.ModuleDir()
	if err != nil {
		return err
	}
	if *podFile == "" {
		*podFile = filepath.Join(moduleDir, "testdata", "vgpu-demo.yaml")
	}
	pod, err := cluster.LoadPod(*podFile)
	if err != nil {
		return err
	}

	binDir, err := os.MkdirTemp("", "vgpu-demo-plugin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	bin, err := cluster.ResolvePluginBinary(ctx, moduleDir, binDir, *pluginBin, log)
	if err != nil {
		return err
	}

	if *nodes < 1 {
		return fmt.Errorf("-nodes %d: want at least 1", *nodes)
	}
	c, err := cluster.Start(ctx, cluster.Options{ModuleDir: moduleDir, Keep: *keep, Log: log, Nodes: make([]cluster.NodeOptions, *nodes)})
	if err != nil {
		return err
	}
	defer func() {
		t := time.Now()
		c.Stop()
		log.Logf("cluster stopped in %s; demo took %s", time.Since(t).Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	}()

	t := time.Now()
	plugin, err := c.StartPlugin(ctx, cluster.PluginOptions{Binary: bin})
	if err != nil {
		return err
	}
	if _, err := c.WaitPluginReady(ctx, plugin, time.Minute, 4); err != nil {
		return err
	}
	log.Logf("node %s: %s capacity 4, allocatable 4 (%s after the plugin started)", c.NodeName, cluster.ResourceName, time.Since(t).Round(time.Millisecond))

	t = time.Now()
	if _, err := c.CreatePod(ctx, pod); err != nil {
		return err
	}
	if _, err := c.WaitPodPhase(ctx, time.Minute, pod.Namespace, pod.Name, corev1.PodRunning); err != nil {
		return err
	}
	container := pod.Spec.Containers[0].Name
	logText, err := c.WaitPodLog(ctx, 30*time.Second, pod.Namespace, pod.Name, container, cluster.AssignedPrefix)
	if err != nil {
		return err
	}
	log.Logf("pod %s running with its log line %s after creation", pod.Name, time.Since(t).Round(time.Millisecond))
	ids, err := c.ContainerDeviceIDs(ctx, pod.Namespace, pod.Name, container)
	if err != nil {
		return err
	}
	fmt.Printf("$ kubectl logs %s\n%s", pod.Name, logText)
	fmt.Printf("(the kubelet's PodResources API reports %s holding %v)\n", pod.Name, ids)
	if *hold {
		log.Logf("holding the cluster until interrupted: KUBECONFIG=%s, logs in %s", c.Kubeconfig, c.LogDir)
		<-ctx.Done()
	}
	return nil
}
