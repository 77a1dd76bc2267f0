package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/atomicfile"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// The container view: what a container that gets virtual GPUs sees besides
// the topology variables. Two parts:
//
//   - containerView, a value of each device set (one configuration): the
//     catalog's Respond, which turns a stored allocation into the rest of
//     the container's answer (VIRTUAL_GPU_UUIDS, NVIDIA_VISIBLE_DEVICES,
//     the nvidia-smi and status mounts, device nodes, CDI device names, and
//     with -telemetry-writable the allocation's load socket directory);
//   - viewFiles, one per process (liveParts.view): the files those answers
//     name on the host — the nvidia-smi binary in -tools-dir, the status
//     files in status/ next to the state file, the CDI spec in
//     -cdi-spec-dir — written at start, around every live change and on
//     every health change, and written again (viewFiles.run) while a write
//     of the status files failed. None of them is ever removed: the
//     kubelet replays cached answers on container restarts, across plugin
//     restarts too.

// Container paths and variables of the view.
const (
	// nvidiaSMIContainerPath is where a container finds nvidia-smi.
	nvidiaSMIContainerPath = "/usr/bin/nvidia-smi"
	// nvidiaSMIName is the binary's name in -tools-dir: the multi-call
	// binary runs as nvidia-smi under that name (main).
	nvidiaSMIName = "nvidia-smi"
	// envVisibleDevices is NVIDIA's variable naming a container's GPUs
	// (-visible-devices-env); NVIDIA's plugin sets no CUDA_VISIBLE_DEVICES,
	// and neither does this one.
	envVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// selfExecutable is the running binary, the default source of the
	// installed nvidia-smi: readable even after the file was replaced or
	// deleted (an upgrade in place).
	selfExecutable = "/proc/self/exe"
	// toolTmpPrefix starts the names of the installer's temporary files.
	toolTmpPrefix = "." + nvidiaSMIName + ".tmp-"
)

// containerView is how one configuration answers for a container. It is an
// immutable, comparable value (deviceSet.equal compares it).
type containerView struct {
	nvidiaSMI   bool     // mount nvidia-smi
	visibleEnv  bool     // set NVIDIA_VISIBLE_DEVICES
	deviceNodes bool     // device nodes in the answer (envvar)
	envvar      bool     // the envvar strategy: mounts and device nodes in the answer
	cdi         bool     // the cdi-cri strategy: CDI device names in the answer
	cdiKind     cdi.Kind // their kind, the resource name's (options.Config.CDIKind)
	nodeSource  string   // host device node behind every device node
	smiHost     string   // <tools-dir>/nvidia-smi on the host
	statusDir   string   // the status directory on the host
	loadSocket  bool     // -telemetry-writable: a load socket per allocation
	loadDir     string   // the load sockets' directory on the host
}

// newContainerView returns the view of cfg.
func newContainerView(cfg *options.Config) containerView {
	return containerView{
		nvidiaSMI:   cfg.View.NvidiaSMI,
		visibleEnv:  cfg.View.VisibleDevicesEnv,
		deviceNodes: cfg.View.DeviceNodes,
		envvar:      cfg.View.Uses(view.DeviceListEnvVar),
		cdi:         cfg.View.Uses(view.DeviceListCDICRI),
		cdiKind:     cfg.View.CDIKind,
		nodeSource:  cfg.View.DeviceNodeSource,
		smiHost:     filepath.Join(cfg.View.ToolsDir, nvidiaSMIName),
		statusDir:   cfg.View.StatusDir,
		loadSocket:  cfg.Telemetry.Writable,
		loadDir:     cfg.View.LoadSocketDir,
	}
}

// catalog returns the Server's catalog for the stored devices: build's,
// with the container view's Respond over the stored GPU UUIDs.
func (s *deviceSet) catalog(stored []store.Device) (plugin.Catalog, error) {
	cat, err := s.build(stored)
	if err != nil {
		return cat, err
	}
	cat.Respond = s.view.respond(s.cfg.GPUs.Machine, gpuUUIDs(stored), s.GPU)
	if s.view.loadSocket {
		cat.Env = withLoadSocket(cat.Env)
	}
	return cat, nil
}

// withLoadSocket adds loadsock.EnvSocket to env's variables: stored with
// the record, it says that the allocation has a load socket (respond
// mounts it; the load sockets follow the records that have it), whatever
// the configuration in force later.
func withLoadSocket(env plugin.EnvFunc) plugin.EnvFunc {
	return func(devs []gpuset.Device) map[string]string {
		out := map[string]string{}
		if env != nil {
			maps.Copy(out, env(devs))
		}
		out[loadsock.EnvSocket] = loadsock.ContainerPath
		return out
	}
}

