// Package metrics exposes the plugin's Prometheus metrics and its health
// probes on one HTTP listener:
//
//	/metrics  Prometheus text format
//	/healthz  200 while the plugin is alive (its liveness check passes)
//	/readyz   200 while the plugin is ready (registered with the kubelet)
//
// Metrics (prefix virtual_gpu_):
//
//	build_info{version,revision,goversion}           always 1; revision is the VCS commit or "unknown"
//	devices{health="healthy|unhealthy"}              gauge of advertised devices, read at scrape time
//	gpus{health="healthy|unhealthy"}                 gauge of the physical GPUs behind them, read at scrape time:
//	                                                 the replicas fake-<i>::<j> of a shared GPU count once, as fake-<i>
//	devices_by_allocation_state{state=…}             gauge, read at scrape time: each device counts in the state
//	                                                 of its newest allocation record: allocated or held while
//	                                                 active, abandoned, or free (released, or never allocated)
//	allocations_total{result="ok|rejected|failed"}   Allocate container requests
//	allocated_devices_total                          devices handed out by answered requests
//	allocate_duration_seconds                        histogram of answered Allocate container requests,
//	                                                 validation and the durable commit of the record included
//	preferred_allocation_duration_seconds            histogram of the policy's choice
//	preferred_allocation_score                       histogram of the chosen set's connectivity score
//	preferred_allocations_total{result="ok|error"}
//	registrations_total                              successful Register calls (the first and every re-registration)
//	registered                                       1 while registered with the kubelet
//	health_changes_total{cause=…}                    health changes made through the plugin, by cause; the
//	                                                 store's known causes are present from the start at 0
//
// plus the Go runtime and process collectors. A Metrics reads what it
// reports at scrape time through the small interfaces below ([Devices],
// [Registration], [Allocations]) and is told the rest: the device plugin's
// RPCs (Allocated, Preferred) and the health changes (HealthChanged). It is safe for concurrent use.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

const namespace = "virtual_gpu"

// Devices lists the advertised devices with their health; the agent
// implements it.
type Devices interface {
	Devices() []gpuset.Device
}

// Registration reports the registration with the kubelet; the device
// plugin's registrar implements it.
type Registration interface {
	// Registered reports whether the plugin is registered right now.
	Registered() bool
	// Registrations counts the successful Register calls so far.
	Registrations() uint64
}

// Allocations reads allocation records; *store.Store implements it.
type Allocations interface {
	// Allocations lists records, newest (highest Seq) first.
	Allocations(store.AllocationFilter) ([]store.Allocation, error)
	// Allocation returns one record, or an error wrapping
	// store.ErrNotFound once it is pruned.
	Allocation(seq uint64) (store.Allocation, error)
}

var _ Allocations = (*store.Store)(nil)

// Config says where a Metrics reads what it reports at scrape time. Every
// field is optional.
type Config struct {
	// Version is the build_info version label; "" reports "unknown".
	Version string
	// Revision is the build_info revision label, the commit the binary was
	// built from (stamped by the build); "" or "unknown" falls back to the
	// VCS revision Go recorded, else "unknown".
	Revision string
	// Devices feeds the devices and devices_by_allocation_state gauges;
	// nil leaves both out.
	Devices Devices
	// Registration feeds registered and registrations_total; nil leaves
	// both out.
	Registration Registration
	// Allocations feeds devices_by_allocation_state (with Devices); nil
	// leaves it out.
	Allocations Allocations
	// Score rates a preferred set for preferred_allocation_score; nil
	// observes no scores.
	Score func([]int) int
	// Logger receives errors met while serving a scrape (the scrape then
	// lacks the failing series); the zero Logger discards.
	Logger zerolog.Logger
}

// Allocation states of devices_by_allocation_state.
const (
	stateFree      = "free"
	stateAllocated = store.StateAllocated
	stateHeld      = store.StateHeld
	stateAbandoned = store.StateAbandoned
)

