package telemetry_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func TestNew_RefusesBadConfig(t *testing.T) {
	m := mustMachine(t, "dgx-a100")
	good := func() telemetry.Config {
		return telemetry.Config{GPUs: machineGPUs(m, nil)[:2], GPUModel: m.GPUModel()}
	}
	for _, tc := range []struct {
		name   string
		change func(*telemetry.Config)
		is     error
		says   string
	}{
		{"no GPUs", func(c *telemetry.Config) { c.GPUs = nil }, telemetry.ErrInvalidConfig, "no GPUs"},
		{"unknown model", func(c *telemetry.Config) { c.Model = "busy" }, telemetry.ErrUnknownModel, `"busy"`},
		{"no product", func(c *telemetry.Config) { c.GPUModel.Product = "" }, telemetry.ErrInvalidConfig, "product"},
		{"no memory", func(c *telemetry.Config) { c.GPUModel.MemoryMiB = 0 }, telemetry.ErrInvalidConfig, "memory 0 MiB"},
		{"idle power at limit", func(c *telemetry.Config) { c.GPUModel.IdlePowerW = c.GPUModel.PowerLimitW },
			telemetry.ErrInvalidConfig, "idle 400 W, limit 400 W"},
		{"negative index", func(c *telemetry.Config) { c.GPUs[0].Index = -1 }, telemetry.ErrInvalidConfig, "GPU -1: negative index"},
		{"index twice", func(c *telemetry.Config) { c.GPUs[1].Index = 0 }, telemetry.ErrInvalidConfig, "GPU 0 listed twice"},
		{"no UUID", func(c *telemetry.Config) { c.GPUs[1].UUID = "" }, telemetry.ErrInvalidConfig, "GPU 1: UUID"},
		{"no bus id", func(c *telemetry.Config) { c.GPUs[1].PCIBusID = "" }, telemetry.ErrInvalidConfig, "GPU 1: PCI bus id"},
		{"no device ids", func(c *telemetry.Config) { c.GPUs[1].DeviceIDs = nil }, telemetry.ErrInvalidConfig, "GPU 1: no device ids"},
		{"empty device id", func(c *telemetry.Config) { c.GPUs[1].DeviceIDs = []string{""} }, telemetry.ErrInvalidConfig, "empty device id"},
		{"shared device id", func(c *telemetry.Config) { c.GPUs[1].DeviceIDs = []string{"fake-0"} },
			telemetry.ErrInvalidConfig, `device id "fake-0" already belongs to GPU 0`},
		{"control character in hostname", func(c *telemetry.Config) { c.Hostname = "node\n1" }, telemetry.ErrInvalidConfig, "hostname"},
		{"invalid UTF-8 in driver version", func(c *telemetry.Config) { c.DriverVersion = "\xff" }, telemetry.ErrInvalidConfig, "driver version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good()
			tc.change(&cfg)
			e, err := telemetry.New(cfg)
			if e != nil || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("New = %v, %v; want %v saying %q", e, err, tc.is, tc.says)
			}
		})
	}
	if _, err := telemetry.New(good()); err != nil {
		t.Errorf("New(good config) = %v", err)
	}
}

// Without Hostname and DriverVersion their labels are left out, as
// dcgm-exporter --no-hostname and a blank driver field do.
func TestExporter_OptionalLabels(t *testing.T) {
	m := mustMachine(t, "dgx-a100")
	text := exposition(t, mustNew(t, telemetry.Config{GPUs: machineGPUs(m, nil)[:1], GPUModel: m.GPUModel()}))
	if strings.Contains(text, "Hostname=") || strings.Contains(text, "DCGM_FI_DRIVER_VERSION=") {
		t.Errorf("empty labels printed:\n%s", text)
	}
	if !strings.Contains(text, `modelName="NVIDIA A100-SXM4-40GB"}`) {
		t.Errorf("modelName not last:\n%s", text)
	}
}

// count returns how many samples of name an exposition has for GPU gpu,
// and how many of them carry pod labels.
func count(text, name, gpu string) (all, withPod int) {
	for _, line := range series(text, gpu) {
		if strings.HasPrefix(line, name+"{") {
			all++
			if strings.Contains(line, ",pod=") {
				withPod++
			}
		}
	}
	return all, withPod
}

