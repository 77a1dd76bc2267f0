package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// The GPU telemetry (-telemetry-address): the Exporter over the
// configuration in force, its listener, the live values in the status
// files, and what workloads set over their load sockets (loadsock).
//
//   - The exporter is built at start and again on every live change
//     (Follow): its GPUs are the machine's, with their stored UUIDs, their
//     device ids (a shared GPU's replicas and the GPU's own id, which
//     allocations of an earlier configuration may hold), the GPU model
//     (memory: what the driver leaves usable, total − reserved, as the
//     status files count it), the load model, seed and per-pod setting of
//     the configuration. Holders come from the allocation records the
//     lifecycle tracker keeps (StoreHolders), health from the
//     agent's devices.
//   - Every second, just after the clock's second turns (the load model
//     changes once a second), and at once after a change (a workload's
//     load, a rebuild), the exporter's readings of that second go into the
//     status directory's live file (view.Files.Live: one file, replaced
//     without fsync), whose values nvidia-smi in a container shows instead
//     of its status files': what the exporter serves.
//   - A workload's request (loadsock.Handler) becomes an exporter override
//     for its holder on its GPUs, for loadTTL; the overrides are
//     remembered, so that a rebuilt exporter gets them again, and cleared
//     when their allocation ends.

// Release is the dcgm-exporter release whose series the telemetry follows
// (the package's README).
const Release = "4.5.3-4.8.2"

// Telemetry timings.
const (
	// telemetryPeriod is how often the status files get the live values.
	telemetryPeriod = time.Second
	// telemetryAlign is how long after the second turns they are written.
	telemetryAlign = 5 * time.Millisecond
	// loadTTL is how long a workload's load lasts unless set again or its
	// allocation ends: MaxOverrideTTL.
	loadTTL = MaxOverrideTTL
	// heldPoll is how often a load request waits for its allocation's
	// holder to be recorded.
	heldPoll = 50 * time.Millisecond
)

// Service is the process's telemetry. Build it with NewService; Follow
// gives it an exporter; Run keeps the status files' live values until ctx
// ends. It is safe for concurrent use.
type Service struct {
	st       Store
	holders  HolderSource // who holds the GPUs
	devices  Devices
	live     LiveSink
	hostname string
	coll     []Collector
	counters *Counters // the energy and NVLink counters, across rebuilds
	notify   func()    // asks the lifecycle tracker to look for holders now
	clock    Clock
	log      zerolog.Logger

	state atomic.Pointer[serviceState]
	kick  chan struct{}

	mu        sync.Mutex // serializes follow and the load requests
	overrides map[loadKey]loadOverride
	lastErr   string // the update error logged last
}

// serviceState is an exporter and how the configuration that built it
// lets containers drive it. err says why there is no exporter.
type serviceState struct {
	exp      *Exporter
	handler  http.Handler
	writable bool
	err      error
}

// loadKey is one GPU of one allocation.
type loadKey struct {
	seq uint64
	gpu int
}

// loadOverride is a workload's load on one GPU, as set.
type loadOverride struct {
	holder Holder
	o      Override
	until  time.Time
}

// Store is what the Service reads of the state file; *store.Store
// implements it.
type Store interface {
	// Devices lists the stored devices (their UUIDs).
	Devices() ([]store.Device, error)
	// Allocation returns one record, or an error wrapping store.ErrNotFound.
	Allocation(seq uint64) (store.Allocation, error)
}

// LiveSink takes the exporter's readings of each second, for the GPU
// status files containers read; view.Files implements it.
type LiveSink interface {
	Live(rs []Reading, now time.Time) error
}

var _ Store = (*store.Store)(nil)

// ClaimStore is a Store that keeps DRA claims too; *store.Store
// implements it. Through DRA a partitionable GPU's MIG devices are series
// while a prepared claim holds them.
type ClaimStore interface {
	Store
	PreparedClaims() ([]store.Claim, error)
}