// physicalGPUs returns the GPU indices of an allocation's devices, each
// once, ascending: the GPUs whose UUIDs, device nodes and CDI devices the
// container gets. gpuOf maps a device to its GPU (deviceSet.gpuOf: a
// replica to the GPU it shares).
func physicalGPUs(devs []gpuset.Device, gpuOf func(gpuset.Device) int) []int {
	gpus := make([]int, 0, len(devs))
	for _, d := range devs {
		gpus = append(gpus, gpuOf(d))
	}
	slices.Sort(gpus)
	return slices.Compact(gpus)
}

// respond returns the catalog's Respond for machine m whose GPUs have the
// given UUIDs (by GPU index; stored once and never changed, so the answer
// is a function of the record's devices). It adds:
//
//   - VIRTUAL_GPU_UUIDS, the GPUs' UUIDs in the order of VIRTUAL_GPU_IDS
//     (one per GPU), and with -visible-devices-env NVIDIA_VISIBLE_DEVICES,
//     the same list; neither when a GPU has no UUID (no node identity);
//   - with the envvar strategy: nvidia-smi read-only at /usr/bin/nvidia-smi
//     (-nvidia-smi), the status directory read-only at /run/virtual-gpu,
//     and with -device-nodes /dev/nvidia<minor> per GPU, /dev/nvidiactl and
//     /dev/nvidia-uvm, all backed by the device node source, read-write
//     without mknod (cdi.DevicePermissions, as in the CDI spec);
//   - with the cdi-cri strategy: the GPUs' CDI device names, of the
//     kind of the resource name in force (the spec of that kind viewFiles
//     writes carries the mounts and device nodes; an answer given under an
//     earlier resource name keeps naming that name's kind, whose spec
//     stays);
//   - for a record with a load socket (its variables have
//     loadsock.EnvSocket, -telemetry-writable), whatever the strategy: the
//     allocation's socket directory read-only at loadsock.ContainerDir.
//     The answer then differs per allocation (rec.Seq names the
//     directory).
func (v containerView) respond(m *topology.Machine, uuids map[int]string, gpuOf func(gpuset.Device) int) plugin.RespondFunc {
	return func(rec plugin.Record, devs []gpuset.Device) (plugin.ContainerSpec, error) {
		gpus := physicalGPUs(devs, gpuOf)
		var spec plugin.ContainerSpec
		if list, ok := joinUUIDs(gpus, uuids); ok {
			spec.Envs = map[string]string{status.EnvUUIDs: list}
			if v.visibleEnv {
				spec.Envs[envVisibleDevices] = list
			}
		}
		if v.envvar {
			if v.nvidiaSMI {
				spec.Mounts = append(spec.Mounts, plugin.Mount{ContainerPath: nvidiaSMIContainerPath, HostPath: v.smiHost, ReadOnly: true})
			}
			spec.Mounts = append(spec.Mounts, plugin.Mount{ContainerPath: status.DefaultDir, HostPath: v.statusDir, ReadOnly: true})
			if v.deviceNodes {
				spec.DeviceNodes = make([]plugin.DeviceNode, 0, len(gpus)+2)
				for _, i := range gpus {
					spec.DeviceNodes = append(spec.DeviceNodes, plugin.DeviceNode{ContainerPath: devicePath(minorOf(m, i)), HostPath: v.nodeSource, Permissions: cdi.DevicePermissions})
				}
				for _, p := range []string{cdi.ControlDevicePath, cdi.UVMDevicePath} {
					spec.DeviceNodes = append(spec.DeviceNodes, plugin.DeviceNode{ContainerPath: p, HostPath: v.nodeSource, Permissions: cdi.DevicePermissions})
				}
			}
		}
		if rec.Envs[loadsock.EnvSocket] != "" {
			spec.Mounts = append(spec.Mounts, plugin.Mount{ContainerPath: loadsock.ContainerDir, HostPath: loadsock.HostDir(v.loadDir, rec.Seq), ReadOnly: true})
		}
		if v.cdi {
			ids := make([]string, len(gpus))
			for k, i := range gpus {
				ids[k] = gpuID(i)
			}
			names, err := v.cdiKind.QualifiedNames(ids)
			if err != nil {
				return spec, err
			}
			spec.CDIDevices = names
		}
		return spec, nil
	}
}

// joinUUIDs joins the UUIDs of gpus with commas; false if one has none.
func joinUUIDs(gpus []int, uuids map[int]string) (string, bool) {
	var b strings.Builder
	for k, i := range gpus {
		u := uuids[i]
		if u == "" {
			return "", false
		}
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString(u)
	}
	return b.String(), len(gpus) > 0
}

