package metrics_test

import (
	"context"
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

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
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
	list atomic.Pointer[[]gpuset.Device]
}

func newDeviceList(devs ...gpuset.Device) *deviceList {
	d := &deviceList{}
	d.set(devs)
	return d
}

func (d *deviceList) set(devs []gpuset.Device) { d.list.Store(&devs) }
func (d *deviceList) Devices() []gpuset.Device { return *d.list.Load() }

// registration is a Registration the test moves.
type registration struct {
	registered atomic.Bool
	count      atomic.Uint64
}

func (r *registration) Registered() bool      { return r.registered.Load() }
func (r *registration) Registrations() uint64 { return r.count.Load() }

// fakeDevices returns healthy devices fake-0 … fake-n-1.
func fakeDevices(n int) []gpuset.Device {
	devs := make([]gpuset.Device, n)
	for i := range devs {
		devs[i] = gpuset.Device{ID: fmt.Sprintf("fake-%d", i), Index: i, NUMA: -1, Healthy: true}
	}
	return devs
}

// mustStore opens a real store in a temp dir that knows devs.
func mustStore(t *testing.T, devs []gpuset.Device) *store.Store {
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
	devices := newDeviceList(gpuset.Device{ID: "fake-0", Healthy: true}, gpuset.Device{ID: "fake-1", Healthy: true}, gpuset.Device{ID: "fake-2"})
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

	m.Allocated([]string{"fake-0", "fake-1"}, metrics.ResultOK, 3*time.Millisecond)
	m.Allocated([]string{"fake-9"}, metrics.ResultRejected, time.Microsecond)
	m.Allocated([]string{"fake-0"}, metrics.ResultFailed, 2*time.Millisecond)
	m.Preferred([]int{0, 1}, metrics.ResultOK, 3*time.Microsecond)
	m.Preferred(nil, metrics.ResultFailed, time.Microsecond)
	m.HealthChanged("fake-2", false, store.CauseAdmin)
	reg.count.Store(2)
	reg.registered.Store(true)
	devices.set([]gpuset.Device{{ID: "fake-0", Healthy: true}, {ID: "fake-1", Healthy: true}, {ID: "fake-2", Healthy: true}})

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
	m.Allocated([]string{"fake-0"}, metrics.ResultOK, time.Millisecond)
	m.Preferred([]int{0}, metrics.ResultOK, time.Microsecond)
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

// countingStore is the real store, counting the records the metrics read.
type countingStore struct {
	*store.Store
	read atomic.Int64
}

func (c *countingStore) Allocations(f store.AllocationFilter) ([]store.Allocation, error) {
	recs, err := c.Store.Allocations(f)
	c.read.Add(int64(len(recs)))
	return recs, err
}

func (c *countingStore) Allocation(seq uint64) (store.Allocation, error) {
	c.read.Add(1)
	return c.Store.Allocation(seq)
}

// scrapeStates scrapes and returns the devices_by_allocation_state lines.
func scrapeStates(t *testing.T, h http.Handler) string {
	t.Helper()
	_, body := get(t, h, "/metrics")
	return grepLines(body, "virtual_gpu_devices_by_allocation_state{")
}

// grepLines returns the lines of s that start with prefix, joined by ";".
func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, strings.TrimPrefix(l, prefix))
		}
	}
	return strings.Join(out, ";")
}

