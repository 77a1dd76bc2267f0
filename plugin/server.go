package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// EnvIDs is the environment variable Allocate sets in the container: the
// allocated device ids, joined by commas, in device-index order, unless the
// catalog's Env sets it (gpuset.EnvIDs).
const EnvIDs = gpuset.EnvIDs

// Observer is told what the Server did, for metrics. Its methods are called
// on the RPC path: they must be fast and safe for concurrent use.
type Observer interface {
	// Allocated reports one container request of Allocate: its ids (as
	// asked), how it ended, and how long it took, validation, the durable
	// commit of its record and the catalog's Respond included.
	Allocated(ids []string, result metrics.Result, took time.Duration)
	// Preferred reports one container request of GetPreferredAllocation
	// that reached the preference policy: the Index of each chosen device,
	// ascending (nil unless metrics.ResultOK), metrics.ResultOK or metrics.ResultFailed, and how
	// long the choice took.
	Preferred(chosen []int, result metrics.Result, took time.Duration)
}

// ServerConfig configures a Server. Catalog is required.
type ServerConfig struct {
	// Catalog is the first catalog: the devices and how to answer for
	// them (see [Catalog]; [Server.SetCatalog] replaces it).
	Catalog Catalog
	// Recorder stores allocations; nil records nothing (records then have
	// Seq 0).
	Recorder Recorder
	// Logger receives one info line per answered allocation and per
	// catalog change; the zero Logger discards. Refused
	// and failed calls are not logged here: the Server returns them, and
	// the Runner logs them.
	Logger zerolog.Logger
}

// Server answers the device plugin RPCs for one catalog at a time. It is
// safe for concurrent use and outlives the gRPC servers (and Runners) that
// serve it: its owner closes it. Its handlers return gRPC status errors and
// log nothing about them.
type Server struct {
	pluginapi.UnimplementedDevicePluginServer

	recorder Recorder
	observer atomic.Pointer[observerRef]
	log      zerolog.Logger

	// state is the current catalog, read without locks by the RPCs.
	state atomic.Pointer[catalogState]
	// writeMu serializes the writers of state (SetHealth, SetCatalog) for
	// the whole of a change, store write included.
	writeMu sync.Mutex
	mu      sync.Mutex    // guards publishing state and changed
	changed chan struct{} // closed and replaced on every change
	closed  chan struct{} // closed by Close
}

var (
	_ pluginapi.DevicePluginServer = (*Server)(nil)
	_ DevicePlugin                 = (*Server)(nil)
	_ Observer                     = (*metrics.Metrics)(nil)
	_ metrics.Devices              = (*Server)(nil)
	_ metrics.Registration         = (*Runner)(nil)
	_ telemetry.Devices            = (*Server)(nil)
)

// observerRef holds an Observer for an atomic.Pointer.
type observerRef struct{ Observer }

// NewServer checks cfg and returns a Server for its catalog. A catalog
// without devices is ErrNoDevices, without Prefer ErrNoPreferFunc; an empty
// id ErrEmptyID; a repeated id or index ErrDuplicateDevice; a negative
// Limit.Max ErrInvalidLimit.
func NewServer(cfg ServerConfig) (*Server, error) {
	st, err := newCatalogState(cfg.Catalog)
	if err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	s := &Server{
		recorder: cfg.Recorder,
		log:      cfg.Logger,
		changed:  make(chan struct{}),
		closed:   make(chan struct{}),
	}
	s.state.Store(st)
	s.SetObserver(nil)
	return s, nil
}

// SetObserver makes o the Observer told about every later allocation and
// preference; nil tells nobody (the default). Call it
// before the Server is served, so that no call goes unobserved; it is safe
// at any time.
func (s *Server) SetObserver(o Observer) {
	if o == nil {
		o = nopObserver{}
	}
	s.observer.Store(&observerRef{o})
}

// obs is the current Observer.
func (s *Server) obs() Observer { return s.observer.Load().Observer }

// Close ends every ListAndWatch stream; later streams end at once. The
// Server still answers the other RPCs and takes catalog and health changes.
// Close is idempotent; the Server's owner calls it when it is done with
// the Server (a Runner does not).
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
}

// Devices returns a copy of the current catalog's devices, sorted by index.
func (s *Server) Devices() []gpuset.Device { return slices.Clone(s.state.Load().devices) }

// Catalog returns the current catalog, with a copy of its devices as they
// are now (health included).
func (s *Server) Catalog() Catalog { return s.state.Load().catalog() }

// publish makes next the current catalog and wakes every ListAndWatch
// stream. The caller holds writeMu.
func (s *Server) publish(next *catalogState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.Store(next)
	close(s.changed)
	s.changed = make(chan struct{})
}

