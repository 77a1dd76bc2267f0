package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// draClassName is the DeviceClass deploy/components/dra ships (selector: the driver; extendedResourceName
// unicore.mcyou.cc/gpu).
const draClassName = "gpu.unicore.mcyou.cc"

// draClassUsers counts the scenarios using the shipped DeviceClass at once (parallelDRA): the first
// applies it, the last one's cleanup deletes it.
var draClassUsers struct {
	sync.Mutex
	n int
}

// parallelDRA runs a DRA scenario in parallel with the other parallel ones, after the suite's sequential
// scenarios: each adds its own containerd 2 node, pins its pods to it (Node.SchedulePod) and names its
// objects after itself, so they share only the cluster and the DeviceClass (applyDRAClass). Scenarios
// with pods any node could take (the extended resource, mixed nodes) stay sequential.
func parallelDRA(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// applyDRAClass applies deploy/components/dra's DeviceClass; the last scenario using it deletes it at
// cleanup.
func applyDRAClass(t *testing.T, c *cluster.Cluster) *resourcev1.DeviceClass {
	t.Helper()
	objs, err := cluster.LoadObjects(filepath.Join(moduleDir, "..", "deploy", "components", "dra", "deviceclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("deploy/components/dra/deviceclass.yaml: %d objects, want 1", len(objs))
	}
	class, ok := objs[0].(*resourcev1.DeviceClass)
	if !ok || class.Name != draClassName {
		t.Fatalf("deploy/components/dra/deviceclass.yaml: %T %v, want the DeviceClass %s", objs[0], objs[0], draClassName)
	}
	draClassUsers.Lock()
	defer draClassUsers.Unlock()
	if draClassUsers.n == 0 {
		if err := c.Apply(t.Context(), class); err != nil {
			t.Fatal(err)
		}
	}
	draClassUsers.n++
	t.Cleanup(func() {
		draClassUsers.Lock()
		defer draClassUsers.Unlock()
		if draClassUsers.n--; draClassUsers.n > 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Delete(ctx, 45*time.Second, class); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return class
}

// draNode adds a containerd 2 node called name (removed at cleanup), applies the DeviceClass and starts
// the plugin as its DRA driver with opts, waiting until its pool has n devices.
func draNode(t *testing.T, c *cluster.Cluster, name string, opts cluster.PluginOptions, n int64) (*cluster.Node, *cluster.Plugin) {
	t.Helper()
	node := addContainerd2Node(t, c, name)
	applyDRAClass(t, c)
	return node, startDRAPlugin(t, c, node, opts, n)
}

// draScript prints what a DRA container got: its ids and UUIDs from the CDI spec's environment and
// nvidia-smi -L (the plugin's, mounted by the spec), then sleeps.
const draScript = `echo "assigned virtual gpus: ${VIRTUAL_GPU_IDS}"
echo "uuids=${VIRTUAL_GPU_UUIDS}"
echo "=== list"; nvidia-smi -L; echo "exit=$?"
echo "=== topo"; nvidia-smi topo -m
echo "=== end"
sleep infinity
`

// claimTemplate returns a ResourceClaimTemplate of count devices of the shipped DeviceClass, with the
// constraint matchAttribute attr when attr is not empty and the CEL selectors sel.
func claimTemplate(name string, count int64, attr string, sel ...string) *resourcev1.ResourceClaimTemplate {
	tmpl := cluster.NewResourceClaimTemplate(metav1.NamespaceDefault, name, draClassName, count)
	setClaimSpec(&tmpl.Spec.Spec, attr, sel...)
	return tmpl
}

func setClaimSpec(spec *resourcev1.ResourceClaimSpec, attr string, sel ...string) {
	if attr != "" {
		a := resourcev1.FullyQualifiedName(attr)
		spec.Devices.Constraints = []resourcev1.DeviceConstraint{{Requests: []string{cluster.ClaimName}, MatchAttribute: &a}}
	}
	for _, s := range sel {
		spec.Devices.Requests[0].Exactly.Selectors = append(spec.Devices.Requests[0].Exactly.Selectors,
			resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
}

// indexIs is a CEL selector of the GPU with the index attribute i.
func indexIs(i int) string {
	return fmt.Sprintf(`device.attributes[%q].index == %d`, cluster.DRADriverName, i)
}

// claimPodRun schedules a pod of the claim on node (SchedulePod, deleted at cleanup) and waits until it
// runs; it returns the running pod, its claim (allocated) and the allocated devices sorted by index.
func claimPodRun(t *testing.T, c *cluster.Cluster, node *cluster.Node, name string, claim cluster.PodClaim, script string) (*corev1.Pod, *resourcev1.ResourceClaim, []string, time.Duration) {
	t.Helper()
	start := time.Now()
	pod := claimPodSubmit(t, c, node, name, claim, script)
	running, err := c.WaitPodPhase(t.Context(), time.Minute, pod.Namespace, pod.Name, corev1.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	rc, err := c.WaitPodClaim(t.Context(), 10*time.Second, pod.Namespace, pod.Name, cluster.ClaimName, cluster.ClaimAllocated)
	if err != nil {
		t.Fatal(err)
	}
	return running, rc, sortByIndex(cluster.AllocatedDevices(rc)), took
}

// claimPodSubmit schedules a pod of the claim on node, deleted at cleanup.
func claimPodSubmit(t *testing.T, c *cluster.Cluster, node *cluster.Node, name string, claim cluster.PodClaim, script string) *corev1.Pod {
	t.Helper()
	pod, err := node.SchedulePod(t.Context(), cluster.NewClaimPod(name, claim, script))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePodAtCleanup(t, c, pod) })
	return pod
}

// sortByIndex sorts fake-N ids by N.
func sortByIndex(ids []string) []string {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b string) int {
		x, _ := topology.GPUOf(a)
		y, _ := topology.GPUOf(b)
		return x - y
	})
	return out
}

// podIDs waits for the pod's "assigned virtual gpus:" line and returns its ids.
func podIDs(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) []string {
	t.Helper()
	log, err := c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, pod.Spec.Containers[0].Name, cluster.AssignedPrefix)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := cluster.AssignedIDs(log)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// claimSpecFiles returns the files of the node's CDI spec directory that name the claim uid (its spec,
// or a temporary file of it).
func claimSpecFiles(t *testing.T, node *cluster.Node, uid string) []string {
	t.Helper()
	entries, err := os.ReadDir(node.CDISpecDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), uid) {
			out = append(out, e.Name())
		}
	}
	return out
}

// waitClaimUnprepared waits until the plugin's dump shows claim uid's newest record unprepared and no
// CDI spec file of it is left in the node's spec directory.
func waitClaimUnprepared(t *testing.T, p *cluster.Plugin, uid string) time.Duration {
	t.Helper()
	start := time.Now()
	_, err := p.WaitDump(t.Context(), 30*time.Second, 100*time.Millisecond, func(d *cluster.DumpDoc) (bool, string, error) {
		recs := d.ClaimsOf(uid)
		files := claimSpecFiles(t, p.Node, uid)
		return len(recs) > 0 && recs[0].State == "unprepared" && len(files) == 0,
			fmt.Sprintf("records %+v, spec files %v", recs, files), nil
	})
	if err != nil {
		t.Fatalf("claim %s not unprepared: %v", uid, err)
	}
	return time.Since(start)
}

// semver3 is a dotted version with three numbers, as DRA's version attributes are written.
func semver3(v string) string {
	parts := strings.Split(v, ".")
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		n, _ := strconv.Atoi(p)
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts[:3], ".")
}

