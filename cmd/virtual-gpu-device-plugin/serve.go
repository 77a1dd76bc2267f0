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
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
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
		profilePoll:   agent.DefaultProfilePoll,
		labelWait:     agent.DefaultLabelWait,
		environ:       os.Environ,
	}
}

// serve runs the device plugin until ctx ends: it wires the agent, which
// decides what is served (start: the configuration options.Load resolved;
// profiles: the -config directory's, nil when -config is not one; the
// Node's label selects among them, live), to the state file, the host
// files, the telemetry, the device-plugin target and the services around
// them, and runs them all until ctx ends or one fails.
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
	startDRA := start.KubeletAPI.OrDefault() == agent.KubeletAPIDRA
	api, apiErr, err := connectAPI(o, profiles, startDRA, env, log)
	if err != nil {
		return err
	}
	var client kubernetes.Interface // the DRA driver's
	if startDRA {                   // refused before the state file is touched
		if client, err = draClient(o, start.Profile, api, apiErr); err != nil {
			return err
		}
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
	ag := agent.New(agent.Options{Store: st, Source: options.NewProfileSource(o, start, profiles), Identity: identity,
		API: api, NodeName: o.NodeName, LabelNode: o.LabelNode, Logger: log})
	if api != nil {
		g.Go(func() error { return ag.WatchNode(ctx) })
		ag.WaitLabels(ctx, env.labelWait)
	}
	// The devices and the configuration event of this start, stored in one
	// transaction.
	set, stored, err := ag.Begin()
	if err != nil {
		return err
	}
	useDRA := set.Config.KubeletAPI.OrDefault() == agent.KubeletAPIDRA
	if useDRA {
		if client == nil { // a node's profile chose DRA
			if client, err = draClient(o, set.Config.Profile, api, apiErr); err != nil {
				return err
			}
		}
		klog.SetLogger(dra.Logr(log)) // client-go's and the DRA libraries' lines without a context logger
	}

	// Everything this process must have to itself is claimed before it
	// writes anything into a directory another instance may share (status
	// files, CDI spec, nvidia-smi, load sockets): a second instance that
	// cannot run must leave the running one's files alone. The state file
	// is locked (openState); then the admin socket, the listeners and the
	// device-plugin socket.
	adminSrv := admin.NewServer(admin.ServerConfig{Socket: start.AdminSocket, Source: admin.StoreSource{Store: st}, Logger: log,
		Reported: ag.Devices, Health: ag.HealthSetter(store.CauseAdmin)})
	if err := adminSrv.Listen(); err != nil { // before anything registers
		return err
	}
	defer adminSrv.Close()
	var metricsLis net.Listener
	if start.MetricsAddress != "" {
		if metricsLis, err = net.Listen("tcp", start.MetricsAddress); err != nil {
			return fmt.Errorf("-metrics-address: %w", err)
		}
		defer metricsLis.Close() // on an early return; metrics.Serve closes it too
		log.Info().Str("address", metricsLis.Addr().String()).Msg("serving /metrics, /healthz, /readyz")
	}
	var telemetryLis net.Listener
	if start.TelemetryAddress != "" {
		if telemetryLis, err = net.Listen("tcp", start.TelemetryAddress); err != nil {
			return fmt.Errorf("-telemetry-address: %w", err)
		}
		defer telemetryLis.Close() // on an early return; metrics.Serve closes it too
	}
	if useDRA {
		if err := start.DRA.Check(); err != nil {
			return err
		}
	} else if err := checkPluginSocket(start); err != nil {
		return err
	}

	files, err := view.NewFiles(start.View, st, env.executable, identity, log)
	if err != nil {
		return err
	}
	// The history is pruned off the RPC path: at start, every minute, and
	// after allocations (at most once a second).
	pruner, err := store.NewPruner(st, start.History, store.PrunerConfig{Report: func(r store.PruneResult, err error) { logPrune(log, r, err) }})
	if err != nil {
		return err
	}
	// The load sockets of -telemetry-writable, one per allocation whose
	// record says it has one (whatever the configuration in force): those
	// of the active allocations exist again before the plugin registers.
	// The device plugin's alone, as the tracker of its allocations.
	var telemetryRef atomic.Pointer[telemetry.Service] // set below, with -telemetry-address
	var (
		loads    *loadsock.Server
		tracker  *podresources.Tracker
		dpTarget *plugin.Target
		driver   *dra.Driver
		target   agent.Target
		reg      registration
	)
	if !useDRA {
		loads, err = loadsock.NewServer(loadsock.Config{Dir: start.View.LoadSocketDir, Logger: log, MaxSockets: ag.MaxLoadSockets,
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
		if err := loads.Sync(ag.LoadSockets); err != nil {
			log.Error().Err(err).Msg("load sockets of active allocations not all created again; retrying")
		}
		tracker, err = podresources.New(podresources.Config{
			Socket:       start.PodResourcesSocket,
			ResourceName: set.Resource(),
			Store:        st,
			Interval:     start.ReconcileInterval,
			AbandonAfter: start.AbandonAfter,
			Logger:       log,
		})
		if err != nil {
			return err
		}
		dpTarget, err = plugin.NewTarget(plugin.TargetConfig{Set: set, Stored: stored, Record: ag.RecordAllocation,
			Dir: start.DevicePluginPath, SocketName: start.SocketName, Logger: log})
		if err != nil {
			return err
		}
		defer dpTarget.Close() // the Server is ours, not the Runners'
		target, reg = dpTarget, dpTarget
	} else {
		driver, err = dra.NewDriver(dra.DriverConfig{Config: start.DRA, NodeName: o.NodeName, Client: client, Store: st,
			Set: set, Stored: stored, Logger: log,
			// A partitionable GPU's MIG devices exist for containers and
			// the telemetry while a claim holds them.
			Changed: func([]string) {
				cur := ag.Current()
				if cur == nil {
					return
				}
				files.Publish(cur.View)
				if t := telemetryRef.Load(); t != nil {
					if err := t.Follow(cur.GPUs, cur.Config.Telemetry); err != nil {
						log.Error().Err(err).Msg("GPU telemetry not brought up to date with the claims' MIG devices")
					}
				}
			}})
		if err != nil {
			return err
		}
		target, reg = driver, driver
	}
	faultPlan := faults.NewRunner(ag.HealthSetter(store.CauseFaultInjection), log)
	m := metrics.New(metrics.Config{
		Version:      version,
		Revision:     revision,
		Devices:      ag,
		Registration: reg,
		Allocations:  st,
		Score:        ag.Score,
		Logger:       log,
	})
	if useDRA {
		driver.SetObserver(m) // before anything serves it
	} else {
		dpTarget.SetObserver(m) // before anything serves it
	}
	nodeName := o.NodeName
	if nodeName == "" {
		nodeName, _ = os.Hostname()
	}
	var telem *telemetry.Service
	if start.TelemetryAddress != "" {
		tc := telemetry.ServiceConfig{Store: st, Active: ag.Active(), Devices: ag, Live: files, Hostname: nodeName,
			Collectors: start.TelemetryCollectors, Clock: env.clock, Logger: log}
		if useDRA {
			tc.Holders = dra.Holders{Store: driver} // its prepared claims, from memory
		} else {
			tc.Notify = tracker.Notify
		}
		telem = telemetry.NewService(tc)
		telemetryRef.Store(telem)
		log.Info().Str("address", telemetryLis.Addr().String()).Str("model", start.Telemetry.Model.String()).
			Bool("writable", start.Telemetry.Writable).Msg("serving GPU telemetry on /metrics (dcgm-exporter " + telemetry.Release + ")")
	}

	cfg := set.Config
	ev := log.Info().Str("version", version).Str("node", nodeName).Str("topology", cfg.GPUs.Machine.Name()).Int("devices", cfg.GPUs.Machine.Len()).
		Str("kubelet_api", string(cfg.KubeletAPI.OrDefault())).Str("profile", cfg.Profile).Str("why", ag.Why())
	if useDRA {
		ev = ev.Str("driver", start.DRA.DriverName).Str("socket", start.DRA.Socket())
	} else {
		ev = ev.Str("resource", set.Resource()).Str("dir", start.DevicePluginPath)
	}
	ev.Str("state", st.Path()).Str("policy", cfg.GPUs.AllocationPolicy).Msg("starting")
	// From here on a new label or profile is applied live.
	parts := agent.Parts{Files: files, Telemetry: telem, Faults: faultPlan, Kick: pruner.Kick, Targets: []agent.Target{target}, Observer: m}
	if !useDRA {
		parts.Tracker, parts.Loads = tracker, loads
	}
	if err := ag.Start(ctx, parts); err != nil {
		return err
	}

	if useDRA {
		g.Go(func() error { return driver.Run(ctx) })
	} else {
		g.Go(func() error { return dpTarget.Run(ctx) })
		g.Go(func() error { return tracker.Run(ctx) })
		g.Go(func() error { return loads.Run(ctx, loadSyncInterval, ag.LoadSockets) })
	}
	g.Go(func() error { return adminSrv.Run(ctx) })
	g.Go(func() error { return pruner.Run(ctx) })
	g.Go(func() error { return faultPlan.Run(ctx) })
	g.Go(func() error { return files.Run(ctx, view.RetryInterval) })
	if telem != nil {
		g.Go(func() error { return telem.Run(ctx) })
		g.Go(func() error { return metrics.Serve(ctx, telemetryLis, telem) })
	}
	if profiles != nil {
		w := &agent.DirWatch{Dir: profiles.Dir, Poll: env.profilePoll, Since: profiles.Fingerprint, Log: log}
		g.Go(func() error { return w.Run(ctx, func() { ag.Reload(ctx, agent.CauseDirChanged) }) })
	}
	g.Go(func() error {
		return onHangup(ctx, hup, func() {
			if profiles == nil {
				log.Info().Msg("SIGHUP: nothing to read again: the configuration is read at start; only a -config directory of profiles is followed live")
				return
			}
			ag.Reload(ctx, agent.CauseSIGHUP)
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

// loadSyncInterval is how often the load sockets follow the active
// allocations.
const loadSyncInterval = time.Second

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
		machineID = topology.ReadMachineID(machineIDPath)
	}
	identity, source, err := topology.NodeIdentity(nodeName, machineID)
	if err != nil {
		log.Warn().Err(err).Msg("devices get no GPU UUIDs")
		return ""
	}
	log.Debug().Str("source", source).Msg("GPU UUIDs derived from the node's identity")
	return identity
}

// connectAPI returns a client of the API server when the plugin needs one
// (-node-name set, and a profiles directory, -label-node or the DRA
// driver), nil when it does not or has no API access; then it says once
// what the plugin does without, and returns why as apiErr. Only an
// explicit -kubeconfig that cannot be used is an error.
func connectAPI(o *options.Options, profiles *options.Profiles, forDRA bool, env serveEnv, log zerolog.Logger) (api kube.API, apiErr, err error) {
	switch {
	case profiles == nil && !o.LabelNode && !forDRA:
		return nil, nil, nil
	case o.NodeName == "":
		if profiles != nil {
			log.Warn().Str("config", o.ConfigPath).
				Msg("no -node-name (nor NODE_NAME): the node's profile label is not read; serving the -config-default profile")
		}
		return nil, errors.New("no -node-name (nor NODE_NAME)"), nil
	}
	api, err = env.newAPI(kube.Options{Kubeconfig: o.Kubeconfig, Version: version, Logger: log})
	switch {
	case err == nil:
		return api, nil, nil
	case o.Kubeconfig != "":
		return nil, nil, usageError{fmt.Errorf("-kubeconfig: %w", err)}
	}
	if profiles != nil || o.LabelNode {
		log.Warn().Err(err).Str("node", o.NodeName).
			Msg("no API access: the node's profile label is not read and no GPU labels are written; serving the -config-default profile")
	}
	return nil, err, nil
}

// registration is what the readiness check and the metrics read of a
// kubelet API's registration: the device plugin's Registrar, the DRA
// driver.
type registration interface {
	Registered() bool
	Registrations() uint64
}

// draClient returns the typed client the DRA driver needs, or the error
// that says why it cannot run: it needs -node-name (its pool and slices are
// the node's) and API access (it publishes ResourceSlices and reads
// ResourceClaims). profile is the profile in force, apiErr connectAPI's
// reason for having no API access.
func draClient(o *options.Options, profile string, api kube.API, apiErr error) (kubernetes.Interface, error) {
	what := "-kubelet-api=dra"
	if p := profile; p != "" {
		what = fmt.Sprintf("-kubelet-api=dra (profile %q)", p)
	}
	if o.NodeName == "" {
		return nil, usagef("%s needs -node-name (or NODE_NAME, from the pod's spec.nodeName): the driver's pool and ResourceSlices are the node's", what)
	}
	if api == nil {
		return nil, usagef("%s needs API access (in a pod its service account; else -kubeconfig or KUBECONFIG): the driver publishes ResourceSlices and reads ResourceClaims: %w", what, apiErr)
	}
	cs, ok := api.(interface {
		Clientset() (kubernetes.Interface, error)
	})
	if !ok {
		return nil, fmt.Errorf("%s: the API client (%T) gives no typed client", what, api)
	}
	return cs.Clientset()
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

// logPrune logs what a prune did: errors, and the deletions that deserve
// attention, at warn; the routine ones at debug.
func logPrune(log zerolog.Logger, r store.PruneResult, err error) {
	switch {
	case err != nil:
		log.Error().Err(err).Msg("prune history")
	case r.ActiveAllocations > 0 || r.ActiveClaims > 0:
		log.Warn().Int("active_allocations", r.ActiveAllocations).Int("active_claims", r.ActiveClaims).Int("allocations", r.Allocations).
			Int("claims", r.Claims).Int("health_events", r.HealthEvents).
			Msg("pruned records of allocations or claims still active: only those were left over -history-max-records or -history-max-bytes")
	case r.Allocations > 0 || r.Claims > 0 || r.HealthEvents > 0:
		log.Debug().Int("allocations", r.Allocations).Int("claims", r.Claims).Int("health_events", r.HealthEvents).Msg("pruned history")
	}
	if r.Quarantined > 0 {
		log.Warn().Int("records", r.Quarantined).Msg("damaged records found while pruning were moved into quarantine (kept in the state file)")
	}
}
