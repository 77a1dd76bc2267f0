package metrics_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// deviceList is a Devices whose list the test changes.
type deviceList struct {
	list atomic.Pointer[[]plugin.Device]
}

func newDeviceList(devs ...plugin.Device) *deviceList {
	d := &deviceList{}
	d.set(devs)
	return d
}

func (d *deviceList) set(devs []plugin.Device) { d.list.Store(&devs) }
func (d *deviceList) Devices() []plugin.Device { return *d.list.Load() }

// registration is a Registration the test moves.
type registration struct {
	registered atomic.Bool
	count      atomic.Uint64
}

func (r *registration) Registered() bool      { return r.registered.Load() }
func (r *registration) Registrations() uint64 { return r.count.Load() }

// fakeDevices returns healthy devices fake-0 … fake-n-1.
func fakeDevices(n int) []plugin.Device {
	devs := make([]plugin.Device, n)
	for i := range devs {
		devs[i] = plugin.Device{ID: fmt.Sprintf("fake-%d", i), Index: i, NUMA: -1, Healthy: true}
	}
	return devs
}

// mustStore opens a real store in a temp dir that knows devs.
func mustStore(t *testing.T, devs []plugin.Device) *store.Store {
	t.Helper()
	st := storetest.MustOpen(t, store.Options{})
	specs := make([]store.DeviceSpec, len(devs))
	for i, d := range devs {
		specs[i] = store.DeviceSpec{ID: d.ID, Index: d.Index, NUMA: -1}
	}
	if _, err := st.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	return st
}

// record stores an allocation of ids and moves it to state.
func record(t *testing.T, st *store.Store, state string, ids ...string) {
	t.Helper()
	a, err := st.RecordAllocation(store.Allocation{DeviceIDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	if state == store.StateAllocated {
		return
	}
	if _, err := st.UpdateAllocation(a.Seq, func(a *store.Allocation) error { a.State = state; return nil }); err != nil {
		t.Fatal(err)
	}
}

func assertContains(t *testing.T, what, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w+"\n") {
			t.Errorf("%s: missing %q", what, w)
		}
	}
}

func TestMetrics_NumbersMove(t *testing.T) {
	devices := newDeviceList(plugin.Device{ID: "fake-0", Healthy: true}, plugin.Device{ID: "fake-1", Healthy: true}, plugin.Device{ID: "fake-2"})
	reg := &registration{}
	m := metrics.New(metrics.Config{Devices: devices, Registration: reg, Score: func(set []int) int { return 100 * len(set) }})
	h := m.Handler(func() error { return nil }, func() error { return nil })

	_, before := get(t, h, "/metrics")
	assertContains(t, "before", before,
		`virtual_gpu_devices{health="healthy"} 2`, `virtual_gpu_devices{health="unhealthy"} 1`,
		`virtual_gpu_allocations_total{result="ok"} 0`, `virtual_gpu_allocations_total{result="rejected"} 0`,
		`virtual_gpu_allocations_total{result="failed"} 0`, `virtual_gpu_allocate_duration_seconds_count 0`,
		`virtual_gpu_registered 0`, `virtual_gpu_registrations_total 0`,
		`virtual_gpu_health_changes_total{cause="admin"} 0`, `virtual_gpu_health_changes_total{cause="fault-injection"} 0`,
		`virtual_gpu_health_changes_total{cause="reconcile"} 0`)
	if !strings.Contains(before, "go_goroutines") {
		t.Error("before: no Go runtime metrics")
	}

	m.Allocated([]string{"fake-0", "fake-1"}, plugin.ResultOK, 3*time.Millisecond)
	m.Allocated([]string{"fake-9"}, plugin.ResultRejected, time.Microsecond)
	m.Allocated([]string{"fake-0"}, plugin.ResultFailed, 2*time.Millisecond)
	m.Preferred([]int{0, 1}, plugin.ResultOK, 3*time.Microsecond)
	m.Preferred(nil, plugin.ResultFailed, time.Microsecond)
	m.HealthChanged("fake-2", false, store.CauseAdmin)
	reg.count.Store(2)
	reg.registered.Store(true)
	devices.set([]plugin.Device{{ID: "fake-0", Healthy: true}, {ID: "fake-1", Healthy: true}, {ID: "fake-2", Healthy: true}})

	_, after := get(t, h, "/metrics")
	assertContains(t, "after", after,
		`virtual_gpu_devices{health="healthy"} 3`,
		`virtual_gpu_allocations_total{result="ok"} 1`,
		`virtual_gpu_allocations_total{result="rejected"} 1`,
		`virtual_gpu_allocations_total{result="failed"} 1`,
		`virtual_gpu_allocated_devices_total 2`,
		`virtual_gpu_allocate_duration_seconds_count 1`, // answered requests only
		`virtual_gpu_allocate_duration_seconds_sum 0.003`,
		`virtual_gpu_preferred_allocations_total{result="ok"} 1`,
		`virtual_gpu_preferred_allocations_total{result="error"} 1`,
		`virtual_gpu_preferred_allocation_duration_seconds_count 1`,
		`virtual_gpu_preferred_allocation_score_sum 200`,
		`virtual_gpu_health_changes_total{cause="admin"} 1`,
		`virtual_gpu_registrations_total 2`,
		`virtual_gpu_registered 1`,
	)
}

