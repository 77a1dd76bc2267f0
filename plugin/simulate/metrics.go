package simulate

import (
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The simulator's API client: a thousand nodes' first publish is a
// thousand writes, which client-go's default rate (5/s, burst 10) would
// spread over minutes.
const (
	ClientQPS   = 200
	ClientBurst = 400
)

// RequestCounter counts the requests a client sends to the API server
// (Wrap its transport), for the metrics. The zero value is ready.
type RequestCounter struct{ n atomic.Uint64 }

// Wrap returns rt counting every request through c.
func (c *RequestCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return countingTransport{rt, c}
}

type countingTransport struct {
	rt http.RoundTripper
	c  *RequestCounter
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.n.Add(1)
	return t.rt.RoundTrip(r)
}

// MetricsHandler is the simulator's /metrics (the nodes simulated, their
// starts, the status patches, the slice writes, requests' API requests,
// the Go runtime and the process), /healthz and /readyz (ready once the
// first lists are in). requests may be nil: no request counter.
func (s *Simulator) MetricsHandler(requests *RequestCounter) http.Handler {
	reg := prometheus.NewRegistry()
	counter := func(name, help string, v func(Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(s.Stats())) })
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "virtual_gpu_simulated_nodes", Help: "Nodes simulated now."},
			func() float64 { return float64(s.Stats().Nodes) }),
		counter("virtual_gpu_simulate_node_starts_total", "Node simulations started, restarts included.", func(st Stats) uint64 { return st.Started }),
		counter("virtual_gpu_simulate_status_patches_total", "Node status patches sent.", func(st Stats) uint64 { return st.StatusPatches }),
		counter("virtual_gpu_simulate_slice_writes_total", "ResourceSlice creates, updates and deletes sent.", func(st Stats) uint64 { return st.SliceWrites }))
	if requests != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "virtual_gpu_simulate_api_requests_total",
			Help: "Requests sent to the API server, watches included."}, func() float64 { return float64(requests.n.Load()) }))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Stats().Synced {
			http.Error(w, "not ready: the first lists of Nodes, Pods and ResourceClaims are not in yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