// SetCatalog replaces the catalog with c, checked as NewServer checks it
// (an invalid c leaves the current one and returns the error). The swap is
// atomic: every open ListAndWatch stream gets c's full device list at once,
// with the health c gives; an RPC that began before the swap finishes with
// the catalog it began with, and one that begins after uses c only, so an
// id c lacks is then "unknown device" (InvalidArgument). Registration is
// not the Server's: if the resource name changes too, the owner stops the
// Runner and starts another (see [Runner.Run]). SetCatalog waits for a
// SetHealth in progress, and SetHealth for it.
func (s *Server) SetCatalog(c Catalog) error {
	return s.replace("set catalog", func(Catalog) (Catalog, error) { return c, nil })
}

// UpdateCatalog is SetCatalog with the new catalog built by build from the
// current one (a copy, health as it is now). No health change can happen
// between build's call and the swap: a caller that builds the catalog from
// the stored health (store.Store.Devices after a reconcile) cannot lose a
// concurrent SetHealth. build must not call the Server's SetHealth,
// SetCatalog or UpdateCatalog (they would wait forever); an error from build
// is returned wrapped and changes nothing.
func (s *Server) UpdateCatalog(build func(current Catalog) (Catalog, error)) error {
	return s.replace("update catalog", build)
}

func (s *Server) replace(op string, build func(Catalog) (Catalog, error)) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	cur := s.state.Load()
	c, err := build(cur.catalog())
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	next, err := newCatalogState(c)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	s.publish(next)
	added, removed := cur.diff(next)
	s.log.Info().Int("devices", len(next.devices)).Int("added", added).Int("removed", removed).Msg("device catalog replaced")
	return nil
}

// SetHealth changes a device's health in the current catalog and sends the
// new list to every ListAndWatch stream: SetHealthOf of one device.
func (s *Server) SetHealth(id string, healthy bool, reason string) (bool, error) {
	return s.SetHealthOf([]string{id}, healthy, reason)
}

// SetHealthOf changes the health of the devices ids of the current catalog
// as one change (the replicas of a shared GPU, whose health is the GPU's):
// every ListAndWatch stream gets one new list. The health change itself,
// stored, logged and counted, is the agent's (agent.Agent.SetHealth): the
// Server only publishes it. It reports whether any device changed;
// devices that have the health and reason already are left as they are.
// An id the current catalog lacks is an error wrapping
// store.ErrUnknownDevice, and so is an empty ids; nothing is changed then.
func (s *Server) SetHealthOf(ids []string, healthy bool, reason string) (bool, error) {
	if healthy {
		reason = ""
	}
	if len(ids) == 0 {
		return false, fmt.Errorf("set health: no devices: %w", store.ErrUnknownDevice)
	}
	// Writers take turns; RPCs only see the published catalog.
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	cur := s.state.Load()
	var change []int // positions of the devices to change
	for _, id := range ids {
		pos, ok := cur.byID[id]
		switch {
		case !ok:
			return false, fmt.Errorf("set health of %s: %w", topology.QuoteID(id), store.ErrUnknownDevice)
		case cur.devices[pos].Healthy != healthy || cur.devices[pos].Reason != reason:
			change = append(change, pos)
		}
	}
	if len(change) == 0 {
		return false, nil
	}
	s.publish(cur.withHealth(change, healthy, reason))
	return true, nil
}

// Options is what GetDevicePluginOptions answers and what Register sends.
func Options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// GetDevicePluginOptions answers [Options].
func (s *Server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return Options(), nil
}

// ListAndWatch sends the full device list at once and again on every change
// (health, catalog), until the stream's context ends or the Server is
// closed.
func (s *Server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	ctx := stream.Context()
	for {
		resp, changed := s.snapshot()
		if err := stream.Send(resp); err != nil {
			return fmt.Errorf("list and watch: send: %w", err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		case <-s.closed:
			return nil
		}
	}
}

// snapshot returns the current list and the channel that closes on the next
// change.
func (s *Server) snapshot() (*pluginapi.ListAndWatchResponse, <-chan struct{}) {
	s.mu.Lock()
	st, changed := s.state.Load(), s.changed
	s.mu.Unlock()
	resp := &pluginapi.ListAndWatchResponse{Devices: make([]*pluginapi.Device, len(st.devices))}
	for i, d := range st.devices {
		pd := &pluginapi.Device{ID: d.ID, Health: pluginapi.Unhealthy}
		if d.Healthy {
			pd.Health = pluginapi.Healthy
		}
		if d.NUMA >= 0 {
			pd.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMA)}}}
		}
		resp.Devices[i] = pd
	}
	return resp, changed
}

