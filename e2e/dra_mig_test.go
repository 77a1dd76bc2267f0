package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// h100x4 is a 4-GPU H100 node: one NUMA node, an NVSwitch domain.
const h100x4 = `apiVersion: virtual-gpu.unicore.mcyou.cc/v1
kind: Topology
name: h100x4
gpu:
  product: NVIDIA H100 80GB HBM3
  memoryMiB: 81559
  computeCapability: "9.0"
  powerLimitW: 700
  idlePowerW: 70
numaNodes:
  - cpus: 0-15
    hostBridges:
      - count: 4
        switches:
          - gpus: 1
nvlinks:
  - domain: 0-3
    links: 18
`

// firstMIG turns MIG on for GPU 0 alone: under DRA it is published whole and as every placement
// of every H100 profile, the other GPUs whole.
const firstMIG = `version: v1
mig-configs:
  first-mig:
    - devices: [0]
      mig-enabled: true
      mig-devices: {}
    - devices: [1, 2, 3]
      mig-enabled: false
`

// h100Placements is the number of valid placements of an H100's profiles (1g.10gb 7, 1g.10gb+me 7,
// 1g.20gb 4, 2g.20gb 3, 3g.40gb 2, 4g.40gb 1, 7g.80gb 1: NVIDIA's MIG user guide).
const h100Placements = 25

// migClassName is deploy/components/dra's class of MIG devices.
const migClassName = "mig.unicore.mcyou.cc"

// profileIs is a CEL selector of the MIG devices of profile.
func profileIs(profile string) string {
	return fmt.Sprintf(`device.attributes[%q].profile == %q`, cluster.DRADriverName, profile)
}