var _ ClaimStore = (*store.Store)(nil)

// ServiceConfig is what a Service reads and writes. Store, Devices and
// Live are required.
type ServiceConfig struct {
	// Store has the devices and the records.
	Store Store
	// Active lists the active records, for the holders; nil reads them
	// from the Store when it is an Allocations.
	Active Allocations
	// Holders says who holds the GPUs; nil is StoreHolders over Active
	// (the device plugin's allocation records). The DRA driver gives its
	// claims'.
	Holders HolderSource
	// Devices gives the devices' health.
	Devices Devices
	// Live takes the readings of every second.
	Live LiveSink
	// Hostname is the Hostname label.
	Hostname string
	// Collectors are the fields served (ParseCollectors); nil is
	// DefaultCollectors.
	Collectors []Collector
	// Notify asks the lifecycle tracker to look for holders now; nil: none.
	Notify func()
	// Clock is the load model's clock; nil is the wall clock.
	Clock Clock
	// Logger receives the failures; the zero Logger discards.
	Logger zerolog.Logger
}

// NewService returns the telemetry of the process (see ServiceConfig).
func NewService(cfg ServiceConfig) *Service {
	active := cfg.Active
	if active == nil {
		active, _ = cfg.Store.(Allocations)
	}
	clock := cfg.Clock
	if clock == nil {
		clock = systemClock{}
	}
	notify := cfg.Notify
	if notify == nil {
		notify = func() {}
	}
	holders := cfg.Holders
	if holders == nil {
		holders = StoreHolders{Store: active}
	}
	return &Service{st: cfg.Store, holders: holders, devices: cfg.Devices, live: cfg.Live, hostname: cfg.Hostname,
		coll: cfg.Collectors, counters: NewCounters(), notify: notify, clock: clock,
		log: cfg.Logger.With().Str("component", "telemetry").Logger(), kick: make(chan struct{}, 1), overrides: map[loadKey]loadOverride{}}
}

// Follow builds the exporter of set with the settings of the configuration
// in force, and serves it from now on, with the workloads' loads still in
// force. An
// error (GPUs without UUIDs) leaves no exporter: the listener answers 503
// saying why.
func (t *Service) Follow(set *gpuset.Set, settings Settings) error {
	exp, err := t.newExporter(set, settings)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.state.Store(&serviceState{err: err})
		return err
	}
	now := t.clock.Now()
	for k, lo := range t.overrides {
		o := lo.o
		o.TTL = lo.until.Sub(now)
		if o.TTL <= 0 || exp.SetOverride(k.gpu, lo.holder, o) != nil {
			delete(t.overrides, k) // expired, or the GPU or its hold is gone
		}
	}
	t.state.Store(&serviceState{exp: exp, handler: exp.Handler(), writable: settings.Writable})
	t.Poke()
	return nil
}

// newExporter builds the exporter of set's GPUs as the store has them.
func (t *Service) newExporter(set *gpuset.Set, settings Settings) (*Exporter, error) {
	stored, err := t.st.Devices()
	if err != nil {
		return nil, err
	}
	var claimed map[string]bool
	if cs, ok := t.st.(ClaimStore); ok && set.Config().MIG.Partitionable {
		prepared, err := cs.PreparedClaims()
		if err != nil {
			return nil, err
		}
		claimed = store.ClaimedDevices(prepared)
	}
	gpus, err := exporterGPUs(set, stored, claimed)
	if err != nil {
		return nil, err
	}
	gm := set.Machine().GPUModel()
	reserved := topology.ReservedMiB(gm.MemoryMiB)
	gm.MemoryMiB -= reserved // as nvidia-smi counts it: used + free = total − reserved
	return New(Config{
		GPUs:          gpus,
		GPUModel:      gm,
		ReservedMiB:   reserved,
		Collectors:    t.coll,
		Counters:      t.counters,
		Hostname:      t.hostname,
		DriverVersion: topology.DriverVersion,
		Devices:       t.devices,
		Holders:       t.holders,
		Model:         settings.Model,
		Seed:          settings.Seed,
		Clock:         t.clock,
		PerPod:        settings.PerPod,
		Logger:        t.log,
	})
}

