package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/lifecycle"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
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

// serve runs the device plugin until ctx ends.
func serve(ctx context.Context, cfg *options.Config, logw io.Writer) error {
	log := newLogger(cfg, logw)
	logConfig(log, cfg)
	machine, plan := cfg.Machine, cfg.Faults
	ids := make([]string, machine.Len())
	for i := range ids {
		ids[i] = machine.ID(i)
	}

	st, err := openState(cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	specs := make([]store.DeviceSpec, machine.Len())
	for i := range specs {
		specs[i] = store.DeviceSpec{ID: machine.ID(i), Index: i, NUMA: machine.NUMA(i)}
	}
	report, err := st.Reconcile(specs)
	if err != nil {
		return err
	}
	if !report.Empty() {
		log.Info().Strs("added", report.Added).Strs("removed", report.Removed).Strs("restored", report.Restored).
			Int("changed", len(report.Changed)).Str("state", st.Path()).Msg("reconciled stored devices with the configured machine")
	}
	if err := logDamaged(log, st, report); err != nil {
		return err
	}
	devices, err := pluginDevices(cfg, machine, st, log)
	if err != nil {
		return err
	}

	policy := cfg.Policy
	// The history is pruned off the RPC path: at start, every minute, and
	// after allocations (at most once a second).
	pruner, err := store.NewPruner(st, store.PruneOptions{MaxRecords: cfg.HistoryMaxRecords, MaxBytes: cfg.HistoryMaxBytes, MaxAge: cfg.HistoryMaxAge},
		store.PrunerConfig{Report: func(r store.PruneResult, err error) { logPrune(log, r, err) }})
	if err != nil {
		return err
	}
	// The tracker first: the recorder tells it about each allocation.
	tracker, err := lifecycle.New(lifecycle.Config{
		Socket:       cfg.PodResourcesSocket,
		ResourceName: cfg.ResourceName,
		Store:        st,
		Interval:     cfg.ReconcileInterval,
		AbandonAfter: cfg.AbandonAfter,
		Logger:       log,
	})
	if err != nil {
		return err
	}
	srv, err := plugin.NewServer(plugin.ServerConfig{
		Catalog: plugin.Catalog{
			Devices: devices,
			Prefer: plugin.PreferByIndex(func(available, mustInclude []int, size int) ([]int, error) {
				return policy(machine, available, mustInclude, size)
			}),
			Env: plugin.EnvByIndex(machine.ContainerEnv),
		},
		Recorder: recorder{st: st, kick: pruner.Kick, recorded: tracker.Notify},
		Health:   healthRecorder{st},
		Logger:   log,
	})
	if err != nil {
		return err
	}
	defer srv.Close() // the Server is ours, not the Runner's
	runner, err := plugin.NewRunner(plugin.RunnerConfig{
		Dir:          cfg.DevicePluginPath,
		SocketName:   cfg.SocketName,
		ResourceName: cfg.ResourceName,
		Server:       srv,
		Logger:       log,
	})
	if err != nil {
		return err
	}
	m := metrics.New(metrics.Config{
		Version:      version,
		Devices:      srv,
		Registration: runner,
		Allocations:  st,
		Score:        func(set []int) int { return allocator.Score(machine, set) },
		Logger:       log,
	})
	srv.SetObserver(m) // before anything serves srv
	adminSrv := admin.NewServer(admin.ServerConfig{Socket: cfg.AdminSocket, Source: stateSource{st}, Reported: srv.Devices, Logger: log,
		Health: func(id string, healthy bool, reason string) error {
			_, err := srv.SetHealth(id, healthy, reason, store.CauseAdmin)
			return err
		}})
	if err := adminSrv.Listen(); err != nil { // before anything registers
		return err
	}
	defer adminSrv.Close()

	host, _ := os.Hostname()
	log.Info().Str("version", version).Str("node", host).Str("topology", machine.Name()).Int("devices", machine.Len()).
		Str("resource", cfg.ResourceName).Str("dir", cfg.DevicePluginPath).Str("state", st.Path()).
		Str("policy", cfg.AllocationPolicy).Msg("starting")

	var metricsLis net.Listener
	if cfg.MetricsAddress != "" {
		if metricsLis, err = net.Listen("tcp", cfg.MetricsAddress); err != nil {
			return fmt.Errorf("-metrics-address: %w", err)
		}
		log.Info().Str("address", metricsLis.Addr().String()).Msg("serving /metrics, /healthz, /readyz")
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return runner.Run(ctx) })
	g.Go(func() error { return adminSrv.Run(ctx) })
	g.Go(func() error { return tracker.Run(ctx) })
	g.Go(func() error { return pruner.Run(ctx) })
	if metricsLis != nil {
		live := func() error { _, err := st.Devices(); return err }
		ready := func() error { // registered, and the state file takes writes (Allocate needs them)
			if !runner.Registered() {
				return errors.New("not registered with the kubelet")
			}
			if err := st.Writable(); err != nil {
				return err
			}
			return live()
		}
		g.Go(func() error { return metrics.Serve(ctx, metricsLis, m.Handler(live, ready)) })
	}
	if len(plan) > 0 {
		log.Info().Str("plan", cfg.FaultPlan).Msg("fault injection on")
		g.Go(func() error {
			faults.Run(ctx, plan, ids, func(id string, healthy bool, reason string) error {
				_, err := srv.SetHealth(id, healthy, reason, store.CauseFaultInjection)
				return err
			}, faults.Options{OnError: func(err error) { log.Error().Err(err).Msg("fault injection") }})
			return nil
		})
	}
	return g.Wait()
}

