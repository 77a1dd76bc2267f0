package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// staticDevices is the agent's device list as the telemetry reads it.
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

// serviceRig is the telemetry of a configuration over a real state file
// and status directory, at a clock the test sets.
type serviceRig struct {
	set      *gpuset.Set
	settings telemetry.Settings
	st       *store.Store
	files    *view.Files
	status   string // the status directory
	devices  *staticDevices
	clock    *storetest.Clock
	tel      *telemetry.Service
	logs     *plugintest.LogBuffer
}

// newServiceRig builds the set of a machine (a preset, or n generic GPUs
// for "generic-<n>") shared replicas ways for node "node-a", reconciles a
// fresh state file with it, publishes its status files and builds its
// telemetry with settings.
func newServiceRig(t testing.TB, machine string, replicas int, settings telemetry.Settings) *serviceRig {
	t.Helper()
	dir := plugintest.ShortTempDir(t)
	set, err := gpuset.New(plugintest.GPUConfig(t, machine, gpuset.Sharing{Replicas: replicas}), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.MustOpenPath(t, filepath.Join(dir, "state.db"), store.Options{})
	devs := plugintest.Served(t, st, set)
	logs := &plugintest.LogBuffer{}
	vcfg := plugintest.ViewConfig(dir)
	vcfg.LoadSockets = settings.Writable
	files, err := view.NewFiles(vcfg, st, os.Args[0], "node-a", zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	files.Publish(view.New(vcfg, set))
	if strings.Contains(logs.String(), "not all brought up to date") {
		t.Fatalf("status files not written:\n%s", logs)
	}
	r := &serviceRig{set: set, settings: settings, st: st, files: files, status: vcfg.StatusDir, devices: &staticDevices{devs: devs},
		clock: storetest.NewClock(t, time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)), logs: logs}
	r.tel = telemetry.NewService(telemetry.ServiceConfig{Store: st, Devices: r.devices, Live: files, Hostname: "node-a", Clock: r.clock, Logger: zerolog.New(logs)})
	if err := r.tel.Follow(set, settings); err != nil {
		t.Fatal(err)
	}
	return r
}

// hold records an allocation of ids held by namespace/pod/container and
// returns its sequence number.
func (r *serviceRig) hold(t testing.TB, namespace, pod, container string, ids ...string) uint64 {
	t.Helper()
	a, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: map[string]string{loadsock.EnvSocket: loadsock.ContainerPath}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.UpdateAllocation(a.Seq, func(x *store.Allocation) error {
		x.State, x.Namespace, x.Pod, x.Container, x.HeldSince = store.StateHeld, namespace, pod, container, r.clock.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return a.Seq
}

// scrape returns the telemetry listener's answer.
func (r *serviceRig) scrape(t *testing.T) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.tel.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Code, rec.Body.String()
}

// smi runs the fake nvidia-smi as a container of the machine's GPUs ids
// would, reading the rig's status files.
func (r *serviceRig) smi(t *testing.T, ids []string, args ...string) (string, int) {
	t.Helper()
	stored, err := r.st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	uuids := gpuset.UUIDs(stored)
	var us []string
	for _, id := range ids {
		i, _ := topology.GPUOf(id)
		us = append(us, uuids[i])
	}
	env := map[string]string{nvidiasmi.EnvIDs: strings.Join(ids, ","), status.EnvUUIDs: strings.Join(us, ","), status.EnvStatusDir: r.status}
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
			r := newServiceRig(t, "dgx-a100", 2, telemetry.Settings{Model: model, Seed: 11, Writable: true})
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
				r.tel.UpdateAt(now)
				code, body := r.scrape(t)
				if code != 200 {
					t.Fatalf("scrape: %d %s", code, body)
				}
				samples := plugintest.ParseExposition(t, body)
				out, exit := r.smi(t, ids, "--query-gpu="+fields, "--format=csv,noheader,nounits")
				if exit != 0 {
					t.Fatalf("nvidia-smi: exit %d\n%s", exit, out)
				}
				want := map[string]string{}
				for _, f := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK"} {
					for gpu, v := range plugintest.Values(samples, f) {
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
				if got := plugintest.Values(samples, "DCGM_FI_DEV_GPU_UTIL")["5"]; got != "90" {
					t.Errorf("second %d: GPU 5, whose holder set 90 %%, shows %s", sec, got)
				}
				if model == telemetry.ModelIdle && plugintest.Values(samples, "DCGM_FI_DEV_GPU_UTIL")["0"] != "0" {
					t.Errorf("idle model: GPU 0 is busy")
				}
			}
			if x := plugintest.Values(plugintest.ParseExposition(t, must(r.scrape(t))), "DCGM_FI_DEV_XID_ERRORS")["7"]; x != "79" {
				t.Errorf("XID of the lost GPU 7: %s, want 79", x)
			}
			live, err := status.ReadLive(os.DirFS(r.status))
			if err != nil {
				t.Fatal(err)
			}
			if x := live.GPUs[gpuset.UUIDs(mustDevices(t, r.st))[7]].LastXID; x == nil || *x != 79 {
				t.Errorf("live values of the lost GPU: lastXid %v, want 79", x)
			}
		})
	}
}

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
	r := newServiceRig(t, "generic-4", 1, telemetry.Settings{Model: telemetry.ModelSteady, Writable: true})
	seq := r.hold(t, "ml", "a", "c", "fake-1", "fake-2")
	other := r.hold(t, "ml", "b", "c", "fake-3")
	util := func(gpu string) string {
		return plugintest.Values(plugintest.ParseExposition(t, must(r.scrape(t))), "DCGM_FI_DEV_GPU_UTIL")[gpu]
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
	if err := r.tel.Follow(r.set, r.settings); err != nil {
		t.Fatal(err)
	}
	if util("2") != "37" {
		t.Errorf("GPU 2 after a rebuild: %s, want the workload's 37", util("2"))
	}
	// The allocation ends: its load is cleared, and a pod of the same name
	// holding the GPU again starts from the model.
	r.tel.KeepLoads([]uint64{other})
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
	ro := newServiceRig(t, "generic-2", 1, telemetry.Settings{Model: telemetry.ModelSteady})
	s := ro.hold(t, "ml", "a", "c", "fake-0")
	_, err = ro.tel.SetLoad(t.Context(), s, loadsock.Request{UtilizationPercent: ptr(5.0)})
	refused("without -telemetry-writable", err, loadsock.CauseOff)
}