// The whole scrape, with every optional series, passes promlint.
func TestMetrics_Promlint(t *testing.T) {
	devs := fakeDevices(4)
	st := mustStore(t, devs)
	record(t, st, store.StateHeld, "fake-0")
	m := metrics.New(metrics.Config{Version: "v1.2.3", Devices: newDeviceList(devs...), Registration: &registration{},
		Allocations: st, Score: func([]int) int { return 1 }})
	m.Allocated([]string{"fake-0"}, plugin.ResultOK, time.Millisecond)
	m.Preferred([]int{0}, plugin.ResultOK, time.Microsecond)
	_, body := get(t, m.Handler(func() error { return nil }, func() error { return nil }), "/metrics")
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestMetrics_BuildInfo(t *testing.T) {
	revision := "unknown" // go test does not stamp the VCS revision; go build does
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	for _, tt := range []struct{ version, want string }{{"v1.2.3", "v1.2.3"}, {"", "unknown"}} {
		_, body := get(t, metrics.New(metrics.Config{Version: tt.version}).Handler(nil, nil), "/metrics")
		assertContains(t, "build info", body,
			fmt.Sprintf(`virtual_gpu_build_info{goversion=%q,revision=%q,version=%q} 1`, runtime.Version(), revision, tt.want))
	}
}

// Each device counts in the state of its newest allocation record, read
// from a real store.
func TestMetrics_DevicesByAllocationState(t *testing.T) {
	devs := fakeDevices(7)
	st := mustStore(t, devs)
	record(t, st, store.StateAbandoned, "fake-0") // older
	record(t, st, store.StateAllocated, "fake-0") // newest: allocated
	record(t, st, store.StateHeld, "fake-1", "fake-2")
	record(t, st, store.StateReleased, "fake-2") // newest for fake-2: free
	record(t, st, store.StateHeld, "fake-3")
	record(t, st, store.StateAbandoned, "fake-3") // newest for fake-3: abandoned
	record(t, st, store.StateAbandoned, "fake-4")
	// fake-5 and fake-6: never allocated, free.
	m := metrics.New(metrics.Config{Devices: newDeviceList(devs...), Allocations: st})
	_, body := get(t, m.Handler(nil, nil), "/metrics")
	assertContains(t, "states", body,
		`virtual_gpu_devices_by_allocation_state{state="allocated"} 1`,
		`virtual_gpu_devices_by_allocation_state{state="held"} 1`,
		`virtual_gpu_devices_by_allocation_state{state="abandoned"} 2`,
		`virtual_gpu_devices_by_allocation_state{state="free"} 3`,
	)
}

// A device whose newest record is far back in a long history is still
// found (the scrape reads the history in growing pages).
func TestMetrics_DevicesByAllocationState_LongHistory(t *testing.T) {
	devs := fakeDevices(2)
	st := mustStore(t, devs)
	record(t, st, store.StateHeld, "fake-1")
	for range 300 { // more than one page
		record(t, st, store.StateAllocated, "fake-0")
	}
	m := metrics.New(metrics.Config{Devices: newDeviceList(devs...), Allocations: st})
	_, body := get(t, m.Handler(nil, nil), "/metrics")
	assertContains(t, "states", body,
		`virtual_gpu_devices_by_allocation_state{state="allocated"} 1`,
		`virtual_gpu_devices_by_allocation_state{state="held"} 1`,
		`virtual_gpu_devices_by_allocation_state{state="free"} 0`,
	)
}

// A store that cannot be read leaves its series out of the scrape, logs why,
// and the rest is served.
func TestMetrics_AllocationStateUnreadable(t *testing.T) {
	devs := fakeDevices(2)
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	var logs plugintest.LogBuffer
	m := metrics.New(metrics.Config{Devices: newDeviceList(devs...), Allocations: st, Logger: zerolog.New(&logs)})
	code, body := get(t, m.Handler(nil, nil), "/metrics")
	if code != http.StatusOK || strings.Contains(body, "devices_by_allocation_state{") {
		t.Errorf("scrape = %d, with the state series: %v", code, strings.Contains(body, "devices_by_allocation_state{"))
	}
	assertContains(t, "rest", body, `virtual_gpu_devices{health="healthy"} 2`)
	if logs.Count("metrics scrape incomplete") != 1 {
		t.Errorf("log = %q, want one warning", logs.String())
	}
}

func TestMetrics_Probes(t *testing.T) {
	m := metrics.New(metrics.Config{})
	h := m.Handler(func() error { return nil }, func() error { return errors.New("not registered with the kubelet") })
	if code, body := get(t, h, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "not registered") {
		t.Errorf("/readyz = %d %q", code, body)
	}
}
