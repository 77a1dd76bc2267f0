package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

const healthSynopsis = "health list [-o table|wide|json|yaml] [--no-headers] | health set <device> healthy|unhealthy [--reason TEXT]"

// health lists device health or changes it in the running plugin.
func health(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	var (
		f      options.Inspect
		reason string
	)
	fset := flag.NewFlagSet("health", flag.ContinueOnError)
	f.Register(fset)
	fset.StringVar(&reason, "reason", "", "why the device is unhealthy (health set … unhealthy)")
	pos, err := options.ParseSubcommand(fset, args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		options.PrintSubcommandUsage(fset, stdout, healthSynopsis, "list shows every device's health, NUMA node and holder, from the running plugin or the state file.\n"+
			"set changes a device's health in the running plugin: stored, and sent to the kubelet at once.")
		return nil
	}
	if err != nil {
		return usageError{err}
	}
	if err := f.Validate(fset, getenv); err != nil {
		return usageError{err}
	}
	if len(pos) == 0 {
		return usagef("health: want %s", healthSynopsis)
	}
	switch pos[0] {
	case "list":
		if len(pos) != 1 {
			return usagef("health list: unexpected argument %q", topology.Clip(pos[1]))
		}
		if reason != "" {
			return usagef("health list: --reason is only for health set")
		}
		snap, err := readSnapshot(ctx, f, admin.Query{DevicesOnly: true})
		if err != nil {
			return err
		}
		return admin.Print(stdout, snap, f.PrintOptions())
	case "set":
		if len(pos) != 3 {
			return usagef("health set: want <device> healthy|unhealthy, got %d arguments", len(pos)-1)
		}
		id, state := pos[1], pos[2]
		if id == "" {
			return usagef("health set: empty device id: want a device id (health list shows them)")
		}
		var healthy bool
		switch state {
		case "healthy", "Healthy":
			healthy = true
		case "unhealthy", "Unhealthy":
		default:
			return usagef("health set %s: state %q: want healthy or unhealthy", topology.Clip(id), topology.Clip(state))
		}
		if healthy && reason != "" {
			return usagef("health set %s healthy: --reason is only for unhealthy", topology.Clip(id))
		}
		if !healthy && reason == "" {
			reason = "set unhealthy by an operator"
		}
		snap, err := f.Client(dumpTimeout).SetHealth(ctx, id, healthy, reason)
		switch {
		case errors.Is(err, admin.ErrNoPlugin):
			return fmt.Errorf("health set needs the running plugin: %w", err)
		case errors.Is(err, admin.ErrPermission):
			return fmt.Errorf("health set: %w; run as root or as the socket's owner", err)
		case errors.Is(err, admin.ErrRequest):
			return fmt.Errorf("health set: %w", err)
		case err != nil: // connected, then no answer: the change may be made
			return fmt.Errorf("health set: %w (the plugin may have made the change: see health list)", err)
		}
		return admin.Print(stdout, snap, f.PrintOptions())
	default:
		return usagef("health: unknown command %q: want list or set", topology.Clip(pos[0]))
	}
}