// allocationStates are the label values of devices_by_allocation_state, all
// reported at every scrape.
var allocationStates = []string{stateFree, stateAllocated, stateHeld, stateAbandoned}

// knownCauses are the health change causes whose series exist from the
// start.
var knownCauses = []string{store.CauseAdmin, store.CauseFaultInjection, store.CauseReconcile}

// Metrics holds the plugin's collectors on a registry of its own. Build it
// with New; it lives as long as the process.
type Metrics struct {
	registry         *prometheus.Registry
	log              zerolog.Logger
	allocations      *prometheus.CounterVec
	allocatedDevices prometheus.Counter
	allocateSeconds  prometheus.Histogram
	preferredSeconds prometheus.Histogram
	preferredScore   prometheus.Histogram
	preferred        *prometheus.CounterVec
	healthChanges    *prometheus.CounterVec
	score            func([]int) int
}

// New builds the collectors for cfg and registers them.
func New(cfg Config) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		log:      cfg.Logger,
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "allocations_total",
			Help: "Allocate container requests by result: ok, rejected (bad or unhealthy ids), failed (not recorded).",
		}, []string{"result"}),
		allocatedDevices: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "allocated_devices_total",
			Help: "Devices handed out by answered Allocate container requests.",
		}),
		allocateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "allocate_duration_seconds",
			Help:    "Time to answer an Allocate container request, validation and the durable commit of its record included; answered requests only.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16), // 25µs … ~0.8s
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
			Help: "GetPreferredAllocation container requests that reached the policy, by result.",
		}, []string{"result"}),
		healthChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "health_changes_total",
			Help: "Device health changes made through the plugin, by cause.",
		}, []string{"cause"}),
		score: cfg.Score,
	}
	m.registry.MustRegister(
		m.allocations, m.allocatedDevices, m.allocateSeconds, m.preferredSeconds, m.preferredScore, m.preferred,
		m.healthChanges, buildInfo(cfg.Version, cfg.Revision),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if reg := cfg.Registration; reg != nil {
		m.registry.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "registered",
				Help: "1 while the plugin is registered with the kubelet."}, func() float64 {
				if reg.Registered() {
					return 1
				}
				return 0
			}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "registrations_total",
				Help: "Successful registrations with the kubelet; more than one means re-registrations."}, func() float64 {
				return float64(reg.Registrations())
			}),
		)
	}
	if cfg.Devices != nil {
		m.registry.MustRegister(deviceHealth(cfg.Devices), gpuHealth(cfg.Devices))
		if cfg.Allocations != nil {
			m.registry.MustRegister(allocationState(cfg.Devices, cfg.Allocations))
		}
	}
	for _, r := range []Result{ResultOK, ResultRejected, ResultFailed} {
		m.allocations.WithLabelValues(r.String())
	}
	for _, r := range []string{"ok", "error"} {
		m.preferred.WithLabelValues(r)
	}
	for _, c := range knownCauses {
		m.healthChanges.WithLabelValues(c)
	}
	return m
}

// buildInfo is the build_info gauge: 1, with the version, the VCS revision
// the binary was built from and the Go version as labels.
func buildInfo(version, revision string) prometheus.Collector {
	if version == "" {
		version = "unknown"
	}
	if revision == "" {
		revision = "unknown"
	}
	if bi, ok := debug.ReadBuildInfo(); ok && revision == "unknown" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// deviceHealth is the devices{health} gauge, read at scrape time.
func deviceHealth(devices Devices) prometheus.Collector {
	desc := prometheus.NewDesc(namespace+"_devices", "Advertised devices by health.", []string{"health"}, nil)
	return collectorFunc{desc: desc, collect: func(ch chan<- prometheus.Metric) {
		healthy, unhealthy := 0, 0
		for _, d := range devices.Devices() {
			if d.Healthy {
				healthy++
			} else {
				unhealthy++
			}
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(healthy), "healthy")
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(unhealthy), "unhealthy")
	}}
}

