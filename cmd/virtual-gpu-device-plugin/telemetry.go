package main

import (
	"cmp"
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

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// The GPU telemetry (-telemetry-address): plugin/telemetry's exporter over
// the configuration in force, its listener, the live values in the status
// files, and what workloads set over their load sockets (loadsock).
//
//   - The exporter is built at start and again on every live change
//     (follow): its GPUs are the machine's, with their stored UUIDs, their
//     device ids (a shared GPU's replicas and the GPU's own id, which
//     allocations of an earlier configuration may hold), the GPU model
//     (memory: what the driver leaves usable, total − reserved, as the
//     status files count it), the load model, seed and per-pod setting of
//     the configuration. Holders come from the allocation records the
//     lifecycle tracker keeps (telemetry.StoreHolders), health from the
//     Server's devices.
//   - Every second, just after the clock's second turns (the load model
//     changes once a second), and at once after a change (a workload's
//     load, a rebuild), the exporter's readings of that second go into the
//     status directory's live file (viewFiles.live: one file, replaced
//     without fsync), whose values nvidia-smi in a container shows instead
//     of its status files': what the exporter serves.
//   - A workload's request (loadsock.Handler) becomes an exporter override
//     for its holder on its GPUs, for loadTTL; the overrides are
//     remembered, so that a rebuilt exporter gets them again, and cleared
//     when their allocation ends.

// telemetryRelease is the dcgm-exporter release whose series the
// telemetry follows (plugin/telemetry's README).
const telemetryRelease = "4.5.3-4.8.2"

// Telemetry timings.
const (
	// telemetryPeriod is how often the status files get the live values.
	telemetryPeriod = time.Second
	// telemetryAlign is how long after the second turns they are written.
	telemetryAlign = 5 * time.Millisecond
	// loadTTL is how long a workload's load lasts unless set again or its
	// allocation ends: telemetry.MaxOverrideTTL.
	loadTTL = telemetry.MaxOverrideTTL
	// heldPoll is how often a load request waits for its allocation's
	// holder to be recorded.
	heldPoll = 50 * time.Millisecond
	// loadSyncInterval is how often the load sockets follow the active
	// allocations.
	loadSyncInterval = time.Second
)

// gpuTelemetry is the process's telemetry. Build it with newGPUTelemetry;
// follow gives it an exporter; Run keeps the status files' live values
// until ctx ends. It is safe for concurrent use.
type gpuTelemetry struct {
	st       *store.Store
	active   telemetry.Allocations // the active records, for the holders
	devices  telemetry.Devices
	view     *viewFiles
	hostname string
	notify   func() // asks the lifecycle tracker to look for holders now
	clock    telemetry.Clock
	log      zerolog.Logger

	state atomic.Pointer[telemetryState]
	kick  chan struct{}

	mu        sync.Mutex // serializes follow and the load requests
	overrides map[loadKey]loadOverride
	lastErr   string // the update error logged last
}

// telemetryState is an exporter and how the configuration that built it
// lets containers drive it. err says why there is no exporter.
type telemetryState struct {
	exp      *telemetry.Exporter
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
	holder telemetry.Holder
	o      telemetry.Override
	until  time.Time
}

// telemetryClock is the wall clock.
type telemetryClock struct{}

func (telemetryClock) Now() time.Time { return time.Now() }

// newGPUTelemetry returns the telemetry of the process: devices and
// records from st, holders from active (its active records; nil: st),
// health from devices, live values into view's status files, hostname the
// Hostname label. notify (nil: none) asks the lifecycle tracker to look
// for holders now; clock nil is the wall clock.
func newGPUTelemetry(st *store.Store, active telemetry.Allocations, devices telemetry.Devices, view *viewFiles, hostname string, notify func(), clock telemetry.Clock, log zerolog.Logger) *gpuTelemetry {
	if active == nil {
		active = st
	}
	if clock == nil {
		clock = telemetryClock{}
	}
	if notify == nil {
		notify = func() {}
	}
	return &gpuTelemetry{st: st, active: active, devices: devices, view: view, hostname: hostname, notify: notify, clock: clock,
		log: log.With().Str("component", "telemetry").Logger(), kick: make(chan struct{}, 1), overrides: map[loadKey]loadOverride{}}
}

// follow builds the exporter of set, the configuration in force, and
// serves it from now on, with the workloads' loads still in force. An
// error (GPUs without UUIDs) leaves no exporter: the listener answers 503
// saying why.
func (t *gpuTelemetry) follow(set *deviceSet) error {
	exp, err := t.newExporter(set)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.state.Store(&telemetryState{err: err})
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
	t.state.Store(&telemetryState{exp: exp, handler: exp.Handler(), writable: set.cfg.Telemetry.Writable})
	t.poke()
	return nil
}

// newExporter builds the exporter of set's GPUs as the store has them.
func (t *gpuTelemetry) newExporter(set *deviceSet) (*telemetry.Exporter, error) {
	stored, err := t.st.Devices()
	if err != nil {
		return nil, err
	}
	gpus, err := telemetryGPUs(set, stored)
	if err != nil {
		return nil, err
	}
	cfg := set.cfg
	gm := cfg.GPUs.Machine.GPUModel()
	gm.MemoryMiB -= status.ReservedMiB(gm.MemoryMiB) // as nvidia-smi counts it: used + free = total − reserved
	return telemetry.New(telemetry.Config{
		GPUs:          gpus,
		GPUModel:      gm,
		Hostname:      t.hostname,
		DriverVersion: status.DriverVersion,
		Devices:       t.devices,
		Holders:       telemetry.StoreHolders{Store: t.active},
		Model:         cfg.Telemetry.Model,
		Seed:          cfg.Telemetry.Seed,
		Clock:         t.clock,
		PerPod:        cfg.Telemetry.PerPod,
		Logger:        t.log,
	})
}

// telemetryGPUs returns the exporter's GPUs of set: the machine's, with
// their stored UUIDs, each with its own id and, when set shares it, its
// replicas' ids. A GPU without a UUID (the node has no identity) is an
// error.
func telemetryGPUs(set *deviceSet, stored []store.Device) ([]telemetry.GPU, error) {
	m := set.cfg.GPUs.Machine
	uuids := gpuUUIDs(stored)
	out := make([]telemetry.GPU, m.Len())
	for i := range out {
		u := uuids[i]
		if u == "" {
			return nil, fmt.Errorf("telemetry: GPU %s has no UUID: the node has no identity (-node-name, or a machine id) to derive one from", m.ID(i))
		}
		ids := []string{m.ID(i)}
		if set.Shares(i) {
			for j := range set.PerGPU() {
				ids = append(ids, topology.ReplicaID(i, j))
			}
		}
		out[i] = telemetry.GPU{Index: i, UUID: u, PCIBusID: m.PCIBusID(i), DeviceIDs: ids}
	}
	return out, nil
}

// ServeHTTP serves the exporter in force; 503 without one.
func (t *gpuTelemetry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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

var _ http.Handler = (*gpuTelemetry)(nil)

// poke asks Run to write the live values now.
func (t *gpuTelemetry) poke() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Run writes the live values into the status files at once, then just
// after every second of the clock and whenever poked, until ctx ends. A
// failure is logged when it differs from the last one.
func (t *gpuTelemetry) Run(ctx context.Context) error {
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
func (t *gpuTelemetry) update(now time.Time) {
	st := t.state.Load()
	if st == nil || st.exp == nil {
		return
	}
	rs, err := st.exp.ReadingsAt(now)
	if err == nil {
		err = t.view.live(rs, now)
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

// SetLoad applies a workload's request on allocation seq's GPUs: its
// holder's own utilization and memory used, or back to the load model. It
// implements loadsock.Handler. It waits (until ctx ends) for the lifecycle
// tracker to record the allocation's holder, which it does within a
// fraction of a second of the container appearing.
func (t *gpuTelemetry) SetLoad(ctx context.Context, seq uint64, req loadsock.Request) (int, error) {
	rec, err := t.held(ctx, seq)
	if err != nil {
		return 0, err
	}
	gpus, err := loadGPUs(rec, req.GPUs)
	if err != nil {
		return 0, err
	}
	holder := telemetry.Holder{Namespace: rec.Namespace, Pod: rec.Pod, Container: rec.Container}
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
		o := telemetry.Override{UtilizationPercent: req.UtilizationPercent, MemoryUsedMiB: req.MemoryUsedMiB, TTL: loadTTL}
		if err := st.exp.SetOverride(i, holder, o); err != nil {
			return 0, loadRefusal(err)
		}
		t.overrides[k] = loadOverride{holder: holder, o: o, until: until}
	}
	t.poke()
	return len(gpus), nil
}

// loadRefusal maps the exporter's refusal of an override to the load
// protocol's.
func loadRefusal(err error) error {
	cause := loadsock.CauseFailed
	switch {
	case errors.Is(err, telemetry.ErrInvalidOverride):
		cause = loadsock.CauseValue
	case errors.Is(err, telemetry.ErrNotHolder):
		cause = loadsock.CauseNotHeld
	case errors.Is(err, store.ErrUnknownDevice):
		cause = loadsock.CauseGPU
	}
	return &loadsock.Refusal{Cause: cause, Msg: err.Error(), Err: err}
}

// held returns allocation seq's record once a container holds it: at once
// if it does, else after the tracker recorded its holder, waiting until
// ctx ends.
func (t *gpuTelemetry) held(ctx context.Context, seq uint64) (store.Allocation, error) {
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
	var mine []int
	for _, id := range rec.DeviceIDs {
		if i, ok := topology.GPUOf(id); ok {
			mine = append(mine, i)
		}
	}
	slices.Sort(mine)
	mine = slices.Compact(mine)
	if len(names) == 0 {
		return mine, nil
	}
	out := make([]int, 0, len(names))
	for _, name := range names {
		i, ok := topology.GPUOf(name)
		if !ok || topology.IsReplicaID(name) || !slices.Contains(mine, i) {
			ids := make([]string, len(mine))
			for k, g := range mine {
				ids[k] = gpuID(g)
			}
			return nil, loadsock.Refusef(loadsock.CauseGPU, "%q is not a GPU of this allocation (%s)", name, strings.Join(ids, ", "))
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out, nil
}

// keepLoads forgets, and clears in the exporter, the loads of allocations
// not in active: a pod of the same name that gets the GPU later starts
// from the load model.
func (t *gpuTelemetry) keepLoads(active []uint64) {
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

// activeLoadSockets returns the active allocations whose answer mounted a
// load socket (their record has loadsock.EnvSocket), ascending, with their
// devices: the load sockets' Server closes those whose devices newer ones
// took.
func activeLoadSockets(st telemetry.Allocations) ([]loadsock.Allocation, error) {
	recs, err := st.Allocations(store.AllocationFilter{Active: true})
	if err != nil {
		return nil, err
	}
	var out []loadsock.Allocation
	for _, r := range recs {
		if r.Envs[loadsock.EnvSocket] != "" {
			out = append(out, loadsock.Allocation{Seq: r.Seq, Devices: r.DeviceIDs})
		}
	}
	slices.SortFunc(out, func(a, b loadsock.Allocation) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// live writes rs, the exporter's readings at now, into the status
// directory's live file (status.WriteLive: one file for every GPU, without
// fsync), where nvidia-smi takes a GPU's values from (see liveTelemetry).
// GPUs without a reading are left out.
func (f *viewFiles) live(rs []telemetry.Reading, now time.Time) error {
	byUUID := make(map[string]*telemetry.Reading, len(rs))
	for i := range rs {
		byUUID[rs[i].UUID] = &rs[i]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l := status.NewLive(now)
	for _, g := range f.gpus {
		r := byUUID[g.UUID]
		if r == nil {
			continue
		}
		base := *g
		if prev, ok := f.lastLive[g.UUID]; ok {
			base.Telemetry = prev // the last XID and a lost GPU's last values stay
		}
		l.GPUs[g.UUID] = liveTelemetry(&base, r, now)
	}
	if err := f.status.WriteLive(l); err != nil {
		return err
	}
	f.lastLive = l.GPUs
	return nil
}

// dropLive removes the live file: without the telemetry nvidia-smi shows
// the status files' values, not those of an earlier run.
func (f *viewFiles) dropLive() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastLive = nil
	return f.status.RemoveLive()
}

// liveTelemetry returns g's telemetry with reading r's values at now:
// utilization.gpu, utilization.memory, memory.used (at most total −
// reserved), temperature.gpu, power.draw and clocks.sm are the exporter's
// DCGM_FI_DEV_GPU_UTIL, MEM_COPY_UTIL, FB_USED, GPU_TEMP, POWER_USAGE and
// SM_CLOCK. A board with a memory sensor reads 3 °C above the GPU, one
// with a fan turns at 30 % plus 0.4 % per point of utilization; the memory
// clock stays at its maximum. An XID sets lastXid (and it stays); a lost
// GPU keeps its last values (nvidia-smi shows no value of a lost GPU).
func liveTelemetry(g *status.GPU, r *telemetry.Reading, now time.Time) status.Telemetry {
	t := g.Telemetry
	t.Updated = now.UTC()
	if r.XID > 0 {
		x := r.XID
		t.LastXID = &x
	}
	if r.Lost {
		return t
	}
	t.UtilizationGPUPercent = r.UtilizationPercent
	t.UtilizationMemoryPercent = r.MemoryUtilizationPercent
	t.MemoryUsedMiB = min(r.MemoryUsedMiB, g.MemoryTotalMiB-g.MemoryReservedMiB)
	t.TemperatureC = r.TemperatureC
	if t.MemoryTemperatureC != nil {
		v := r.TemperatureC + 3
		t.MemoryTemperatureC = &v
	}
	t.PowerDrawW = r.PowerDrawW
	t.SMClockMHz = r.SMClockMHz
	if t.FanSpeedPercent != nil {
		v := 30 + r.UtilizationPercent*2/5
		t.FanSpeedPercent = &v
	}
	return t
}
