package dra

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra/endpoint"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Defaults of DriverConfig.
const (
	// DefaultGCInterval is how often the driver looks for prepared claims
	// the API server no longer has.
	DefaultGCInterval = time.Minute
	// healthResend is how often the health stream repeats itself: the
	// kubelet takes a device's health as unknown 30 s after its last
	// report.
	healthResend = 10 * time.Second
	// healthTimeout is the validity a report gives each device's health.
	healthTimeout = 30 * time.Second
)

// DriverConfig configures a Driver. Config's fields, NodeName, Client,
// Store, Set and Stored are required.
type DriverConfig struct {
	// Config names the driver and the kubelet's directories.
	endpoint.Config
	// NodeName is the node's name: the driver's pool is named after it,
	// and its slices belong to its Node.
	NodeName string
	// Client reaches the API server: the slices, the claims.
	Client kubernetes.Interface
	// Store is the state file the claims are recorded in.
	Store *store.Store
	// Set is the set served first and Stored the devices as the store has
	// them after Set was stored (agent.Agent.Begin's).
	Set    *agent.Set
	Stored []store.Device
	// GCInterval is how often prepared claims are checked against the API
	// server (default DefaultGCInterval).
	GCInterval time.Duration
	// Changed, if set, is told the devices of a claim that was prepared or
	// unprepared when one of them is a MIG device, after the store has it:
	// a partitionable GPU's MIG devices exist for the container view while
	// a claim holds them (view.Files.Publish).
	Changed func(deviceIDs []string)
	// Logger receives the driver's lines, and the libraries' (Logr); the
	// zero Logger discards.
	Logger zerolog.Logger
}

// Observer is told how every Prepare of a claim ended: its devices, the
// result, how long it took (the durable commit and the CDI write
// included).
type Observer interface {
	Allocated(ids []string, result metrics.Result, took time.Duration)
}

// Driver serves the agent's devices through Dynamic Resource Allocation:
// it publishes them as the node's ResourceSlices, registers with the
// kubelet as a DRA plugin, prepares the claims allocated to them by
// writing a CDI spec per claim, records every claim in the store, and
// streams the devices' health to the kubelet. It is the DRA agent.Target.
// Build it with NewDriver; Run serves until its context ends.
type Driver struct {
	cfg   DriverConfig
	st    *store.Store
	specs *cdi.ClaimWriter
	log   zerolog.Logger

	// prep serializes Prepare, Unprepare and the garbage collection, and
	// guards held and prepared.
	prep     sync.Mutex
	held     map[string]string      // device id -> uid of the prepared claim holding it
	prepared map[string]store.Claim // uid -> record of each claim prepared here

	mu      sync.Mutex
	set     *agent.Set
	stored  []store.Device
	devs    []gpuset.Device
	changed chan struct{} // closed at every change of the devices or their health

	republish chan struct{} // a change to publish; buffered, one pending at most

	observer Observer // set before Run; nil counts nothing

	registrations atomic.Uint64
	registered    atomic.Bool
	fatal         chan error
	dropped       map[string]bool // features whose dropped fields were logged; guarded by mu
}

var (
	_ agent.Target            = (*Driver)(nil)
	_ kubeletplugin.DRAPlugin = (*Driver)(nil)
)

// NewDriver returns the Driver of cfg, serving cfg.Set. It creates the
// claim specs' directory (the view's -cdi-spec-dir) and reads the prepared
// claims of the store; it contacts nothing.
func NewDriver(cfg DriverConfig) (*Driver, error) {
	switch {
	case cfg.DriverName == "" || cfg.RegistryDir == "" || cfg.PluginsDir == "":
		return nil, errors.New("dra driver: a driver name and the kubelet's registry and plugins directories are required")
	case cfg.NodeName == "":
		return nil, errors.New("dra driver: a node name is required (-node-name): the driver's pool is named after it")
	case cfg.Client == nil:
		return nil, errors.New("dra driver: API access is required: it publishes ResourceSlices and reads ResourceClaims")
	case cfg.Store == nil || cfg.Set == nil:
		return nil, errors.New("dra driver: a store and a set are required")
	}
	if cfg.GCInterval <= 0 {
		cfg.GCInterval = DefaultGCInterval
	}
	kind, err := cdi.ClaimKind(cfg.DriverName)
	if err != nil {
		return nil, fmt.Errorf("dra driver %s: %w", cfg.DriverName, err)
	}
	vc := cfg.Set.View.Config()
	specs, err := cdi.NewClaimWriter(vc.CDISpecDir, kind, cdi.Owner{ID: vc.Owner})
	if err != nil {
		return nil, err
	}
	devs, err := cfg.Set.GPUs.Devices(cfg.Stored)
	if err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg, st: cfg.Store, specs: specs, log: cfg.Logger.With().Str("component", "dra").Logger(),
		held: map[string]string{}, prepared: map[string]store.Claim{}, set: cfg.Set, stored: slices.Clone(cfg.Stored), devs: devs, changed: make(chan struct{}), republish: make(chan struct{}, 1), fatal: make(chan error, 1), dropped: map[string]bool{}}
	prepared, err := d.st.PreparedClaims()
	if err != nil {
		return nil, err
	}
	for _, c := range prepared {
		d.prepared[c.UID] = c
		for _, id := range c.DeviceIDs {
			if c.Holds(id) { // admin access holds nothing, after a restart too
				d.held[id] = c.UID
			}
		}
	}
	return d, nil
}

