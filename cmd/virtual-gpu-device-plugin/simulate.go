package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate"
)

const simulateSynopsis = "simulate [-node-selector SEL] [-state DIR] [-admin-socket PATH] [serve's flags: -kubeconfig, -config, -config-default, -log-*, -metrics-address, …]"

// simulateClientQPS and simulateClientBurst bound the simulator's API
// requests: a thousand nodes' first publish is a thousand writes.
const (
	simulateClientQPS   = 200
	simulateClientBurst = 400
)

// simulateFlags are the flags simulate has and serve has not (-state and
// -admin-socket mean a directory and its socket here). Every other flag is
// serve's, read by the options package: the profiles, the default
// profile, the logging, the metrics address, and each setting a node
// without a profile gets.
type simulateFlags struct {
	selector    string
	stateDir    string
	adminSocket string
	workers     int
}

// simulateOwn are simulateFlags' names, with their environment twins.
var simulateOwn = map[string]string{
	"node-selector": "VGPU_NODE_SELECTOR",
	"state":         "VGPU_SIMULATE_STATE",
	"admin-socket":  "VGPU_SIMULATE_ADMIN_SOCKET",
	"workers":       "VGPU_SIMULATE_WORKERS",
}

func (f *simulateFlags) register(fset *flag.FlagSet) {
	fset.StringVar(&f.selector, "node-selector", simulate.DefaultSelector, "the nodes to simulate: a `selector` in label-selector syntax, matched against each node's labels and annotations")
	fset.StringVar(&f.stateDir, "state", simulate.DefaultStateDir, "state `directory`: one state file per simulated node, in nodes/<node>.db")
	fset.StringVar(&f.adminSocket, "admin-socket", "", "admin API socket `path`, used by dump --node/--nodes and health --node (default: admin.sock in -state)")
	fset.IntVar(&f.workers, "workers", simulate.DefaultWorkers, "how many nodes are brought up to date at once")
}

// splitSimulateArgs takes simulate's own flags out of args and returns
// the rest, for serve's parser. A flag's value may follow it ("-state
// DIR") or be joined ("-state=DIR").
func splitSimulateArgs(args []string) (own, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return own, append(rest, args[i:]...), nil
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || simulateOwn[name] == "" {
			rest = append(rest, a)
			continue
		}
		own = append(own, a)
		if !hasValue {
			if i+1 == len(args) {
				return nil, nil, usagef("simulate: flag needs an argument: %s", a)
			}
			i++
			own = append(own, args[i])
		}
	}
	return own, rest, nil
}