// gpuHealth is the gpus{health} gauge, read at scrape time: the distinct
// GPUs of the advertised devices, a replica counting as its GPU (which has
// the health of its replicas).
func gpuHealth(devices Devices) prometheus.Collector {
	desc := prometheus.NewDesc(namespace+"_gpus", "Physical GPUs behind the advertised devices (a shared GPU's replicas count once), by health.", []string{"health"}, nil)
	return collectorFunc{desc: desc, collect: func(ch chan<- prometheus.Metric) {
		healthy, unhealthy := 0, 0
		last := ""
		for _, d := range devices.Devices() { // sorted by index: a GPU's replicas are together
			gpu, _, _ := strings.Cut(d.ID, topology.ReplicaSeparator)
			if gpu == last {
				continue
			}
			last = gpu
			if d.Healthy {
				healthy++
			} else {
				unhealthy++
			}
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(healthy), "healthy")
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(unhealthy), "unhealthy")
	}}
}

// pages are how many allocation records a scrape reads, newest first, until
// it has every record added since the last scrape (and on the first
// scrape, a record of every device): pages of growing size, then the
// whole history.
var pages = []int{16, 256}

// allocationState is the devices_by_allocation_state gauge, read at scrape
// time: each advertised device counts in the state of its newest
// allocation record.
func allocationState(devices Devices, allocs Allocations) prometheus.Collector {
	desc := prometheus.NewDesc(namespace+"_devices_by_allocation_state",
		"Advertised devices by the state of their newest allocation record: allocated or held while active, abandoned, or free (released or never allocated).",
		[]string{"state"}, nil)
	idx := &newestIndex{allocs: allocs}
	return collectorFunc{desc: desc, collect: func(ch chan<- prometheus.Metric) {
		states, err := idx.states(devices.Devices())
		if err != nil {
			ch <- prometheus.NewInvalidMetric(desc, fmt.Errorf("devices by allocation state: %w", err))
			return
		}
		counts := make(map[string]int, len(allocationStates))
		for _, st := range states {
			switch st {
			case store.StateAllocated, store.StateHeld, store.StateAbandoned:
				counts[st]++
			default: // released, or no record
				counts[stateFree]++
			}
		}
		for _, st := range allocationStates {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(counts[st]), st)
		}
	}}
}

// newestIndex remembers, between scrapes, the sequence number of each
// device's newest allocation record, so that a scrape reads only the
// records added since the last one, plus each device's newest record
// again for its current state, instead of the whole history. Records are
// never renumbered and are pruned oldest first, so a device whose newest
// record is gone has none left. It is safe for concurrent use.
type newestIndex struct {
	allocs Allocations

	mu      sync.Mutex
	primed  bool              // newest holds every device of a full read
	lastSeq uint64            // the newest record seen
	newest  map[string]uint64 // device id -> Seq of its newest record; 0: none
}

// states returns the state of each device's newest record ("" for none),
// by device id. On error the index is left as it was.
func (x *newestIndex) states(devs []gpuset.Device) (map[string]string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	primed := x.primed
	for _, d := range devs {
		if _, ok := x.newest[d.ID]; !ok {
			primed = false // a device the index never saw: start over
		}
	}
	lastSeq := x.lastSeq
	if !primed {
		lastSeq = 0
	}
	fresh, err := x.since(lastSeq, devs, primed)
	if err != nil {
		return nil, err
	}
	newest := make(map[string]uint64, len(devs))
	states := make(map[string]string, len(devs))
	for _, d := range devs {
		newest[d.ID], states[d.ID] = 0, ""
		if primed {
			newest[d.ID] = x.newest[d.ID]
		}
	}
	seen := make(map[string]bool, len(devs))
	for _, rec := range fresh { // newest first
		for _, id := range rec.DeviceIDs {
			if _, ok := newest[id]; ok && !seen[id] {
				seen[id] = true
				newest[id], states[id] = rec.Seq, rec.State
			}
		}
	}
	for id, seq := range newest {
		if seen[id] || seq == 0 {
			continue
		}
		rec, err := x.allocs.Allocation(seq) // its state may have moved on
		switch {
		case errors.Is(err, store.ErrNotFound):
			newest[id] = 0 // pruned, and every older record with it
		case err != nil:
			return nil, err
		default:
			states[id] = rec.State
		}
	}
	if len(fresh) > 0 {
		x.lastSeq = max(lastSeq, fresh[0].Seq)
	} else if !primed {
		x.lastSeq = 0
	}
	x.newest, x.primed = newest, true
	return states, nil
}

