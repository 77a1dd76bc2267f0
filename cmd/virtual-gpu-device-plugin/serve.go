package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/podresources"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/unixsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// newLogger builds the root logger from the validated config.
func newLogger(cfg *options.Config, w io.Writer) zerolog.Logger {
	if cfg.LogFormat == options.LogConsole {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !isTerminal(w)}
	}
	return zerolog.New(w).Level(cfg.LogLevel).With().Timestamp().Logger()
}

// serveEnv is what serve takes from outside its configuration: how it
// reaches the API server, the host's machine id, and how patiently it
// watches. defaultServeEnv is the process's; tests replace parts of it.
type serveEnv struct {
	// newAPI connects to the API server (kube.NewClient); an error
	// wrapping kube.ErrNoAPIAccess means there is no way to reach one.
	newAPI func(kube.Options) (kube.API, error)
	// machineIDPath is read for the GPU UUIDs' node identity when
	// -node-name is not set (default /etc/machine-id).
	machineIDPath string
	// executable is the binary installed as the containers' nvidia-smi
	// (default /proc/self/exe: this multi-call binary).
	executable string
	// profilePoll is the fallback check of the profiles directory
	// (default 10 s).
	profilePoll time.Duration
	// labelWait bounds the wait for the Node's labels at start (default
	// 10 s).
	labelWait time.Duration
	// environ lists the environment, for the VGPU_* variables no flag
	// reads (default os.Environ; nil: not looked at).
	environ func() []string
	// clock is the GPU telemetry's clock (default the wall clock): the
	// load model's values are a function of its second.
	clock telemetry.Clock
}