// gpuID is the device id of whole GPU i, "fake-<i>": also its CDI device
// name and the id in its status file.
func gpuID(i int) string { return topology.IDPrefix + strconv.Itoa(i) }

// gpuUUIDs returns the stored UUID of each whole GPU, by index; GPUs
// without one are left out.
func gpuUUIDs(stored []store.Device) map[int]string {
	out := make(map[int]string, len(stored))
	for _, d := range stored {
		if i, ok := topology.GPUOf(d.ID); ok && d.UUID != "" && !topology.IsReplicaID(d.ID) {
			out[i] = d.UUID
		}
	}
	return out
}

// minorOf is the minor number of GPU i: the machine's, or, for a GPU the
// machine no longer has (held since an earlier configuration), its index,
// as topology numbers them.
func minorOf(m *topology.Machine, i int) int {
	if i < m.Len() {
		return m.MinorNumber(i)
	}
	return i
}

// devicePath is the device node of the GPU with the given minor number.
func devicePath(minor int) string { return "/dev/nvidia" + strconv.Itoa(minor) }

// statusRetryInterval is how often run writes the status files again while
// they are behind the store (a write failed: a full disk, say).
const statusRetryInterval = time.Second

// viewFiles keeps the host files containers use: it installs nvidia-smi,
// publishes the GPU status files and writes the CDI spec. A status file
// that cannot be written is written again, with the store's newest
// health, until it can be (run). One serves the whole process; it is safe
// for concurrent use. It never removes a file a container may still use,
// not at shutdown either.
type viewFiles struct {
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
	set       *deviceSet                  // the set last published; nil before
	behind    error                       // why the files are behind the store (the first failure); nil when they are not
	since     time.Time                   // when they fell behind

	wake chan struct{} // tells run that the files fell behind; buffered, one
}

// newViewFiles returns the view's files for the process's configuration
// cfg (its paths), reading active allocations from st. exe is the binary to
// install as nvidia-smi ("" means the running one); identity the node's
// identity (topology.NodeIdentity). It creates the status directory.
func newViewFiles(cfg *options.Config, st *store.Store, exe, identity string, log zerolog.Logger) (*viewFiles, error) {
	if exe == "" {
		exe = selfExecutable
	}
	w, err := status.NewWriter(cfg.View.StatusDir)
	if err != nil {
		return nil, err
	}
	return &viewFiles{st: st, log: log, exe: exe, toolsDir: cfg.View.ToolsDir, cdiDir: cfg.View.CDISpecDir, cdiOwner: cdiOwner(cfg), identity: identity, now: time.Now,
		status: w, gpus: map[string]*status.GPU{}, cdi: map[cdi.Kind]*cdi.Writer{}, wake: make(chan struct{}, 1)}, nil
}

// prepare makes the files set's answers name exist before set serves:
// nvidia-smi installed (once per process) and, with the cdi-cri strategy,
// a CDI spec that holds the GPUs of set, of prev (the set serving until
// now; nil at start) and of every active allocation. An error leaves prev
// serving.
func (f *viewFiles) prepare(set, prev *deviceSet) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if set.view.nvidiaSMI && !f.installed {
		changed, err := installTool(f.exe, f.toolsDir, nvidiaSMIName)
		if err != nil {
			return err
		}
		f.installed = true
		f.log.Info().Str("path", filepath.Join(f.toolsDir, nvidiaSMIName)).Bool("replaced", changed).Msg("nvidia-smi installed for containers")
	}
	if !set.view.cdi {
		return nil
	}
	held, err := f.heldGPUs()
	if err != nil {
		return err
	}
	gpus := append(machineGPUs(set.cfg.GPUs.Machine), held...)
	if prev != nil {
		gpus = append(gpus, machineGPUs(prev.cfg.GPUs.Machine)...)
	}
	return f.writeCDI(set, gpus)
}

