package view

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// RetryInterval is how often Run writes the status files again while they
// are behind the store (a write failed: a full disk, say).
const RetryInterval = time.Second

// Files keeps the host files containers use: it installs nvidia-smi,
// publishes the GPU status files and writes the CDI spec. A status file
// that cannot be written is written again, with the store's newest
// health, until it can be (Run). One serves the whole process; it is safe
// for concurrent use. It never removes a file a container may still use,
// not at shutdown either.
type Files struct {
	st       *store.Store
	log      zerolog.Logger
	exe      string // the binary installed as nvidia-smi
	toolsDir string
	cdiDir   string
	cdiOwner cdi.Owner // the instance the CDI specs are marked with: its state file
	identity string    // the node identity serials are derived from
	now      func() time.Time
	status   *status.Writer

	mu        sync.Mutex
	installed bool                        // nvidia-smi is current in toolsDir
	gpus      map[string]*status.GPU      // GPU id -> its status as last written
	cdi       map[cdi.Kind]*cdi.Writer    // the CDI spec writer of each kind a configuration used
	lastLive  map[string]status.Telemetry // UUID -> its live values as last written (telemetry.go)
	set       *View                       // the set last published; nil before
	behind    error                       // why the files are behind the store (the first failure); nil when they are not
	since     time.Time                   // when they fell behind

	wake chan struct{} // tells Run that the files fell behind; buffered, one
}

// NewFiles returns the view's files for the process's configuration cfg
// (its paths), reading active allocations from st. exe is the binary to
// install as nvidia-smi ("" means the running one); identity the node's
// identity (topology.NodeIdentity). It creates the status directory.
func NewFiles(cfg Config, st *store.Store, exe, identity string, log zerolog.Logger) (*Files, error) {
	if exe == "" {
		exe = selfExecutable
	}
	w, err := status.NewWriter(cfg.StatusDir)
	if err != nil {
		return nil, err
	}
	return &Files{st: st, log: log, exe: exe, toolsDir: cfg.ToolsDir, cdiDir: cfg.CDISpecDir, cdiOwner: cdiOwner(cfg), identity: identity, now: time.Now,
		status: w, gpus: map[string]*status.GPU{}, cdi: map[cdi.Kind]*cdi.Writer{}, wake: make(chan struct{}, 1)}, nil
}

// Prepare makes the files set's answers name exist before set serves:
// nvidia-smi installed (once per process) and, with the cdi-cri strategy,
// a CDI spec that holds the GPUs of set, of prev (the set serving until
// now; nil at start) and of every active allocation. An error leaves prev
// serving.
func (f *Files) Prepare(set, prev *View) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if set.cfg.NvidiaSMI && !f.installed {
		changed, err := installTool(f.exe, f.toolsDir, nvidiaSMIName)
		if err != nil {
			return err
		}
		f.installed = true
		f.log.Info().Str("path", filepath.Join(f.toolsDir, nvidiaSMIName)).Bool("replaced", changed).Msg("nvidia-smi installed for containers")
	}
	if !set.cdi {
		return nil
	}
	held, err := f.heldGPUs()
	if err != nil {
		return err
	}
	gpus := append(machineGPUs(set.set.Machine()), held...)
	if prev != nil {
		gpus = append(gpus, machineGPUs(prev.set.Machine())...)
	}
	return f.writeCDI(set, gpus)
}

// Publish brings the files up to date with set, once it serves (see
// publishLocked). What cannot be written is said once, and written again
// until it can be (Run).
func (f *Files) Publish(set *View) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = set
	if err := f.publishLocked(set); err != nil {
		f.fellBehindLocked(err, "files containers use (status, CDI spec) not all brought up to date with the configuration in force: "+
			"nvidia-smi in containers shows what they last said; written again every second until they are", "")
		return
	}
	f.caughtUpLocked()
}