// exporterGPUs returns the exporter's GPUs of set: the machine's, with
// their stored UUIDs, each with its own id and, when set shares it, its
// replicas' ids, and its MIG devices of the layout in force, or of a
// partitionable set those claimed holds (gpuset.Set.MIGInstancesHeld),
// with their device ids. A GPU without a UUID (the node has no identity)
// is an error.
func exporterGPUs(set *gpuset.Set, stored []store.Device, claimed map[string]bool) ([]GPU, error) {
	m := set.Machine()
	uuids := gpuset.UUIDs(stored)
	out := make([]GPU, m.Len())
	for i := range out {
		u := uuids[i]
		if u == "" {
			return nil, fmt.Errorf("telemetry: GPU %s has no UUID: the node has no identity (-node-name, or a machine id) to derive one from", m.ID(i))
		}
		ids := set.DeviceIDsOf(i)
		out[i] = GPU{Index: i, UUID: u, PCIBusID: m.PCIBusID(i), DeviceIDs: ids, NVLinks: NVLinksOf(m, i)}
		for _, d := range set.MIGInstancesHeld(i, func(id string) bool { return claimed[id] }) {
			out[i].MIG = append(out[i].MIG, MIGInstance{ID: d.ID, Profile: d.Profile.Name, GPUInstanceID: d.GPUInstanceID, MemoryMiB: d.Profile.MemoryMiB,
				ComputeShare: float64(d.Profile.ComputeSlices) / float64(set.MIGProduct().ComputeSlices)})
		}
	}
	return out, nil
}

// ServeHTTP serves the exporter in force; 503 without one.
func (t *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := t.state.Load()
	if st == nil || st.handler == nil {
		why := "not started"
		if st != nil && st.err != nil {
			why = st.err.Error()
		}
		http.Error(w, "telemetry unavailable: "+why, http.StatusServiceUnavailable)
		return
	}
	st.handler.ServeHTTP(w, r)
}

var _ http.Handler = (*Service)(nil)

// Poke asks Run to write the live values now: after a health change, a
// lost GPU shows as lost at once.
func (t *Service) Poke() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Run writes the live values into the status files at once, then just
// after every second of the clock and whenever poked, until ctx ends. A
// failure is logged when it differs from the last one.
func (t *Service) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-t.kick:
		}
		now := t.clock.Now()
		t.update(now)
		timer.Reset(now.Truncate(telemetryPeriod).Add(telemetryPeriod + telemetryAlign).Sub(now))
	}
}

// update writes the readings at now into the status files.
func (t *Service) update(now time.Time) {
	st := t.state.Load()
	if st == nil || st.exp == nil {
		return
	}
	rs, err := st.exp.ReadingsAt(now)
	if err == nil {
		err = t.live.Live(rs, now)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil && err.Error() != t.lastErr:
		t.log.Warn().Err(err).Msg("live GPU values not written to the status files: nvidia-smi in containers shows older values")
		t.lastErr = err.Error()
	case err == nil:
		t.lastErr = ""
	}
}

var _ loadsock.Handler = (*Service)(nil)

