package plugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// EnvIDs is the environment variable Allocate sets in the container: the
// allocated device ids, joined by commas, in device-index order.
const EnvIDs = "VIRTUAL_GPU_IDS"

// Device is one device the Server advertises.
type Device struct {
	// ID is the device id the kubelet sees, e.g. "fake-0".
	ID string
	// Index orders devices: lists, VIRTUAL_GPU_IDS and PreferFunc use it.
	Index int
	// NUMA is the NUMA node reported in ListAndWatch; a negative value
	// reports no topology for the device.
	NUMA int
	// Healthy devices are reported "Healthy"; the others "Unhealthy".
	Healthy bool
	// Reason says why a device is unhealthy (empty when healthy).
	Reason string
}

// PreferFunc chooses size device indices from available, including every
// index of mustInclude. The Server has validated the request before calling
// it: the indices are known, distinct, and 0 < size <= len(available),
// len(mustInclude) <= size, mustInclude ⊆ available. It must return exactly
// size distinct indices from available, or an error.
type PreferFunc func(available, mustInclude []int, size int) ([]int, error)

// EnvFunc returns extra environment variables for a container that gets the
// devices with these indices (sorted ascending). It must not set [EnvIDs].
type EnvFunc func(indices []int) map[string]string

// Recorder makes an allocation durable before Allocate answers it.
type Recorder interface {
	// RecordAllocation stores the allocation of ids with the response envs
	// and returns the envs to hand to the kubelet (those of the stored
	// record). An error fails the Allocate call with codes.Unavailable.
	RecordAllocation(ctx context.Context, ids []string, envs map[string]string) (map[string]string, error)
}

// HealthRecorder makes a health change durable before it is broadcast.
type HealthRecorder interface {
	// RecordHealth stores the device's new health with its reason and cause.
	RecordHealth(id string, healthy bool, reason, cause string) error
}

// Result is how one container request ended, as an Observer is told.
type Result int

const (
	// ResultOK means the request was answered.
	ResultOK Result = iota
	// ResultRejected means an Allocate container request was refused for
	// what it asked: no, unknown, repeated or unhealthy ids, or a device
	// another container request of the call asked for (InvalidArgument or
	// FailedPrecondition).
	ResultRejected
	// ResultFailed means a valid request could not be answered: the
	// allocation was not recorded (Unavailable), or the preference policy
	// failed or broke its contract.
	ResultFailed
)

