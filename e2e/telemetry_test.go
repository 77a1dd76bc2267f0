package e2e_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// telemetryBound is the bound: a workload's load shows in the telemetry, and in nvidia-smi in
// the pod, within a second of nvidia-smi --set-load.
const telemetryBound = time.Second

// telemetryScript is a workload that drives its own load: it shows its load socket's mount, sets 90 %
// on its GPUs with nvidia-smi --set-load (between two /proc/uptime stamps: the host's clock, which the
// test reads too), then prints nvidia-smi's utilization.gpu with a stamp whenever it changes.
const telemetryScript = `echo "assigned virtual gpus: ${VIRTUAL_GPU_IDS}"
echo "socket=${VIRTUAL_GPU_LOAD_SOCKET}"
echo "=== mounts"; grep ' /run/virtual-gpu-load ' /proc/self/mountinfo | awk '{print $5, $6}'
sleep 1
echo "=== load"
a=$(cut -d' ' -f1 /proc/uptime); nvidia-smi --set-load 90; echo "exit=$?"; b=$(cut -d' ' -f1 /proc/uptime)
echo "=== set $a $b"
prev=""; apps=""; while true; do u=$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits | tr '\n' ' '); if [ "$u" != "$prev" ]; then echo "=== util $(cut -d' ' -f1 /proc/uptime) $u"; prev="$u"; fi; if [ "$u" = "90 90 " ] && [ -z "$apps" ]; then apps=1; echo "=== apps"; nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory --format=csv,noheader,nounits; echo "apps-exit=$?"; fi; sleep 0.05; done
`

// uptime is the host's /proc/uptime, the clock the pod stamps its log with.
func uptime() (float64, error) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/uptime: %q", b)
	}
	return strconv.ParseFloat(f[0], 64)
}

// dcgmSample is one sample of the telemetry.
type dcgmSample struct {
	name   string
	labels map[string]string
	value  string
}