// PreparedClaims returns the records of the claims prepared here, newest
// first, as the store lists them, from memory: what the telemetry reads
// at every scrape (Holders), without a scan of the claims' history.
func (d *Driver) PreparedClaims() ([]store.Claim, error) {
	d.prep.Lock()
	out := slices.Collect(maps.Values(d.prepared))
	d.prep.Unlock()
	slices.SortFunc(out, func(a, b store.Claim) int { return cmp.Compare(b.Seq, a.Seq) })
	return out, nil
}

// SetObserver makes obs count every Prepare (*metrics.Metrics counts them
// as the device plugin's Allocate calls). Call it before Run.
func (d *Driver) SetObserver(obs Observer) { d.observer = obs }

// Name returns the driver's name.
func (d *Driver) Name() string { return d.cfg.DriverName }

// Run registers the driver with the kubelet and publishes the node's
// slices, and serves until ctx ends: the kubelet's calls, the health
// stream, and every minute (GCInterval) the claims the API server no
// longer has unprepared. A fatal error of the library (HandleError) ends
// it with that error.
func (d *Driver) Run(ctx context.Context) error {
	for _, dir := range []string{d.cfg.RegistryDir, d.cfg.SocketDir()} {
		// The library creates neither; the kubelet creates its registry
		// directory when it starts, which may be later.
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("dra driver: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lctx := klog.NewContext(ctx, Logr(d.log))
	helper, err := kubeletplugin.Start(lctx, d,
		kubeletplugin.DriverName(d.cfg.DriverName),
		kubeletplugin.NodeName(d.cfg.NodeName),
		kubeletplugin.KubeClient(d.cfg.Client),
		kubeletplugin.RegistrarDirectoryPath(d.cfg.RegistryDir),
		kubeletplugin.PluginDataDirectoryPath(d.cfg.SocketDir()),
		kubeletplugin.GRPCInterceptor(d.countRegistrations),
	)
	if err != nil {
		return fmt.Errorf("dra driver %s: %w", d.cfg.DriverName, err)
	}
	defer helper.Stop()
	waitWatch, err := d.watchSlices(lctx)
	if err != nil {
		return err
	}
	defer waitWatch() // after the cancel below
	d.log.Info().Str("driver", d.cfg.DriverName).Str("pool", d.cfg.NodeName).Str("socket", d.cfg.Socket()).
		Str("registration", d.cfg.RegistrationSocket()).Msg("DRA driver started: publishing ResourceSlices, waiting for the kubelet")
	published := make(chan struct{})
	go func() {
		defer close(published)
		d.publish(lctx, helper)
	}()
	defer func() { cancel(); <-published }()
	d.collect(ctx)
	tick := time.NewTicker(d.cfg.GCInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-d.fatal:
			return err
		case <-tick.C:
			d.collect(ctx)
		}
	}
}

// countRegistrations counts the kubelet's successful registrations (its
// NotifyRegistrationStatus calls that say registered) and logs each.
func (d *Driver) countRegistrations(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if st, ok := req.(*registerapi.RegistrationStatus); ok && strings.HasSuffix(info.FullMethod, "/NotifyRegistrationStatus") {
		d.registered.Store(st.PluginRegistered)
		if st.PluginRegistered {
			d.registrations.Add(1)
			d.log.Info().Str("driver", d.cfg.DriverName).Msg("registered with the kubelet")
		} else {
			d.log.Error().Str("driver", d.cfg.DriverName).Str("error", st.Error).Msg("the kubelet refused the registration")
		}
	}
	return handler(ctx, req)
}

// Registered reports whether the kubelet said last that it registered the
// driver.
func (d *Driver) Registered() bool { return d.registered.Load() }

// Registrations counts the kubelet's registrations so far.
func (d *Driver) Registrations() uint64 { return d.registrations.Load() }

// HandleError implements kubeletplugin.DRAPlugin: the library's background
// errors (publishing slices, its gRPC servers). A recoverable one is
// logged; any other ends Run.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) {
		d.droppedFields(dropped)
		return
	}
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.log.Warn().Err(err).Msg(msg)
		return
	}
	d.log.Error().Err(err).Msg(msg)
	select {
	case d.fatal <- fmt.Errorf("dra driver: %s: %w", msg, err):
	default:
	}
}

