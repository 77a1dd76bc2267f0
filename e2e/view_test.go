package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// viewScript is what a workload in a GPU container does first: list its GPUs, their topology, a CSV
// query and its device nodes; time nvidia-smi -L (20 runs, /proc/uptime's centiseconds); then watch
// nvidia-smi -L, printing its output (and exit code) whenever it changes.
const viewScript = `echo "assigned virtual gpus: ${VIRTUAL_GPU_IDS}"
echo "uuids=${VIRTUAL_GPU_UUIDS}"
echo "=== list"; nvidia-smi -L; echo "exit=$?"
echo "=== topo"; nvidia-smi topo -m
echo "=== csv"; nvidia-smi --query-gpu=index,uuid,name,pci.bus_id --format=csv
echo "=== dev"; ls /dev/nvidia* 2>&1
echo "=== mounts"; grep -E ' /usr/bin/nvidia-smi | /run/virtual-gpu ' /proc/self/mountinfo | awk '{print $5, $6}'
a=$(cut -d' ' -f1 /proc/uptime); i=0; while [ $i -lt 20 ]; do nvidia-smi -L >/dev/null; i=$((i+1)); done; b=$(cut -d' ' -f1 /proc/uptime)
echo "=== timing $a $b"
prev=""; while true; do out=$(nvidia-smi -L 2>&1; echo "exit=$?"); if [ "$out" != "$prev" ]; then echo "=== watch"; echo "$out"; prev="$out"; fi; sleep 0.2; done
`

// viewSection returns the lines of log between "=== name" and the next "=== " line.
func viewSection(log, name string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(log, "\n") {
		switch {
		case strings.HasPrefix(l, "=== "):
			in = l == "=== "+name
		case in:
			out = append(out, l)
		}
	}
	return out
}

// viewUUIDs returns the UUID of each device the plugin's dump shows.
func viewUUIDs(t *testing.T, p *cluster.Plugin) map[string]string {
	t.Helper()
	d, err := p.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, dev := range d.Devices {
		out[dev.ID] = dev.UUID
	}
	return out
}

