package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
)

// cdiResource is the test resource whose Allocate answers carry CDI device names.
const cdiResource corev1.ResourceName = "e2e.unicore.mcyou.cc/cdi-gpu"

// cdiScript prints what the container got: the ids from the Allocate answer's env, every character
// device /dev/nvidia*, the output of the mounted nvidia-smi, the mounted status file, and whether the
// status mount is read-only.
const cdiScript = `echo "ids=${VIRTUAL_GPU_IDS}"
for d in /dev/nvidia*; do [ -c "$d" ] && echo "chardev $d"; done
echo "smi: $(/usr/bin/nvidia-smi)"
echo "status: $(cat /run/virtual-gpu/status.json)"
if touch /run/virtual-gpu/new 2>/dev/null; then echo "status dir writable"; else echo "status dir read-only"; fi
`

// TestCDIContainerd2 adds a node that runs containerd 2 (CDI on, spec dir /var/run/cdi of the node's
// mount namespace), shows it runs pods, writes the CDI spec of 3 GPUs with plugin/view/cdi into the node's
// CDISpecDir, and serves a test resource whose Allocate answers name CDI devices
// (unicore.mcyou.cc/gpu=fake-N): the pods' device nodes and mounts come from the spec, injected by
// containerd.
func TestCDIContainerd2(t *testing.T) {
	c := needCluster(t)
	node := addContainerd2Node(t, c, "vgpu-e2e-cdi")
	n, err := node.Get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://"+strings.TrimPrefix(cluster.Containerd2Version, "v"); got != want {
		t.Errorf("node %s runs %q, want %q", node.Name, got, want)
	}

	t.Run("plain pod", func(t *testing.T) {
		pod := cluster.NewPod("cdi-plain", 0, "echo hello from containerd 2")
		created := createNodePod(t, c, node, pod)
		if _, err := c.WaitPodPhase(t.Context(), time.Minute, created.Namespace, created.Name, corev1.PodSucceeded); err != nil {
			t.Fatal(err)
		}
		log, err := c.PodLog(t.Context(), created.Namespace, created.Name, "main")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log, "hello from containerd 2") {
			t.Errorf("log %q", log)
		}
	})

	// What the spec mounts: a stand-in nvidia-smi and a status dir, on the host side as containerd sees
	// them (the node's mount namespace shares /tmp with the host).
	files := filepath.Join(node.Dir, "cdi-files")
	smi, statusDir := filepath.Join(files, "nvidia-smi"), filepath.Join(files, "status")
	if err := os.MkdirAll(statusDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(smi, []byte("#!/bin/sh\necho fake nvidia-smi from the CDI spec\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(statusDir, "status.json"), []byte(`{"kind":"GPUStatus"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ids := []string{"fake-0", "fake-1", "fake-2"}
	cfg := cdi.Config{
		SharedNodes: cdi.DefaultSharedNodes(cdi.DefaultNodeSource),
		Mounts:      []cdi.Mount{{HostPath: smi, ContainerPath: "/usr/bin/nvidia-smi"}, {HostPath: statusDir, ContainerPath: "/run/virtual-gpu"}},
	}
	for i, id := range ids {
		cfg.GPUs = append(cfg.GPUs, cdi.GPU{ID: id, Minor: i})
	}
	w, err := cdi.NewWriter(node.CDISpecDir, cdi.DefaultKind, cdi.Owner{ID: "e2e " + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(cfg); err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CDI spec %s (%s in the node's mount namespace):\n%s", w.Path(), filepath.Join(cluster.CDISpecDirInNode, cdi.DefaultKind.SpecFileName()), spec)

	dp := startTestDevicePlugin(t, node, "cdi-e2e", string(cdiResource), ids, func(ids []string) (*pluginapi.ContainerAllocateResponse, error) {
		names, err := cdi.DefaultKind.QualifiedNames(ids)
		if err != nil {
			return nil, err
		}
		r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{cluster.EnvIDs: strings.Join(ids, ",")}}
		for _, n := range names {
			r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: n})
		}
		return r, nil
	})
	if _, err := node.WaitNodeResource(t.Context(), 30*time.Second, cdiResource, 3, 3); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		gpus int64
	}{{"one GPU", 1}, {"two GPUs", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(dp.Allocations())
			pod := cluster.NewPod("cdi-"+strconv.FormatInt(tc.gpus, 10), 0, cdiScript)
			q := *resource.NewQuantity(tc.gpus, resource.DecimalSI)
			pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{cdiResource: q}, Requests: corev1.ResourceList{cdiResource: q}}
			submitted := time.Now()
			created := createNodePod(t, c, node, pod)
			if _, err := c.WaitPodPhase(t.Context(), time.Minute, created.Namespace, created.Name, corev1.PodSucceeded); err != nil {
				t.Fatal(err)
			}
			t.Logf("timing: CDI pod with %d GPU(s) created -> Succeeded: %s", tc.gpus, time.Since(submitted).Round(time.Millisecond))
			log, err := c.PodLog(t.Context(), created.Namespace, created.Name, "main")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("pod log:\n%s", log)
			allocs := dp.Allocations()
			if len(allocs) != before+1 {
				t.Fatalf("%d Allocate container requests for the pod, want 1", len(allocs)-before)
			}
			got := slices.Sorted(slices.Values(allocs[before]))
			if len(got) != int(tc.gpus) {
				t.Fatalf("Allocate got %q, want %d ids", got, tc.gpus)
			}
			want := []string{"ids=" + strings.Join(allocs[before], ",")}
			devs := []string{"/dev/nvidia-uvm", "/dev/nvidiactl"}
			for _, id := range got {
				devs = append(devs, "/dev/nvidia"+strings.TrimPrefix(id, "fake-"))
			}
			slices.Sort(devs) // the shell's glob order
			for _, d := range devs {
				want = append(want, "chardev "+d)
			}
			want = append(want, "smi: fake nvidia-smi from the CDI spec", `status: {"kind":"GPUStatus"}`, "status dir read-only")
			if lines := strings.Split(strings.TrimSpace(log), "\n"); !slices.Equal(lines, want) {
				t.Errorf("the container saw:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// createNodePod creates pod bound to node and deletes it at cleanup.
func createNodePod(t *testing.T, c *cluster.Cluster, node *cluster.Node, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := node.CreatePod(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePodAtCleanup(t, c, created) })
	return created
}

// addContainerd2Node adds a node that runs containerd 2 (CDI on) to c,
// Ready, removed when the test ends.
func addContainerd2Node(t *testing.T, c *cluster.Cluster, name string) *cluster.Node {
	t.Helper()
	start := time.Now()
	node, err := c.AddNode(t.Context(), cluster.NodeOptions{Name: name, Runtime: cluster.RuntimeContainerd2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.RemoveNode(ctx, node); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	t.Logf("timing: containerd %s node added and Ready: %s", cluster.Containerd2Version, time.Since(start).Round(time.Millisecond))
	return node
}
