package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// DefaultLabelWait bounds how long the start waits for the Node's labels
// before it serves the default profile: long enough for an API server that
// answers, short enough to register fast when it does not (pods admitted
// before the plugin registers fail).
const DefaultLabelWait = 10 * time.Second

// Options is what an Agent is built from. Store and Source are required.
type Options struct {
	// Store is the state file: devices, health, history.
	Store *store.Store
	// Source gives the configurations.
	Source Source
	// Identity is what GPU UUIDs are derived from
	// (topology.NodeIdentity); "" derives none.
	Identity string
	// API reaches the API server for the Node's labels; nil without API
	// access (the label is then never read and no GPU label written).
	API kube.API
	// NodeName names the Node whose labels are followed.
	NodeName string
	// LabelNode writes the GPU labels on the Node (-label-node).
	LabelNode bool
	// Logger receives what the agent does; the zero Logger discards.
	Logger zerolog.Logger
}

// Parts are what a started agent drives, built by the caller between
// Begin and Start (they may call back into the agent: the fault plan's
// setter, the load sockets' bound). Faults and at least one Target are
// required; Tracker and Loads are the device plugin's (a DRA driver has
// neither: nil).
type Parts struct {
	// Files are the host files containers use; nil for a node without
	// containers (a simulated one): nothing is written on the host.
	Files *view.Files
	// Telemetry is the GPU telemetry; nil when it is off.
	Telemetry *telemetry.Service
	// Faults runs the configuration's fault plan.
	Faults *faults.Runner
	// Tracker follows allocations to their pods.
	Tracker Tracker
	// Loads are the per-allocation load sockets.
	Loads *loadsock.Server
	// Kick asks for a prune of the history (store.Pruner.Kick); nil none.
	Kick func()
	// Targets are the kubelet APIs the devices are served through.
	Targets []Target
	// Observer is told of every health change; nil tells nobody.
	Observer Observer
}

// Agent is the one place that decides what the plugin serves and changes
// it: the configuration in force (the Node's profile label, the profiles
// directory, SIGHUP), live changes applied to the state file, the host
// files, the telemetry, the fault plan and every kubelet API at once; the
// one health path (SetHealth); and what an allocation does besides being
// stored (RecordAllocation). Build it with New, call Begin, build the
// parts, then Start. Its methods are safe for concurrent use; mu
// serializes every change of what is served.
type Agent struct {
	st        *store.Store
	src       Source
	identity  string
	api       kube.API
	nodeName  string
	labelNode bool
	log       zerolog.Logger

	firstOnce sync.Once
	first     chan struct{} // closed once the Node's labels are known, or cannot be

	// devMu guards current and devices, for readers that do not take mu
	// (the metrics, the admin API, the telemetry).
	devMu   sync.RWMutex
	current *Set
	devices []gpuset.Device // current's devices as served, with their health

	active     *ActiveIndex
	openFailed *causeLog

	mu       sync.Mutex
	labels   map[string]string // the Node's labels as last seen
	haveNode bool              // labels holds the Node's labels
	sel      Selection         // the labels' values the configuration in force was selected by
	migState string            // kube.LabelMIGConfigState's value: the MIG layout label's outcome; "" without that label
	retry    bool              // the last change failed for a reason worth retrying
	lastErr  string            // the configuration error logged last, so it is logged once
	conflict map[string]bool   // devices whose UUID conflict was logged
	set      *Set              // in force; nil before Begin
	why      string            // why set is in force (Choice.Why)
	report   store.ReconcileReport
	started  bool
	parts    Parts
}

// New returns an agent of o. It reads nothing yet.
func New(o Options) *Agent {
	return &Agent{st: o.Store, src: o.Source, identity: o.Identity, api: o.API, nodeName: o.NodeName, labelNode: o.LabelNode, log: o.Logger,
		first: make(chan struct{}), conflict: map[string]bool{}, openFailed: newCauseLog(o.Logger)}
}

// WatchNode follows the Node's labels until ctx ends. A watch the API
// server refuses at start (no such Node, no permission) is logged once:
// the plugin then serves the configuration it has, and never reads the
// label. It needs API access (Options.API).
func (a *Agent) WatchNode(ctx context.Context) error {
	err := a.api.WatchNode(ctx, a.nodeName, func(labels map[string]string) error { return a.onLabels(ctx, labels) })
	if err != nil && ctx.Err() == nil {
		a.log.Error().Err(err).Str("node", a.nodeName).
			Msg("cannot read this node's labels: the profile label is not followed and no GPU labels are written")
	}
	a.firstOnce.Do(func() { close(a.first) })
	return nil
}