// Allocate answers each container request from its stored record: it
// checks every container request against one catalog, then for each one
// computes the environment (the catalog's Env and VIRTUAL_GPU_IDS), records
// it, and builds the answer from the stored record (its environment, and
// the catalog's Respond: mounts, device nodes, CDI devices, annotations,
// more variables). Empty requests, unknown ids, ids repeated within a
// container request or across two of them, and requests over the
// catalog's Limit are InvalidArgument; unhealthy ids FailedPrecondition; a
// failed record Unavailable; a failed or invalid Respond Internal. Every
// container request is checked before any is recorded. The answer is a
// function of the stored record: the same ids always get the same answer
// unless Respond uses the record's sequence number.
func (s *Server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	crs := req.GetContainerRequests()
	if len(crs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "allocate: no container requests")
	}
	cat := s.state.Load()
	obs := s.obs()
	sets := make([][]gpuset.Device, len(crs))
	took := make([]time.Duration, len(crs))
	var owner map[string]int // device id -> container request, when several
	if len(crs) > 1 {
		owner = make(map[string]int)
	}
	for i, cr := range crs {
		start := time.Now()
		devs, err := cat.lookup(cr.GetDevicesIds(), true)
		if err == nil {
			err = cat.checkLimit(len(devs))
		}
		if err == nil && owner != nil {
			err = claimDevices(owner, devs, i)
		}
		if err != nil {
			obs.Allocated(cr.GetDevicesIds(), metrics.ResultRejected, time.Since(start))
			return nil, status.Errorf(status.Code(err), "allocate: container request %d: %s", i, status.Convert(err).Message())
		}
		sets[i], took[i] = devs, time.Since(start)
	}
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, len(sets))}
	for i, devs := range sets {
		start := time.Now()
		cr, ids, err := s.allocateOne(ctx, cat, devs)
		if err != nil {
			obs.Allocated(ids, metrics.ResultFailed, took[i]+time.Since(start))
			return nil, err
		}
		obs.Allocated(ids, metrics.ResultOK, took[i]+time.Since(start))
		resp.ContainerResponses[i] = cr
	}
	return resp, nil
}

// allocateOne records the allocation of devs (checked, sorted by Index)
// and builds its answer from the stored record. It returns the ids and a
// gRPC status error.
func (s *Server) allocateOne(ctx context.Context, cat *catalogState, devs []gpuset.Device) (*pluginapi.ContainerAllocateResponse, []string, error) {
	ids := make([]string, len(devs))
	for j, d := range devs {
		ids[j] = d.ID
	}
	envs := map[string]string{}
	if cat.env != nil {
		for k, v := range cat.env(devs) {
			envs[k] = v
		}
	}
	if _, set := envs[EnvIDs]; !set {
		envs[EnvIDs] = strings.Join(ids, ",")
	}
	rec := Record{IDs: ids, Envs: envs}
	if s.recorder != nil {
		stored, err := s.recorder.RecordAllocation(ctx, ids, envs)
		if err != nil {
			// The store's error names its own operation.
			return nil, ids, status.Errorf(codes.Unavailable, "allocate %s: not recorded: %v", topology.JoinIDs(ids), err)
		}
		rec = stored
	}
	var spec ContainerSpec
	if cat.respond != nil {
		var err error
		if spec, err = cat.respond(rec, devs); err != nil {
			return nil, ids, status.Errorf(codes.Internal, "allocate %s: container response: %v", topology.JoinIDs(ids), err)
		}
	}
	cr, err := containerResponse(rec, spec)
	if err != nil {
		return nil, ids, status.Errorf(codes.Internal, "allocate %s: container response: %v", topology.JoinIDs(ids), err)
	}
	s.log.Info().Strs("ids", ids).Uint64("seq", rec.Seq).Msg("allocated")
	return cr, ids, nil
}

// claimDevices records in owner that container request i asks for devs, and
// refuses a device another container request of the same call asked for:
// one device must not go to two containers.
func claimDevices(owner map[string]int, devs []gpuset.Device, i int) error {
	for _, d := range devs {
		if j, taken := owner[d.ID]; taken {
			return status.Errorf(codes.InvalidArgument, "device %s is also in container request %d: one device cannot go to two containers", topology.QuoteID(d.ID), j)
		}
		owner[d.ID] = i
	}
	return nil
}

// lookup resolves ids to devices of the catalog sorted by index. It rejects
// an empty list, unknown and duplicate ids (InvalidArgument) and, if
// requireHealthy, unhealthy devices (FailedPrecondition). The error is a
// gRPC status.
func (c *catalogState) lookup(ids []string, requireHealthy bool) ([]gpuset.Device, error) {
	if len(ids) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no device ids")
	}
	devs := make([]gpuset.Device, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return nil, status.Errorf(codes.InvalidArgument, "device %s requested twice", topology.QuoteID(id))
		}
		seen[id] = true
		pos, ok := c.byID[id]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "unknown device %s", topology.QuoteID(id))
		}
		d := c.devices[pos]
		if requireHealthy && !d.Healthy {
			return nil, status.Errorf(codes.FailedPrecondition, "device %s is unhealthy: %s", topology.QuoteID(id), d.Reason)
		}
		devs = append(devs, d)
	}
	slices.SortFunc(devs, func(a, b gpuset.Device) int { return a.Index - b.Index })
	return devs, nil
}

