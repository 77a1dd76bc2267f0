package e2e_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// TestTopology (issue 4): with -topology=dgx1-volta (8 GPUs, hybrid cube mesh) and -numa-report=never,
// a 1-GPU pod first takes the GPU the allocator prefers on the empty machine; then a 4-GPU pod gets
// exactly allocator.Preferred(machine, free, nil, 4) for the GPUs the PodResources API shows free: a
// fully NVLink-connected set that is not the lowest free indices. The kubelet asked the plugin
// (GetPreferredAllocation, seen in its metrics) and called Allocate with exactly that answer (the
// plugin's "allocated" log). The container's VIRTUAL_GPU_* environment is machine.ContainerEnv of the
// set, and the kubelet's checkpoint has the devices without a NUMA node.
func TestTopology(t *testing.T) {
	c := needCluster(t)
	const preset = "dgx1-volta"
	machine, err := topology.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	n := machine.Len()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	plugin := startPluginN(t, c, cluster.PluginOptions{Topology: preset, Args: []string{
		"-numa-report=never", fmt.Sprintf("-metrics-address=127.0.0.1:%d", port),
	}}, int64(n))
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}

	one := runPod(t, c, gpuPod("topology-one", 1))
	oneIDs := podDevices(t, c, one, 1)
	wantOne, err := allocator.Preferred(machine, all, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := indices(t, machine, oneIDs); !slices.Equal(got, wantOne) {
		t.Errorf("1-GPU pod got %v, the allocator prefers %v on the empty machine", oneIDs, ids(machine, wantOne))
	}

	held, err := c.HeldDeviceIDs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	heldIdx := indices(t, machine, held)
	var free []int
	for _, i := range all {
		if !slices.Contains(heldIdx, i) {
			free = append(free, i)
		}
	}
	want, err := allocator.Preferred(machine, free, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := ids(machine, want)
	lowest := free[:4]
	t.Logf("held per PodResources %v; free %v; allocator prefers %v (score %d), lowest free %v (score %d)",
		held, ids(machine, free), wantIDs, allocator.Score(machine, want), ids(machine, lowest), allocator.Score(machine, lowest))
	if slices.Equal(want, lowest) {
		t.Fatalf("the scenario needs a preferred set other than the lowest free indices %v", ids(machine, lowest))
	}
	if !allocator.NVLinkConnected(machine, want) {
		t.Errorf("preferred set %v is not fully NVLink-connected", wantIDs)
	}

	allocsBefore, err := plugin.FindLog("allocated")
	if err != nil {
		t.Fatal(err)
	}
	script := `echo "assigned virtual gpus: ${VIRTUAL_GPU_IDS}"; env | grep ^VIRTUAL_GPU_ | sort; sleep infinity`
	start := time.Now()
	four := runPod(t, c, cluster.NewPod("topology-four", 4, script))
	got := podDevices(t, c, four, 4)
	t.Logf("timing: 4-GPU pod create -> running with its ids: %s", time.Since(start).Round(time.Millisecond))
	if !slices.Equal(got, sortedIDs(wantIDs)) {
		t.Errorf("4-GPU pod got %v, the allocator prefers %v", got, wantIDs)
	}
	if !allocator.NVLinkConnected(machine, indices(t, machine, got)) {
		t.Errorf("4-GPU pod's set %v is not fully NVLink-connected", got)
	}

	// Allocate got exactly the preferred set: one more "allocated" line, with those ids.
	allocs, err := plugin.FindLog("allocated")
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != len(allocsBefore)+1 {
		t.Fatalf("plugin answered %d Allocate calls for the 4-GPU pod, want 1", len(allocs)-len(allocsBefore))
	}
	if allocated := sortedIDs(allocs[len(allocs)-1].Strings("ids")); !slices.Equal(allocated, sortedIDs(wantIDs)) {
		t.Errorf("kubelet called Allocate with %v, the plugin preferred %v", allocated, wantIDs)
	}
	// And the kubelet asked for a preference: once per pod, the answers scored Score(want) + 0.
	m, err := scrape(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	if calls := m[`virtual_gpu_preferred_allocations_total{result="ok"}`]; calls != 2 {
		t.Errorf("GetPreferredAllocation answered %v times, want 2 (one per pod); metrics %v", calls, m)
	}
	if sum, want := m["virtual_gpu_preferred_allocation_score_sum"], float64(allocator.Score(machine, want)+allocator.Score(machine, wantOne)); sum != want {
		t.Errorf("preferred answers scored %v in total, want %v (the allocator's sets)", sum, want)
	}

	// The container's environment.
	log, err := c.WaitPodLog(t.Context(), 30*time.Second, four.Namespace, four.Name, "main", "VIRTUAL_GPU_TOPOLOGY=")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.HasPrefix(k, "VIRTUAL_GPU_") {
			env[k] = v
		}
	}
	t.Logf("container env: %v", env)
	wantEnv := machine.ContainerEnv(want)
	wantEnv[cluster.EnvIDs] = strings.Join(wantIDs, ",")
	if wantEnv[topology.EnvTopology] != preset {
		t.Errorf("machine.ContainerEnv says %s=%q, want %q", topology.EnvTopology, wantEnv[topology.EnvTopology], preset)
	}
	for _, k := range []string{cluster.EnvIDs, topology.EnvTopology, topology.EnvNUMANodes, topology.EnvLinks} {
		if v, ok := env[k]; !ok || v != wantEnv[k] {
			t.Errorf("container %s=%q (present %v), want %q", k, v, ok, wantEnv[k])
		}
	}
	if numa := strings.Split(env[topology.EnvNUMANodes], ","); len(numa) != 4 {
		t.Errorf("%s=%q: want one NUMA node per device", topology.EnvNUMANodes, env[topology.EnvNUMANodes])
	}
	if links, err := topology.ParseLinks(env[topology.EnvLinks], 4); err != nil {
		t.Errorf("%s=%q: want the labels of the 4 devices' pairs: %v", topology.EnvLinks, env[topology.EnvLinks], err)
	} else {
		for p := range 4 {
			for q := p + 1; q < 4; q++ {
				if l := links.Label(p, q); !strings.HasPrefix(l, "NV") {
					t.Errorf("%s=%q: positions %d and %d are %s, want every pair NVLinked", topology.EnvLinks, env[topology.EnvLinks], p, q, l)
				}
			}
		}
	}

	// -numa-report=never: the kubelet knows the devices without a NUMA node (checkpoint key "-1").
	numaKeys, err := checkpointNUMA(filepath.Join(c.DevicePluginDir, "kubelet_internal_checkpoint"), string(four.UID))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(numaKeys, []string{"-1"}) {
		t.Errorf("kubelet checkpoint: the 4-GPU pod's devices under NUMA nodes %v, want only -1 (none reported)", numaKeys)
	}
}

// indices maps device ids to their machine indices.
func indices(t *testing.T, m *topology.Machine, ids []string) []int {
	t.Helper()
	out := make([]int, 0, len(ids))
	for _, id := range ids {
		i, ok := m.Index(id)
		if !ok {
			t.Fatalf("device id %q is not on machine %s", id, m.Name())
		}
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// ids maps machine indices to device ids (in index order).
func ids(m *topology.Machine, idx []int) []string {
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = m.ID(i)
	}
	return out
}

// sortedIDs sorts ids as strings, the order podDevices returns.
func sortedIDs(ids []string) []string { return slices.Sorted(slices.Values(ids)) }

// scrape fetches a Prometheus text exposition and returns its samples by series ("name{labels}").
func scrape(url string) (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// checkpointEntry is the kubelet device manager's checkpoint entry of one
// container's devices of one resource.
type checkpointEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     map[string][]string // by NUMA node
	AllocResp     []byte              // the Allocate answer, protobuf
}

// checkpointEntries returns the entries of the kubelet's device manager
// checkpoint at path for pod podUID and our resource; none is an error.
func checkpointEntries(path, podUID string) ([]checkpointEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubelet checkpoint: %w", err)
	}
	var cp struct {
		Data struct{ PodDeviceEntries []checkpointEntry }
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("decode kubelet checkpoint %s: %w", path, err)
	}
	var out []checkpointEntry
	for _, e := range cp.Data.PodDeviceEntries {
		if e.PodUID == podUID && e.ResourceName == cluster.ResourceName {
			out = append(out, e)
		}
	}
	if out == nil {
		return nil, fmt.Errorf("kubelet checkpoint %s has no %s entry for pod %s", path, cluster.ResourceName, podUID)
	}
	return out, nil
}

// checkpointNUMA returns the NUMA node keys under which the kubelet's device manager checkpoint stores
// the devices of pod podUID, sorted.
func checkpointNUMA(path, podUID string) ([]string, error) {
	entries, err := checkpointEntries(path, podUID)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range entries {
		for k := range e.DeviceIDs {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys, nil
}