// WaitLabels waits until the Node's labels are known (or cannot be), at
// most wait; it reports whether they are.
func (a *Agent) WaitLabels(ctx context.Context, wait time.Duration) bool {
	if a.api == nil {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-a.first:
	case <-t.C:
		a.log.Warn().Dur("waited", wait).Msg("the node's labels are not known yet: starting with the default profile, the labelled one follows")
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.haveNode
}

// Begin chooses the configuration to start with (the profile the Node's
// label names if its labels are known, else the Source's fallback), builds
// its set and stores it: the devices and the configuration event of this
// start in one transaction. It writes nothing but the state file, which is
// the process's own, so it may run before the shared files and sockets are
// claimed. It returns the set and the stored devices, which the first
// catalog of a Target is built from.
func (a *Agent) Begin() (*Set, []store.Device, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := a.initialLocked()
	logConfig(a.log, ch)
	set, err := NewSet(ch.Config, a.identity)
	if err != nil {
		return nil, nil, err
	}
	change, stored, devs, err := a.commit(set, ch.Why, ch.Detail)
	if err != nil {
		return nil, nil, err
	}
	report := change.Report
	if !report.Empty() {
		a.log.Info().Strs("added", report.Added).Strs("removed", report.Removed).Strs("restored", report.Restored).
			Int("changed", len(report.Changed)).Str("state", a.st.Path()).Msg("reconciled stored devices with the configured machine")
	}
	if err := logDamaged(a.log, a.st, report); err != nil {
		return nil, nil, err
	}
	if a.active, err = NewActiveIndex(a.st); err != nil {
		return nil, nil, err
	}
	a.set, a.why, a.report = set, ch.Why, report
	a.publish(set, devs)
	return set, stored, nil
}

// initialLocked returns the configuration to start with. The caller holds
// mu.
func (a *Agent) initialLocked() Choice {
	fallback := a.src.Fallback()
	if !a.haveNode {
		return fallback
	}
	a.sel = a.selection(a.labels)
	if a.sel == (Selection{}) {
		return fallback
	}
	ch, err := a.src.Select(a.sel)
	a.setMIGState(err == nil)
	if err != nil {
		a.logErr(err, fallback.Config.Profile)
		return fallback
	}
	return ch
}

// Start brings what Begin chose into force in the parts, and applies every
// later change from now on: the host files containers use (an error there
// fails the start), the telemetry, the fault plan, the tracker's resource
// names, the Node's GPU labels, and a label change that came after Begin.
// ctx bounds the API calls of that change.
func (a *Agent) Start(ctx context.Context, p Parts) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.set == nil {
		return errors.New("agent: Start before Begin")
	}
	set := a.set
	if p.Files != nil {
		if err := p.Files.Prepare(set.View, nil); err != nil {
			return err
		}
		p.Files.Publish(set.View) // what cannot be written now is written by Files.Run once it can
		if p.Telemetry == nil {
			if err := p.Files.DropLive(); err != nil {
				a.log.Warn().Err(err).Msg("live GPU values of an earlier run not removed: nvidia-smi in containers shows them")
			}
		}
	}
	stored, err := a.st.Devices()
	if err != nil {
		return err
	}
	logUnhealthy(a.log, stored)
	logNUMA(a.log, set)
	if err := a.followEarlierNames(p.Tracker); err != nil {
		return err
	}
	if p.Telemetry != nil {
		if err := p.Telemetry.Follow(set.GPUs, set.Config.Telemetry); err != nil {
			a.log.Error().Err(err).Msg("GPU telemetry unavailable: its listener answers 503")
		}
	}
	p.Faults.Restart(set.Config.Faults, set.GPUs.GPUIDs())
	observeReconcile(p.Observer, a.report)
	a.parts, a.started = p, true
	a.logUUIDConflicts(a.report)
	if a.haveNode {
		if sel := a.selection(a.labels); sel != a.sel {
			a.sel = sel
			if err := a.changeLocked(ctx, ""); err != nil {
				a.log.Error().Err(err).Msg("applying the profile the node's label names failed; retrying with the node's next change")
			}
		}
	}
	if err := a.syncLabels(ctx); err != nil {
		a.log.Warn().Err(err).Msg("GPU labels of the node not updated; retrying with the node's next change")
	}
	return nil
}