// GetPreferredAllocation answers each container request with exactly
// allocation_size ids from available_deviceIDs, including every
// must_include_deviceIDs, chosen by the catalog's Prefer, sorted by device
// index. Impossible or malformed requests, and sizes over the catalog's
// Limit, are InvalidArgument; an answer of Prefer that breaks this contract
// Internal.
func (s *Server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	if len(req.GetContainerRequests()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "preferred allocation: no container requests")
	}
	cat := s.state.Load()
	resp := &pluginapi.PreferredAllocationResponse{}
	for i, cr := range req.GetContainerRequests() {
		ids, err := s.preferOne(cat, cr)
		if err != nil {
			return nil, status.Errorf(status.Code(err), "preferred allocation: container request %d: %s", i, status.Convert(err).Message())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (s *Server) preferOne(cat *catalogState, cr *pluginapi.ContainerPreferredAllocationRequest) ([]string, error) {
	size := int(cr.GetAllocationSize())
	avail := cr.GetAvailableDeviceIDs()
	must := cr.GetMustIncludeDeviceIDs()
	switch {
	case size <= 0:
		return nil, status.Errorf(codes.InvalidArgument, "allocation size %d: must be at least 1", size)
	case size > len(avail):
		return nil, status.Errorf(codes.InvalidArgument, "allocation size %d is more than the %d available devices", size, len(avail))
	case len(must) > size:
		return nil, status.Errorf(codes.InvalidArgument, "%d must-include devices do not fit allocation size %d", len(must), size)
	}
	if err := cat.checkLimit(size); err != nil {
		return nil, err
	}
	availDevs, err := cat.lookup(avail, false)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "available devices: %s", status.Convert(err).Message())
	}
	var mustDevs []gpuset.Device
	if len(must) > 0 {
		if mustDevs, err = cat.lookup(must, false); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "must-include devices: %s", status.Convert(err).Message())
		}
		for _, d := range mustDevs {
			if !slices.Contains(avail, d.ID) {
				return nil, status.Errorf(codes.InvalidArgument, "must-include device %s is not available", topology.QuoteID(d.ID))
			}
		}
	}
	start := time.Now()
	chosen, err := cat.prefer(availDevs, mustDevs, size)
	took := time.Since(start)
	if err == nil {
		// The kubelet does not check the answer; we do.
		var devs []gpuset.Device
		if devs, err = checkChoice(cat, chosen, availDevs, mustDevs, size); err == nil {
			s.obs().Preferred(Indices(devs), metrics.ResultOK, took)
			ids := make([]string, len(devs))
			for i, d := range devs {
				ids[i] = d.ID
			}
			return ids, nil
		}
	}
	s.obs().Preferred(nil, metrics.ResultFailed, took)
	if errors.Is(err, ErrInvalidChoice) {
		return nil, status.Errorf(codes.Internal, "preference policy: %v", err)
	}
	return nil, status.Errorf(codes.InvalidArgument, "%v", err)
}

// checkChoice verifies a PreferFunc answer: size distinct ids, all of
// available, every must-include among them. It returns the chosen devices
// sorted by index.
func checkChoice(cat *catalogState, chosen []string, available, must []gpuset.Device, size int) ([]gpuset.Device, error) {
	if len(chosen) != size {
		return nil, fmt.Errorf("%d devices chosen, want %d: %w", len(chosen), size, ErrInvalidChoice)
	}
	isAvail := make(map[string]bool, len(available))
	for _, d := range available {
		isAvail[d.ID] = true
	}
	seen := make(map[string]bool, len(chosen))
	devs := make([]gpuset.Device, 0, len(chosen))
	for _, id := range chosen {
		if !isAvail[id] || seen[id] {
			return nil, fmt.Errorf("device %s unavailable or repeated: %w", topology.QuoteID(id), ErrInvalidChoice)
		}
		seen[id] = true
		devs = append(devs, cat.devices[cat.byID[id]])
	}
	for _, d := range must {
		if !seen[d.ID] {
			return nil, fmt.Errorf("must-include device %s missing: %w", topology.QuoteID(d.ID), ErrInvalidChoice)
		}
	}
	slices.SortFunc(devs, func(a, b gpuset.Device) int { return a.Index - b.Index })
	return devs, nil
}

// PreStartContainer answers with an empty response; the Server does not ask
// for it (PreStartRequired is false).
func (s *Server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

type nopObserver struct{}

func (nopObserver) Allocated([]string, metrics.Result, time.Duration) {}
func (nopObserver) Preferred([]int, metrics.Result, time.Duration)    {}
