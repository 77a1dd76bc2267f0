package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/signal"

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

// runSimulate is the simulate command: it resolves the profiles as serve
// does, then runs the simulator, its admin API, its metrics and the
// profiles' reload until ctx ends.
func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	so, err := options.ParseSimulate(args, getenv)
	switch {
	case err != nil:
		return usageError{err}
	case so.Serve.Help:
		options.PrintSimulateUsage(stdout)
		return nil
	}
	o := so.Serve
	cfg, profiles, err := o.Load()
	if err != nil {
		return usageError{err}
	}
	log := newLogger(cfg, stderr)
	klog.SetLogger(dra.Logr(log))
	var requests simulate.RequestCounter
	api, err := kube.NewClient(kube.Options{Kubeconfig: o.Kubeconfig, Version: version, Logger: log,
		QPS: simulate.ClientQPS, Burst: simulate.ClientBurst, WrapTransport: requests.Wrap})
	if err != nil {
		return usagef("simulate needs API access (-kubeconfig, KUBECONFIG or a pod's service account): %w", err)
	}
	client, err := api.Clientset()
	if err != nil {
		return err
	}
	sim, err := simulate.New(simulate.Config{Client: client, Source: options.NewProfileSource(o, cfg, profiles), Selector: so.Selector,
		StateDir: so.StateDir, DriverName: cfg.DRA.DriverName, Workers: so.Workers, Logger: log})
	if err != nil {
		return err
	}
	adminSrv := admin.NewServer(admin.ServerConfig{Socket: so.AdminSocket, Handler: sim.Handler(), Logger: log})
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
	log.Info().Str("version", version).Str("selector", so.Selector.String()).Str("state", so.StateDir).Str("config", o.ConfigPath).
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
		g.Go(func() error { return metrics.Serve(ctx, metricsLis, sim.MetricsHandler(&requests)) })
	}
	return g.Wait()
}
