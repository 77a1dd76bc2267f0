package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// sharedScript prints what the plugin told the container about its GPUs and sleeps.
const sharedScript = `echo "shared: ids=${VIRTUAL_GPU_IDS} replicas=${VIRTUAL_GPU_REPLICAS} numa=${VIRTUAL_GPU_NUMA_NODES}"; sleep infinity`

// sharedPod is a pod asking for n devices of resource that prints its environment (sharedScript).
func sharedPod(name string, resourceName corev1.ResourceName, n int64) *corev1.Pod {
	pod := cluster.NewPod(name, 0, sharedScript)
	q := *resource.NewQuantity(n, resource.DecimalSI)
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Limits: corev1.ResourceList{resourceName: q}, Requests: corev1.ResourceList{resourceName: q},
	}
	return pod
}

// sharedEnv is a shared pod's printed environment.
type sharedEnv struct{ ids, replicas, numa string }

// podSharedEnv waits for a running shared pod's line and returns what it printed.
func podSharedEnv(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) sharedEnv {
	t.Helper()
	log, err := c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, "main", "shared: ")
	if err != nil {
		t.Fatal(err)
	}
	var e sharedEnv
	for _, f := range strings.Fields(log[strings.Index(log, "shared: ")+len("shared: "):]) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "ids":
			e.ids = v
		case "replicas":
			e.replicas = v
		case "numa":
			e.numa = v
		}
	}
	return e
}

// podSharedDevices returns the device ids of resource the kubelet's PodResources API gives a pod's
// container "main".
func podSharedDevices(t *testing.T, c *cluster.Cluster, pod *corev1.Pod, resourceName string) []string {
	t.Helper()
	all, err := c.PodResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, cd := range all {
		if cd.Namespace == pod.Namespace && cd.Pod == pod.Name && cd.Container == "main" {
			return cd.Devices[resourceName]
		}
	}
	return nil
}

// gpuOfReplica returns the GPU id of a replica id, failing the test for anything else.
func gpuOfReplica(t *testing.T, id string) string {
	t.Helper()
	g, _, err := topology.ParseReplicaID(id)
	if err != nil {
		t.Fatalf("device %q: %v", id, err)
	}
	return topology.IDPrefix + strconv.Itoa(g)
}

// replicaDump is the part of `dump -o json` that shows shared GPUs.
type replicaDump struct {
	Devices []struct {
		ID       string `json:"id"`
		GPU      string `json:"gpu"`
		Healthy  bool   `json:"healthy"`
		Replicas *struct {
			Total   int `json:"total"`
			InUse   int `json:"inUse"`
			Holders []struct {
				Pod       string   `json:"pod"`
				DeviceIDs []string `json:"deviceIDs"`
			} `json:"holders"`
		} `json:"replicas"`
	} `json:"devices"`
	Allocations []struct {
		DeviceIDs []string `json:"deviceIDs"`
		GPUIDs    []string `json:"gpuIDs"`
	} `json:"allocations"`
}

func dumpReplicas(t *testing.T, p *cluster.Plugin) replicaDump {
	t.Helper()
	out, err := p.CLI(t.Context(), "dump", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var d replicaDump
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("dump -o json: %v", err)
	}
	return d
}