// checkView checks what the pod's workload saw of its GPUs ids (sorted by index) on machine m: nvidia-smi
// -L lists exactly them with the UUIDs dump shows, topo -m has their links, the CSV query their bus ids,
// /dev has their device nodes (devNodes) and nvidia-smi and the status directory are read-only mounts.
// It returns the mean time of nvidia-smi -L.
func checkView(t *testing.T, log string, m *topology.Machine, ids []string, uuids map[string]string, devNodes bool) time.Duration {
	t.Helper()
	idx := make([]int, len(ids))
	var wantList, wantCSV, wantUUIDs []string
	wantCSV = append(wantCSV, "index, uuid, name, pci.bus_id")
	product := m.GPUModel().Product
	for k, id := range ids {
		i, ok := m.Index(id)
		if !ok {
			t.Fatalf("%s is not a GPU of %s", id, m.Name())
		}
		idx[k] = i
		wantList = append(wantList, fmt.Sprintf("GPU %d: %s (UUID: %s)", k, product, uuids[id]))
		wantCSV = append(wantCSV, fmt.Sprintf("%d, %s, %s, %s", k, uuids[id], product, m.PCIBusID(i)))
		wantUUIDs = append(wantUUIDs, uuids[id])
	}
	if got := viewSection(log, "list"); !slices.Equal(got, append(wantList, "exit=0")) {
		t.Errorf("nvidia-smi -L in the pod:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantList, "\n"))
	}
	if !strings.Contains(log, "uuids="+strings.Join(wantUUIDs, ",")+"\n") {
		t.Errorf("VIRTUAL_GPU_UUIDS in the pod is not %s (dump's)", strings.Join(wantUUIDs, ","))
	}
	topo := strings.Join(viewSection(log, "topo"), "\n")
	got, err := topology.ParseNvidiaSMI("pod", strings.NewReader(topo))
	if err != nil {
		t.Errorf("nvidia-smi topo -m in the pod does not parse: %v\n%s", err, topo)
	} else {
		if got.Len() != len(ids) {
			t.Errorf("topo -m shows %d GPUs, want %d:\n%s", got.Len(), len(ids), topo)
		}
		for p := range min(got.Len(), len(ids)) {
			for q := p + 1; q < min(got.Len(), len(ids)); q++ {
				// As topo -m labels it: an NVLink pair shows no PCIe relation.
				if got.Link(p, q).String() != m.Link(idx[p], idx[q]).String() {
					t.Errorf("topo -m: GPU%d–GPU%d is %v, the machine links %s and %s by %v", p, q, got.Link(p, q), ids[p], ids[q], m.Link(idx[p], idx[q]))
				}
			}
		}
		t.Logf("nvidia-smi topo -m in the pod:\n%s", topo)
	}
	if csv := viewSection(log, "csv"); !slices.Equal(csv, wantCSV) {
		t.Errorf("--query-gpu in the pod:\n%s\nwant\n%s", strings.Join(csv, "\n"), strings.Join(wantCSV, "\n"))
	}
	wantDev := []string{"ls: /dev/nvidia*: No such file or directory"}
	if devNodes {
		wantDev = []string{"/dev/nvidia-uvm"}
		for _, i := range slices.Sorted(slices.Values(idx)) { // ls sorts by name: one digit here
			wantDev = append(wantDev, "/dev/nvidia"+strconv.Itoa(m.MinorNumber(i)))
		}
		wantDev = append(wantDev, "/dev/nvidiactl")
	}
	if dev := viewSection(log, "dev"); !slices.Equal(dev, wantDev) {
		t.Errorf("ls /dev/nvidia* in the pod: %q, want %q", dev, wantDev)
	}
	var readOnly []string
	for _, l := range viewSection(log, "mounts") { // "<mount point> <options>"
		if f := strings.Fields(l); len(f) == 2 && slices.Contains(strings.Split(f[1], ","), "ro") {
			readOnly = append(readOnly, f[0])
		}
	}
	slices.Sort(readOnly)
	if want := []string{"/run/virtual-gpu", "/usr/bin/nvidia-smi"}; !slices.Equal(readOnly, want) {
		t.Errorf("read-only mounts in the pod: %q, want %q (mountinfo: %q)", readOnly, want, viewSection(log, "mounts"))
	}
	var a, b float64
	for _, l := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(l, "=== timing "); ok {
			if _, err := fmt.Sscanf(rest, "%f %f", &a, &b); err != nil {
				t.Errorf("timing line %q: %v", l, err)
			}
		}
	}
	return time.Duration((b - a) / 20 * float64(time.Second))
}

// TestContainerView: on dgx1-volta with -device-nodes, a pod asking for 2 GPUs runs nvidia-smi (the
// plugin's, mounted read-only): -L lists its 2 GPUs with the UUIDs dump shows, topo -m shows the
// preset's link between them, a --query-gpu CSV their bus ids, and ls /dev/nvidia* lists its device
// nodes. After `health set <one of them> unhealthy`, nvidia-smi in the running pod shows that GPU as
// lost (exit 255) and the other one as before.
func TestContainerView(t *testing.T) {
	c := needCluster(t)
	const preset = "dgx1-volta"
	m, err := topology.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	p := startPluginN(t, c, cluster.PluginOptions{Topology: preset, Args: []string{"-numa-report=never", "-node-name=" + c.Name, "-device-nodes"}}, int64(m.Len()))
	start := time.Now()
	pod := runPod(t, c, cluster.NewPod("view-2gpu", 2, viewScript))
	ids := podDevices(t, c, pod, 2)
	log, err := c.WaitPodLog(t.Context(), time.Minute, pod.Namespace, pod.Name, "main", "=== watch")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: pod create -> its first nvidia-smi checks done: %s", time.Since(start).Round(time.Millisecond))
	t.Logf("pod log:\n%s", log)
	uuids := viewUUIDs(t, p)
	mean := checkView(t, log, m, ids, uuids, true)
	t.Logf("timing: nvidia-smi -L in a container: %s (mean of 20 runs)", mean.Round(100*time.Microsecond))

	lost := ids[1]
	set := time.Now()
	if out, err := p.CLI(t.Context(), "health", "set", lost, "unhealthy", "--reason", "XID 79"); err != nil {
		t.Fatalf("health set: %v\n%s", err, out)
	}
	log, err = c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, "main", "Unable to determine the device handle")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: health set unhealthy -> nvidia-smi in the running pod shows it: %s (the pod runs it every 0.2 s)", time.Since(set).Round(time.Millisecond))
	watches := strings.Split(log, "=== watch\n")
	last := strings.Split(strings.TrimSpace(watches[len(watches)-1]), "\n")
	i, _ := m.Index(lost)
	busID := strings.TrimPrefix(m.PCIBusID(i), "0000")
	want := []string{
		fmt.Sprintf("GPU 0: %s (UUID: %s)", m.GPUModel().Product, uuids[ids[0]]),
		"Unable to determine the device handle for GPU" + busID + ": Unknown Error",
		"exit=255",
	}
	if !slices.Equal(last, want) {
		t.Errorf("nvidia-smi -L after health set %s unhealthy:\n%s\nwant\n%s", lost, strings.Join(last, "\n"), strings.Join(want, "\n"))
	}
	checkStillRunning(t, c, pod, ids)
}

