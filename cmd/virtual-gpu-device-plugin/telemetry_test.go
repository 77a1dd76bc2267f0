package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// staticDevices is the Server's device list as the exporter reads it.
type staticDevices struct {
	mu   sync.Mutex
	devs []gpuset.Device
}

func (d *staticDevices) Devices() []gpuset.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.devs)
}

func (d *staticDevices) setHealth(id string, healthy bool, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.devs {
		if d.devs[i].ID == id {
			d.devs[i].Healthy, d.devs[i].Reason = healthy, reason
		}
	}
}

// telemetryRig is the telemetry of a configuration over a real state file
// and status directory, at a clock the test sets.
type telemetryRig struct {
	set     *deviceSet
	st      *store.Store
	view    *viewFiles
	devices *staticDevices
	clock   *plugintest.Clock
	tel     *gpuTelemetry
	active  *activeAllocations
	logs    *plugintest.LogBuffer
}

// newTelemetryRig builds the configuration of args (-node-name=node-a),
// reconciles a fresh state file with it, publishes its status files and
// builds its telemetry.
func newTelemetryRig(t testing.TB, args ...string) *telemetryRig {
	t.Helper()
	state := filepath.Join(plugintest.ShortTempDir(t), "state.db") // the load sockets' paths must fit
	set, _ := viewSet(t, append([]string{"-node-name=node-a", "-state=" + state}, args...)...)
	st, err := store.Open(set.cfg.StatePath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Reconcile(set.Specs()); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := set.catalog(stored)
	if err != nil {
		t.Fatal(err)
	}
	logs := &plugintest.LogBuffer{}
	view, err := newViewFiles(set.cfg, st, "", "node-a", zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	view.publish(set)
	if view.behind != nil {
		t.Fatal(view.behind)
	}
	r := &telemetryRig{set: set, st: st, view: view, devices: &staticDevices{devs: cat.Devices},
		clock: plugintest.NewClock(t, time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)), logs: logs}
	r.active, err = newActiveAllocations(st)
	if err != nil {
		t.Fatal(err)
	}
	r.tel = newGPUTelemetry(st, r.active, r.devices, view, "node-a", nil, r.clock, zerolog.New(logs))
	if err := r.tel.follow(set); err != nil {
		t.Fatal(err)
	}
	return r
}

// hold records an allocation of ids held by namespace/pod/container and
// returns its sequence number.
func (r *telemetryRig) hold(t testing.TB, namespace, pod, container string, ids ...string) uint64 {
	t.Helper()
	a, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: map[string]string{loadsock.EnvSocket: loadsock.ContainerPath}})
	if err != nil {
		t.Fatal(err)
	}
	r.active.add(a.Seq)
	if _, err := r.st.UpdateAllocation(a.Seq, func(x *store.Allocation) error {
		x.State, x.Namespace, x.Pod, x.Container, x.HeldSince = store.StateHeld, namespace, pod, container, r.clock.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return a.Seq
}

// scrape returns the telemetry listener's answer.
func (r *telemetryRig) scrape(t *testing.T) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.tel.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Code, rec.Body.String()
}

// sample is one line of an exposition.
type sample struct {
	name   string
	labels map[string]string
	value  string
}

