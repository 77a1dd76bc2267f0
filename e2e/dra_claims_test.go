package e2e_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// The attributes the constraints of TestDRA_MatchAttribute match on.
const (
	attrNVLinkDomain = cluster.DRADriverName + "/nvlinkDomain"
	attrNUMANode     = "resource.kubernetes.io/numaNode"
)

// deletePodAndClaim deletes a pod and waits until its template-generated claim is gone too (the
// resourceclaim controller deletes it), so its devices are free for the next claim.
func deletePodAndClaim(t *testing.T, c *cluster.Cluster, pod *corev1.Pod, claim *resourcev1.ResourceClaim) {
	t.Helper()
	if err := c.DeletePod(t.Context(), 40*time.Second, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	err := cluster.Poll(t.Context(), 30*time.Second, 50*time.Millisecond, func() (bool, string, error) {
		_, err := c.Client.ResourceV1().ResourceClaims(claim.Namespace).Get(t.Context(), claim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "claim still there (" + errString(err) + ")", nil
	})
	if err != nil {
		t.Fatalf("claim %s of pod %s: %v", claim.Name, pod.Name, err)
	}
}

// TestDRA_MatchAttribute: on dgx-a100 (one NVSwitch domain, two GPUs per NUMA node) and on dgx1-volta
// (a hybrid cube mesh: NVLink domains are its quads, one NUMA node per quad), claims of 2 and 4 GPUs
// with matchAttribute gpu.unicore.mcyou.cc/nvlinkDomain and of 2 GPUs with
// resource.kubernetes.io/numaNode are allocated GPUs that satisfy the constraint in the topology
// itself, checked independently of the attribute: every pair of the claim's GPUs is NVLinked in the
// preset, and nvidia-smi topo -m in the pod shows NV# between every pair; or all have the preset's
// NUMA node. Claims the topology cannot satisfy stay unschedulable: 5 NVLinked GPUs on dgx1-volta,
// 3 GPUs of one NUMA node on dgx-a100.
func TestDRA_MatchAttribute(t *testing.T) {
	parallelDRA(t)
	c := needCluster(t)
	node := addContainerd2Node(t, c, "vgpu-e2e-dra-match")
	applyDRAClass(t, c)
	for _, tc := range []struct {
		preset   string
		impCount int64  // a claim of impCount GPUs
		impAttr  string // matching this attribute, which the topology cannot satisfy
	}{
		{"dgx-a100", 3, attrNUMANode},
		{"dgx1-volta", 5, attrNVLinkDomain},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			m, err := topology.Preset(tc.preset)
			if err != nil {
				t.Fatal(err)
			}
			startDRAPlugin(t, c, node, cluster.PluginOptions{Topology: tc.preset}, int64(m.Len()))
			for _, cc := range []struct {
				count int64
				attr  string
			}{{2, attrNVLinkDomain}, {4, attrNVLinkDomain}, {2, attrNUMANode}} {
				name := fmt.Sprintf("dra-match-%s-%d-%s", tc.preset, cc.count, map[string]string{attrNVLinkDomain: "nvlink", attrNUMANode: "numa"}[cc.attr])
				tmpl := claimTemplate(name, cc.count, cc.attr)
				applyDRA(t, c, tmpl)
				pod, rc, devs, took := claimPodRun(t, c, node, name, cluster.PodClaim{ResourceClaimTemplateName: tmpl.Name}, draScript)
				t.Logf("%s: %d GPUs with matchAttribute %s: %v (pod running after %s)", tc.preset, cc.count, cc.attr, devs, took.Round(time.Millisecond))
				if int64(len(devs)) != cc.count {
					t.Fatalf("claim %s allocated %v, want %d devices", rc.Name, devs, cc.count)
				}
				if ids := podIDs(t, c, pod); !slices.Equal(ids, devs) {
					t.Errorf("pod %s: %s=%v, the claim's devices %v", pod.Name, cluster.EnvIDs, ids, devs)
				}
				idx := indices(t, m, devs)
				switch cc.attr {
				case attrNVLinkDomain:
					for p := range idx {
						for q := p + 1; q < len(idx); q++ {
							if l := m.Link(idx[p], idx[q]); l.NVLinks == 0 {
								t.Errorf("%s: %s and %s of the NVLink claim are linked %s in the preset", tc.preset, devs[p], devs[q], l)
							}
						}
					}
					log, err := c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, "main", "=== end")
					if err != nil {
						t.Fatal(err)
					}
					topo := strings.Join(viewSection(log, "topo"), "\n")
					got, err := topology.ParseNvidiaSMI("pod", strings.NewReader(topo))
					if err != nil {
						t.Fatalf("nvidia-smi topo -m in the pod does not parse: %v\n%s", err, topo)
					}
					if got.Len() != len(devs) {
						t.Errorf("nvidia-smi topo -m in the pod shows %d GPUs, want %d", got.Len(), len(devs))
					}
					for p := range got.Len() {
						for q := p + 1; q < got.Len(); q++ {
							if got.Link(p, q).NVLinks == 0 {
								t.Errorf("nvidia-smi topo -m in the pod: GPU%d–GPU%d is %s, want NV#:\n%s", p, q, got.Link(p, q), topo)
							}
						}
					}
				case attrNUMANode:
					for k, i := range idx {
						if m.NUMA(i) != m.NUMA(idx[0]) {
							t.Errorf("%s: %s is on NUMA node %d, %s on %d", tc.preset, devs[k], m.NUMA(i), devs[0], m.NUMA(idx[0]))
						}
					}
				}
				deletePodAndClaim(t, c, pod, rc)
			}

			name := fmt.Sprintf("dra-match-%s-impossible", tc.preset)
			tmpl := claimTemplate(name, tc.impCount, tc.impAttr)
			applyDRA(t, c, tmpl)
			pod := claimPodSubmit(t, c, node, name, cluster.PodClaim{ResourceClaimTemplateName: tmpl.Name}, "sleep infinity")
			cond, err := c.WaitPodUnschedulable(t.Context(), 30*time.Second, pod.Namespace, pod.Name)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d GPUs with matchAttribute %s: unschedulable: %s", tc.preset, tc.impCount, tc.impAttr, cond.Message)
			if err := c.DeletePod(t.Context(), 40*time.Second, pod.Namespace, pod.Name); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDRA_ExtendedResource runs the seed's vgpu-demo pod (limits unicore.mcyou.cc/gpu: 2), unchanged
// and without a node, where only a DRA node serves GPUs: the shipped DeviceClass's extendedResourceName
// makes the scheduler create a claim for it (named in pod.status.extendedResourceClaimStatus, annotated
// resource.kubernetes.io/extended-resource-claim), allocated 2 of the DRA node's GPUs, and the
// container prints exactly them. Skipped, naming the gate, when DRAExtendedResource is off.
func TestDRA_ExtendedResource(t *testing.T) {
	c := needCluster(t)
	if on, err := c.FeatureEnabled(t.Context(), "DRAExtendedResource"); err != nil || !on {
		t.Skipf("feature gate DRAExtendedResource is off in the API server (%v)", err)
	}
	node, _ := draNode(t, c, "vgpu-e2e-dra-ext", cluster.PluginOptions{}, 4)
	pod, err := cluster.LoadPod(filepath.Join(moduleDir, "testdata", "vgpu-demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	created, err := c.SubmitPod(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePodAtCleanup(t, c, created) })
	running, err := c.WaitPodPhase(t.Context(), time.Minute, created.Namespace, created.Name, corev1.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: vgpu-demo (extended resource through DRA) created -> Running: %s", time.Since(start).Round(time.Millisecond))
	if running.Spec.NodeName != node.Name {
		t.Errorf("pod %s on node %s, want the DRA node %s", running.Name, running.Spec.NodeName, node.Name)
	}
	st := running.Status.ExtendedResourceClaimStatus
	if st == nil || st.ResourceClaimName == "" {
		t.Fatalf("pod %s: no extendedResourceClaimStatus: %+v", running.Name, running.Status)
	}
	rc, err := c.Client.ResourceV1().ResourceClaims(running.Namespace).Get(t.Context(), st.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claim %s (annotations %v), request mappings %+v", rc.Name, rc.Annotations, st.RequestMappings)
	if _, ok := rc.Annotations["resource.kubernetes.io/extended-resource-claim"]; !ok {
		t.Errorf("claim %s: no annotation resource.kubernetes.io/extended-resource-claim: %v", rc.Name, rc.Annotations)
	}
	devs := sortByIndex(cluster.AllocatedDevices(rc))
	if len(devs) != 2 {
		t.Fatalf("claim %s allocated %v, want 2 devices", rc.Name, devs)
	}
	for _, r := range rc.Status.Allocation.Devices.Results {
		if r.Driver != cluster.DRADriverName || r.Pool != node.Name {
			t.Errorf("claim %s: result %+v, want driver %s pool %s", rc.Name, r, cluster.DRADriverName, node.Name)
		}
	}
	if ids := podIDs(t, c, running); !slices.Equal(ids, devs) {
		t.Errorf("pod %s: %s=%v, the claim's devices %v", running.Name, cluster.EnvIDs, ids, devs)
	}
}