// logConfig logs, once, where the configuration came from and what in it
// has no effect (yet).
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
	if cfg.Sharing.Enabled() {
		log.Warn().Int("replicas", cfg.Sharing.Replicas).Str("resource", cfg.Sharing.ResourceName).
			Msg("GPU sharing is configured but not served yet: advertising whole GPUs")
	}
	if len(cfg.DeviceListStrategies) != 1 || cfg.DeviceListStrategies[0] != options.DeviceListEnvVar {
		strategies := make([]string, len(cfg.DeviceListStrategies))
		for i, s := range cfg.DeviceListStrategies {
			strategies[i] = string(s)
		}
		log.Warn().Strs("strategies", strategies).Msg("only the envvar device list strategy is served so far")
	}
}

// openState opens the state file; with -state-move-aside a damaged file is
// renamed and a fresh one started.
func openState(cfg *options.Config, log zerolog.Logger) (*store.Store, error) {
	opts := store.Options{RecoveryHint: "start once with -state-move-aside to keep it as <file>.corrupt-<time> and start fresh"}
	st, err := store.Open(cfg.StatePath, opts)
	if err == nil || !errors.Is(err, store.ErrCorrupt) || !cfg.StateMoveAside {
		return st, err
	}
	moved, merr := store.MoveAside(cfg.StatePath, time.Now())
	if merr != nil {
		return nil, fmt.Errorf("%w; moving it aside failed: %w", err, merr)
	}
	log.Warn().AnErr("damage", err).Str("moved_to", moved).Msg("damaged state file moved aside; starting with a fresh one")
	return store.Open(cfg.StatePath, opts)
}

// pluginDevices builds the served devices from the stored ones (health
// survives restarts) and the NUMA nodes to report.
func pluginDevices(cfg *options.Config, machine *topology.Machine, st *store.Store, log zerolog.Logger) ([]plugin.Device, error) {
	stored, err := st.Devices()
	if err != nil {
		return nil, err
	}
	numa := machine.ReportNUMA(cfg.NUMAReport, os.DirFS(cfg.SysfsRoot))
	if numa.HostErr != nil {
		log.Warn().Err(numa.HostErr).Str("sysfs", cfg.SysfsRoot).Msg("cannot read the host's NUMA nodes; reporting none")
	}
	var devices []plugin.Device
	for _, d := range stored {
		if d.Removed {
			continue
		}
		devices = append(devices, plugin.Device{ID: d.ID, Index: d.Index, NUMA: numa.Node(d.Index), Healthy: d.Healthy, Reason: d.Reason})
		if !d.Healthy {
			log.Info().Str("device", d.ID).Str("reason", d.Reason).Time("since", d.Since).Msg("device unhealthy since before this start")
		}
	}
	if len(numa.Dropped) > 0 {
		log.Info().Ints("host_numa_nodes", numa.Host).Ints("not_reported", numa.Dropped).
			Msg("the host lacks some topology NUMA nodes; those devices report no NUMA node (-numa-report=always to force)")
	}
	return devices, nil
}

// recorder stores every allocation before Allocate answers it, then asks
// for a prune (kick, if set).
type recorder struct {
	st   *store.Store
	kick func()
	// recorded, if set, runs after each stored record (the lifecycle
	// tracker's Notify: look for the holder now).
	recorded func()
}

var _ plugin.Recorder = recorder{}

func (r recorder) RecordAllocation(_ context.Context, ids []string, envs map[string]string) (plugin.Record, error) {
	a, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: envs})
	if err != nil {
		return plugin.Record{}, err
	}
	if r.recorded != nil {
		r.recorded()
	}
	if r.kick != nil {
		r.kick()
	}
	return plugin.Record{Seq: a.Seq, IDs: a.DeviceIDs, Envs: a.Envs}, nil
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