// publishLocked writes the status files of set's GPUs (with their stored
// UUIDs and health) and of GPUs an active allocation still holds (their
// last files, kept), and the CDI spec of the same GPUs. Errors are joined;
// what could be written is. The caller holds mu.
func (f *Files) publishLocked(set *View) error {
	stored, err := f.st.Devices() // read under mu: a health change waits, or was stored before
	if err != nil {
		return err
	}
	held, err := f.heldGPUs()
	if err != nil {
		return err
	}
	var claimed map[string]bool // devices of prepared claims: a partitionable GPU's MIG devices that exist
	if set.set.Config().MIG.Partitionable {
		prepared, err := f.st.PreparedClaims()
		if err != nil {
			return err
		}
		claimed = store.ClaimedDevices(prepared)
	}
	m := set.set.Machine()
	byGPU := map[int]store.Device{}
	migUUIDs := map[string]string{} // MIG device id -> its stored UUID
	for _, d := range stored {
		switch i, ok := topology.GPUOf(d.ID); {
		case !ok || topology.IsReplicaID(d.ID):
		case topology.IsMIGID(d.ID):
			migUUIDs[d.ID] = d.UUID
		default:
			byGPU[i] = d
		}
	}
	now := f.now()
	var errs []error
	gpus := map[string]*status.GPU{}
	list := make([]*status.GPU, 0, m.Len())
	for i := range m.Len() {
		d, ok := byGPU[i]
		if !ok || d.UUID == "" {
			continue // no UUID (no node identity): no file; nvidia-smi shows N/A
		}
		g, err := status.NewGPU(m, i, f.identity, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g.UUID = d.UUID
		g.MIGEnabled, g.MIGDevices = migStatus(set.set, i, migUUIDs, claimed)
		g.Health = statusHealth(d.Healthy, d.Reason, d.Since, now)
		g.Telemetry = faultTelemetry(m.GPUModel(), g.Telemetry, g.Health)
		gpus[g.ID] = g
		list = append(list, g)
	}
	fsys := os.DirFS(f.status.Dir())
	for _, i := range held {
		d, ok := byGPU[i]
		if i < m.Len() || !ok || d.UUID == "" {
			continue
		}
		// A GPU the machine no longer has: its last file stays as it was.
		if g, err := status.Read(fsys, d.UUID); err == nil {
			list = append(list, g)
		}
	}
	if err := f.status.Sync(list); err != nil {
		errs = append(errs, err)
	}
	f.gpus = gpus
	if set.cdi {
		if err := f.writeCDI(set, append(machineGPUs(m), held...)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// migStatus returns whether GPU i of set has MIG on and its MIG devices
// as the status file holds them, with their stored UUIDs (by device id):
// those of the layout in force, or of a partitionable set those prepared
// claims hold (gpuset.Set.MIGInstancesHeld); a device without a UUID (no
// node identity) is left out.
func migStatus(set *gpuset.Set, i int, uuids map[string]string, claimed map[string]bool) (bool, []status.MIGDevice) {
	if !set.Config().MIG.Enabled(i) {
		return false, nil
	}
	var out []status.MIGDevice
	for _, d := range set.MIGInstancesHeld(i, func(id string) bool { return claimed[id] }) {
		u := uuids[d.ID]
		if u == "" {
			continue
		}
		p := d.Profile
		out = append(out, status.MIGDevice{ID: d.ID, UUID: u, Profile: p.Name, ProfileID: p.ID, GPUInstanceID: d.GPUInstanceID,
			PlacementStart: d.Placement.Start, PlacementSize: d.Placement.Size, MemoryMiB: p.MemoryMiB,
			Multiprocessors: p.Multiprocessors, CopyEngines: p.CopyEngines, Decoders: p.Decoders, Encoders: p.Encoders, JPEGs: p.JPEGs, OFAs: p.OFAs})
	}
	return true, out
}

// Health writes the status file of the GPU of device id with its new
// health; a device without a status file is skipped. A file that cannot be
// written is said once, and written again until it can be (Run).
func (f *Files) Health(id string, healthy bool, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := topology.GPUOf(id)
	if !ok {
		return
	}
	g := f.gpus[topology.GPUID(i)]
	if g == nil {
		return
	}
	now := f.now()
	next := *g
	next.Health = statusHealth(healthy, reason, now, now)
	if f.set != nil {
		next.Telemetry = faultTelemetry(f.set.set.Machine().GPUModel(), next.Telemetry, next.Health)
	}
	next.Telemetry.Updated = now
	if err := f.status.Write(&next); err != nil {
		f.fellBehindLocked(err, "status file not updated: nvidia-smi in containers shows the previous health; "+
			"written again every second until it is", id)
		return
	}
	f.gpus[next.ID] = &next
}

// fellBehindLocked notes that the files are behind the store after err and
// wakes Run to write them again. The first failure of a spell is logged at
// warn with msg (and the device, if not ""); the others until the files
// are up to date again at debug. The caller holds mu.
func (f *Files) fellBehindLocked(err error, msg, device string) {
	ev := f.log.Debug()
	if f.behind == nil {
		f.behind, f.since = err, f.now()
		ev = f.log.Warn()
	}
	if device != "" {
		ev = ev.Str("device", device)
	}
	ev.Err(err).Str("dir", f.status.Dir()).Msg(msg)
	select {
	case f.wake <- struct{}{}:
	default: // Run is woken already
	}
}

// caughtUpLocked notes that the files are up to date with the store, and
// says so if they were behind. The caller holds mu.
func (f *Files) caughtUpLocked() {
	if f.behind == nil {
		return
	}
	f.log.Info().AnErr("failure", f.behind).Time("behind_since", f.since).Str("dir", f.status.Dir()).
		Msg("status files written again: up to date with the stored health")
	f.behind = nil
}

// Run writes the files again, every interval, while they are behind the
// store (fellBehindLocked): all of the set last published, with the newest
// stored health, until that succeeds. It returns nil when ctx ends.
func (f *Files) Run(ctx context.Context, interval time.Duration) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.wake:
		}
		if err := f.retry(ctx, interval); err != nil {
			return nil // ctx ended
		}
	}
}

// retry writes the files every interval until they are up to date; it
// returns ctx's error if ctx ends first.
func (f *Files) retry(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if f.catchUp() {
			return nil
		}
	}
}

