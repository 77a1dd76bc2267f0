package cluster

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"
)

// SimulatorOptions configure StartSimulator.
type SimulatorOptions struct {
	// Binary is the plugin executable (its simulate subcommand runs). Required.
	Binary string
	// StateDir is the simulator's state directory (-state). Default: a new directory under the
	// cluster's.
	StateDir string
	// Args are more flags of simulate (-config, -config-default, -node-selector, serve's settings).
	Args []string
	// Env is added to its environment (GOMEMLIMIT=…, say).
	Env []string
}

// Simulator is a running `virtual-gpu-device-plugin simulate`: a Plugin without a node, whose
// StatePath is the state directory and whose CLI (dump --node, health --node) reaches it through
// its admin socket.
type Simulator struct {
	*Plugin
	// MetricsURL is the base URL of its /metrics, /healthz and /readyz.
	MetricsURL string
}

// StartSimulator starts the simulate subcommand against the cluster's API server (the admin
// kubeconfig), with -state, -metrics-address on a free local port and opts.Args, and waits (one
// minute at most) until it answers /readyz: its first lists of Nodes, Pods and ResourceClaims are
// in. The cluster stops it on Stop.
func (c *Cluster) StartSimulator(ctx context.Context, opts SimulatorOptions) (*Simulator, error) {
	c.mu.Lock()
	c.pluginStarts++
	num := c.pluginStarts
	c.mu.Unlock()
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(c.Dir, fmt.Sprintf("simulate-%d", num))
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	argv := append([]string{opts.Binary, "simulate", "-kubeconfig=" + c.Kubeconfig, "-state=" + opts.StateDir,
		"-metrics-address=" + addr, "-log-level=debug"}, opts.Args...)
	if err := mkdirFor(filepath.Join(opts.StateDir, "x")); err != nil {
		return nil, err
	}
	p, err := c.reg.start(processSpec{name: "simulate", argv: argv, dir: opts.StateDir, env: append(pluginEnv(), opts.Env...),
		logPath: c.logPath(fmt.Sprintf("simulate.%d", num))})
	if err != nil {
		return nil, err
	}
	pl := &Plugin{Process: p, Binary: opts.Binary, StatePath: opts.StateDir, AdminSocket: filepath.Join(opts.StateDir, "admin.sock")}
	c.mu.Lock()
	c.plugins = append(c.plugins, pl)
	c.mu.Unlock()
	s := &Simulator{Plugin: pl, MetricsURL: "http://" + addr}
	err = poll(ctx, time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("simulate exited: %w (log %s)", p.ExitErr(), p.LogPath)
		}
		resp, err := http.Get(s.MetricsURL + "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	if err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, fmt.Errorf("simulate not ready: %w", err)
	}
	return s, nil
}

// RestartAPIServer kills kube-apiserver (SIGKILL: a crash; its graceful shutdown outwaits its long
// watches) and starts it again as it was started,
// then waits (one minute at most) until it answers /readyz. Clients, their watches included, see the
// server go away and come back with the same address, credentials and data.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	old, spec := c.apiserver, c.apiserverSpec
	c.mu.Unlock()
	if old == nil {
		return fmt.Errorf("restart kube-apiserver: it was never started")
	}
	old.Kill()
	p, err := c.reg.start(spec)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.apiserver = p
	c.mu.Unlock()
	return poll(ctx, time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("kube-apiserver exited: %w", p.ExitErr())
		}
		err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}