// publish brings the files up to date with set, once it serves (see
// publishLocked). What cannot be written is said once, and written again
// until it can be (run).
func (f *viewFiles) publish(set *deviceSet) {
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
func (f *viewFiles) publishLocked(set *deviceSet) error {
	stored, err := f.st.Devices() // read under mu: a health change waits, or was stored before
	if err != nil {
		return err
	}
	held, err := f.heldGPUs()
	if err != nil {
		return err
	}
	m := set.cfg.GPUs.Machine
	byGPU := map[int]store.Device{}
	for _, d := range stored {
		if i, ok := topology.GPUOf(d.ID); ok && !topology.IsReplicaID(d.ID) {
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
		g.Health = statusHealth(d.Healthy, d.Reason, d.Since, now)
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
	if set.view.cdi {
		if err := f.writeCDI(set, append(machineGPUs(m), held...)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// health writes the status file of the GPU of device id with its new
// health; a device without a status file is skipped. A file that cannot be
// written is said once, and written again until it can be (run).
func (f *viewFiles) health(id string, healthy bool, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := topology.GPUOf(id)
	if !ok {
		return
	}
	g := f.gpus[gpuID(i)]
	if g == nil {
		return
	}
	now := f.now()
	next := *g
	next.Health = statusHealth(healthy, reason, now, now)
	next.Telemetry.Updated = now
	if err := f.status.Write(&next); err != nil {
		f.fellBehindLocked(err, "status file not updated: nvidia-smi in containers shows the previous health; "+
			"written again every second until it is", id)
		return
	}
	f.gpus[next.ID] = &next
}

// fellBehindLocked notes that the files are behind the store after err and
// wakes run to write them again. The first failure of a spell is logged at
// warn with msg (and the device, if not ""); the others until the files
// are up to date again at debug. The caller holds mu.
func (f *viewFiles) fellBehindLocked(err error, msg, device string) {
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
	default: // run is woken already
	}
}

// caughtUpLocked notes that the files are up to date with the store, and
// says so if they were behind. The caller holds mu.
func (f *viewFiles) caughtUpLocked() {
	if f.behind == nil {
		return
	}
	f.log.Info().AnErr("failure", f.behind).Time("behind_since", f.since).Str("dir", f.status.Dir()).
		Msg("status files written again: up to date with the stored health")
	f.behind = nil
}

// run writes the files again, every interval, while they are behind the
// store (fellBehindLocked): all of the set last published, with the newest
// stored health, until that succeeds. It returns nil when ctx ends.
func (f *viewFiles) run(ctx context.Context, interval time.Duration) error {
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
func (f *viewFiles) retry(ctx context.Context, interval time.Duration) error {
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
func (f *viewFiles) catchUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.behind == nil {
		return true
	}
	if f.set == nil {
		return false // nothing published yet: publish writes them
	}
	if err := f.publishLocked(f.set); err != nil {
		f.fellBehindLocked(err, "status files still not written", "")
		return false
	}
	f.caughtUpLocked()
	return true
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
func (f *viewFiles) heldGPUs() ([]int, error) {
	active, err := f.st.Allocations(store.AllocationFilter{Active: true})
	if err != nil {
		return nil, err
	}
	var out []int
	for _, a := range active {
		for _, id := range a.DeviceIDs {
			if i, ok := topology.GPUOf(id); ok {
				out = append(out, i)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
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
func (f *viewFiles) writeCDI(set *deviceSet, gpus []int) error {
	v, m := set.view, set.cfg.GPUs.Machine
	w := f.cdi[v.cdiKind]
	first := w == nil
	if first {
		var err error
		if w, err = cdi.NewWriter(f.cdiDir, v.cdiKind, f.cdiOwner); err != nil {
			return err
		}
	}
	slices.Sort(gpus)
	gpus = slices.Compact(gpus)
	cfg := cdi.Config{Kind: v.cdiKind, SharedNodes: cdi.DefaultSharedNodes(v.nodeSource)}
	for _, i := range gpus {
		if minor := minorOf(m, i); minor <= cdi.MaxMinor {
			cfg.GPUs = append(cfg.GPUs, cdi.GPU{ID: gpuID(i), Minor: minor, HostNode: v.nodeSource})
		}
	}
	if v.nvidiaSMI {
		cfg.Mounts = append(cfg.Mounts, cdi.Mount{HostPath: v.smiHost, ContainerPath: nvidiaSMIContainerPath})
	}
	cfg.Mounts = append(cfg.Mounts, cdi.Mount{HostPath: v.statusDir, ContainerPath: status.DefaultDir})
	if err := w.Write(cfg); err != nil {
		if errors.Is(err, cdi.ErrForeignSpec) {
			return fmt.Errorf("%w; another plugin with the same -resource-name (the CDI kind %s) writes into -cdi-spec-dir %s: give each its own -resource-name or -cdi-spec-dir", err, v.cdiKind, f.cdiDir)
		}
		return err
	}
	if first {
		// The kind is ours now: what a crash of ours left can go.
		if err := w.RemoveTemporaryFiles(); err != nil {
			f.log.Warn().Err(err).Str("dir", f.cdiDir).Msg("temporary CDI spec files left by an earlier run not removed")
		}
		f.cdi[v.cdiKind] = w
	}
	return nil
}

// cdiOwner is the owner the CDI specs of cfg's process are marked with:
// its state file, which names one instance (the file is locked while it
// runs). An unmarked spec, written before specs were marked, is this
// instance's own when it mounts this instance's status directory (next to
// the state file) where containers read it.
func cdiOwner(cfg *options.Config) cdi.Owner {
	statusDir := cfg.View.StatusDir
	return cdi.Owner{ID: cfg.StatePath, Adopt: func(s *specs.Spec) bool {
		for _, m := range s.ContainerEdits.Mounts {
			if m != nil && m.HostPath == statusDir && m.ContainerPath == status.DefaultDir {
				return true
			}
		}
		return false
	}}
}

// installTool installs the file src as dir/name for containers: mode 0755,
// replaced atomically (a temporary file in dir, written, flushed, renamed
// over the old one, the directory flushed) and only when its content
// differs, so a running container's bind mount keeps the file it has and a
// new one gets the new file. It creates dir (0755) if needed, removes
// temporary files an interrupted install left, and reports whether it
// wrote the file.
func installTool(src, dir, name string) (changed bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("install %s: create %q: %w", name, dir, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, toolTmpPrefix+"*")); len(leftovers) > 0 {
		for _, p := range leftovers {
			_ = os.Remove(p) // best effort: a leftover only costs space
		}
	}
	dst := filepath.Join(dir, name)
	// What stands there must be a file (or a link to one, or nothing): a
	// directory would make the rename fail, a FIFO block the comparison.
	if fi, err := os.Stat(dst); err == nil && !fi.Mode().IsRegular() {
		return false, fmt.Errorf("install %s: %q is %s, not a file: remove it (the plugin installs its %s there)", name, dst, fileKind(fi.Mode()), name)
	}
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("install %s: open %q: %w", name, src, err)
	}
	defer in.Close()
	same, err := sameContent(in, dst)
	if err != nil {
		return false, fmt.Errorf("install %s: compare with %q: %w", name, dst, err)
	}
	if same {
		if fi, err := os.Stat(dst); err == nil && fi.Mode().Perm() != 0o755 {
			if err := os.Chmod(dst, 0o755); err != nil {
				return false, fmt.Errorf("install %s: %w", name, err)
			}
		}
		return false, nil
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return false, fmt.Errorf("install %s: read %q: %w", name, src, err)
	}
	copyIn := func(w io.Writer) error {
		if _, err := io.Copy(w, in); err != nil {
			return fmt.Errorf("copy %q: %w", src, err)
		}
		return nil
	}
	if err := atomicfile.Replace(dst, atomicfile.Options{Prefix: toolTmpPrefix, Mode: 0o755}, copyIn); err != nil {
		return false, fmt.Errorf("install %s: %w", name, err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return true, fmt.Errorf("install %s: %w", name, err)
	}
	return true, nil
}

// fileKind names the type of a file mode: "a directory", "a named pipe".
func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeSymlink:
		return "a symbolic link"
	case fs.ModeNamedPipe:
		return "a named pipe"
	case fs.ModeSocket:
		return "a socket"
	case fs.ModeDevice:
		return "a block device"
	case fs.ModeDevice | fs.ModeCharDevice:
		return "a character device"
	}
	return "a " + m.Type().String() + " file"
}

// sameContent reports whether the file at path holds exactly what r reads
// from its start; a missing file is not the same.
func sameContent(r io.Reader, path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	const chunk = 1 << 20
	a, b := make([]byte, chunk), make([]byte, chunk)
	for {
		na, errA := io.ReadFull(r, a)
		nb, errB := io.ReadFull(f, b)
		if !bytes.Equal(a[:na], b[:nb]) {
			return false, nil
		}
		doneA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		doneB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		switch {
		case errA != nil && !doneA:
			return false, errA
		case errB != nil && !doneB:
			return false, errB
		case doneA || doneB:
			return doneA && doneB, nil
		}
	}
}

// viewHealth stores a health change (next) and then writes the GPU's
// status file, so nvidia-smi in running containers shows it. A status file
// that cannot be written is the view's to log and write again: the change
// is stored and served all the same.
type viewHealth struct {
	next  plugin.HealthRecorder
	files *viewFiles
}

var _ plugin.HealthRecorder = viewHealth{}

func (h viewHealth) RecordHealth(id string, healthy bool, reason, cause string) error {
	if err := h.next.RecordHealth(id, healthy, reason, cause); err != nil {
		return err
	}
	h.files.health(id, healthy, reason)
	return nil
}