// A GPU shared by several containers has one series per field labelled
// with its last holder, or with PerPod one per holder (GPU_UTIL and
// FB_USED keeping the device-level one); a free GPU keeps its series
// without pod labels either way.
func TestExporter_SharedGPUSeries(t *testing.T) {
	for _, tc := range []struct {
		perPod bool
		name   string
		gpu    string
		all    int
		pod    int
	}{
		{false, "DCGM_FI_DEV_SM_CLOCK", "3", 1, 1},
		{false, "DCGM_FI_DEV_GPU_UTIL", "3", 1, 1},
		{false, "DCGM_FI_DEV_FB_USED", "3", 1, 1},
		{false, "DCGM_FI_DEV_GPU_UTIL", "0", 1, 0},
		{true, "DCGM_FI_DEV_SM_CLOCK", "3", 2, 2},
		{true, "DCGM_FI_DEV_XID_ERRORS", "3", 2, 2},
		{true, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "3", 2, 2},
		{true, "DCGM_FI_DEV_GPU_UTIL", "3", 3, 2},
		{true, "DCGM_FI_DEV_FB_USED", "3", 3, 2},
		{true, "DCGM_FI_DEV_FB_FREE", "3", 2, 2},
		{true, "DCGM_FI_DEV_GPU_UTIL", "1", 2, 1},
		{true, "DCGM_FI_DEV_SM_CLOCK", "1", 1, 1},
		{true, "DCGM_FI_DEV_GPU_UTIL", "0", 1, 0},
		{true, "DCGM_FI_DEV_XID_ERRORS", "4", 1, 1},
		{true, "DCGM_FI_DEV_GPU_UTIL", "4", 0, 0},
	} {
		text := exposition(t, scenario(t, telemetry.ModelSteady, tc.perPod))
		if all, pod := count(text, tc.name, tc.gpu); all != tc.all || pod != tc.pod {
			t.Errorf("perPod %v, %s of GPU %s: %d series, %d with pod labels; want %d, %d",
				tc.perPod, tc.name, tc.gpu, all, pod, tc.all, tc.pod)
		}
	}
	// Without PerPod the last holder labels the GPU, and no vgpu label.
	text := exposition(t, scenario(t, telemetry.ModelSteady, false))
	for _, line := range series(text, "3") {
		if !strings.Contains(line, `namespace="team-b",pod="infer-b"`) || strings.Contains(line, "vgpu=") {
			t.Errorf("shared GPU without PerPod: %s; want the last holder's labels, no vgpu", line)
		}
	}
}

// The per-pod values of a shared GPU are each holder's share, and the
// device-level value their sum.
func TestExporter_PerPodValuesAreShares(t *testing.T) {
	e := scenario(t, telemetry.ModelSteady, true)
	r := mustReadings(t, e)[3]
	text := exposition(t, e)
	for _, want := range []string{
		`DCGM_FI_DEV_GPU_UTIL{gpu="3",`, `namespace="team-a",pod="infer-a",vgpu="0"} ` + itoa(r.Holders[0].UtilizationPercent),
		`namespace="team-b",pod="infer-b",vgpu="1"} ` + itoa(r.Holders[1].UtilizationPercent),
		`namespace="team-a",pod="infer-a",vgpu="0"} ` + itoa(r.Holders[0].MemoryUsedMiB),
		`DCGM_FI_DRIVER_VERSION="550.54.15"} ` + itoa(r.UtilizationPercent),
		`DCGM_FI_DRIVER_VERSION="550.54.15"} ` + itoa(r.MemoryUsedMiB),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if got := r.Holders[0].UtilizationPercent + r.Holders[1].UtilizationPercent; abs(got-r.UtilizationPercent) > 1 {
		t.Errorf("shares %d%% + %d%% != %d%%", r.Holders[0].UtilizationPercent, r.Holders[1].UtilizationPercent, r.UtilizationPercent)
	}
}

// The handler serves the exposition with the text format's content type;
// when the holders cannot be read the scrape fails with 503 and one
// warning, rather than show held GPUs as idle.
func TestHandler(t *testing.T) {
	m := mustMachine(t, "dgx-a100")
	hs := &holdings{}
	var logs bytes.Buffer
	e := mustNew(t, telemetry.Config{GPUs: machineGPUs(m, nil), GPUModel: m.GPUModel(), Holders: hs,
		Clock: storetest.NewClock(t, epoch), Logger: zerolog.New(&logs)})
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()

	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	resp, body := get("/metrics")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != telemetry.ContentType || body != exposition(t, e) {
		t.Errorf("GET /metrics: %d %q, body equal to the exposition: %v", resp.StatusCode, resp.Header.Get("Content-Type"), body == exposition(t, e))
	}
	parse(t, body)
	if resp, _ := get("/other"); resp.StatusCode != 404 {
		t.Errorf("GET /other: %d, want 404", resp.StatusCode)
	}
	hs.Fail(errors.New("store closed"))
	resp, body = get("/metrics")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "store closed") {
		t.Errorf("unreadable holders: %d %q; want 503 naming the error", resp.StatusCode, body)
	}
	if n := strings.Count(logs.String(), `"level":"warn"`); n != 1 || !strings.Contains(logs.String(), "store closed") {
		t.Errorf("logged %d warnings, want 1 naming the error:\n%s", n, logs.String())
	}
}