// catchUp writes the files of the set last published again if they are
// behind, and reports whether they are up to date now.
func (f *Files) catchUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.behind == nil {
		return true
	}
	if f.set == nil {
		return false // nothing published yet: Publish writes them
	}
	if err := f.publishLocked(f.set); err != nil {
		f.fellBehindLocked(err, "status files still not written", "")
		return false
	}
	f.caughtUpLocked()
	return true
}

// faultTelemetry returns idle telemetry t of a GPU of model gm with the
// marks of its health h, as the telemetry shows them (topology.ParseFault):
// an ECC fault's memory errors and its XID as the last; a thermal fault's
// temperature (1 °C above slowdown) and thermal slowdown reasons; a lost
// GPU's XID; healthy, no errors and the GPU idle reason. The status files
// carry them while the telemetry is off; its live values replace them.
func faultTelemetry(gm topology.GPUModel, t status.Telemetry, h status.Health) status.Telemetry {
	t.MemoryErrors = topology.MemoryErrors{}
	t.ClockEventReasons = topology.ClockEventGPUIdle
	if h.Healthy {
		return t
	}
	if x, ok := topology.ParseXID(h.Reason); ok {
		t.LastXID = &x
	}
	f := topology.ParseFault(h.Reason)
	switch f.Kind {
	case topology.FaultECC:
		t.MemoryErrors = gm.MemoryErrors(f)
	case topology.FaultThermal:
		t.TemperatureC = max(t.TemperatureC, gm.ThermalFaultTempC())
		if t.MemoryTemperatureC != nil {
			v := topology.MemoryTemperatureC(t.TemperatureC)
			t.MemoryTemperatureC = &v
		}
		t.ClockEventReasons |= topology.ClockEventsThermal
	}
	return t
}