// TestSharing: 2 GPUs × 4 replicas: the node shows 8 allocatable; three 1-replica pods, admitted one
// after another, hold 3 replicas over 2 GPUs under distributed and 3 replicas of one GPU under
// packed (the other stays whole); each container's VIRTUAL_GPU_IDS is its physical GPU,
// VIRTUAL_GPU_REPLICAS its replica as the kubelet's PodResources API has it; the dump shows per GPU
// the replicas in use; `health set fake-1 unhealthy` takes all 4 of its replicas out of allocatable
// (8 → 4) and `healthy` brings them back.
func TestSharing(t *testing.T) {
	c := needCluster(t)
	for _, tc := range []struct {
		policy string
		// perGPU is the wanted number of the pods' replicas per GPU, sorted descending.
		perGPU []int
	}{
		{"distributed", []int{2, 1}},
		{"packed", []int{3}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			plugin := startPluginN(t, c, cluster.PluginOptions{Devices: 2, Args: []string{"-replicas=4", "-shared-devices-allocation-policy=" + tc.policy}}, 8)
			use := map[string]int{}
			for i := range 3 {
				name := "shared-" + tc.policy + "-" + strconv.Itoa(i)
				start := time.Now()
				pod := runPod(t, c, sharedPod(name, cluster.ResourceName, 1))
				t.Logf("timing: %s pod %d created -> running: %s", tc.policy, i, time.Since(start).Round(time.Millisecond))
				devs := podSharedDevices(t, c, pod, cluster.ResourceName)
				if len(devs) != 1 {
					t.Fatalf("pod %s holds %v, want one replica", name, devs)
				}
				gpu := gpuOfReplica(t, devs[0])
				env := podSharedEnv(t, c, pod)
				if env.ids != gpu || env.replicas != devs[0] || env.numa != "0" {
					t.Errorf("pod %s: env %+v, want ids=%s replicas=%s numa=0", name, env, gpu, devs[0])
				}
				use[gpu]++
			}
			var got []int
			for _, n := range use {
				got = append(got, n)
			}
			slices.Sort(got)
			slices.Reverse(got)
			t.Logf("%s: replicas per GPU %v", tc.policy, use)
			if !slices.Equal(got, tc.perGPU) {
				t.Errorf("%s: replicas per GPU %v, want %v", tc.policy, use, tc.perGPU)
			}

			d := dumpReplicas(t, plugin)
			inUse := 0
			for _, dev := range d.Devices {
				if dev.GPU == "" && dev.Replicas != nil {
					if dev.Replicas.Total != 4 || dev.Replicas.InUse != use[dev.ID] {
						t.Errorf("dump: %s replicas %+v, want %d of 4 in use", dev.ID, *dev.Replicas, use[dev.ID])
					}
					inUse += dev.Replicas.InUse
				}
			}
			if inUse != 3 {
				t.Errorf("dump: %d replicas in use, want 3", inUse)
			}

			for _, step := range []struct {
				health string
				want   int64
			}{{"unhealthy", 4}, {"healthy", 8}} {
				since := time.Now()
				if _, err := plugin.CLI(t.Context(), "health", "set", "fake-1", step.health); err != nil {
					t.Fatal(err)
				}
				at, err := c.WaitNodeResource(t.Context(), 10*time.Second, cluster.ResourceName, 8, step.want)
				if err != nil {
					t.Fatal(err)
				}
				took := at.Sub(since)
				t.Logf("timing: health set fake-1 %s -> node allocatable %d of 8: %s", step.health, step.want, took.Round(time.Millisecond))
				if took > healthBound {
					t.Errorf("allocatable %d reached %s after health set fake-1 %s, want <= %s", step.want, took.Round(time.Millisecond), step.health, healthBound)
				}
			}
			if _, err := plugin.CLI(t.Context(), "health", "set", "fake-1::0", "unhealthy"); err == nil ||
				!strings.Contains(err.Error(), "health is per GPU; set fake-1") {
				t.Errorf("health set of a replica: %v, want a refusal naming fake-1", err)
			}
		})
	}
}

// TestSharingRenamedFailRequests: with renameByDefault the node shows unicore.mcyou.cc/gpu.shared (8
// for 2 GPUs × 4); with failRequestsGreaterThanOne a pod asking for 2 fails admission with the
// plugin's message (from the pod's status) and a pod asking for 1 runs.
func TestSharingRenamedFailRequests(t *testing.T) {
	c := needCluster(t)
	const shared = cluster.ResourceName + ".shared"
	cfg := filepath.Join(t.TempDir(), "sharing.yaml")
	if err := os.WriteFile(cfg, []byte(`version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: `+cluster.ResourceName+`
      replicas: 4
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	start := time.Now()
	plugin, err := c.StartPlugin(t.Context(), cluster.PluginOptions{Binary: pluginBin, Devices: 2, Args: []string{"-config=" + cfg}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := plugin.Terminate(); err != nil {
			t.Errorf("plugin on SIGTERM: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.WaitNodeResource(ctx, 20*time.Second, shared, -1, 0); err != nil {
			t.Errorf("after the plugin stopped: %v", err)
		}
	})
	if _, err := c.WaitNodeResource(t.Context(), 30*time.Second, shared, 8, 8); err != nil {
		t.Fatalf("%v (plugin log %s:\n%s)", err, plugin.LogPath, plugin.Tail(10))
	}
	t.Logf("timing: plugin start -> node %s capacity 8 allocatable 8: %s", shared, time.Since(start).Round(time.Millisecond))

	greedy := createPod(t, c, sharedPod("shared-wants-two", shared, 2))
	failed, err := c.WaitPodPhase(t.Context(), time.Minute, greedy.Namespace, greedy.Name, corev1.PodFailed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rejected: %s: %s", failed.Status.Reason, failed.Status.Message)
	if failed.Status.Reason != "UnexpectedAdmissionError" {
		t.Errorf("pod asking for 2: reason %q, want UnexpectedAdmissionError", failed.Status.Reason)
	}
	if want := "2 devices requested, more than the 1 per container that sharing.timeSlicing.failRequestsGreaterThanOne allows"; !strings.Contains(failed.Status.Message, want) {
		t.Errorf("pod asking for 2: message %q, want it to contain %q", failed.Status.Message, want)
	}

	one := runPod(t, c, sharedPod("shared-wants-one", shared, 1))
	devs := podSharedDevices(t, c, one, shared)
	if len(devs) != 1 {
		t.Fatalf("pod asking for 1 holds %v", devs)
	}
	if env := podSharedEnv(t, c, one); env.ids != gpuOfReplica(t, devs[0]) || env.replicas != devs[0] {
		t.Errorf("pod asking for 1: env %+v, devices %v", env, devs)
	}
}