// TestDRA_MIG: a 4-GPU H100 node with MIG on for GPU 0 publishes it as partitionable devices; claims
// of the MIG class for a 4g.40gb and then a 3g.40gb partition both land on GPU 0 (the only
// MIG-enabled GPU: their placements 0:4 and 4:4 fit together, and the counters leave the 3g.40gb
// only 4:4) and their pods run with their MIG ids; a
// whole-GPU claim for GPU 0 then stays unschedulable, the counters being used; once they are gone,
// five whole-GPU claims on the four GPUs leave one pod Pending with the scheduler's reason. It logs
// the scheduling time of a partition claim against a whole-GPU claim.
func TestDRA_MIG(t *testing.T) {
	parallelDRA(t)
	c := needCluster(t)
	node := addContainerd2Node(t, c, "vgpu-e2e-dra-mig")
	applyDRAClass(t, c)
	objs, err := cluster.LoadObjects(filepath.Join(moduleDir, "..", "deploy", "components", "dra", "deviceclass-mig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("deviceclass-mig.yaml: %d objects, want 1", len(objs))
	}
	if mc, ok := objs[0].(*resourcev1.DeviceClass); !ok || mc.Name != migClassName {
		t.Fatalf("deviceclass-mig.yaml: %v, want the DeviceClass %s", objs[0], migClassName)
	}
	applyDRA(t, c, objs[0])
	dir := t.TempDir()
	topo, layout := filepath.Join(dir, "h100x4.yaml"), filepath.Join(dir, "mig.yaml")
	for p, body := range map[string]string{topo: h100x4, layout: firstMIG} {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	startDRAPlugin(t, c, node, cluster.PluginOptions{Topology: topo, Args: []string{"-mig-config-file=" + layout, "-mig-config=first-mig"}}, 4+h100Placements)

	// scheduled submits a pod of tmpl's claim and returns it with the time until it is bound.
	scheduled := func(name string, tmpl *resourcev1.ResourceClaimTemplate, script string) (*corev1.Pod, time.Duration) {
		t.Helper()
		applyDRA(t, c, tmpl)
		start := time.Now()
		pod := claimPodSubmit(t, c, node, name, cluster.PodClaim{ResourceClaimTemplateName: tmpl.Name}, script)
		if _, _, err := c.WaitPodScheduled(t.Context(), 30*time.Second, pod.Namespace, pod.Name); err != nil {
			t.Fatal(err)
		}
		return pod, time.Since(start)
	}
	var partitions []*corev1.Pod
	// The 4g.40gb first: it has one placement, 0:4; the scheduler takes the first placement that
	// fits (a 3g.40gb first would take 0:4 too and leave the 4g.40gb no room), so the 3g.40gb must
	// go to 4:4 by the counters.
	for _, tc := range []struct{ profile, want string }{{"4g.40gb", "fake-0-mig-4g40gb-0"}, {"3g.40gb", "fake-0-mig-3g40gb-4"}} {
		name := "dra-mig-" + strings.ReplaceAll(tc.profile, ".", "-")
		tmpl := cluster.NewResourceClaimTemplate("default", name, migClassName, 1)
		setClaimSpec(&tmpl.Spec.Spec, "", profileIs(tc.profile))
		pod, took := scheduled(name, tmpl, draScript)
		if _, err := c.WaitPodPhase(t.Context(), time.Minute, pod.Namespace, pod.Name, corev1.PodRunning); err != nil {
			t.Fatal(err)
		}
		rc, err := c.WaitPodClaim(t.Context(), 10*time.Second, pod.Namespace, pod.Name, cluster.ClaimName, cluster.ClaimAllocated)
		if err != nil {
			t.Fatal(err)
		}
		devs := cluster.AllocatedDevices(rc)
		t.Logf("timing: scheduling a %s partition claim (pod submitted -> bound): %s", tc.profile, took.Round(time.Millisecond))
		if len(devs) != 1 || devs[0] != tc.want {
			t.Errorf("the %s claim got %v, want %s (GPU 0's only placement that fits)", tc.profile, devs, tc.want)
		}
		if ids := podIDs(t, c, pod); len(ids) != 1 || ids[0] != tc.want {
			t.Errorf("pod %s: %s=%v, want %s", pod.Name, cluster.EnvIDs, ids, tc.want)
		}
		// nvidia-smi -L in the container: its GPU with the prepared MIG device under it.
		log, err := c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, "main", "=== end")
		if err != nil {
			t.Fatal(err)
		}
		list := viewSection(log, "list")
		if !slices.ContainsFunc(list, func(l string) bool {
			return strings.Contains(l, "MIG "+tc.profile) && strings.Contains(l, "UUID: MIG-")
		}) {
			t.Errorf("nvidia-smi -L in pod %s does not list its %s MIG device:\n%s", pod.Name, tc.profile, strings.Join(list, "\n"))
		}
		partitions = append(partitions, pod)
	}

	// GPU 0 whole: its counters are used by the partitions.
	tmpl := claimTemplate("dra-mig-gpu0", 1, "", indexIs(0))
	applyDRA(t, c, tmpl)
	pod := claimPodSubmit(t, c, node, "dra-mig-gpu0", cluster.PodClaim{ResourceClaimTemplateName: tmpl.Name}, "sleep infinity")
	cond, err := c.WaitPodUnschedulable(t.Context(), 30*time.Second, pod.Namespace, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a whole-GPU claim for GPU 0 beside its partitions: unschedulable: %s", cond.Message)
	for _, p := range append(partitions, pod) {
		if err := c.DeletePod(t.Context(), 40*time.Second, p.Namespace, p.Name); err != nil {
			t.Fatal(err)
		}
	}

	// Five whole GPUs on four: one stays Pending.
	whole := claimTemplate("dra-mig-whole", 1, "")
	var pending []string
	for i := range 5 {
		name := fmt.Sprintf("dra-mig-whole-%d", i)
		if i == 0 {
			_, took := scheduled(name, whole, "sleep infinity")
			t.Logf("timing: scheduling a whole-GPU claim (pod submitted -> bound): %s", took.Round(time.Millisecond))
			continue
		}
		claimPodSubmit(t, c, node, name, cluster.PodClaim{ResourceClaimTemplateName: whole.Name}, "sleep infinity")
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		pending = pending[:0]
		bound := 0
		for i := range 5 {
			p, err := c.Client.CoreV1().Pods("default").Get(t.Context(), fmt.Sprintf("dra-mig-whole-%d", i), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.NodeName != "" {
				bound++
				continue
			}
			for _, cd := range p.Status.Conditions {
				if cd.Type == corev1.PodScheduled && cd.Status == corev1.ConditionFalse && cd.Reason == corev1.PodReasonUnschedulable {
					pending = append(pending, p.Name+": "+cd.Message)
				}
			}
		}
		if bound == 4 && len(pending) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("five whole-GPU claims on four GPUs: %d bound, unschedulable %v; want 4 and 1", bound, pending)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("five whole-GPU claims on four GPUs: four bound, %s", pending[0])
	if !strings.Contains(pending[0], "cannot allocate all claims") {
		t.Errorf("the pending pod's reason %q does not say the claim cannot be allocated", pending[0])
	}
}