// statusHealth is a status file's health: the reason only when unhealthy,
// made one line of at most 1024 bytes as the format requires.
func statusHealth(healthy bool, reason string, since, now time.Time) status.Health {
	if since.IsZero() {
		since = now
	}
	h := status.Health{Healthy: healthy, Since: since.UTC()}
	if !healthy {
		reason = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return ' '
			}
			return r
		}, reason)
		for len(reason) > 1024 { // cut at a rune boundary
			_, n := utf8.DecodeLastRuneInString(reason)
			reason = reason[:len(reason)-n]
		}
		h.Reason = reason
	}
	return h
}

// heldGPUs returns the GPU indices of active allocations (allocated or held),
// ascending. The caller holds mu.
func (f *Files) heldGPUs() ([]int, error) {
	active, err := f.st.Allocations(store.AllocationFilter{Active: true})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, a := range active {
		ids = append(ids, a.DeviceIDs...)
	}
	return topology.GPUsOf(ids...), nil
}

// machineGPUs returns the GPU indices of m.
func machineGPUs(m *topology.Machine) []int {
	out := make([]int, m.Len())
	for i := range out {
		out[i] = i
	}
	return out
}

// writeCDI writes the CDI spec of gpus (any order, repeats allowed) for
// set's view, of its kind: one device per GPU with its device node, the
// shared nodes, and the nvidia-smi (with -nvidia-smi) and status mounts.
// GPUs whose minor number a CDI spec cannot hold are left out (they came
// from a configuration without CDI). The spec of a kind used before stays
// as it was last written. A spec of another instance at the kind's path is
// left alone and is an error. The caller holds mu.
func (f *Files) writeCDI(set *View, gpus []int) error {
	v, m := set.cfg, set.set.Machine()
	w := f.cdi[v.CDIKind]
	first := w == nil
	if first {
		var err error
		if w, err = cdi.NewWriter(f.cdiDir, v.CDIKind, f.cdiOwner); err != nil {
			return err
		}
	}
	slices.Sort(gpus)
	gpus = slices.Compact(gpus)
	cfg := cdi.Config{Kind: v.CDIKind, SharedNodes: cdi.DefaultSharedNodes(v.DeviceNodeSource)}
	for _, i := range gpus {
		if minor := minorOf(m, i); minor <= cdi.MaxMinor {
			cfg.GPUs = append(cfg.GPUs, cdi.GPU{ID: topology.GPUID(i), Minor: minor, HostNode: v.DeviceNodeSource})
		}
	}
	if v.NvidiaSMI {
		cfg.Mounts = append(cfg.Mounts, cdi.Mount{HostPath: set.smiHost, ContainerPath: nvidiaSMIContainerPath})
	}
	cfg.Mounts = append(cfg.Mounts, cdi.Mount{HostPath: v.StatusDir, ContainerPath: status.DefaultDir})
	if err := w.Write(cfg); err != nil {
		if errors.Is(err, cdi.ErrForeignSpec) {
			return fmt.Errorf("%w; another plugin with the same -resource-name (the CDI kind %s) writes into -cdi-spec-dir %s: give each its own -resource-name or -cdi-spec-dir", err, v.CDIKind, f.cdiDir)
		}
		return err
	}
	if first {
		// The kind is ours now: what a crash of ours left can go.
		if err := w.RemoveTemporaryFiles(); err != nil {
			f.log.Warn().Err(err).Str("dir", f.cdiDir).Msg("temporary CDI spec files left by an earlier run not removed")
		}
		f.cdi[v.CDIKind] = w
	}
	return nil
}

// cdiOwner is the owner the CDI specs of cfg's process are marked with:
// cfg.Owner, its state file, which names one instance (the file is locked while it
// runs). An unmarked spec, written before specs were marked, is this
// instance's own when it mounts this instance's status directory (next to
// the state file) where containers read it.
func cdiOwner(cfg Config) cdi.Owner {
	statusDir := cfg.StatusDir
	return cdi.Owner{ID: cfg.Owner, Adopt: func(s *specs.Spec) bool {
		for _, m := range s.ContainerEdits.Mounts {
			if m != nil && m.HostPath == statusDir && m.ContainerPath == status.DefaultDir {
				return true
			}
		}
		return false
	}}
}