// String returns "ok", "rejected" or "failed" (the metrics' label values).
func (r Result) String() string {
	switch r {
	case ResultOK:
		return "ok"
	case ResultRejected:
		return "rejected"
	case ResultFailed:
		return "failed"
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// Observer is told what the Server did, for metrics. Its methods are called
// on the RPC path: they must be fast and safe for concurrent use.
type Observer interface {
	// Allocated reports one container request of Allocate: its ids (as
	// asked), how it ended, and how long it took, validation and the
	// durable commit of its record included.
	Allocated(ids []string, result Result, took time.Duration)
	// Preferred reports one container request of GetPreferredAllocation
	// that reached the preference policy: the chosen indices (nil unless
	// ResultOK), ResultOK or ResultFailed, and how long the choice took.
	Preferred(chosen []int, result Result, took time.Duration)
	// HealthChanged reports a stored and broadcast health change.
	HealthChanged(id string, healthy bool, cause string)
}

// ServerConfig configures a Server. Devices and Prefer are required.
type ServerConfig struct {
	// Devices are the advertised devices; ids and indices must be unique.
	Devices []Device
	// Prefer chooses preferred allocations (allocator.Policies, bound to
	// the machine).
	Prefer PreferFunc
	// Env adds environment variables to Allocate answers; nil adds none.
	Env EnvFunc
	// Recorder stores allocations; nil records nothing.
	Recorder Recorder
	// Health stores health changes; nil keeps them in memory only.
	Health HealthRecorder
	// Logger receives one info line per answered allocation and per
	// health change; the zero Logger discards. Refused and failed calls are
	// not logged here: the Server returns them, and the Runner logs them.
	Logger zerolog.Logger
}

// Server answers the device plugin RPCs for one device set. It is safe for
// concurrent use and outlives the gRPC servers that serve it. Its handlers
// return gRPC status errors and log nothing about them.
type Server struct {
	pluginapi.UnimplementedDevicePluginServer

	prefer   PreferFunc
	env      EnvFunc
	recorder Recorder
	health   HealthRecorder
	observer atomic.Pointer[observerRef]
	log      zerolog.Logger

	healthMu sync.Mutex     // serializes SetHealth calls
	mu       sync.Mutex     // guards the fields below
	devices  []Device       // sorted by Index
	byID     map[string]int // id -> position in devices
	changed  chan struct{}  // closed and replaced on every change
	closed   chan struct{}  // closed by Close
}

var (
	_ pluginapi.DevicePluginServer = (*Server)(nil)
	_ DevicePlugin                 = (*Server)(nil)
)

// observerRef holds an Observer for an atomic.Pointer.
type observerRef struct{ Observer }

// NewServer checks cfg and returns a Server for its devices.
func NewServer(cfg ServerConfig) (*Server, error) {
	if len(cfg.Devices) == 0 {
		return nil, fmt.Errorf("new server: %w", ErrNoDevices)
	}
	if cfg.Prefer == nil {
		return nil, fmt.Errorf("new server: %w", ErrNoPreferFunc)
	}
	devices := slices.Clone(cfg.Devices)
	slices.SortFunc(devices, func(a, b Device) int { return a.Index - b.Index })
	byID := make(map[string]int, len(devices))
	for i, d := range devices {
		if d.ID == "" {
			return nil, fmt.Errorf("new server: device at index %d: %w", d.Index, ErrEmptyID)
		}
		if _, dup := byID[d.ID]; dup {
			return nil, fmt.Errorf("new server: device %q: %w", d.ID, ErrDuplicateDevice)
		}
		if i > 0 && devices[i-1].Index == d.Index {
			return nil, fmt.Errorf("new server: devices %q and %q share index %d: %w", devices[i-1].ID, d.ID, d.Index, ErrDuplicateDevice)
		}
		byID[d.ID] = i
	}
	s := &Server{
		prefer:   cfg.Prefer,
		env:      cfg.Env,
		recorder: cfg.Recorder,
		health:   cfg.Health,
		log:      cfg.Logger,
		devices:  devices,
		byID:     byID,
		changed:  make(chan struct{}),
		closed:   make(chan struct{}),
	}
	s.SetObserver(nil)
	return s, nil
}

// SetObserver makes o the Observer told about every later allocation,
// preference and health change; nil tells nobody (the default). Call it
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

// Close ends every ListAndWatch stream; later streams end at once. Close is
// idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
}

// Devices returns a copy of the device list, sorted by index.
func (s *Server) Devices() []Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.devices)
}

// SetHealth changes a device's health, stores it through the
// HealthRecorder first (if any), and sends the new list to every
// ListAndWatch stream. It reports whether anything changed; setting the
// same health and reason again is a no-op. cause says who asked ("admin",
// "fault-injection", ...). An unknown id is an error wrapping
// store.ErrUnknownDevice.
func (s *Server) SetHealth(id string, healthy bool, reason, cause string) (bool, error) {
	if healthy {
		reason = ""
	}
	// Health writers take turns; RPCs only wait for the in-memory change,
	// never for the disk.
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	s.mu.Lock()
	pos, ok := s.byID[id]
	unchanged := ok && s.devices[pos].Healthy == healthy && s.devices[pos].Reason == reason
	s.mu.Unlock()
	switch {
	case !ok:
		return false, fmt.Errorf("set health of %s: %w", quoteID(id), store.ErrUnknownDevice)
	case unchanged:
		return false, nil
	}
	if s.health != nil {
		if err := s.health.RecordHealth(id, healthy, reason, cause); err != nil {
			return false, fmt.Errorf("set health of %s: %w", quoteID(id), err)
		}
	}
	s.mu.Lock()
	d := &s.devices[pos]
	d.Healthy, d.Reason = healthy, reason
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.log.Info().Str("device", id).Bool("healthy", healthy).Str("reason", reason).Str("cause", cause).Msg("device health changed")
	s.obs().HealthChanged(id, healthy, cause)
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

// ListAndWatch sends the full device list at once and again on every change,
// until the stream's context ends or the Server is closed.
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
	defer s.mu.Unlock()
	resp := &pluginapi.ListAndWatchResponse{Devices: make([]*pluginapi.Device, len(s.devices))}
	for i, d := range s.devices {
		pd := &pluginapi.Device{ID: d.ID, Health: pluginapi.Unhealthy}
		if d.Healthy {
			pd.Health = pluginapi.Healthy
		}
		if d.NUMA >= 0 {
			pd.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMA)}}}
		}
		resp.Devices[i] = pd
	}
	return resp, s.changed
}