// followEarlierNames makes tracker follow the resource names of the
// configuration history too (containers may hold devices under a name of
// an earlier configuration), and the one in force.
func (a *Agent) followEarlierNames(tracker Tracker) error {
	if tracker == nil {
		return nil
	}
	const lookBack = 100
	events, err := a.st.ConfigEvents(store.ConfigFilter{Limit: lookBack})
	if err != nil {
		return err
	}
	for _, e := range events {
		tracker.FollowResourceName(e.ResourceName)
	}
	for _, r := range a.set.Resources() {
		tracker.FollowResourceName(r)
	}
	return nil
}

// Current returns the set in force (Begin's until a change is applied);
// nil before Begin.
func (a *Agent) Current() *Set {
	a.devMu.RLock()
	defer a.devMu.RUnlock()
	return a.current
}

// Devices returns the devices served, with their health, sorted by Index:
// what every Target publishes. Nil before Begin.
func (a *Agent) Devices() []gpuset.Device {
	a.devMu.RLock()
	defer a.devMu.RUnlock()
	return slices.Clone(a.devices)
}

// publish makes set and its devices the ones readers see.
func (a *Agent) publish(set *Set, devs []gpuset.Device) {
	a.devMu.Lock()
	defer a.devMu.Unlock()
	a.current, a.devices = set, devs
}

// Why says what chose the configuration in force: one of store's Why
// constants ("" before Begin).
func (a *Agent) Why() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.why
}

// Score rates a preferred set of device indices on the machine in force,
// for the metrics; 0 before Begin.
func (a *Agent) Score(chosen []int) int {
	if set := a.Current(); set != nil {
		return set.GPUs.Score(chosen)
	}
	return 0
}

// Active returns the index of the active allocation records, for the
// telemetry's holders; nil before Begin.
func (a *Agent) Active() *ActiveIndex {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.active
}

// commit makes the state file's devices those of set and stores the
// configuration change in the history (why and detail as given, the device
// changes from the reconcile; nothing when set is the configuration of the
// newest stored event and no device changed), in one transaction
// (store.ReconcileConfig): a crash keeps both or neither. It returns what
// it stored, the stored devices and set's devices among them; a set whose
// devices the store lacks stores nothing.
func (a *Agent) commit(set *Set, why, detail string) (store.ConfigChange, []store.Device, []gpuset.Device, error) {
	e := set.Event()
	e.Why, e.Detail = why, detail
	var stored []store.Device
	var devs []gpuset.Device
	change, err := a.st.ReconcileConfig(set.GPUs.Specs(), e, func(s []store.Device) error {
		var err error
		devs, err = set.GPUs.Devices(s)
		stored = s
		return err
	})
	if err != nil {
		return store.ConfigChange{}, nil, nil, err
	}
	return change, stored, devs, nil
}

// SetHealth sets GPU id's health, as one change, through the one health
// path: the state file first, then the GPU's status file (nvidia-smi in
// running containers shows it), then every Target (the kubelet gets the
// new device list), then the telemetry and the metrics. With the GPU
// shared, all its replicas change with it; a replica id is refused
// (health is per GPU), and so is an id that names no GPU (an error
// wrapping store.ErrUnknownDevice). Setting the health and reason a GPU
// has already changes nothing. cause says who asked: store.CauseAdmin,
// store.CauseFaultInjection, … A status file that cannot be written is
// the view's to log and write again: the change is stored and served all
// the same.
func (a *Agent) SetHealth(id string, healthy bool, reason, cause string) error {
	if healthy {
		reason = ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		return fmt.Errorf("set health of %s: the plugin has not started serving yet", topology.QuoteID(id))
	}
	ids, err := a.set.GPUs.Members(id)
	if err != nil {
		return err
	}
	devs := a.Devices()
	pos := make(map[string]int, len(devs))
	for i, d := range devs {
		pos[d.ID] = i
	}
	var change []int
	for _, m := range ids {
		i, ok := pos[m]
		switch {
		case !ok:
			return fmt.Errorf("set health of %s: %w", topology.QuoteID(m), store.ErrUnknownDevice)
		case devs[i].Healthy != healthy || devs[i].Reason != reason:
			change = append(change, i)
		}
	}
	if len(change) == 0 && len(ids) > 0 {
		return nil
	}
	// A MIG-enabled GPU without MIG devices advertises nothing, but its
	// health is stored all the same (store.SetHealth changes nothing when
	// it is the same).
	_, changed, err := a.st.SetHealth(id, healthy, reason, cause)
	if err != nil {
		return fmt.Errorf("set health of %s: %w", topology.QuoteID(id), err)
	}
	if !changed && len(ids) == 0 {
		return nil
	}
	if a.parts.Files != nil {
		a.parts.Files.Health(id, healthy, reason)
	}
	var errs []error
	for _, t := range a.parts.Targets {
		if err := t.SetHealth(id, ids, healthy, reason); err != nil {
			errs = append(errs, err)
		}
	}
	for _, i := range change {
		devs[i].Healthy, devs[i].Reason = healthy, reason
	}
	a.publish(a.set, devs)
	if a.parts.Telemetry != nil {
		a.parts.Telemetry.Poke()
	}
	ev := a.log.Info().Str("device", id)
	if len(ids) != 1 || ids[0] != id {
		ev = ev.Int("devices", len(ids))
	}
	ev.Bool("healthy", healthy).Str("reason", reason).Str("cause", cause).Msg("device health changed")
	if a.parts.Observer != nil {
		a.parts.Observer.HealthChanged(id, healthy, cause)
	}
	return errors.Join(errs...)
}