// defaultServeEnv is the process's serveEnv.
func defaultServeEnv() serveEnv {
	return serveEnv{
		newAPI: func(o kube.Options) (kube.API, error) {
			c, err := kube.NewClient(o)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		machineIDPath: topology.DefaultMachineIDPath,
		profilePoll:   defaultProfilePoll,
		labelWait:     defaultLabelWait,
		environ:       os.Environ,
	}
}

// serve runs the device plugin until ctx ends. start is the configuration
// options.Load resolved and profiles the -config directory's profiles (nil
// when -config is not a directory); with the Node's label known, its
// profile is served instead, and every later change of the label or the
// profiles is applied live (selector).
func serve(ctx context.Context, o *options.Options, start *options.Config, profiles *options.Profiles, logw io.Writer, env serveEnv) error {
	hup := notifyHangup()
	defer signal.Stop(hup)
	log := newLogger(start, logw)
	if env.environ != nil {
		if unknown := options.UnknownVariables(env.environ()); len(unknown) > 0 {
			log.Warn().Strs("variables", unknown).Msg("VGPU_* variables that no flag reads: ignored")
		}
	}
	identity := identityFor(o.NodeName, env.machineIDPath, log)
	api, err := connectAPI(o, profiles, env, log)
	if err != nil {
		return err
	}
	st, err := openState(start, log)
	if err != nil {
		return err
	}
	defer st.Close()

	ctx, cancel := context.WithCancel(ctx)
	g, ctx := errgroup.WithContext(ctx)
	defer func() { // on an early return, end what started
		cancel()
		_ = g.Wait()
	}()
	sel := newSelector(o, profiles, api, identity, log)
	if api != nil {
		g.Go(func() error { return sel.watchNode(ctx) })
		sel.waitLabels(ctx, env.labelWait)
	}
	cfg, why, detail := sel.initial(start)
	logConfig(log, cfg)
	set, err := newDeviceSet(cfg, identity)
	if err != nil {
		return err
	}
	// The devices and the configuration event of this start, stored in one
	// transaction.
	change, catalog, err := reconcile(st, set, why, detail)
	if err != nil {
		return err
	}
	report := change.Report
	if !report.Empty() {
		log.Info().Strs("added", report.Added).Strs("removed", report.Removed).Strs("restored", report.Restored).
			Int("changed", len(report.Changed)).Str("state", st.Path()).Msg("reconciled stored devices with the configured machine")
	}
	if err := logDamaged(log, st, report); err != nil {
		return err
	}
	stored, err := st.Devices()
	if err != nil {
		return err
	}

	// Everything this process must have to itself is claimed before it
	// writes anything into a directory another instance may share (status
	// files, CDI spec, nvidia-smi, load sockets): a second instance that
	// cannot run must leave the running one's files alone. The state file
	// is locked (openState); then the admin socket, the listeners and the
	// device-plugin socket.
	var srv *plugin.Server // set below, before anything serves the admin API
	adminSrv := admin.NewServer(admin.ServerConfig{Socket: cfg.AdminSocket, Source: stateSource{st}, Logger: log,
		Reported: func() []gpuset.Device { return srv.Devices() },
		Health: func(id string, healthy bool, reason string) error {
			return sel.setHealth(srv, id, healthy, reason, store.CauseAdmin)
		}})
	if err := adminSrv.Listen(); err != nil { // before anything registers
		return err
	}
	defer adminSrv.Close()
	var metricsLis net.Listener
	if cfg.MetricsAddress != "" {
		if metricsLis, err = net.Listen("tcp", cfg.MetricsAddress); err != nil {
			return fmt.Errorf("-metrics-address: %w", err)
		}
		defer metricsLis.Close() // on an early return; metrics.Serve closes it too
		log.Info().Str("address", metricsLis.Addr().String()).Msg("serving /metrics, /healthz, /readyz")
	}
	var telemetryLis net.Listener
	if cfg.TelemetryAddress != "" {
		if telemetryLis, err = net.Listen("tcp", cfg.TelemetryAddress); err != nil {
			return fmt.Errorf("-telemetry-address: %w", err)
		}
		defer telemetryLis.Close() // on an early return; metrics.Serve closes it too
	}
	if err := checkPluginSocket(cfg); err != nil {
		return err
	}

	files, err := view.NewFiles(cfg.View, st, env.executable, identity, log)
	if err != nil {
		return err
	}
	if err := files.Prepare(set.view, nil); err != nil {
		return err
	}
	files.Publish(set.view) // what cannot be written now is written by files.Run once it can
	if cfg.TelemetryAddress == "" {
		if err := files.DropLive(); err != nil {
			log.Warn().Err(err).Msg("live GPU values of an earlier run not removed: nvidia-smi in containers shows them")
		}
	}
	logUnhealthy(log, stored)
	logNUMA(log, cfg, set)

	// The history is pruned off the RPC path: at start, every minute, and
	// after allocations (at most once a second).
	pruner, err := store.NewPruner(st, store.PruneOptions{MaxRecords: cfg.History.MaxRecords, MaxBytes: cfg.History.MaxBytes, MaxAge: cfg.History.MaxAge},
		store.PrunerConfig{Report: func(r store.PruneResult, err error) { logPrune(log, r, err) }})
	if err != nil {
		return err
	}
	// The load sockets of -telemetry-writable, one per allocation whose
	// record says it has one (whatever the configuration in force): those
	// of the active allocations exist again before the plugin registers.
	active, err := agent.NewActiveIndex(st)
	if err != nil {
		return err
	}
	var telemetryRef atomic.Pointer[telemetry.Service] // set below, with -telemetry-address
	loads, err := loadsock.NewServer(loadsock.Config{Dir: cfg.View.LoadSocketDir, Logger: log,
		MaxSockets: func() int { // the configuration in force, once the selector has one
			if s := sel.current.Load(); s != nil {
				return maxLoadSockets(s)
			}
			return maxLoadSockets(set)
		},
		Handler: loadsock.HandlerFunc(func(ctx context.Context, seq uint64, req loadsock.Request) (int, error) {
			t := telemetryRef.Load()
			if t == nil {
				return 0, loadsock.Refusef(loadsock.CauseOff, "the plugin's telemetry is off (-telemetry-address)")
			}
			return t.SetLoad(ctx, seq, req)
		})})
	if err != nil {
		return err
	}
	defer loads.Close()
	loadList := func() ([]loadsock.Allocation, error) {
		allocs, err := activeLoadSockets(active)
		if t := telemetryRef.Load(); err == nil && t != nil {
			seqs := make([]uint64, len(allocs))
			for i, a := range allocs {
				seqs[i] = a.Seq
			}
			t.KeepLoads(seqs)
		}
		return allocs, err
	}
	if err := loads.Sync(loadList); err != nil {
		log.Error().Err(err).Msg("load sockets of active allocations not all created again; retrying")
	}
	// The tracker first: the recorder tells it about each allocation.
	tracker, err := podresources.New(podresources.Config{
		Socket:       cfg.PodResourcesSocket,
		ResourceName: set.Resource(),
		Store:        st,
		Interval:     cfg.ReconcileInterval,
		AbandonAfter: cfg.AbandonAfter,
		Logger:       log,
	})
	if err != nil {
		return err
	}
	if err := followEarlierNames(st, tracker); err != nil {
		return err
	}
	openFailed := newCauseLog(log)
	opened := func(a store.Allocation) { // before Allocate answers
		active.Add(a.Seq) // before its socket: a Sync after the Open must list it
		if a.Envs[loadsock.EnvSocket] == "" {
			return
		}
		// Best effort: the record is stored and the answer mounts the
		// directory; a socket that cannot be opened now (too many open
		// files, a full disk) is opened by the next Sync that can, inside
		// the mounted directory, where the container sees it.
		if err := loads.Open(a.Seq, a.DeviceIDs); err != nil {
			openFailed.warn(err, "load socket of a new allocation not opened: Allocate answers with its directory mounted, "+
				"and the socket appears in it once it can be opened (retried every second; logged once per cause)")
		}
	}
	srv, err = plugin.NewServer(plugin.ServerConfig{
		Catalog:  catalog,
		Recorder: recorder{st: st, kick: pruner.Kick, recorded: tracker.Notify, opened: opened},
		Health:   viewHealth{next: healthRecorder{st}, files: files},
		Logger:   log,
	})
	if err != nil {
		return err
	}
	defer srv.Close() // the Server is ours, not the Runners'
	reg := plugin.NewRegistrar(plugin.RunnerConfig{
		Dir:        cfg.DevicePluginPath,
		SocketName: cfg.SocketName,
		Server:     srv,
		Logger:     log,
	}, set.Resource())
	faultPlan := faults.NewRunner(func(id string, healthy bool, reason string) error {
		return sel.setHealth(srv, id, healthy, reason, store.CauseFaultInjection)
	}, log)
	faultPlan.Restart(cfg.Faults, set.GPUIDs())
	m := metrics.New(metrics.Config{
		Version:      version,
		Revision:     revision,
		Devices:      srv,
		Registration: reg,
		Allocations:  st,
		Score:        sel.score,
		Logger:       log,
	})
	srv.SetObserver(m) // before anything serves srv
	observeReconcile(m, report)
	nodeName := o.NodeName
	if nodeName == "" {
		nodeName, _ = os.Hostname()
	}
	var telem *telemetry.Service
	if cfg.TelemetryAddress != "" {
		telem = telemetry.NewService(telemetry.ServiceConfig{Store: st, Active: active, Devices: srv, Live: files, Hostname: nodeName,
			Notify: tracker.Notify, Clock: env.clock, Logger: log})
		telemetryRef.Store(telem)
		if err := telem.Follow(set.Set, cfg.Telemetry); err != nil {
			log.Error().Err(err).Msg("GPU telemetry unavailable: its listener answers 503")
		}
		log.Info().Str("address", telemetryLis.Addr().String()).Str("model", cfg.Telemetry.Model.String()).
			Bool("writable", cfg.Telemetry.Writable).Msg("serving GPU telemetry on /metrics (dcgm-exporter " + telemetry.Release + ")")
	}

	log.Info().Str("version", version).Str("node", nodeName).Str("topology", cfg.GPUs.Machine.Name()).Int("devices", cfg.GPUs.Machine.Len()).
		Str("resource", set.Resource()).Str("profile", cfg.Profile).Str("why", why).Str("dir", cfg.DevicePluginPath).Str("state", st.Path()).
		Str("policy", cfg.GPUs.AllocationPolicy).Msg("starting")
	// From here on a new label or profile is applied live.
	sel.start(ctx, liveParts{obs: m, st: st, srv: srv, reg: reg, tracker: tracker, faults: faultPlan, view: files, telemetry: telem}, set, report)

	g.Go(func() error { return reg.Run(ctx) })
	g.Go(func() error { return adminSrv.Run(ctx) })
	g.Go(func() error { return tracker.Run(ctx) })
	g.Go(func() error { return pruner.Run(ctx) })
	g.Go(func() error { return faultPlan.Run(ctx) })
	g.Go(func() error { return loads.Run(ctx, loadSyncInterval, loadList) })
	g.Go(func() error { return files.Run(ctx, view.RetryInterval) })
	if telem != nil {
		g.Go(func() error { return telem.Run(ctx) })
		g.Go(func() error { return metrics.Serve(ctx, telemetryLis, telem) })
	}
	if profiles != nil {
		w := &dirWatch{dir: profiles.Dir, poll: env.profilePoll, log: log}
		g.Go(func() error { return w.Run(ctx, func() { sel.reload(ctx, causeDirChanged) }) })
	}
	g.Go(func() error {
		return onHangup(ctx, hup, func() {
			if profiles == nil {
				log.Info().Msg("SIGHUP: nothing to read again: the configuration is read at start; only a -config directory of profiles is followed live")
				return
			}
			sel.reload(ctx, causeSIGHUP)
		})
	})
	if metricsLis != nil {
		live := func() error { _, err := st.Devices(); return err }
		ready := func() error { // registered, and the state file takes writes (Allocate needs them)
			if !reg.Registered() {
				return errors.New("not registered with the kubelet")
			}
			if err := st.Writable(); err != nil {
				return err
			}
			return live()
		}
		g.Go(func() error { return metrics.Serve(ctx, metricsLis, m.Handler(live, ready)) })
	}
	return g.Wait()
}

// checkPluginSocket refuses a device-plugin socket path another process
// serves on (a second plugin on the same path), or that is not a socket,
// before anything is written: the Runner claims the path when it serves
// (unixsock.Claim), which is too late for that. A stale socket is
// removed, as the Runner would. Other errors are left to the Runner, which
// retries them.
func checkPluginSocket(cfg *options.Config) error {
	err := unixsock.Claim(filepath.Join(cfg.DevicePluginPath, cfg.SocketName), 0)
	switch {
	case errors.Is(err, unixsock.ErrInUse):
		return fmt.Errorf("%w; stop that process, or give this plugin another socket name", err)
	case errors.Is(err, unixsock.ErrNotSocket):
		return err
	}
	return nil
}

// identityFor returns the identity GPU UUIDs are derived from: the node's
// name, else the machine id read from machineIDPath. Without either it
// says so and returns "": the devices then get no UUID.
func identityFor(nodeName, machineIDPath string, log zerolog.Logger) string {
	var machineID string
	if strings.TrimSpace(nodeName) == "" {
		machineID = readMachineID(machineIDPath)
	}
	identity, source, err := topology.NodeIdentity(nodeName, machineID)
	if err != nil {
		log.Warn().Err(err).Msg("devices get no GPU UUIDs")
		return ""
	}
	log.Debug().Str("source", source).Msg("GPU UUIDs derived from the node's identity")
	return identity
}

// readMachineID returns the content of the machine-id file at path, or ""
// when it is not a small regular file that reads.
func readMachineID(path string) string {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// connectAPI returns a client of the API server when the plugin needs one
// (-node-name set, and a profiles directory or -label-node), nil when it
// does not or has no API access; then it says once what the plugin does
// without. Only an explicit -kubeconfig that cannot be used is an error.
func connectAPI(o *options.Options, profiles *options.Profiles, env serveEnv, log zerolog.Logger) (kube.API, error) {
	switch {
	case profiles == nil && !o.LabelNode:
		return nil, nil
	case o.NodeName == "":
		log.Warn().Str("config", o.ConfigPath).
			Msg("no -node-name (nor NODE_NAME): the node's profile label is not read; serving the -config-default profile")
		return nil, nil
	}
	api, err := env.newAPI(kube.Options{Kubeconfig: o.Kubeconfig, Version: version, Logger: log})
	switch {
	case err == nil:
		return api, nil
	case o.Kubeconfig != "":
		return nil, usageError{fmt.Errorf("-kubeconfig: %w", err)}
	}
	log.Warn().Err(err).Str("node", o.NodeName).
		Msg("no API access: the node's profile label is not read and no GPU labels are written; serving the -config-default profile")
	return nil, nil
}

// followEarlierNames makes tracker follow the resource names of the
// configuration history too (containers may hold devices under a name of
// an earlier configuration).
func followEarlierNames(st *store.Store, tracker *podresources.Tracker) error {
	const lookBack = 100
	events, err := st.ConfigEvents(store.ConfigFilter{Limit: lookBack})
	if err != nil {
		return err
	}
	for _, e := range events {
		tracker.FollowResourceName(e.ResourceName)
	}
	return nil
}

// logConfig logs, once, where the configuration came from, what in it
// has no effect (yet), and what it allows that is unsafe (at warn).
func logConfig(log zerolog.Logger, cfg *options.Config) {
	if cfg.File != "" {
		c := log.With().Str("file", cfg.File)
		if cfg.Profile != "" {
			c = c.Str("profile", cfg.Profile)
		}
		if len(cfg.Overridden) > 0 {
			c = c.Strs("overridden", cfg.Overridden)
		}
		l := c.Logger()
		l.Info().Msg("configuration file")
	}
	if len(cfg.Ignored) > 0 {
		notes := make([]string, len(cfg.Ignored))
		for i, n := range cfg.Ignored {
			notes[i] = n.String()
		}
		log.Info().Strs("fields", notes).Msg("fields of NVIDIA's device plugin configuration that have no effect here")
	}
	for _, w := range cfg.Warnings {
		log.Warn().Msg(w)
	}
	if sh := cfg.GPUs.Sharing; sh.Enabled() {
		gpus := "all"
		if sh.GPUs != nil {
			gpus = fmt.Sprint(sh.GPUs)
		}
		log.Info().Int("replicas", sh.Replicas).Str("resource", sh.ResourceName).Str("gpus", gpus).Str("policy", sh.PolicyName).
			Bool("fail_requests_greater_than_one", sh.FailRequestsGreaterThanOne).Msg("GPUs shared by time-slicing: each advertised as replicas")
	}
}

// openState opens the state file; with -state-move-aside a damaged file is
// renamed and a fresh one started. An empty file (zero bytes) is started as
// a new one, with a warning: it holds nothing to keep, and a hostPath
// volume of type File or a crash right after the file was created leaves
// one, but so does a file whose content was lost.
func openState(cfg *options.Config, log zerolog.Logger) (*store.Store, error) {
	opts := store.Options{RecoveryHint: "start once with -state-move-aside to keep it as <file>.corrupt-<time> and start fresh"}
	st, err := store.Open(cfg.StatePath, opts)
	if err != nil && errors.Is(err, store.ErrCorrupt) && cfg.StateMoveAside {
		moved, merr := store.MoveAside(cfg.StatePath, time.Now())
		if merr != nil {
			return nil, fmt.Errorf("%w; moving it aside failed: %w", err, merr)
		}
		log.Warn().AnErr("damage", err).Str("moved_to", moved).Msg("damaged state file moved aside; starting with a fresh one")
		st, err = store.Open(cfg.StatePath, opts)
	}
	if err != nil {
		return nil, err
	}
	if st.FoundEmpty() {
		log.Warn().Str("state", st.Path()).
			Msg("the state file was empty (0 bytes): started as a new one, with no devices' health and no history; if it held them before, they are lost")
	}
	return st, nil
}

// logUnhealthy logs the configured GPUs that are unhealthy since before
// this start (stored after a reconcile: the devices not removed are the
// configured ones). A shared GPU's replicas, which have its health, are
// not logged one by one.
func logUnhealthy(log zerolog.Logger, stored []store.Device) {
	for _, d := range stored {
		if !d.Healthy && !d.Removed && !d.IsReplica() {
			log.Info().Str("device", d.ID).Str("reason", d.Reason).Time("since", d.Since).Msg("device unhealthy since before this start")
		}
	}
}

// logNUMA says what of the machine's NUMA nodes is not reported: the
// host's nodes could not be read, or it lacks some.
func logNUMA(log zerolog.Logger, cfg *options.Config, set *deviceSet) {
	numa := set.NUMA()
	if numa.HostErr != nil {
		log.Warn().Err(numa.HostErr).Str("sysfs", cfg.GPUs.SysfsRoot).Msg("cannot read the host's NUMA nodes; reporting none")
	}
	if len(numa.Dropped) > 0 {
		log.Info().Ints("host_numa_nodes", numa.Host).Ints("not_reported", numa.Dropped).
			Msg("the host lacks some topology NUMA nodes; those devices report no NUMA node (-numa-report=always to force)")
	}
}

// recorder stores every allocation before Allocate answers it, then asks
// for a prune (kick, if set).
type recorder struct {
	st   *store.Store
	kick func()
	// recorded, if set, runs after each stored record (the lifecycle
	// tracker's Notify: look for the holder now).
	recorded func()
	// opened, if set, makes what the answer to the stored record names
	// exist (its load socket) before Allocate answers, as far as it can:
	// the record is stored, so the Allocate succeeds whatever it does.
	opened func(store.Allocation)
}

var _ plugin.Recorder = recorder{}

func (r recorder) RecordAllocation(_ context.Context, ids []string, envs map[string]string) (plugin.Record, error) {
	a, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: envs})
	if err != nil {
		return plugin.Record{}, err
	}
	if r.opened != nil {
		r.opened(a)
	}
	if r.recorded != nil {
		r.recorded()
	}
	if r.kick != nil {
		r.kick()
	}
	return plugin.Record{Seq: a.Seq, IDs: a.DeviceIDs, Envs: a.Envs}, nil
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

// maxLoadSockets returns the cap of open load sockets with set in force.
func maxLoadSockets(set *deviceSet) int {
	return max(minLoadSockets, loadSocketsPerDevice*set.Len())
}

// causeLog logs an error at warn once per cause (loadsock.ErrorCause):
// what fails for every call logs once, not at every call. It is safe for
// concurrent use.
type causeLog struct {
	log  zerolog.Logger
	mu   sync.Mutex
	seen map[string]bool
}

func newCauseLog(log zerolog.Logger) *causeLog {
	return &causeLog{log: log, seen: map[string]bool{}}
}

// warn logs err with msg unless an error of its cause was logged before.
func (c *causeLog) warn(err error, msg string) {
	cause := loadsock.ErrorCause(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[cause] {
		return
	}
	c.seen[cause] = true
	c.log.Warn().Err(err).Str("cause", cause).Msg(msg)
}

// healthRecorder stores health changes.
type healthRecorder struct{ st *store.Store }

var _ plugin.HealthRecorder = healthRecorder{}

func (h healthRecorder) RecordHealth(id string, healthy bool, reason, cause string) error {
	_, _, err := h.st.SetHealth(id, healthy, reason, cause)
	return err
}

// logDamaged warns about damaged records the store keeps in quarantine (at
// most maxLogged, then their number) and the devices added again because
// their record was among them.
func logDamaged(log zerolog.Logger, st *store.Store, report store.ReconcileReport) error {
	const maxLogged = 20
	damaged, err := st.Damaged()
	if err != nil {
		return err
	}
	for i, d := range damaged {
		if i == maxLogged {
			log.Warn().Int("more", len(damaged)-maxLogged).Msg("more damaged state records")
			break
		}
		log.Warn().Str("bucket", d.Bucket).Str("key", d.Key).Str("reason", d.Reason).Time("quarantined", d.Quarantined).
			Str("state", st.Path()).Msg("damaged state record kept in quarantine; the rest of the file is in use")
	}
	if len(report.Recreated) > 0 {
		log.Warn().Strs("devices", report.Recreated).
			Msg("devices whose stored record was damaged were added again as new and healthy; their stored health is lost")
	}
	return nil
}

// logPrune logs what a prune did: errors, and the deletions that deserve
// attention, at warn; the routine ones at debug.
func logPrune(log zerolog.Logger, r store.PruneResult, err error) {
	switch {
	case err != nil:
		log.Error().Err(err).Msg("prune history")
	case r.ActiveAllocations > 0:
		log.Warn().Int("active_allocations", r.ActiveAllocations).Int("allocations", r.Allocations).Int("health_events", r.HealthEvents).
			Msg("pruned records of allocations still active: only those were left over -history-max-records or -history-max-bytes")
	case r.Allocations > 0 || r.HealthEvents > 0:
		log.Debug().Int("allocations", r.Allocations).Int("health_events", r.HealthEvents).Msg("pruned history")
	}
	if r.Quarantined > 0 {
		log.Warn().Int("records", r.Quarantined).Msg("damaged records found while pruning were moved into quarantine (kept in the state file)")
	}
}