// Later scrapes see new records, state changes of older ones, and pruning.
func TestMetrics_DevicesByAllocationState_FollowsChanges(t *testing.T) {
	devs := fakeDevices(4)
	st := mustStore(t, devs)
	setState := func(seq uint64, state string) {
		t.Helper()
		if _, err := st.UpdateAllocation(seq, func(a *store.Allocation) error { a.State = state; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	record(t, st, store.StateAllocated, "fake-0") // seq 1
	record(t, st, store.StateHeld, "fake-1")      // seq 2
	h := metrics.New(metrics.Config{Devices: newDeviceList(devs...), Allocations: st}).Handler(nil, nil)
	steps := []struct {
		name   string
		change func()
		want   string
	}{
		{"first scrape", func() {}, `state="abandoned"} 0;state="allocated"} 1;state="free"} 2;state="held"} 1`},
		{"states move, a new record", func() {
			setState(1, store.StateHeld)
			setState(2, store.StateReleased)
			record(t, st, store.StateAbandoned, "fake-2") // seq 3
		}, `state="abandoned"} 1;state="allocated"} 0;state="free"} 2;state="held"} 1`},
		{"inactive records pruned", func() {
			// Pruning takes inactive records first: fake-1's released and
			// fake-2's abandoned records go, fake-0's held one stays.
			if _, err := st.Prune(context.Background(), store.PruneOptions{MaxRecords: 1}); err != nil {
				t.Fatal(err)
			}
		}, `state="abandoned"} 0;state="allocated"} 0;state="free"} 3;state="held"} 1`},
		{"nothing changed", func() {}, `state="abandoned"} 0;state="allocated"} 0;state="free"} 3;state="held"} 1`},
	}
	for _, step := range steps {
		step.change()
		if got := scrapeStates(t, h); got != step.want {
			t.Errorf("%s: %s, want %s", step.name, got, step.want)
		}
	}
}

// A device whose newest record is far back in a long history is found; the
// next scrape reads only what is new, not the whole history again.
func TestMetrics_DevicesByAllocationState_LongHistory(t *testing.T) {
	const history = 300 // more than the pages before a full read
	devs := fakeDevices(3)
	st := &countingStore{Store: mustStore(t, devs)}
	record(t, st.Store, store.StateHeld, "fake-1")
	for range history - 1 {
		record(t, st.Store, store.StateAllocated, "fake-0")
	}
	// fake-2: never allocated, so the first scrape reads everything.
	h := metrics.New(metrics.Config{Devices: newDeviceList(devs...), Allocations: st}).Handler(nil, nil)
	want := `state="abandoned"} 0;state="allocated"} 1;state="free"} 1;state="held"} 1`
	if got := scrapeStates(t, h); got != want {
		t.Errorf("first scrape: %s, want %s", got, want)
	}
	if n := st.read.Load(); n < history {
		t.Errorf("first scrape read %d records, want the whole history (%d)", n, history)
	}
	st.read.Store(0)
	record(t, st.Store, store.StateAbandoned, "fake-2")
	want = `state="abandoned"} 1;state="allocated"} 1;state="free"} 0;state="held"} 1`
	if got := scrapeStates(t, h); got != want {
		t.Errorf("next scrape: %s, want %s", got, want)
	}
	if n := st.read.Load(); n > 20 {
		t.Errorf("next scrape read %d records for one new record and 3 devices, want a small page", n)
	}
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

// BenchmarkScrape_LongHistory measures a scrape over a long allocation
// history in which one device was never allocated: the first scrape of a
// Metrics reads the whole history, the next ones what is new (metric
// records is the history's length).
func BenchmarkScrape_LongHistory(b *testing.B) {
	const records = 2000
	devs := fakeDevices(8)
	st := storetest.MustOpen(b, store.Options{})
	specs := make([]store.DeviceSpec, len(devs))
	for i, d := range devs {
		specs[i] = store.DeviceSpec{ID: d.ID, Index: d.Index, NUMA: -1}
	}
	if _, err := st.Reconcile(specs); err != nil {
		b.Fatal(err)
	}
	for i := range records {
		if _, err := st.RecordAllocation(store.Allocation{DeviceIDs: []string{devs[i%7].ID}}); err != nil {
			b.Fatal(err)
		}
	}
	cfg := metrics.Config{Devices: newDeviceList(devs...), Allocations: st}
	scrape := func(b *testing.B, h http.Handler) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `state="free"} 1`) {
			b.Fatalf("scrape: %d", rec.Code)
		}
	}
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			scrape(b, metrics.New(cfg).Handler(nil, nil))
		}
		b.ReportMetric(records, "records")
	})
	b.Run("next", func(b *testing.B) {
		h := metrics.New(cfg).Handler(nil, nil)
		scrape(b, h)
		b.ReportAllocs()
		for b.Loop() {
			scrape(b, h)
		}
		b.ReportMetric(records, "records")
	})
}

// The replicas of a shared GPU are devices, and count once among the GPUs,
// with their GPU's health; whole GPUs of a partly shared set count as
// themselves.
func TestMetrics_GPUsOfReplicas(t *testing.T) {
	devices := newDeviceList(
		gpuset.Device{ID: "fake-0::0", Index: 0, Healthy: true}, gpuset.Device{ID: "fake-0::1", Index: 1, Healthy: true},
		gpuset.Device{ID: "fake-1", Index: 2, Healthy: true},
		gpuset.Device{ID: "fake-2::0", Index: 4}, gpuset.Device{ID: "fake-2::1", Index: 5},
	)
	h := metrics.New(metrics.Config{Devices: devices}).Handler(func() error { return nil }, func() error { return nil })
	_, body := get(t, h, "/metrics")
	assertContains(t, "scrape", body,
		`virtual_gpu_devices{health="healthy"} 3`, `virtual_gpu_devices{health="unhealthy"} 2`,
		`virtual_gpu_gpus{health="healthy"} 2`, `virtual_gpu_gpus{health="unhealthy"} 1`)
}