// TestTelemetry_NoUUIDs: without a node identity the GPUs have no UUIDs;
// the listener answers 503 saying why.
func TestTelemetry_NoUUIDs(t *testing.T) {
	m, err := topology.Generic(2)
	if err != nil {
		t.Fatal(err)
	}
	set, err := gpuset.New(gpuset.Config{ResourceName: "unicore.mcyou.cc/gpu", Machine: m, AllocationPolicy: allocator.PolicyBestConnected}, "")
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.MustOpen(t, store.Options{})
	specs := slices.Clone(set.Specs())
	for i := range specs {
		specs[i].UUID = ""
	}
	if _, err := st.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	tel := telemetry.NewService(telemetry.ServiceConfig{Store: st, Devices: &staticDevices{}, Hostname: "node-a"})
	if err := tel.Follow(set, telemetry.Settings{Model: telemetry.ModelSteady}); err == nil || !strings.Contains(err.Error(), "no UUID") {
		t.Fatalf("follow: %v, want an error naming the missing UUID", err)
	}
	rec := httptest.NewRecorder()
	tel.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "has no UUID") {
		t.Errorf("scrape: %d %q", rec.Code, rec.Body.String())
	}
	tel.UpdateAt(time.Now()) // nothing to write, nothing to fail
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
		got, err := telemetry.LoadGPUs(rec, tc.names)
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