// since returns the records newer than lastSeq, newest first. Unless
// primed, it stops early once it has a record of every device in devs.
func (x *newestIndex) since(lastSeq uint64, devs []gpuset.Device, primed bool) ([]store.Allocation, error) {
	for _, limit := range pages {
		recs, err := x.allocs.Allocations(store.AllocationFilter{Limit: limit})
		switch {
		case err != nil:
			return nil, err
		case len(recs) < limit: // the whole history
			return newerThan(recs, lastSeq), nil
		case primed && recs[len(recs)-1].Seq <= lastSeq:
			return newerThan(recs, lastSeq), nil
		case !primed && coversAll(recs, devs):
			return recs, nil
		}
	}
	recs, err := x.allocs.Allocations(store.AllocationFilter{})
	if err != nil {
		return nil, err
	}
	return newerThan(recs, lastSeq), nil
}

// newerThan returns the leading records (newest first) with Seq > seq.
func newerThan(recs []store.Allocation, seq uint64) []store.Allocation {
	for i, r := range recs {
		if r.Seq <= seq {
			return recs[:i]
		}
	}
	return recs
}

// coversAll reports whether recs include every device of devs.
func coversAll(recs []store.Allocation, devs []gpuset.Device) bool {
	seen := make(map[string]bool, len(devs))
	for _, r := range recs {
		for _, id := range r.DeviceIDs {
			seen[id] = true
		}
	}
	for _, d := range devs {
		if !seen[d.ID] {
			return false
		}
	}
	return true
}

// Allocated counts one container request of Allocate: its ids, how it
// ended and how long it took.
func (m *Metrics) Allocated(ids []string, result Result, took time.Duration) {
	m.allocations.WithLabelValues(result.String()).Inc()
	if result == ResultOK {
		m.allocatedDevices.Add(float64(len(ids)))
		m.allocateSeconds.Observe(took.Seconds())
	}
}

// Preferred counts one choice of a preferred allocation: the chosen
// devices' indices, how it ended and how long it took.
func (m *Metrics) Preferred(chosen []int, result Result, took time.Duration) {
	if result != ResultOK {
		m.preferred.WithLabelValues("error").Inc()
		return
	}
	m.preferred.WithLabelValues("ok").Inc()
	m.preferredSeconds.Observe(took.Seconds())
	if m.score != nil {
		m.preferredScore.Observe(float64(m.score(chosen)))
	}
}

// HealthChanged counts one health change, by cause.
func (m *Metrics) HealthChanged(_ string, _ bool, cause string) {
	m.healthChanges.WithLabelValues(cause).Inc()
}

// Check is a probe: nil means pass.
type Check func() error

// Handler serves /metrics, /healthz (live) and /readyz (ready). A series
// that cannot be read at scrape time is left out of that scrape and the
// error logged; the rest is served.
func (m *Metrics) Handler(live, ready Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{
		ErrorLog:      scrapeLog{m.log},
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", probe(live))
	mux.HandleFunc("GET /readyz", probe(ready))
	return mux
}

// scrapeLog is promhttp's error log, on zerolog.
type scrapeLog struct{ log zerolog.Logger }

func (l scrapeLog) Println(v ...any) {
	l.log.Warn().Str("error", fmt.Sprint(v...)).Msg("metrics scrape incomplete")
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
