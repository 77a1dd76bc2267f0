package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

const healthSynopsis = "health list [-o table|json] | health set <device> healthy|unhealthy [--reason TEXT]"

// health lists device health or changes it in the running plugin.
func health(args []string, stdout io.Writer, getenv func(string) string) error {
	var (
		f      inspectFlags
		reason string
	)
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	f.register(fs)
	fs.StringVar(&reason, "reason", "", "why the device is unhealthy (health set)")
	pos, err := parseSubcommand(fs, args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(fs, stdout, healthSynopsis)
		return nil
	}
	if err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("health: want %s", healthSynopsis)
	}
	switch pos[0] {
	case "list":
		if len(pos) != 1 {
			return usagef("health list: unexpected argument %q", pos[1])
		}
		src, _, closeSrc, err := openSource(f)
		if err != nil {
			return err
		}
		defer closeSrc()
		devs, err := readDevices(src)
		if err != nil {
			return err
		}
		return printDevices(stdout, f.output, devs)
	case "set":
		if len(pos) != 3 {
			return usagef("health set: want <device> healthy|unhealthy, got %d arguments", len(pos)-1)
		}
		id, state := pos[1], pos[2]
		var healthy bool
		switch state {
		case "healthy", "Healthy":
			healthy = true
		case "unhealthy", "Unhealthy":
		default:
			return usagef("health set %s: state %q: want healthy or unhealthy", id, state)
		}
		if healthy && reason != "" {
			return usagef("health set %s healthy: --reason is only for unhealthy", id)
		}
		if !healthy && reason == "" {
			reason = "set unhealthy by an operator"
		}
		client := admin.NewClient(f.adminSocket, dumpTimeout)
		d, err := client.SetHealth(id, healthy, reason)
		if errors.Is(err, admin.ErrNoPlugin) {
			return fmt.Errorf("health set needs the running plugin: %w", err)
		}
		if err != nil {
			return err
		}
		active, err := client.Allocations(store.AllocationFilter{Active: true, DeviceID: id})
		if err != nil {
			return err
		}
		return printDevices(stdout, f.output, withHolders([]store.Device{d}, active))
	default:
		return usagef("health: unknown command %q: want list or set", pos[0])
	}
}

// printDevices prints devices as a table or as the JSON of dump's devices.
func printDevices(w io.Writer, output string, devs []dumpDevice) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(devs)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	writeDevices(tw, devs)
	return tw.Flush()
}