// runSimulate is the simulate command: it resolves the profiles as serve
// does, then runs the simulator, its admin API and its metrics until ctx
// ends.
func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	ownArgs, rest, err := splitSimulateArgs(args)
	if err != nil {
		return err
	}
	var f simulateFlags
	fset := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	f.register(fset)
	if err := fset.Parse(ownArgs); err != nil {
		return usagef("simulate: %w", err)
	}
	set := map[string]bool{}
	fset.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for name, env := range simulateOwn {
		if v := getenv(env); v != "" && !set[name] {
			if err := fset.Set(name, v); err != nil {
				return usagef("invalid %s=%q: %w", env, v, err)
			}
		}
	}
	// serve's -state and -admin-socket are a file and its socket; the
	// simulator's are its own: serve's variables for them are not read.
	serveEnv := func(k string) string {
		if k == options.EnvName("state") || k == options.EnvName("admin-socket") {
			return ""
		}
		return getenv(k)
	}
	o, err := options.Parse(rest, serveEnv)
	switch {
	case err != nil:
		return usageError{fmt.Errorf("simulate: %w", err)}
	case o.Help:
		printSimulateHelp(stdout, fset)
		return nil
	}
	if !filepath.IsAbs(f.stateDir) {
		return usagef("invalid -state=%q: must be an absolute directory path", f.stateDir)
	}
	f.stateDir = filepath.Clean(f.stateDir)
	if f.adminSocket == "" {
		f.adminSocket = filepath.Join(f.stateDir, options.AdminSocketName)
	} else if !filepath.IsAbs(f.adminSocket) {
		return usagef("invalid -admin-socket=%q: must be an absolute path", f.adminSocket)
	}
	if f.workers < 1 {
		return usagef("invalid -workers=%d: must be at least 1", f.workers)
	}
	sel, err := simulate.ParseSelector(f.selector)
	if err != nil {
		return usagef("invalid -node-selector: %w", err)
	}
	cfg, profiles, err := o.Load()
	if err != nil {
		return usageError{err}
	}
	log := newLogger(cfg, stderr)
	klog.SetLogger(dra.Logr(log))
	var requests atomic.Uint64
	api, err := kube.NewClient(kube.Options{Kubeconfig: o.Kubeconfig, Version: version, Logger: log,
		QPS: simulateClientQPS, Burst: simulateClientBurst,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &requests} }})
	if err != nil {
		return usagef("simulate needs API access (-kubeconfig, KUBECONFIG or a pod's service account): %w", err)
	}
	client, err := api.Clientset()
	if err != nil {
		return err
	}
	sim, err := simulate.New(simulate.Config{Client: client, Source: options.NewProfileSource(o, cfg, profiles), Selector: sel,
		StateDir: f.stateDir, DriverName: cfg.DRA.DriverName, Workers: f.workers, Logger: log})
	if err != nil {
		return err
	}
	adminSrv := admin.NewServer(admin.ServerConfig{Socket: f.adminSocket, Handler: sim.Handler(), Logger: log})
	if err := adminSrv.Listen(); err != nil {
		return err
	}
	defer adminSrv.Close()
	var metricsLis net.Listener
	if cfg.MetricsAddress != "" {
		if metricsLis, err = net.Listen("tcp", cfg.MetricsAddress); err != nil {
			return fmt.Errorf("-metrics-address: %w", err)
		}
		defer metricsLis.Close()
		log.Info().Str("address", metricsLis.Addr().String()).Msg("serving /metrics, /healthz, /readyz")
	}
	log.Info().Str("version", version).Str("selector", sel.String()).Str("state", f.stateDir).Str("config", o.ConfigPath).
		Str("default_profile", cfg.Profile).Msg("starting the simulator")
	hup := notifyHangup()
	defer signal.Stop(hup)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return sim.Run(ctx) })
	if profiles != nil {
		w := &agent.DirWatch{Dir: profiles.Dir, Since: profiles.Fingerprint, Log: log}
		g.Go(func() error { return w.Run(ctx, func() { sim.Reload(ctx, agent.CauseDirChanged) }) })
	}
	g.Go(func() error {
		return onHangup(ctx, hup, func() {
			if profiles == nil {
				log.Info().Msg("SIGHUP: nothing to read again: only a -config directory of profiles is followed live")
				return
			}
			sim.Reload(ctx, agent.CauseSIGHUP)
		})
	})
	g.Go(func() error { return adminSrv.Run(ctx) })
	if metricsLis != nil {
		g.Go(func() error { return metrics.Serve(ctx, metricsLis, simulateMetrics(sim, &requests)) })
	}
	return g.Wait()
}

// countingTransport counts the API requests sent.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Uint64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.rt.RoundTrip(r)
}

// simulateMetrics is the simulator's /metrics (the simulated nodes, the
// status patches, the API requests, the Go runtime and the process),
// /healthz and /readyz (ready once the first lists are in).
func simulateMetrics(sim *simulate.Simulator, requests *atomic.Uint64) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "virtual_gpu_simulated_nodes", Help: "Nodes simulated now."},
			func() float64 { return float64(sim.Stats().Nodes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "virtual_gpu_simulate_node_starts_total", Help: "Node simulations started, restarts included."},
			func() float64 { return float64(sim.Stats().Started) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "virtual_gpu_simulate_status_patches_total", Help: "Node status patches sent."},
			func() float64 { return float64(sim.Stats().StatusPatches) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "virtual_gpu_simulate_slice_writes_total", Help: "ResourceSlice creates, updates and deletes sent."},
			func() float64 { return float64(sim.Stats().SliceWrites) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "virtual_gpu_simulate_api_requests_total", Help: "Requests sent to the API server, watches included."},
			func() float64 { return float64(requests.Load()) }),
	)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !sim.Stats().Synced {
			http.Error(w, "not ready: the first lists of Nodes, Pods and ResourceClaims are not in yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// printSimulateHelp prints simulate's usage: its own flags, then serve's.
func printSimulateHelp(w io.Writer, fset *flag.FlagSet) {
	fmt.Fprintln(w, "Usage: virtual-gpu-device-plugin "+simulateSynopsis)
	fmt.Fprintln(w, "\nGives kubelet-less nodes (KWOK's) the GPUs of their profile: the extended resources and GPU labels, or the")
	fmt.Fprintln(w, "ResourceSlices of DRA profiles, and records what the pods and claims bound there took, one state file per node.")
	fmt.Fprintln(w, "\nFlags of simulate (environment twins VGPU_NODE_SELECTOR, VGPU_SIMULATE_STATE, VGPU_SIMULATE_ADMIN_SOCKET, VGPU_SIMULATE_WORKERS):")
	fset.SetOutput(w)
	fset.PrintDefaults()
	fmt.Fprintln(w, "\nEvery other flag is serve's (below): -config and -config-default choose each node's profile by its label, as the")
	fmt.Fprintln(w, "DaemonSet's do; the others are the settings of a node without a profile.")
	fmt.Fprintln(w)
	options.PrintUsage(w)
}