// TestContainerViewCDI: the plugin on a containerd 2 node with -device-list-strategy=cdi-cri writes its
// CDI spec into the node's spec directory; a pod asking for 2 GPUs gets an Allocate answer with their
// CDI names and the variables but no mount and no device node (the kubelet's checkpoint shows the
// answer), and its container has them all the same, from the spec: the device nodes, nvidia-smi and the
// status directory, with which nvidia-smi lists exactly its GPUs.
func TestContainerViewCDI(t *testing.T) {
	c := needCluster(t)
	node := addContainerd2Node(t, c, "vgpu-e2e-view-cdi")
	const preset = "dgx1-volta"
	m, err := topology.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	p := startNodePlugin(t, c, node, cluster.PluginOptions{Topology: preset, Args: []string{
		"-numa-report=never", "-node-name=" + node.Name, "-device-list-strategy=cdi-cri", "-cdi-spec-dir=" + node.CDISpecDir,
	}}, int64(m.Len()))
	spec, err := os.ReadFile(filepath.Join(node.CDISpecDir, "unicore.mcyou.cc-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the plugin's CDI spec:\n%s", spec)

	pod := cluster.NewPod("view-cdi", 2, viewScript)
	submitted := time.Now()
	created := createNodePod(t, c, node, pod)
	running, err := c.WaitPodPhase(t.Context(), time.Minute, created.Namespace, created.Name, corev1.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	ids := podDevices(t, c, running, 2)
	log, err := c.WaitPodLog(t.Context(), time.Minute, created.Namespace, created.Name, "main", "=== watch")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: CDI pod create -> its first nvidia-smi checks done: %s", time.Since(submitted).Round(time.Millisecond))
	t.Logf("pod log:\n%s", log)
	mean := checkView(t, log, m, ids, viewUUIDs(t, p), true)
	t.Logf("timing: nvidia-smi -L in a container (CDI mounts): %s (mean of 20 runs)", mean.Round(100*time.Microsecond))

	// What the plugin answered, as the kubelet keeps it.
	ans, err := checkpointAnswer(filepath.Join(node.DevicePluginDir, "kubelet_internal_checkpoint"), string(running.UID))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ans.CdiDevices {
		names = append(names, d.Name)
	}
	wantNames := []string{"unicore.mcyou.cc/gpu=" + ids[0], "unicore.mcyou.cc/gpu=" + ids[1]}
	if !slices.Equal(names, wantNames) || len(ans.Mounts) != 0 || len(ans.Devices) != 0 || ans.Envs[cluster.EnvIDs] != strings.Join(ids, ",") {
		t.Errorf("Allocate answer: CDI devices %v (want %v), %d mounts, %d device nodes (want none), envs %v", names, wantNames, len(ans.Mounts), len(ans.Devices), ans.Envs)
	}
}

// checkpointAnswer returns the Allocate answer the kubelet's device manager checkpoint keeps for the
// container of pod podUID (one container asking for the plugin's resource).
func checkpointAnswer(path, podUID string) (*pluginapi.ContainerAllocateResponse, error) {
	entries, err := checkpointEntries(path, podUID)
	if err != nil {
		return nil, err
	}
	var r pluginapi.ContainerAllocateResponse
	if err := proto.Unmarshal(entries[0].AllocResp, &r); err != nil {
		return nil, fmt.Errorf("kubelet checkpoint %s: the answer for pod %s: %w", path, podUID, err)
	}
	return &r, nil
}