// droppedFields says, once per set of features, that the API server
// dropped fields of the slices because its feature gates are off: the
// library reports it at every publish. Without DRADeviceTaints an unhealthy
// GPU is not tainted; the health stream still reports it.
func (d *Driver) droppedFields(err *resourceslice.DroppedFieldsError) {
	features := strings.Join(err.DisabledFeatures(), ",")
	d.mu.Lock()
	seen := d.dropped[features]
	d.dropped[features] = true
	d.mu.Unlock()
	if seen {
		return
	}
	ev := d.log.Warn().Str("features", features).Str("pool", err.PoolName)
	if slices.Contains(err.DisabledFeatures(), "DRADeviceTaints") {
		ev = ev.Str("effect", "unhealthy GPUs are not tainted in the ResourceSlices: new claims may get them; the health stream still reports them")
	}
	ev.Msg("the API server dropped fields of the ResourceSlices: feature gates off there (logged once)")
}

// Apply implements agent.Target: set's devices, with the health commit
// stores, become the slices published (one update of the pool: a new
// generation).
func (d *Driver) Apply(set *agent.Set, commit func() ([]store.Device, error)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	stored, err := commit()
	if err != nil {
		return err
	}
	devs, err := set.GPUs.Devices(stored)
	if err != nil {
		return err
	}
	d.set, d.stored, d.devs = set, slices.Clone(stored), devs
	return d.publishLocked()
}

// SetHealth implements agent.Target: the device gets or loses its taint
// in the slices, and the health stream reports it.
func (d *Driver) SetHealth(_ string, ids []string, healthy bool, reason string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now().UTC()
	// New slices, never the old ones changed: current's callers read them
	// without the lock.
	devs, stored := slices.Clone(d.devs), slices.Clone(d.stored)
	for i := range devs {
		if slices.Contains(ids, devs[i].ID) {
			devs[i].Healthy, devs[i].Reason = healthy, reason
		}
	}
	for i := range stored {
		if slices.Contains(ids, stored[i].ID) {
			stored[i].Healthy, stored[i].Reason, stored[i].Since = healthy, reason, now
		}
	}
	d.devs, d.stored = devs, stored
	return d.publishLocked()
}

// publishLocked asks for the devices to be published, and tells the
// health stream; d.mu is held. The publisher (publish) does it off the
// agent's path: the library waits for the API server.
func (d *Driver) publishLocked() error {
	close(d.changed)
	d.changed = make(chan struct{})
	select {
	case d.republish <- struct{}{}:
	default: // one is pending: it publishes what is current then
	}
	return nil
}

// publishRetry is how long the publisher waits after the library refused
// the resources before it tries again.
const publishRetry = time.Second

// publish hands the library the devices as they are now, at start and at
// every change, until ctx ends. The library's controller keeps the
// slices as given, retrying the API server on its own; the first call
// waits until it has read the slices there.
func (d *Driver) publish(ctx context.Context, helper *kubeletplugin.Helper) {
	for {
		d.mu.Lock()
		set, stored, devs := d.set, d.stored, slices.Clone(d.devs)
		d.mu.Unlock()
		res, err := Resources(d.cfg.DriverName, d.cfg.NodeName, set.GPUs, devs, stored)
		if err == nil {
			err = helper.PublishResources(ctx, res)
		}
		if err != nil && ctx.Err() == nil {
			d.log.Error().Err(err).Msg("ResourceSlices not published; retrying")
			select {
			case <-ctx.Done():
				return
			case <-time.After(publishRetry):
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-d.republish:
		}
	}
}

// current returns the set served, the stored devices and the devices;
// the caller must not modify them (they are replaced, never changed).
func (d *Driver) current() (*agent.Set, []store.Device, []gpuset.Device) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.set, d.stored, d.devs
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: a report of every
// device now, again at every change, and at least every 10 s, until ctx
// ends. An unhealthy device's message is its reason.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	for {
		d.mu.Lock()
		rep := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(d.devs))}
		now := time.Now()
		for _, dev := range d.devs {
			h := kubeletplugin.DeviceHealth{PoolName: d.cfg.NodeName, DeviceName: dev.ID, Health: kubeletplugin.HealthStatusHealthy,
				LastUpdated: now, HealthCheckTimeout: healthTimeout}
			if !dev.Healthy {
				h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, dev.Reason
			}
			rep.Devices = append(rep.Devices, h)
		}
		changed := d.changed
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case reports <- rep:
		}
		t := time.NewTimer(healthResend)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}