// Allocate answers each container request with VIRTUAL_GPU_IDS (and the
// EnvFunc's variables) after recording it. Empty requests, unknown ids and
// ids repeated within a container request or across two of them are
// InvalidArgument; unhealthy ids FailedPrecondition; a failed record
// Unavailable. Every container request is checked before any is recorded.
// The same ids always get the same answer.
func (s *Server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	crs := req.GetContainerRequests()
	if len(crs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "allocate: no container requests")
	}
	obs := s.obs()
	sets := make([][]Device, len(crs))
	took := make([]time.Duration, len(crs))
	var owner map[string]int // device id -> container request, when several
	if len(crs) > 1 {
		owner = make(map[string]int)
	}
	for i, cr := range crs {
		start := time.Now()
		devs, err := s.lookup(cr.GetDevicesIds(), true)
		if err == nil && owner != nil {
			err = claimDevices(owner, devs, i)
		}
		if err != nil {
			obs.Allocated(cr.GetDevicesIds(), ResultRejected, time.Since(start))
			return nil, status.Errorf(status.Code(err), "allocate: container request %d: %s", i, status.Convert(err).Message())
		}
		sets[i], took[i] = devs, time.Since(start)
	}
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, len(sets))}
	for i, devs := range sets {
		start := time.Now()
		ids := make([]string, len(devs))
		indices := make([]int, len(devs))
		for j, d := range devs {
			ids[j], indices[j] = d.ID, d.Index
		}
		envs := map[string]string{}
		if s.env != nil {
			for k, v := range s.env(indices) {
				envs[k] = v
			}
		}
		envs[EnvIDs] = strings.Join(ids, ",")
		if s.recorder != nil {
			stored, err := s.recorder.RecordAllocation(ctx, ids, envs)
			if err != nil {
				obs.Allocated(ids, ResultFailed, took[i]+time.Since(start))
				// The store's error names its own operation.
				return nil, status.Errorf(codes.Unavailable, "allocate %s: not recorded: %v", shortIDs(ids), err)
			}
			envs = stored
		}
		obs.Allocated(ids, ResultOK, took[i]+time.Since(start))
		s.log.Info().Strs("ids", ids).Msg("allocated")
		resp.ContainerResponses[i] = &pluginapi.ContainerAllocateResponse{Envs: envs}
	}
	return resp, nil
}

// claimDevices records in owner that container request i asks for devs, and
// refuses a device another container request of the same call asked for:
// one device must not go to two containers.
func claimDevices(owner map[string]int, devs []Device, i int) error {
	for _, d := range devs {
		if j, taken := owner[d.ID]; taken {
			return status.Errorf(codes.InvalidArgument, "device %s is also in container request %d: one device cannot go to two containers", quoteID(d.ID), j)
		}
		owner[d.ID] = i
	}
	return nil
}

