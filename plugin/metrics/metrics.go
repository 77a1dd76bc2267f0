// Package metrics exposes the plugin's Prometheus metrics and its health
// probes on one HTTP listener:
//
//	/metrics  Prometheus text format
//	/healthz  200 while the plugin is alive (its liveness check passes)
//	/readyz   200 while the plugin is ready (registered with the kubelet)
//
// Metrics (prefix virtual_gpu_):
//
//	devices{health="healthy|unhealthy"}            gauge, read at scrape time
//	allocations_total{result="ok|rejected|failed"} Allocate container requests
//	allocated_devices_total                        devices handed out by answered requests
//	preferred_allocation_duration_seconds          histogram of the policy's choice
//	preferred_allocation_score                     histogram of the chosen set's connectivity score
//	preferred_allocations_total{result="ok|error"}
//	registrations_total                            successful Register calls (the first and every re-registration)
//	registered                                     1 while registered with the kubelet
//	health_changes_total{cause=…}                  stored health changes by cause
//
// A Metrics is safe for concurrent use; it implements plugin.Observer.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
)

const namespace = "virtual_gpu"

// Metrics holds the plugin's collectors on a registry of its own.
type Metrics struct {
	registry         *prometheus.Registry
	allocations      *prometheus.CounterVec
	allocatedDevices prometheus.Counter
	preferredSeconds prometheus.Histogram
	preferredScore   prometheus.Histogram
	preferred        *prometheus.CounterVec
	registrations    prometheus.Counter
	healthChanges    *prometheus.CounterVec
	score            func([]int) int
}

var _ plugin.Observer = (*Metrics)(nil)

// New registers the collectors. devices is read at scrape time; registered
// reports the registration state; score rates a chosen set (nil: no score
// histogram observations).
func New(devices func() []plugin.Device, registered func() bool, score func([]int) int) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "allocations_total",
			Help: "Allocate container requests by result: ok, rejected (bad or unhealthy ids), failed (not recorded).",
		}, []string{"result"}),
		allocatedDevices: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "allocated_devices_total",
			Help: "Devices handed out by answered Allocate container requests.",
		}),
		preferredSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "preferred_allocation_duration_seconds",
			Help:    "Time the allocation policy took to choose a preferred set.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12), // 1µs … ~4s
		}),
		preferredScore: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "preferred_allocation_score",
			Help:    "Connectivity score of each preferred set (see the allocator package).",
			Buckets: prometheus.ExponentialBuckets(10, 2, 16),
		}),
		preferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "preferred_allocations_total",
			Help: "GetPreferredAllocation container requests by result.",
		}, []string{"result"}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "registrations_total",
			Help: "Successful registrations with the kubelet; more than one means re-registrations.",
		}),
		healthChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "health_changes_total",
			Help: "Stored device health changes by cause.",
		}, []string{"cause"}),
		score: score,
	}
	deviceDesc := prometheus.NewDesc(namespace+"_devices", "Advertised devices by health.", []string{"health"}, nil)
	m.registry.MustRegister(
		m.allocations, m.allocatedDevices, m.preferredSeconds, m.preferredScore, m.preferred,
		m.registrations, m.healthChanges,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "registered",
			Help: "1 while the plugin is registered with the kubelet."}, func() float64 {
			if registered() {
				return 1
			}
			return 0
		}),
		collectorFunc{desc: deviceDesc, collect: func(ch chan<- prometheus.Metric) {
			healthy, unhealthy := 0, 0
			for _, d := range devices() {
				if d.Healthy {
					healthy++
				} else {
					unhealthy++
				}
			}
			ch <- prometheus.MustNewConstMetric(deviceDesc, prometheus.GaugeValue, float64(healthy), "healthy")
			ch <- prometheus.MustNewConstMetric(deviceDesc, prometheus.GaugeValue, float64(unhealthy), "unhealthy")
		}},
	)
	for _, r := range []string{"ok", "rejected", "failed"} {
		m.allocations.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.preferred.WithLabelValues(r)
	}
	return m
}

// Allocated implements plugin.Observer.
func (m *Metrics) Allocated(ids []string, err error) {
	switch {
	case err == nil:
		m.allocations.WithLabelValues("ok").Inc()
		m.allocatedDevices.Add(float64(len(ids)))
	case isRejection(err):
		m.allocations.WithLabelValues("rejected").Inc()
	default:
		m.allocations.WithLabelValues("failed").Inc()
	}
}

// isRejection reports whether err refuses the request (a gRPC status of a
// bad or unhealthy id) rather than failing it.
func isRejection(err error) bool {
	st, ok := status.FromError(err)
	return ok && (st.Code() == codes.InvalidArgument || st.Code() == codes.FailedPrecondition)
}

// Preferred implements plugin.Observer.
func (m *Metrics) Preferred(chosen []int, took time.Duration, err error) {
	if err != nil {
		m.preferred.WithLabelValues("error").Inc()
		return
	}
	m.preferred.WithLabelValues("ok").Inc()
	m.preferredSeconds.Observe(took.Seconds())
	if m.score != nil {
		m.preferredScore.Observe(float64(m.score(chosen)))
	}
}

// HealthChanged implements plugin.Observer.
func (m *Metrics) HealthChanged(_ string, _ bool, cause string) {
	m.healthChanges.WithLabelValues(cause).Inc()
}

// Registered counts one successful registration; wire it to
// plugin.RunnerConfig.OnRegistered.
func (m *Metrics) Registered() { m.registrations.Inc() }

// Check is a probe: nil means pass.
type Check func() error

// Handler serves /metrics, /healthz (live) and /readyz (ready).
func (m *Metrics) Handler(live, ready Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", probe(live))
	mux.HandleFunc("GET /readyz", probe(ready))
	return mux
}

func probe(check Check) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ok: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// Serve serves h on lis until ctx ends, then closes lis.
func Serve(ctx context.Context, lis net.Listener, h http.Handler) error {
	addr := lis.Addr().String()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics listener %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	return nil
}

// collectorFunc is a collector of one description computed at scrape time.
type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