// SetLoad applies a workload's request on allocation seq's GPUs: its
// holder's own utilization and memory used, or back to the load model. It
// implements loadsock.Handler. It waits (until ctx ends) for the lifecycle
// tracker to record the allocation's holder, which it does within a
// fraction of a second of the container appearing.
func (t *Service) SetLoad(ctx context.Context, seq uint64, req loadsock.Request) (int, error) {
	rec, err := t.held(ctx, seq)
	if err != nil {
		return 0, err
	}
	gpus, err := loadGPUs(rec, req.GPUs)
	if err != nil {
		return 0, err
	}
	holder := Holder{Namespace: rec.Namespace, Pod: rec.Pod, Container: rec.Container}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state.Load()
	switch {
	case st == nil || st.exp == nil:
		why := "not started"
		if st != nil && st.err != nil {
			why = st.err.Error()
		}
		return 0, loadsock.Refusef(loadsock.CauseOff, "the plugin's telemetry is unavailable: %s", why)
	case !st.writable:
		return 0, loadsock.Refusef(loadsock.CauseOff, "containers may not set their load: -telemetry-writable is off in the configuration in force")
	}
	until := t.clock.Now().Add(loadTTL)
	for _, i := range gpus {
		k := loadKey{seq, i}
		if req.Clear {
			st.exp.ClearOverride(i, holder)
			delete(t.overrides, k)
			continue
		}
		o := Override{UtilizationPercent: req.UtilizationPercent, MemoryUsedMiB: req.MemoryUsedMiB, TTL: loadTTL}
		if err := st.exp.SetOverride(i, holder, o); err != nil {
			return 0, loadRefusal(err)
		}
		t.overrides[k] = loadOverride{holder: holder, o: o, until: until}
	}
	t.Poke()
	return len(gpus), nil
}

// loadRefusal maps the exporter's refusal of an override to the load
// protocol's.
func loadRefusal(err error) error {
	cause := loadsock.CauseFailed
	switch {
	case errors.Is(err, ErrInvalidOverride):
		cause = loadsock.CauseValue
	case errors.Is(err, ErrNotHolder):
		cause = loadsock.CauseNotHeld
	case errors.Is(err, store.ErrUnknownDevice):
		cause = loadsock.CauseGPU
	}
	return &loadsock.Refusal{Cause: cause, Msg: err.Error(), Err: err}
}

// held returns allocation seq's record once a container holds it: at once
// if it does, else after the tracker recorded its holder, waiting until
// ctx ends.
func (t *Service) held(ctx context.Context, seq uint64) (store.Allocation, error) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return store.Allocation{}, loadsock.Refusef(loadsock.CauseNotHeld,
				"allocation %d: no container holds it yet (the kubelet's PodResources API has not shown its container)", seq)
		case <-timer.C:
		}
		rec, err := t.st.Allocation(seq)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return rec, loadsock.Refusef(loadsock.CauseNotHeld, "allocation %d is no longer recorded", seq)
		case err != nil:
			return rec, err
		case rec.State == store.StateHeld:
			return rec, nil
		case rec.State != store.StateAllocated:
			return rec, loadsock.Refusef(loadsock.CauseNotHeld, "allocation %d is %s: its container is gone", seq, rec.State)
		}
		t.notify()
		timer.Reset(heldPoll)
	}
}

// loadGPUs returns the GPU indices a request names among rec's GPUs (a
// replica's GPU counts), all of them if it names none.
func loadGPUs(rec store.Allocation, names []string) ([]int, error) {
	mine := topology.GPUsOf(rec.DeviceIDs...)
	if len(names) == 0 {
		return mine, nil
	}
	out := make([]int, 0, len(names))
	for _, name := range names {
		i, ok := topology.GPUOf(name)
		if !ok || topology.IsReplicaID(name) || !slices.Contains(mine, i) {
			ids := make([]string, len(mine))
			for k, g := range mine {
				ids[k] = topology.GPUID(g)
			}
			return nil, loadsock.Refusef(loadsock.CauseGPU, "%q is not a GPU of this allocation (%s)", name, strings.Join(ids, ", "))
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out, nil
}

// KeepLoads forgets, and clears in the exporter, the loads of allocations
// not in active: a pod of the same name that gets the GPU later starts
// from the load model.
func (t *Service) KeepLoads(active []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state.Load()
	for k, lo := range t.overrides {
		if slices.Contains(active, k.seq) {
			continue
		}
		if st != nil && st.exp != nil {
			st.exp.ClearOverride(k.gpu, lo.holder)
		}
		delete(t.overrides, k)
	}
}