var (
	dcgmLineRE  = regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$`)
	dcgmLabelRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrapeTelemetry returns the samples the plugin's telemetry serves at url.
func scrapeTelemetry(url string) ([]dcgmSample, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	var out []dcgmSample
	for _, line := range strings.Split(string(b), "\n") {
		m := dcgmLineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := dcgmSample{name: m[1], labels: map[string]string{}, value: m[3]}
		for _, l := range dcgmLabelRE.FindAllStringSubmatch(m[2], -1) {
			s.labels[l[1]] = l[2]
		}
		out = append(out, s)
	}
	return out, nil
}

// ofName returns the samples of one series name, by gpu label.
func ofName(ss []dcgmSample, name string) map[string]dcgmSample {
	out := map[string]dcgmSample{}
	for _, s := range ss {
		if s.name == name {
			out[s.labels["gpu"]] = s
		}
	}
	return out
}

// stampedScrape is one scrape of DCGM_FI_DEV_GPU_UTIL and when it was answered.
type stampedScrape struct {
	at   float64 // /proc/uptime
	util map[string]dcgmSample
}

// TestTelemetry (issue: fake GPU telemetry): the plugin with -telemetry-address and
// -telemetry-writable. A pod holding 2 GPUs: the telemetry shows 2 DCGM_FI_DEV_GPU_UTIL series with
// its namespace, pod and container, busy under the steady model; its load socket's directory is a
// read-only mount; it runs nvidia-smi --set-load 90, and within a second both the telemetry and
// nvidia-smi --query-gpu=utilization.gpu in the pod read 90 (asserted). health set fake-1 unhealthy
// --reason "XID 79": DCGM_FI_DEV_XID_ERRORS{gpu="1"} is 79. The pod ends: the labels are gone, its
// GPUs idle and the socket's directory is removed.
func TestTelemetry(t *testing.T) {
	c := needCluster(t)
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startPlugin(t, c, cluster.PluginOptions{Args: []string{"-node-name=" + c.Name, "-reconcile-interval=1s",
		fmt.Sprintf("-telemetry-address=127.0.0.1:%d", port), "-telemetry-writable", "-telemetry-model=steady", "-telemetry-seed=3"}})
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	ss, err := scrapeTelemetry(url)
	if err != nil {
		t.Fatal(err)
	}
	util := ofName(ss, "DCGM_FI_DEV_GPU_UTIL")
	if len(util) != 4 {
		t.Fatalf("%d GPU_UTIL series, want 4: %v", len(util), util)
	}
	for gpu, s := range util {
		if s.value != "0" || s.labels["pod"] != "" || s.labels["Hostname"] != c.Name {
			t.Errorf("GPU %s before any pod: %+v", gpu, s)
		}
	}

	// Scrape every 20 ms while the pod runs, stamped with the clock the pod stamps its log with.
	var (
		mu      sync.Mutex
		scrapes []stampedScrape
	)
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			ss, err := scrapeTelemetry(url)
			at, uerr := uptime()
			if err == nil && uerr == nil {
				mu.Lock()
				scrapes = append(scrapes, stampedScrape{at: at, util: ofName(ss, "DCGM_FI_DEV_GPU_UTIL")})
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	defer func() { stop(); wg.Wait() }()

	created := time.Now()
	pod := runPod(t, c, cluster.NewPod("telemetry-2gpu", 2, telemetryScript))
	ids := podDevices(t, c, pod, 2)
	if _, err := c.WaitPodLog(t.Context(), time.Minute, pod.Namespace, pod.Name, "main", "=== util"); err != nil {
		t.Fatal(err)
	}
	log, err := c.WaitPodLog(t.Context(), 10*time.Second, pod.Namespace, pod.Name, "main", " 90 90 \n")
	if err != nil {
		t.Fatalf("nvidia-smi in the pod never showed 90 %% on both GPUs: %v", err)
	}
	stop()
	wg.Wait()
	t.Logf("pod log:\n%s", log)
	if !strings.Contains(log, "socket=/run/virtual-gpu-load/load.sock\n") || !strings.Contains(log, "exit=0\n") {
		t.Errorf("pod: no load socket variable, or nvidia-smi --set-load failed")
	}
	m := viewSection(log, "mounts") // "<mount point> <options>"
	if f := strings.Fields(strings.Join(m, " ")); len(f) != 2 || f[0] != "/run/virtual-gpu-load" || !slices.Contains(strings.Split(f[1], ","), "ro") {
		t.Errorf("the load socket's mount in the pod: %q, want /run/virtual-gpu-load read-only", m)
	}
	if want := []string{"Load of GPU ", "Load of GPU ", "All done.", "exit=0"}; len(viewSection(log, "load")) != len(want) {
		t.Errorf("nvidia-smi --set-load 90 in the pod: %q", viewSection(log, "load"))
	}
	var setAt, setDone float64
	var smiAt float64
	for _, l := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(l, "=== set "); ok {
			if _, err := fmt.Sscanf(rest, "%f %f", &setAt, &setDone); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
		}
		if rest, ok := strings.CutPrefix(l, "=== util "); ok && strings.HasSuffix(rest, " 90 90 ") && smiAt == 0 {
			smiAt, _ = strconv.ParseFloat(strings.Fields(rest)[0], 64)
		}
	}
	if setAt == 0 || smiAt == 0 {
		t.Fatalf("no set-load or utilization stamps in the pod log")
	}
	gpus := make([]string, len(ids))
	for i, id := range ids {
		gpus[i] = strings.TrimPrefix(id, "fake-")
	}

	// The telemetry: the pod's labels on its 2 GPUs, busy before the load was set; 90 from the first
	// scrape after it was set, and every one after.
	mu.Lock()
	all := slices.Clone(scrapes)
	mu.Unlock()
	labelled, busyBefore := false, false
	metricsAt := 0.0
	for _, s := range all {
		held := 0
		for _, g := range gpus {
			if l := s.util[g].labels; l["namespace"] == "default" && l["pod"] == pod.Name && l["container"] == "main" {
				held++
			}
		}
		if held == len(gpus) {
			labelled = true
			if s.at < setAt && s.util[gpus[0]].value != "0" {
				busyBefore = true
			}
		}
		is90 := s.util[gpus[0]].value == "90" && s.util[gpus[1]].value == "90"
		switch {
		case s.at >= setAt && is90 && metricsAt == 0:
			metricsAt = s.at
		case metricsAt != 0 && !is90:
			t.Errorf("GPU_UTIL left 90 at %.2f: %v", s.at, s.util)
		}
	}
	if !labelled {
		t.Errorf("no scrape showed GPUs %v labelled default/%s/main", gpus, pod.Name)
	}
	if !busyBefore {
		t.Errorf("the held GPUs were idle before the load was set (model steady)")
	}
	if metricsAt == 0 {
		t.Fatalf("no scrape after --set-load showed 90 on GPUs %v (%d scrapes)", gpus, len(all))
	}
	toMetrics := time.Duration((metricsAt - setAt) * float64(time.Second))
	toSMI := time.Duration((smiAt - setAt) * float64(time.Second))
	t.Logf("timing: pod created -> checks: %s; nvidia-smi --set-load took %s; set -> telemetry 90: %s; set -> nvidia-smi in the pod 90: %s (%d scrapes, every 20 ms)",
		time.Since(created).Round(time.Millisecond), time.Duration((setDone-setAt)*float64(time.Second)).Round(time.Millisecond),
		toMetrics.Round(time.Millisecond), toSMI.Round(time.Millisecond), len(all))
	if toMetrics > telemetryBound || toSMI > telemetryBound {
		t.Errorf("--set-load 90 showed after %s in the telemetry and %s in the pod's nvidia-smi, want within %s", toMetrics, toSMI, telemetryBound)
	}

	// Every default counter of dcgm-exporter but the memory temperature (these GPUs are L40S, GDDR),
	// and the energy counter counting.
	names := map[string]bool{}
	for _, smp := range ss {
		names[smp.name] = true
	}
	for _, n := range []string{"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
		"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
		"DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
		"DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
		"DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
		"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
		"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"} {
		if !names[n] {
			t.Errorf("the telemetry lacks %s", n)
		}
	}
	if len(names) != 24 {
		t.Errorf("%d fields served, want the 24 default counters of a GDDR board: %v", len(names), slices.Sorted(maps.Keys(names)))
	}
	energy := func() int64 {
		t.Helper()
		ss, err := scrapeTelemetry(url)
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(ofName(ss, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[gpus[0]].value, 10, 64)
		if err != nil {
			t.Fatalf("energy of GPU %s: %v", gpus[0], err)
		}
		return v
	}
	e0 := energy()
	for deadline := time.Now().Add(5 * time.Second); energy() <= e0+1000*35; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("the energy of busy GPU %s did not rise by a second's idle power from %d mJ in 5 s", gpus[0], e0)
			break
		}
	}

	// nvidia-smi --query-compute-apps in the pod: one process per GPU, its PID 1, with memory.
	log, err = c.WaitPodLog(t.Context(), 10*time.Second, pod.Namespace, pod.Name, "main", "apps-exit=")
	if err != nil {
		t.Fatalf("no compute apps in the pod's log: %v", err)
	}
	apps := slices.DeleteFunc(viewSection(log, "apps"), func(l string) bool { return l == "" })
	if len(apps) != 3 || apps[2] != "apps-exit=0" {
		t.Errorf("nvidia-smi --query-compute-apps in the pod: %q, want a process per GPU and exit 0", apps)
	} else {
		for _, l := range apps[:2] {
			f := strings.Split(l, ", ")
			if mem, _ := strconv.Atoi(f[len(f)-1]); len(f) != 4 || !strings.HasPrefix(f[0], "GPU-") || f[1] != "1" || mem <= 0 {
				t.Errorf("compute app %q: want GPU-…, pid 1, its name, memory > 0", l)
			}
		}
	}

	// An ECC fault (XID 48): the GPU answers, every series stays, with a remapped row.
	if out, err := p.CLI(t.Context(), "health", "set", "fake-1", "unhealthy", "--reason", "XID 48"); err != nil {
		t.Fatalf("health set: %v\n%s", err, out)
	}
	ss, err = scrapeTelemetry(url)
	if err != nil {
		t.Fatal(err)
	}
	if r := ofName(ss, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")["1"]; r.value != "1" || ofName(ss, "DCGM_FI_DEV_XID_ERRORS")["1"].value != "48" {
		t.Errorf("after XID 48 on fake-1: remapped rows %+v, XID %+v; want 1 and 48", r, ofName(ss, "DCGM_FI_DEV_XID_ERRORS")["1"])
	}
	if _, ok := ofName(ss, "DCGM_FI_DEV_GPU_UTIL")["1"]; !ok {
		t.Error("GPU 1 with an ECC fault lost its GPU_UTIL series: it still answers")
	}

	// A fault: XID 79 in DCGM_FI_DEV_XID_ERRORS.
	if out, err := p.CLI(t.Context(), "health", "set", "fake-1", "unhealthy", "--reason", "XID 79"); err != nil {
		t.Fatalf("health set: %v\n%s", err, out)
	}
	ss, err = scrapeTelemetry(url)
	if err != nil {
		t.Fatal(err)
	}
	if x := ofName(ss, "DCGM_FI_DEV_XID_ERRORS")["1"]; x.value != "79" || x.labels["err_code"] != "79" || x.labels["err_msg"] != "GPU has fallen off the bus" {
		t.Errorf(`DCGM_FI_DEV_XID_ERRORS{gpu="1"} after health set fake-1 unhealthy --reason "XID 79": %+v`, x)
	}
	if _, ok := ofName(ss, "DCGM_FI_DEV_GPU_UTIL")["1"]; ok {
		t.Error("the lost GPU 1 still has a GPU_UTIL series")
	}
	if out, err := p.CLI(t.Context(), "health", "set", "fake-1", "healthy"); err != nil {
		t.Fatalf("health set: %v\n%s", err, out)
	}

	// The pod ends: labels gone, GPUs idle, socket directory removed.
	d, err := p.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rec := findAllocation(d, ids)
	if rec == nil {
		t.Fatalf("no allocation of %v in dump", ids)
	}
	sockDir := filepath.Join(filepath.Dir(p.StatePath), "load", strconv.FormatUint(rec.Seq, 10))
	if _, err := os.Stat(filepath.Join(sockDir, "load.sock")); err != nil {
		t.Errorf("the allocation's socket: %v", err)
	}
	deleted := time.Now()
	if err := c.DeletePod(t.Context(), time.Minute, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ss, err := scrapeTelemetry(url)
		if err != nil {
			t.Fatal(err)
		}
		clean := true
		for _, s := range ofName(ss, "DCGM_FI_DEV_GPU_UTIL") {
			clean = clean && s.labels["pod"] == "" && s.value == "0"
		}
		_, statErr := os.Stat(sockDir)
		if clean && os.IsNotExist(statErr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the pod was deleted: GPU_UTIL %v, socket directory %v", ofName(ss, "DCGM_FI_DEV_GPU_UTIL"), statErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("timing: pod deleted -> labels gone, GPUs idle, socket removed: %s", time.Since(deleted).Round(time.Millisecond))
}

// restartLoadScript sets 70 % on its GPUs every half second and prints nvidia-smi's exit code
// whenever it changes: while the plugin is down it fails, and once the plugin is back it succeeds
// again through the same mount.
const restartLoadScript = `echo "assigned virtual gpus: ${VIRTUAL_GPU_IDS}"
prev=""; while true; do nvidia-smi --set-load 70 >/dev/null 2>&1; e=$?; if [ "$e" != "$prev" ]; then echo "=== set-load exit=$e"; prev=$e; fi; sleep 0.5; done
`

// TestTelemetryPluginRestart: a running container's load socket survives a plugin restart. The
// plugin is killed (SIGKILL) and started again on its state file while a pod sets its load every half
// second through the mounted socket directory: its requests fail while the plugin is down and succeed
// again afterwards, through the socket the new plugin created in the same directory, and the
// telemetry shows the pod's 70 % again with its labels.
func TestTelemetryPluginRestart(t *testing.T) {
	c := needCluster(t)
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-node-name=" + c.Name, fmt.Sprintf("-telemetry-address=127.0.0.1:%d", port), "-telemetry-writable"}
	first := startPlugin(t, c, cluster.PluginOptions{Args: args})
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	pod := runPod(t, c, cluster.NewPod("telemetry-restart", 2, restartLoadScript))
	ids := podDevices(t, c, pod, 2)
	gpus := []string{strings.TrimPrefix(ids[0], "fake-"), strings.TrimPrefix(ids[1], "fake-")}
	shows70 := func() bool {
		ss, err := scrapeTelemetry(url)
		if err != nil {
			return false
		}
		u := ofName(ss, "DCGM_FI_DEV_GPU_UTIL")
		for _, g := range gpus {
			if u[g].value != "70" || u[g].labels["pod"] != pod.Name {
				return false
			}
		}
		return true
	}
	waitFor := func(what string, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("30 s without %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return time.Since(start)
	}
	waitFor("the pod's 70 % in the telemetry", shows70)

	killed := time.Now()
	first.KillHard()
	if _, err := c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, "main", "=== set-load exit=255"); err != nil {
		t.Fatalf("the pod's --set-load did not fail while the plugin was down: %v", err)
	}
	second, err := c.StartPlugin(t.Context(), cluster.PluginOptions{Binary: pluginBin, StatePath: first.StatePath, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPlugin(t, c, second) })
	if _, err := c.WaitPluginReady(t.Context(), second, 30*time.Second, 4); err != nil {
		t.Fatal(err)
	}
	back := waitFor("the pod's 70 % in the telemetry after the restart", shows70)
	log, err := c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, "main", "=== set-load exit=255\n=== set-load exit=0")
	if err != nil {
		t.Fatalf("the pod's --set-load did not succeed again after the restart: %v", err)
	}
	t.Logf("pod log:\n%s", log)
	t.Logf("timing: SIGKILL -> the pod's load in the restarted plugin's telemetry: %s (plugin ready, then %s; the pod sets it every 0.5 s)",
		time.Since(killed).Round(time.Millisecond), back.Round(time.Millisecond))
	checkStillRunning(t, c, pod, ids)
}