// StoreHolders reads who holds what from real allocation records: held
// records only, oldest first.
func TestStoreHolders(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{})
	var specs []store.DeviceSpec
	for i := range 4 {
		specs = append(specs, store.DeviceSpec{ID: topology.ReplicaID(0, i), Index: i, NUMA: -1})
	}
	specs = append(specs, store.DeviceSpec{ID: "fake-1", Index: 4, NUMA: -1})
	if _, err := s.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	record := func(state, ns, pod string, ids ...string) {
		t.Helper()
		a, err := s.RecordAllocation(store.Allocation{DeviceIDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		if state == store.StateAllocated {
			return
		}
		if _, err := s.UpdateAllocation(a.Seq, func(a *store.Allocation) error {
			a.State, a.Namespace, a.Pod, a.Container = state, ns, pod, "main"
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	record(store.StateReleased, "ml", "gone", "fake-0::0")
	record(store.StateHeld, "ml", "first", "fake-0::1")
	record(store.StateAllocated, "", "", "fake-0::2")
	record(store.StateHeld, "ml", "second", "fake-0::3", "fake-1")

	got, err := telemetry.StoreHolders{Store: s}.Holdings()
	if err != nil {
		t.Fatal(err)
	}
	want := []telemetry.Holding{hold("ml", "first", "main", "fake-0::1"), hold("ml", "second", "main", "fake-0::3", "fake-1")}
	if len(got) != len(want) {
		t.Fatalf("holdings %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Holder != want[i].Holder || strings.Join(got[i].DeviceIDs, ",") != strings.Join(want[i].DeviceIDs, ",") {
			t.Errorf("holding %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if hs, err := (telemetry.StoreHolders{}).Holdings(); hs != nil || err != nil {
		t.Errorf("zero StoreHolders: %v, %v; want nothing", hs, err)
	}

	// Wired into an exporter: the shared GPU 0 carries the newest holder.
	m := mustMachine(t, "dgx-a100")
	gpus := machineGPUs(m, map[int]int{0: 4})[:2]
	e := mustNew(t, telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel(), Holders: telemetry.StoreHolders{Store: s}, Clock: storetest.NewClock(t, epoch)})
	rs := mustReadings(t, e)
	if len(rs[0].Holders) != 2 || rs[0].Holders[1].Pod != "second" || rs[0].Holders[1].VGPU != "3" || len(rs[1].Holders) != 1 {
		t.Errorf("readings from the store: %+v", rs)
	}
}

// Scrapes, readings and overrides may run at once (run with -race).
func TestExporter_Concurrent(t *testing.T) {
	e, c, hs := overrideScenario(t)
	h := e.Handler()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				switch w {
				case 0:
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
					if rec.Code != 200 {
						t.Errorf("scrape: %d", rec.Code)
					}
				case 1:
					if err := e.SetOverride(0, job, telemetry.Override{UtilizationPercent: ptr(float64(i))}); err != nil {
						t.Error(err)
					}
					e.ClearOverride(1, job)
				case 2:
					c.Advance(time.Second)
					hs.Set(hold("ml", "job", "main", "fake-0", "fake-1"), hold("ml", "other", "main", "fake-1"))
				default:
					if _, err := e.Readings(); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
}

// Readings of GPUs an exporter does not have are skipped, not a panic.
func TestAppendExposition_ForeignReadings(t *testing.T) {
	rs := mustReadings(t, scenario(t, telemetry.ModelSteady, true))
	m := mustMachine(t, "pcie-8gpu")
	small := mustNew(t, telemetry.Config{GPUs: machineGPUs(m, nil)[:1], GPUModel: m.GPUModel()})
	text := string(small.AppendExposition(nil, rs))
	if strings.Contains(text, `gpu="1"`) || !strings.Contains(text, `gpu="0"`) {
		t.Errorf("exposition of foreign readings:\n%s", text)
	}
}
