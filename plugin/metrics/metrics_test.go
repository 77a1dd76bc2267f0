package metrics_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

func TestMetrics_NumbersMove(t *testing.T) {
	devices := []plugin.Device{{ID: "fake-0", Healthy: true}, {ID: "fake-1", Healthy: true}, {ID: "fake-2"}}
	registered := false
	m := metrics.New(func() []plugin.Device { return devices }, func() bool { return registered }, func(set []int) int { return 100 * len(set) })
	h := m.Handler(func() error { return nil }, func() error { return nil })

	_, before := get(t, h, "/metrics")
	for _, want := range []string{
		`virtual_gpu_devices{health="healthy"} 2`, `virtual_gpu_devices{health="unhealthy"} 1`,
		`virtual_gpu_allocations_total{result="ok"} 0`, `virtual_gpu_registered 0`, "go_goroutines",
	} {
		if !strings.Contains(before, want) {
			t.Errorf("before: missing %q", want)
		}
	}

	m.Allocated([]string{"fake-0", "fake-1"}, nil)
	m.Allocated([]string{"fake-9"}, status.Error(codes.InvalidArgument, "unknown"))
	m.Allocated([]string{"fake-0"}, errors.New("disk full"))
	m.Preferred([]int{0, 1}, 3*time.Microsecond, nil)
	m.Preferred(nil, 0, errors.New("bad"))
	m.HealthChanged("fake-2", false, "admin")
	m.Registered()
	m.Registered()
	registered = true
	devices[2].Healthy = true

	_, after := get(t, h, "/metrics")
	for _, want := range []string{
		`virtual_gpu_devices{health="healthy"} 3`,
		`virtual_gpu_allocations_total{result="ok"} 1`,
		`virtual_gpu_allocations_total{result="rejected"} 1`,
		`virtual_gpu_allocations_total{result="failed"} 1`,
		`virtual_gpu_allocated_devices_total 2`,
		`virtual_gpu_preferred_allocations_total{result="ok"} 1`,
		`virtual_gpu_preferred_allocations_total{result="error"} 1`,
		`virtual_gpu_preferred_allocation_duration_seconds_count 1`,
		`virtual_gpu_preferred_allocation_score_sum 200`,
		`virtual_gpu_health_changes_total{cause="admin"} 1`,
		`virtual_gpu_registrations_total 2`,
		`virtual_gpu_registered 1`,
	} {
		if !strings.Contains(after, want) {
			t.Errorf("after: missing %q", want)
		}
	}
}

func TestMetrics_Probes(t *testing.T) {
	m := metrics.New(func() []plugin.Device { return nil }, func() bool { return false }, nil)
	h := m.Handler(func() error { return nil }, func() error { return errors.New("not registered with the kubelet") })
	if code, body := get(t, h, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "not registered") {
		t.Errorf("/readyz = %d %q", code, body)
	}
}