var (
	sampleRE = regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$`)
	labelRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseExposition returns the samples of a text exposition.
func parseExposition(t *testing.T, body string) []sample {
	t.Helper()
	var out []sample
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("exposition line %q does not parse", line)
		}
		s := sample{name: m[1], labels: map[string]string{}, value: m[3]}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			s.labels[l[1]] = l[2]
		}
		out = append(out, s)
	}
	return out
}

// values returns, by gpu label, the value of the samples of name without
// pod labels or with any (one per GPU is expected).
func values(samples []sample, name string) map[string]string {
	out := map[string]string{}
	for _, s := range samples {
		if s.name == name {
			out[s.labels["gpu"]] = s.value
		}
	}
	return out
}

// smi runs the fake nvidia-smi as a container of the machine's GPUs ids
// would, reading the rig's status files.
func (r *telemetryRig) smi(t *testing.T, ids []string, args ...string) (string, int) {
	t.Helper()
	stored, err := r.st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	uuids := gpuUUIDs(stored)
	var us []string
	for _, id := range ids {
		i, _ := topology.GPUOf(id)
		us = append(us, uuids[i])
	}
	env := map[string]string{nvidiasmi.EnvIDs: strings.Join(ids, ","), status.EnvUUIDs: strings.Join(us, ","), status.EnvStatusDir: r.set.cfg.View.StatusDir}
	var out, errOut bytes.Buffer
	code := nvidiasmi.Main(args, func(k string) string { return env[k] }, &out, &errOut)
	if errOut.Len() > 0 {
		t.Errorf("nvidia-smi wrote to stderr: %s", errOut.String())
	}
	return out.String(), code
}

// TestTelemetry_NvidiaSMIShowsTheExportersValues: at every second of the
// clock, after the status files' update of that second, nvidia-smi in a
// container shows each GPU's utilization, memory used and free,
// temperature, power draw and SM clock as the telemetry serves them (power
// to nvidia-smi's 2 decimals), for every load model, with holders, a
// shared GPU's replicas, a workload's own load and a lost GPU.
func TestTelemetry_NvidiaSMIShowsTheExportersValues(t *testing.T) {
	for _, model := range telemetry.Models {
		t.Run(string(model), func(t *testing.T) {
			r := newTelemetryRig(t, "-topology=dgx-a100", "-replicas=2", "-telemetry-address=:9400", "-telemetry-writable",
				"-telemetry-model="+string(model), "-telemetry-seed=11")
			r.hold(t, "ml", "train-0", "trainer", "fake-0::0", "fake-1::0", "fake-2::1")
			r.hold(t, "ml", "train-1", "trainer", "fake-2::0")
			seq := r.hold(t, "web", "infer", "server", "fake-5::1")
			if n, err := r.tel.SetLoad(t.Context(), seq, loadsock.Request{UtilizationPercent: ptr(90.0), MemoryUsedMiB: ptr(30000)}); err != nil || n != 1 {
				t.Fatalf("SetLoad = %d, %v", n, err)
			}
			r.devices.setHealth("fake-7::0", false, "XID 79")
			r.devices.setHealth("fake-7::1", false, "XID 79")
			ids := []string{"fake-0", "fake-1", "fake-2", "fake-3", "fake-4", "fake-5", "fake-6"}
			const fields = "index,utilization.gpu,memory.used,memory.free,temperature.gpu,power.draw,clocks.sm"
			for sec := range 5 {
				now := r.clock.Now().Add(time.Duration(sec) * time.Second)
				r.clock.Set(now)
				r.tel.update(now)
				code, body := r.scrape(t)
				if code != 200 {
					t.Fatalf("scrape: %d %s", code, body)
				}
				samples := parseExposition(t, body)
				out, exit := r.smi(t, ids, "--query-gpu="+fields, "--format=csv,noheader,nounits")
				if exit != 0 {
					t.Fatalf("nvidia-smi: exit %d\n%s", exit, out)
				}
				want := map[string]string{}
				for _, f := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK"} {
					for gpu, v := range values(samples, f) {
						if f == "DCGM_FI_DEV_POWER_USAGE" {
							w, _ := strconv.ParseFloat(v, 64)
							v = strconv.FormatFloat(w, 'f', 2, 64)
						}
						want[gpu] += ", " + v
					}
				}
				for pos, line := range strings.Split(strings.TrimSpace(out), "\n") {
					if w := strconv.Itoa(pos) + want[strconv.Itoa(pos)]; line != w {
						t.Errorf("second %d, GPU %d: nvidia-smi %q, telemetry %q", sec, pos, line, w)
					}
				}
				if got := values(samples, "DCGM_FI_DEV_GPU_UTIL")["5"]; got != "90" {
					t.Errorf("second %d: GPU 5, whose holder set 90 %%, shows %s", sec, got)
				}
				if model == telemetry.ModelIdle && values(samples, "DCGM_FI_DEV_GPU_UTIL")["0"] != "0" {
					t.Errorf("idle model: GPU 0 is busy")
				}
			}
			if x := values(parseExposition(t, must(r.scrape(t))), "DCGM_FI_DEV_XID_ERRORS")["7"]; x != "79" {
				t.Errorf("XID of the lost GPU 7: %s, want 79", x)
			}
			live, err := status.ReadLive(os.DirFS(r.set.cfg.View.StatusDir))
			if err != nil {
				t.Fatal(err)
			}
			if x := live.GPUs[gpuUUIDs(mustDevices(t, r.st))[7]].LastXID; x == nil || *x != 79 {
				t.Errorf("live values of the lost GPU: lastXid %v, want 79", x)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func must(_ int, body string) string { return body }

func mustDevices(t *testing.T, st *store.Store) []store.Device {
	t.Helper()
	d, err := st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTelemetry_SetLoad: a workload's load is refused when the
// configuration does not allow it, when its value is out of range, for a
// GPU it does not hold, and while no container holds its allocation; it
// survives a rebuild of the exporter (a live change), and ends with its
// allocation.
func TestTelemetry_SetLoad(t *testing.T) {
	r := newTelemetryRig(t, "-devices=4", "-telemetry-address=:9400", "-telemetry-writable")
	seq := r.hold(t, "ml", "a", "c", "fake-1", "fake-2")
	other := r.hold(t, "ml", "b", "c", "fake-3")
	util := func(gpu string) string {
		return values(parseExposition(t, must(r.scrape(t))), "DCGM_FI_DEV_GPU_UTIL")[gpu]
	}
	refused := func(what string, err error, cause string) {
		t.Helper()
		var ref *loadsock.Refusal
		if !errors.As(err, &ref) || ref.Cause != cause {
			t.Errorf("%s: %v, want a refusal %s", what, err, cause)
		}
	}
	if n, err := r.tel.SetLoad(t.Context(), seq, loadsock.Request{UtilizationPercent: ptr(37.0), GPUs: []string{"fake-2"}}); err != nil || n != 1 {
		t.Fatalf("SetLoad fake-2: %d, %v", n, err)
	}
	if util("2") != "37" {
		t.Errorf("GPU 2 after SetLoad 37: %s", util("2"))
	}
	_, err := r.tel.SetLoad(t.Context(), seq, loadsock.Request{MemoryUsedMiB: ptr(1 << 30)})
	refused("memory above the GPU's", err, loadsock.CauseValue)
	_, err = r.tel.SetLoad(t.Context(), seq, loadsock.Request{UtilizationPercent: ptr(5.0), GPUs: []string{"fake-3"}})
	refused("another allocation's GPU", err, loadsock.CauseGPU)
	_, err = r.tel.SetLoad(t.Context(), seq, loadsock.Request{UtilizationPercent: ptr(5.0), GPUs: []string{"fake-1::0"}})
	refused("a replica id", err, loadsock.CauseGPU)

	// Not held yet: it waits, then says so.
	pending, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = r.tel.SetLoad(ctx, pending.Seq, loadsock.Request{UtilizationPercent: ptr(5.0)})
	refused("an allocation no container holds yet", err, loadsock.CauseNotHeld)

	// A live change builds a new exporter: the load stays.
	if err := r.tel.follow(r.set); err != nil {
		t.Fatal(err)
	}
	if util("2") != "37" {
		t.Errorf("GPU 2 after a rebuild: %s, want the workload's 37", util("2"))
	}
	// The allocation ends: its load is cleared, and a pod of the same name
	// holding the GPU again starts from the model.
	r.tel.keepLoads([]uint64{other})
	if _, err := r.st.UpdateAllocation(seq, func(x *store.Allocation) error {
		x.State, x.ReleasedAt = store.StateReleased, r.clock.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = r.tel.SetLoad(t.Context(), seq, loadsock.Request{Clear: true})
	refused("a released allocation", err, loadsock.CauseNotHeld)
	r.hold(t, "ml", "a", "c", "fake-1", "fake-2")
	if util("2") == "37" {
		t.Error("a new allocation of the same pod got the old allocation's load")
	}

	// A configuration without -telemetry-writable refuses.
	ro := newTelemetryRig(t, "-devices=2", "-telemetry-address=:9400")
	s := ro.hold(t, "ml", "a", "c", "fake-0")
	_, err = ro.tel.SetLoad(t.Context(), s, loadsock.Request{UtilizationPercent: ptr(5.0)})
	refused("without -telemetry-writable", err, loadsock.CauseOff)
}

// TestTelemetry_NoUUIDs: without a node identity the GPUs have no UUIDs;
// the listener answers 503 saying why.
func TestTelemetry_NoUUIDs(t *testing.T) {
	set, _ := viewSet(t, "-devices=2", "-telemetry-address=:9400")
	st, err := store.Open(set.cfg.StatePath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	specs := slices.Clone(set.Specs())
	for i := range specs {
		specs[i].UUID = ""
	}
	if _, err := st.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	tel := newGPUTelemetry(st, nil, &staticDevices{}, nil, "node-a", nil, nil, zerolog.Nop())
	if err := tel.follow(set); err == nil || !strings.Contains(err.Error(), "no UUID") {
		t.Fatalf("follow: %v, want an error naming the missing UUID", err)
	}
	rec := httptest.NewRecorder()
	tel.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "has no UUID") {
		t.Errorf("scrape: %d %q", rec.Code, rec.Body.String())
	}
	tel.update(time.Now()) // nothing to write, nothing to fail
}

// TestLoadGPUs: a request names GPUs of its allocation (a replica's GPU
// counts); none names them all.
func TestLoadGPUs(t *testing.T) {
	rec := store.Allocation{DeviceIDs: []string{"fake-3::1", "fake-5", "fake-3::0"}}
	for _, tc := range []struct {
		names []string
		want  []int
		err   string
	}{
		{nil, []int{3, 5}, ""},
		{[]string{"fake-5"}, []int{5}, ""},
		{[]string{"fake-5", "fake-3", "fake-5"}, []int{5, 3}, ""},
		{[]string{"fake-4"}, nil, `"fake-4" is not a GPU of this allocation (fake-3, fake-5)`},
		{[]string{"fake-3::1"}, nil, "is not a GPU of this allocation"},
		{[]string{"GPU-1234"}, nil, "is not a GPU of this allocation"},
	} {
		got, err := loadGPUs(rec, tc.names)
		switch {
		case tc.err != "":
			var ref *loadsock.Refusal
			if !errors.As(err, &ref) || ref.Cause != loadsock.CauseGPU || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("loadGPUs(%v) = %v, %v; want a gpu refusal %q", tc.names, got, err, tc.err)
			}
		case err != nil || !slices.Equal(got, tc.want):
			t.Errorf("loadGPUs(%v) = %v, %v; want %v", tc.names, got, err, tc.want)
		}
	}
}

// TestContainerView_LoadSocket: with -telemetry-writable the record stores
// VIRTUAL_GPU_LOAD_SOCKET and its answer mounts the allocation's socket
// directory read-only, whatever the strategy; the same record gets the same
// answer; a record without the variable gets no mount, whatever the
// configuration in force.
func TestContainerView_LoadSocket(t *testing.T) {
	for _, strategy := range []string{"envvar", "cdi-cri"} {
		set, stored := viewSet(t, "-devices=4", "-telemetry-address=:9400", "-telemetry-writable", "-device-list-strategy="+strategy)
		cat, err := set.catalog(stored)
		if err != nil {
			t.Fatal(err)
		}
		envs := cat.Env(cat.Devices[1:3])
		if envs[loadsock.EnvSocket] != loadsock.ContainerPath || envs[plugin.EnvIDs] != "" && envs[plugin.EnvIDs] != "fake-1,fake-2" {
			t.Errorf("%s: stored variables %v, want %s=%s", strategy, envs, loadsock.EnvSocket, loadsock.ContainerPath)
		}
		rec := plugin.Record{Seq: 41, IDs: []string{"fake-1", "fake-2"}, Envs: envs}
		spec, err := cat.Respond(rec, cat.Devices[1:3])
		if err != nil {
			t.Fatal(err)
		}
		want := plugin.Mount{ContainerPath: "/run/virtual-gpu-load", HostPath: filepath.Join(filepath.Dir(set.cfg.StatePath), "load", "41"), ReadOnly: true}
		if !slices.Contains(spec.Mounts, want) {
			t.Errorf("%s: mounts %v, want %v", strategy, spec.Mounts, want)
		}
		again, _ := cat.Respond(rec, cat.Devices[1:3])
		if fmt.Sprint(again) != fmt.Sprint(spec) {
			t.Errorf("%s: the same record answered twice differently:\n%v\n%v", strategy, spec, again)
		}
		rec.Envs = nil
		spec, _ = cat.Respond(rec, cat.Devices[1:3])
		for _, m := range spec.Mounts {
			if m.ContainerPath == loadsock.ContainerDir {
				t.Errorf("%s: a record without %s mounts a load socket", strategy, loadsock.EnvSocket)
			}
		}
	}
	set, stored := viewSet(t, "-devices=4")
	cat, _ := set.catalog(stored)
	if _, ok := cat.Env(cat.Devices[:1])[loadsock.EnvSocket]; ok {
		t.Error("without -telemetry-writable the record says it has a load socket")
	}
}

// listenAddress returns the address a running plugin's listener listens
// on, from its log line msg.
func listenAddress(t *testing.T, logs *plugintest.LogBuffer, msg string) string {
	t.Helper()
	re := regexp.MustCompile(`"address":"([^"]+)"[^\n]*` + regexp.QuoteMeta(msg))
	var addr string
	plugintest.WaitFor(t, 10*time.Second, "the log line "+msg, func() bool {
		m := re.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	return string(b)
}

// TestServe_Telemetry: serve with -telemetry-address and -telemetry-writable
// on dgx-a100: every GPU has its series, idle and without pod labels; a
// container holding 2 GPUs labels theirs; its allocation's load socket
// exists when Allocate answers, and nvidia-smi --set-load 90 through it
// shows 90 in the telemetry and in nvidia-smi; health set unhealthy with
// XID 79 shows the XID; when the pod ends, the labels go, the GPUs idle
// and the socket directory is removed; a live change to workstation-4gpu
// serves its 4 GPUs. The plugin's own /metrics stays promlint-clean.
func TestServe_Telemetry(t *testing.T) {
	n := newLiveNode(t)
	api := newFakeAPI(map[string]string{kube.ConfigLabel: "big"})
	reg := n.start(t, api, "-telemetry-address=127.0.0.1:0", "-telemetry-writable", "-metrics-address=127.0.0.1:0")
	plugintest.NextList(t, reg, 10*time.Second)
	url := "http://" + listenAddress(t, n.logs, "serving GPU telemetry") + "/metrics"
	scrape := func() []sample { return parseExposition(t, httpGet(t, url)) }
	utilOf := func(ss []sample) map[string]sample {
		out := map[string]sample{}
		for _, s := range ss {
			if s.name == "DCGM_FI_DEV_GPU_UTIL" {
				out[s.labels["gpu"]] = s
			}
		}
		return out
	}
	u := utilOf(scrape())
	if len(u) != 8 {
		t.Fatalf("%d GPU_UTIL series, want 8", len(u))
	}
	for gpu, s := range u {
		if s.value != "0" || s.labels["pod"] != "" || s.labels["Hostname"] != testNode || s.labels["modelName"] != "NVIDIA A100-SXM4-40GB" ||
			s.labels["DCGM_FI_DRIVER_VERSION"] != status.DriverVersion {
			t.Errorf("GPU %s before any pod: %+v", gpu, s)
		}
	}

	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-1", "fake-2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ans := resp.ContainerResponses[0]
	var sockDir string
	for _, m := range ans.Mounts {
		if m.ContainerPath == loadsock.ContainerDir {
			sockDir = m.HostPath
			if !m.ReadOnly {
				t.Error("the load socket's directory is mounted writable")
			}
		}
	}
	sock := filepath.Join(sockDir, loadsock.SocketName)
	if fi, err := os.Stat(sock); sockDir == "" || err != nil || fi.Mode()&os.ModeSocket == 0 || ans.Envs[loadsock.EnvSocket] != loadsock.ContainerPath {
		t.Fatalf("answer %v: want the load socket (%v) mounted and named", ans, err)
	}
	n.pods.SetPod("ml", "train", options.DefaultResourceName, plugintest.Container{Name: "trainer", IDs: []string{"fake-1", "fake-2"}})
	plugintest.WaitFor(t, 10*time.Second, "2 GPU_UTIL series labelled ml/train/trainer", func() bool {
		held := 0
		for _, s := range utilOf(scrape()) {
			if s.labels["namespace"] == "ml" && s.labels["pod"] == "train" && s.labels["container"] == "trainer" {
				held++
			}
		}
		return held == 2
	})

	// The container sets its load with nvidia-smi, which reads its status files.
	env := func(k string) string {
		switch k {
		case loadsock.EnvSocket:
			return sock
		case status.EnvStatusDir:
			return filepath.Join(filepath.Dir(n.state), "status")
		}
		return ans.Envs[k]
	}
	var out, errOut bytes.Buffer
	set := time.Now()
	if code := nvidiasmi.Main([]string{"--set-load", "90"}, env, &out, &errOut); code != 0 {
		t.Fatalf("nvidia-smi --set-load 90: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	u = utilOf(scrape())
	if u["1"].value != "90" || u["2"].value != "90" {
		t.Errorf("after --set-load 90: GPU_UTIL %v", u)
	}
	plugintest.WaitFor(t, 5*time.Second, "nvidia-smi to show 90 %", func() bool {
		out.Reset()
		nvidiasmi.Main([]string{"--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"}, env, &out, &errOut)
		return out.String() == "90\n90\n"
	})
	t.Logf("--set-load 90 -> nvidia-smi in the container shows it: %s", time.Since(set).Round(time.Millisecond))

	if _, err := n.admin.SetHealth(context.Background(), "fake-1", false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	var xid sample
	for _, s := range scrape() {
		if s.name == "DCGM_FI_DEV_XID_ERRORS" && s.labels["gpu"] == "1" {
			xid = s
		}
	}
	if xid.value != "79" || xid.labels["err_code"] != "79" || xid.labels["err_msg"] != "GPU has fallen off the bus" {
		t.Errorf("XID of GPU 1 after health set unhealthy XID 79: %+v", xid)
	}
	if _, err := n.admin.SetHealth(context.Background(), "fake-1", true, ""); err != nil {
		t.Fatal(err)
	}

	// A plugin restart: the socket comes back in the same directory, which
	// the running container has mounted.
	n.stop(t)
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the socket after the plugin stopped: %v, %v; want it kept for the kubelet's replays", fi, err)
	}
	n.logs = &plugintest.LogBuffer{}
	reg = n.start(t, api, "-telemetry-address=127.0.0.1:0", "-telemetry-writable", "-metrics-address=127.0.0.1:0")
	plugintest.NextList(t, reg, 10*time.Second)
	url = "http://" + listenAddress(t, n.logs, "serving GPU telemetry") + "/metrics"
	if got, err := loadsock.Send(t.Context(), sock, loadsock.Request{UtilizationPercent: ptr(55.0)}); err != nil || got != 2 {
		t.Errorf("the load socket after a plugin restart: %d, %v", got, err)
	}
	if u = utilOf(scrape()); u["1"].value != "55" || u["2"].value != "55" || u["2"].labels["pod"] != "train" {
		t.Errorf("after a restart and --set-load 55: GPU_UTIL %v", u)
	}

	n.pods.DeletePod("ml", "train")
	plugintest.WaitFor(t, 10*time.Second, "the pod's labels gone and its GPUs idle", func() bool {
		for _, s := range utilOf(scrape()) {
			if s.labels["pod"] != "" || s.value != "0" {
				return false
			}
		}
		return true
	})
	plugintest.WaitFor(t, 10*time.Second, "the released allocation's socket directory removed", func() bool {
		_, err := os.Stat(sockDir)
		return os.IsNotExist(err)
	})

	api.setLabel(kube.ConfigLabel, "small")
	plugintest.WaitFor(t, 10*time.Second, "the telemetry of workstation-4gpu", func() bool {
		u := utilOf(scrape())
		return len(u) == 4 && u["0"].labels["modelName"] == "NVIDIA RTX A6000"
	})

	body := httpGet(t, "http://"+listenAddress(t, n.logs, "serving /metrics, /healthz, /readyz")+"/metrics")
	if strings.Contains(body, "DCGM_") {
		t.Error("the plugin's own /metrics has telemetry series")
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// BenchmarkTelemetryUpdate is the live values' update of one second at 128
// GPUs (half of them held): the exporter's readings in one live file
// (WriteLive, not flushed), against the baseline of every GPU's status
// file replaced (Write, flushed) with them. disk-B/op is what reached the
// disk (/proc/self/io write_bytes).
func BenchmarkTelemetryUpdate(b *testing.B) {
	r := newTelemetryRig(b, "-devices=128", "-telemetry-address=:9400")
	for i := 0; i < 64; i += 2 {
		r.hold(b, "ml", "train-"+strconv.Itoa(i), "trainer", gpuID(i), gpuID(i+1))
	}
	now := r.clock.Now()
	b.Run("live", func(b *testing.B) {
		b.ReportAllocs()
		w0 := writeBytes(b)
		for b.Loop() {
			now = now.Add(time.Second)
			r.tel.update(now)
		}
		b.ReportMetric(float64(writeBytes(b)-w0)/float64(b.N), "disk-B/op")
		if r.tel.lastErr != "" {
			b.Fatal(r.tel.lastErr)
		}
	})
	b.Run("file-per-gpu", func(b *testing.B) {
		b.ReportAllocs()
		w0 := writeBytes(b)
		defer func() { b.ReportMetric(float64(writeBytes(b)-w0)/float64(b.N), "disk-B/op") }()
		for b.Loop() {
			now = now.Add(time.Second)
			rs, err := r.tel.state.Load().exp.ReadingsAt(now)
			if err != nil {
				b.Fatal(err)
			}
			r.view.mu.Lock()
			for _, g := range r.view.gpus {
				next := *g
				for i := range rs {
					if rs[i].UUID == g.UUID {
						next.Telemetry = liveTelemetry(g, &rs[i], now)
					}
				}
				if err := r.view.status.Write(&next); err != nil {
					b.Fatal(err)
				}
			}
			r.view.mu.Unlock()
		}
	})
}

// writeBytes is what this process has caused to be written to disk so far
// (/proc/self/io write_bytes).
func writeBytes(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skip("no /proc/self/io")
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Skip("no write_bytes in /proc/self/io")
	return 0
}

// BenchmarkTelemetryScrape is a scrape of the plugin's telemetry listener
// at 128 GPUs, 64 of them held by 32 containers, with the holders read from
// a real state file that also keeps 10,000 released allocations (the
// exporter reads the active ones at every scrape), against the same
// scrape's exposition alone (the holders and health already read), the
// baseline.
func BenchmarkTelemetryScrape(b *testing.B) {
	r := newTelemetryRig(b, "-devices=128", "-telemetry-address=:9400")
	for i := range 10000 {
		a, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: []string{gpuID(64 + i%64)}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.st.UpdateAllocation(a.Seq, func(x *store.Allocation) error {
			x.State, x.Namespace, x.Pod, x.Container, x.ReleasedAt = store.StateReleased, "old", "job-"+strconv.Itoa(i), "c", r.clock.Now()
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 64; i += 2 {
		r.hold(b, "ml", "train-"+strconv.Itoa(i), "trainer", gpuID(i), gpuID(i+1))
	}
	b.Run("listener", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			r.tel.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if rec.Code != 200 {
				b.Fatal(rec.Code)
			}
		}
	})
	exp := r.tel.state.Load().exp
	rs, err := exp.ReadingsAt(r.clock.Now())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("exposition-only", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = exp.AppendExposition(buf[:0], rs)
		}
	})
}