// TestDRA_Node runs the plugin as the DRA driver of a containerd 2 node with -topology=dgx-a100 and
// checks its ResourceSlices device by device against the plugin's own dump (UUIDs, NUMA nodes) and the
// topology preset (every attribute NVIDIA's driver publishes plus nvlinkDomain, the memory capacity; the
// NVLink domains and PCIe roots also against the links between GPUs); a pod of a ResourceClaimTemplate
// asking for 2 GPUs runs, and its container's VIRTUAL_GPU_IDS and nvidia-smi -L show exactly the claim's
// 2 allocated devices with their UUIDs; dump shows the claim prepared, reserved for the pod, and the
// devices held by it; deleting the pod unprepares the claim (its spec file removed). Figure: driver
// start → complete pool visible in the API server.
func TestDRA_Node(t *testing.T) {
	parallelDRA(t)
	c := needCluster(t)
	const preset = "dgx-a100"
	m, err := topology.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	node := addContainerd2Node(t, c, "vgpu-e2e-dra-node")
	applyDRAClass(t, c)
	opts := cluster.PluginOptions{Binary: pluginBin, Topology: preset, KubeletAPI: cluster.KubeletAPIDRA}
	start := time.Now()
	p, err := node.StartPlugin(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPlugin(t, c, p) })
	pool, err := node.WaitResourcePool(t.Context(), 30*time.Second, cluster.DRADriverName, m.Len())
	if err != nil {
		t.Fatalf("%v (plugin log %s)", err, p.LogPath)
	}
	t.Logf("timing: driver start -> complete pool of %d devices in the API server: %s", m.Len(), time.Since(start).Round(time.Millisecond))
	if _, err := c.WaitPluginReady(t.Context(), p, 30*time.Second, int64(m.Len())); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: driver start -> registered with the kubelet and pool complete: %s", time.Since(start).Round(time.Millisecond))

	d, err := p.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range pool.Slices {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != node.Name || s.Spec.Driver != cluster.DRADriverName {
			t.Errorf("slice %s: node %v driver %s, want %s %s", s.Name, s.Spec.NodeName, s.Spec.Driver, node.Name, cluster.DRADriverName)
		}
	}
	if got, want := pool.DeviceNames(), dumpIDs(d); !slices.Equal(sortByIndex(got), want) {
		t.Errorf("pool devices %v, dump's %v", got, want)
	}
	model := m.GPUModel()
	roots, domains := m.PCIeRoots(), m.NVLinkDomains()
	dom := cluster.DRADriverName + "/"
	for _, dev := range pool.Devices {
		i, ok := m.Index(dev.Name)
		if !ok {
			t.Errorf("device %s is not a GPU of %s", dev.Name, preset)
			continue
		}
		dd := d.Device(dev.Name)
		if dd == nil {
			t.Errorf("device %s not in dump", dev.Name)
			continue
		}
		want := map[string]string{
			"type":                            "string gpu",
			"uuid":                            "string " + dd.UUID,
			"productName":                     "string " + model.Product,
			"brand":                           "string " + topology.Brand(model.Product),
			"architecture":                    "string " + topology.Architecture(model.Family),
			"cudaComputeCapability":           "version " + semver3(model.Compute.String()),
			"driverVersion":                   "version " + semver3(topology.DriverVersion),
			"cudaDriverVersion":               "version " + semver3(topology.CUDAVersion),
			"index":                           "int " + strconv.Itoa(i),
			"resource.kubernetes.io/pciBusID": "string " + strings.ToLower(strings.TrimPrefix(m.PCIBusID(i), "0000")),
			"resource.kubernetes.io/pcieRoot": "string " + roots[i],
			"resource.kubernetes.io/numaNode": "int " + strconv.Itoa(dd.NUMA),
			"nvlinkDomain":                    "string " + topology.NVLinkDomainName(domains[i]),
		}
		got := map[string]string{}
		for k, a := range dev.Attributes {
			got[strings.TrimPrefix(string(k), dom)] = attrString(a)
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("device %s attribute %s: %q, want %q", dev.Name, k, got[k], w)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("device %s: unexpected attribute %s = %s", dev.Name, k, got[k])
			}
		}
		if dd.NUMA != m.NUMA(i) {
			t.Errorf("device %s: dump's NUMA node %d, the preset's %d", dev.Name, dd.NUMA, m.NUMA(i))
		}
		wantMem := resource.NewQuantity(int64(model.MemoryMiB)<<20, resource.BinarySI)
		if capa, ok := dev.Capacity["memory"]; !ok || capa.Value.Cmp(*wantMem) != 0 || len(dev.Capacity) != 1 {
			t.Errorf("device %s: capacity %v, want memory %s", dev.Name, dev.Capacity, wantMem)
		}
		if len(dev.Taints) != 0 {
			t.Errorf("device %s: taints %v on a healthy GPU", dev.Name, dev.Taints)
		}
	}
	// The domains and roots, against the links: GPUs of one NVLink domain are NVLinked pair by pair;
	// GPUs of one PCIe root are never linked across the CPU interconnect or host bridge (NODE, SYS).
	for i := range m.Len() {
		for j := i + 1; j < m.Len(); j++ {
			l := m.Link(i, j)
			if domains[i] == domains[j] && domains[i] >= 0 && l.NVLinks == 0 {
				t.Errorf("fake-%d and fake-%d share NVLink domain %d but are linked %s", i, j, domains[i], l)
			}
			if roots[i] == roots[j] && (l.PCIe.String() == "NODE" || l.PCIe.String() == "SYS") {
				t.Errorf("fake-%d and fake-%d share PCIe root %s but are linked %s", i, j, roots[i], l.PCIe)
			}
		}
	}
	t.Logf("pool %s: generation %d, %d slices, %d devices; fake-0: %v", pool.Name, pool.Generation, len(pool.Slices), len(pool.Devices), pool.Devices[0].Attributes)

	tmpl := claimTemplate("dra-node-two", 2, "")
	applyDRA(t, c, tmpl)
	pod, rc, devs, took := claimPodRun(t, c, node, "dra-node-two", cluster.PodClaim{ResourceClaimTemplateName: tmpl.Name}, draScript)
	t.Logf("timing: DRA pod (2 GPUs) created -> Running: %s", took.Round(time.Millisecond))
	if len(devs) != 2 {
		t.Fatalf("claim %s allocated %v, want 2 devices", rc.Name, devs)
	}
	for _, r := range rc.Status.Allocation.Devices.Results {
		if r.Driver != cluster.DRADriverName || r.Pool != node.Name || r.Request != cluster.ClaimName {
			t.Errorf("claim %s: result %+v, want driver %s pool %s request %s", rc.Name, r, cluster.DRADriverName, node.Name, cluster.ClaimName)
		}
	}
	if ids := podIDs(t, c, pod); !slices.Equal(ids, devs) {
		t.Errorf("pod %s: %s=%v, the claim's devices %v", pod.Name, cluster.EnvIDs, ids, devs)
	}
	log, err := c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, "main", "=== end")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod log:\n%s", log)
	var wantList, wantUUIDs []string
	for k, id := range devs {
		wantList = append(wantList, fmt.Sprintf("GPU %d: %s (UUID: %s)", k, model.Product, d.Device(id).UUID))
		wantUUIDs = append(wantUUIDs, d.Device(id).UUID)
	}
	if got := viewSection(log, "list"); !slices.Equal(got, append(wantList, "exit=0")) {
		t.Errorf("nvidia-smi -L in the pod:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantList, "\n"))
	}
	if !strings.Contains(log, "uuids="+strings.Join(wantUUIDs, ",")+"\n") {
		t.Errorf("VIRTUAL_GPU_UUIDS in the pod is not %s (dump's)", strings.Join(wantUUIDs, ","))
	}
	if files := claimSpecFiles(t, node, string(rc.UID)); len(files) != 1 {
		t.Errorf("CDI spec files of claim %s: %v, want one", rc.UID, files)
	}

	d, err = p.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	recs := d.ClaimsOf(string(rc.UID))
	switch {
	case len(recs) != 1:
		t.Errorf("dump: claim %s has records %+v, want one", rc.UID, recs)
	case recs[0].State != "prepared" || recs[0].Namespace != rc.Namespace || recs[0].Name != rc.Name || !slices.Equal(recs[0].DeviceIDs, devs):
		t.Errorf("dump: claim record %+v, want %s/%s prepared with %v", recs[0], rc.Namespace, rc.Name, devs)
	case len(recs[0].ReservedFor) != 1 || recs[0].ReservedFor[0].UID != string(pod.UID):
		t.Errorf("dump: claim reserved for %+v, want the pod %s (%s)", recs[0].ReservedFor, pod.Name, pod.UID)
	case recs[0].Envs[cluster.EnvIDs] != strings.Join(devs, ","):
		t.Errorf("dump: claim envs %v, want %s=%s", recs[0].Envs, cluster.EnvIDs, strings.Join(devs, ","))
	}
	for _, id := range devs {
		if h := d.Device(id).Holder; h == nil || h.State != "prepared" || h.ClaimUID != string(rc.UID) || !slices.Contains(h.Pods, pod.Name) {
			t.Errorf("dump: device %s holder %+v, want claim %s prepared for pod %s", id, h, rc.UID, pod.Name)
		}
	}
	table, err := p.CLI(t.Context(), "dump")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, rc.Name) {
		t.Errorf("dump's table does not name the claim %s:\n%s", rc.Name, table)
	}
	t.Logf("dump:\n%s", table)

	del := time.Now()
	if err := c.DeletePod(t.Context(), 40*time.Second, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	waitClaimUnprepared(t, p, string(rc.UID))
	t.Logf("timing: pod deleted -> claim unprepared, spec file gone: %s", time.Since(del).Round(time.Millisecond))
}

// dumpIDs returns the ids of the dump's devices that are not removed, by index.
func dumpIDs(d *cluster.DumpDoc) []string {
	var out []string
	for _, dev := range d.Devices {
		if !dev.Removed {
			out = append(out, dev.ID)
		}
	}
	return sortByIndex(out)
}

// attrString writes an attribute as "<type> <value>".
func attrString(a resourcev1.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return "string " + *a.StringValue
	case a.IntValue != nil:
		return "int " + strconv.FormatInt(*a.IntValue, 10)
	case a.BoolValue != nil:
		return "bool " + strconv.FormatBool(*a.BoolValue)
	case a.VersionValue != nil:
		return "version " + *a.VersionValue
	}
	return "?"
}