// HealthSetter returns SetHealth with the cause fixed: the admin API's
// (store.CauseAdmin) and the fault plans' (store.CauseFaultInjection).
func (a *Agent) HealthSetter(cause string) func(id string, healthy bool, reason string) error {
	return func(id string, healthy bool, reason string) error { return a.SetHealth(id, healthy, reason, cause) }
}

// RecordAllocation stores an allocation of ids with the container's
// environment before a Target answers it, and makes what the answer names
// exist as far as it can: the allocation's load socket (best effort: the
// record is stored and the answer mounts the directory; a socket that
// cannot be opened now, too many open files or a full disk, is opened by
// the next Sync that can, inside the mounted directory, where the
// container sees it). Then it asks the tracker to look for the holder and
// the pruner to prune.
func (a *Agent) RecordAllocation(_ context.Context, ids []string, envs map[string]string) (store.Allocation, error) {
	rec, err := a.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: envs})
	if err != nil {
		return store.Allocation{}, err
	}
	a.mu.Lock()
	p, active := a.parts, a.active
	a.mu.Unlock()
	active.Add(rec.Seq) // before its socket: a Sync after the Open must list it
	if rec.Envs[loadsock.EnvSocket] != "" && p.Loads != nil {
		if err := p.Loads.Open(rec.Seq, rec.DeviceIDs); err != nil {
			a.openFailed.warn(err, "load socket of a new allocation not opened: Allocate answers with its directory mounted, "+
				"and the socket appears in it once it can be opened (retried every second; logged once per cause)")
		}
	}
	if p.Tracker != nil {
		p.Tracker.Notify()
	}
	if p.Kick != nil {
		p.Kick()
	}
	return rec, nil
}

// LoadSockets returns the active allocations whose answer mounted a load
// socket (their record has loadsock.EnvSocket), ascending, with their
// devices: the load sockets' Server closes those whose devices newer ones
// took. The telemetry forgets the loads of every other allocation.
func (a *Agent) LoadSockets() ([]loadsock.Allocation, error) {
	a.mu.Lock()
	tel, active := a.parts.Telemetry, a.active
	a.mu.Unlock()
	recs, err := active.Allocations(store.AllocationFilter{Active: true})
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
	if tel != nil {
		seqs := make([]uint64, len(out))
		for i, x := range out {
			seqs[i] = x.Seq
		}
		tel.KeepLoads(seqs)
	}
	return out, nil
}

// loadSocketsPerDevice times the advertised devices (a shared GPU's
// replicas each count), at least minLoadSockets, is how many load sockets
// are served at once: a device belongs to at most one live allocation, so
// the live allocations are at most as many as the devices, and the rest is
// room for allocations of an earlier configuration and for a kubelet that
// allocates again before the older allocation's socket is closed.
const (
	loadSocketsPerDevice = 4
	minLoadSockets       = 16
)

// MaxLoadSockets returns the cap of open load sockets with the set in
// force.
func (a *Agent) MaxLoadSockets() int {
	n := 0
	if set := a.Current(); set != nil {
		n = set.GPUs.Len()
	}
	return max(minLoadSockets, loadSocketsPerDevice*n)
}