// lookup resolves ids to devices sorted by index. It rejects an empty list,
// unknown and duplicate ids (InvalidArgument) and, if requireHealthy,
// unhealthy devices (FailedPrecondition). The error is a gRPC status.
func (s *Server) lookup(ids []string, requireHealthy bool) ([]Device, error) {
	if len(ids) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no device ids")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	devs := make([]Device, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return nil, status.Errorf(codes.InvalidArgument, "device %s requested twice", quoteID(id))
		}
		seen[id] = true
		pos, ok := s.byID[id]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "unknown device %s", quoteID(id))
		}
		d := s.devices[pos]
		if requireHealthy && !d.Healthy {
			return nil, status.Errorf(codes.FailedPrecondition, "device %s is unhealthy: %s", quoteID(id), d.Reason)
		}
		devs = append(devs, d)
	}
	slices.SortFunc(devs, func(a, b Device) int { return a.Index - b.Index })
	return devs, nil
}

// GetPreferredAllocation answers each container request with exactly
// allocation_size ids from available_deviceIDs, including every
// must_include_deviceIDs, chosen by the PreferFunc. Impossible or malformed
// requests are InvalidArgument.
func (s *Server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	if len(req.GetContainerRequests()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "preferred allocation: no container requests")
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for i, cr := range req.GetContainerRequests() {
		ids, err := s.preferOne(cr)
		if err != nil {
			return nil, status.Errorf(status.Code(err), "preferred allocation: container request %d: %s", i, status.Convert(err).Message())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (s *Server) preferOne(cr *pluginapi.ContainerPreferredAllocationRequest) ([]string, error) {
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
	availDevs, err := s.lookup(avail, false)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "available devices: %s", status.Convert(err).Message())
	}
	var mustIdx []int
	if len(must) > 0 {
		mustDevs, err := s.lookup(must, false)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "must-include devices: %s", status.Convert(err).Message())
		}
		for _, d := range mustDevs {
			if !slices.Contains(avail, d.ID) {
				return nil, status.Errorf(codes.InvalidArgument, "must-include device %s is not available", quoteID(d.ID))
			}
			mustIdx = append(mustIdx, d.Index)
		}
	}
	availIdx := make([]int, len(availDevs))
	idOf := make(map[int]string, len(availDevs))
	for i, d := range availDevs {
		availIdx[i] = d.Index
		idOf[d.Index] = d.ID
	}
	start := time.Now()
	chosen, err := s.prefer(availIdx, mustIdx, size)
	took := time.Since(start)
	if err != nil {
		s.obs().Preferred(nil, ResultFailed, took)
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	// The kubelet does not check the answer; we do.
	if err := checkChoice(chosen, idOf, mustIdx, size); err != nil {
		s.obs().Preferred(nil, ResultFailed, took)
		return nil, status.Errorf(codes.Internal, "preference policy: %v", err)
	}
	s.obs().Preferred(chosen, ResultOK, took)
	slices.Sort(chosen)
	ids := make([]string, len(chosen))
	for i, idx := range chosen {
		ids[i] = idOf[idx]
	}
	return ids, nil
}

// checkChoice verifies a PreferFunc answer: size distinct indices, all
// available, every must-include among them.
func checkChoice(chosen []int, available map[int]string, must []int, size int) error {
	if len(chosen) != size {
		return fmt.Errorf("%d devices chosen, want %d: %w", len(chosen), size, ErrInvalidChoice)
	}
	seen := make(map[int]bool, len(chosen))
	for _, c := range chosen {
		if _, ok := available[c]; !ok || seen[c] {
			return fmt.Errorf("index %d unavailable or repeated: %w", c, ErrInvalidChoice)
		}
		seen[c] = true
	}
	for _, m := range must {
		if !seen[m] {
			return fmt.Errorf("must-include index %d missing: %w", m, ErrInvalidChoice)
		}
	}
	return nil
}

// PreStartContainer answers with an empty response; the Server does not ask
// for it (PreStartRequired is false).
func (s *Server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

type nopObserver struct{}

func (nopObserver) Allocated([]string, Result, time.Duration) {}
func (nopObserver) Preferred([]int, Result, time.Duration)    {}
func (nopObserver) HealthChanged(string, bool, string)        {}
