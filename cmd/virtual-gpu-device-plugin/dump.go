package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// dumpTimeout bounds every wait of dump and health: the admin call, the
// read-only lock, but for a snapshot's reading (snapshotTimeout).
const dumpTimeout = 2 * time.Second

// snapshotTimeout bounds dump's admin call: the plugin reads and sends
// the whole history, which takes seconds at the -history-max-bytes
// default of 64 MiB, and reads one snapshot at a time.
const snapshotTimeout = 30 * time.Second

// readSnapshot asks the running plugin for the snapshot q selects or, when
// no plugin answers, reads it from the state file opened read-only.
func readSnapshot(ctx context.Context, f options.Inspect, q admin.Query) (admin.Snapshot, error) {
	timeout := dumpTimeout
	if !q.DevicesOnly {
		timeout = snapshotTimeout
	}
	snap, err := f.Client(timeout).Snapshot(ctx, q)
	switch {
	case err == nil:
		return snap, nil
	case errors.Is(err, admin.ErrPermission):
		return snap, fmt.Errorf("%w; run as root or as the socket's owner", err)
	case errors.Is(err, admin.ErrNotSimulated):
		// Not simulated now: its state file, closed, holds its history.
		if _, serr := os.Stat(f.StateFile()); serr != nil {
			return snap, err
		}
	case !errors.Is(err, admin.ErrNoPlugin):
		return snap, err
	}
	path := f.StateFile()
	st, err := store.Open(path, store.Options{ReadOnly: true, Timeout: dumpTimeout})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return snap, fmt.Errorf("no plugin answers on %s and there is no state file at %s", f.AdminSocket, path)
	case errors.Is(err, store.ErrLocked):
		return snap, fmt.Errorf("no plugin answers on %s, and %s is held by another process (a plugin with another -admin-socket?): %w", f.AdminSocket, path, err)
	case err != nil:
		return snap, err
	}
	defer st.Close()
	snap, err = admin.Read(admin.StoreSource{Store: st}, q, nil)
	snap.Source = admin.SourceInfo{Type: admin.SourceFile, Path: path}
	return snap, err
}

const dumpSynopsis = "dump [-o table|wide|json|yaml] [--no-headers] [--device ID] [--since TIME|DURATION] [--limit N] [--active]"

// dump prints the devices and the history.
func dump(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	var (
		f      options.Inspect
		device string
		since  string
		limit  int
		active bool
	)
	fset := flag.NewFlagSet("dump", flag.ContinueOnError)
	f.Register(fset)
	fset.StringVar(&device, "device", "", "only history of this device `id`")
	fset.StringVar(&since, "since", "", "only history since this RFC 3339 `time` or this long ago (e.g. 1h)")
	fset.IntVar(&limit, "limit", 0, "at most this many history records of each kind, newest first; 0 means all")
	fset.BoolVar(&active, "active", false, "only allocations and claims that still hold their devices")
	fset.BoolVar(&f.Nodes, "nodes", false, "the simulator's summary of its nodes (simulate): allocated and free devices per node and profile")
	pos, err := options.ParseSubcommand(fset, args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		options.PrintSubcommandUsage(fset, stdout, dumpSynopsis, "Shows the devices (health, NUMA node, holder), the history of allocations and DRA claims, the health events and the\n"+
			"configuration changes, newest first, from the running plugin or, when none runs, from the state file (read-only).")
		return nil
	}
	if err != nil {
		return usageError{err}
	}
	if len(pos) > 0 {
		return usagef("dump: unexpected argument %q", pos[0])
	}
	if err := f.Validate(fset, getenv); err != nil {
		return usageError{err}
	}
	if f.Nodes {
		if f.Node != "" || device != "" || since != "" || limit != 0 || active {
			return usagef("dump --nodes: takes none of --node, --device, --since, --limit, --active")
		}
		return dumpNodes(ctx, f, stdout)
	}
	if limit < 0 {
		return usagef("invalid --limit=%d: must be 0 (all) or positive", limit)
	}
	if device == "" && options.Given(fset, "device") {
		return usagef("invalid --device: empty: want a device id (leave --device out for every device)")
	}
	sinceT, err := parseSince(since, time.Now())
	if err != nil {
		return err
	}
	snap, err := readSnapshot(ctx, f, admin.Query{DeviceID: device, Since: sinceT, Limit: limit, Active: active})
	if err != nil {
		return err
	}
	return admin.Print(stdout, snap, f.PrintOptions())
}

// dumpNodes prints the running simulator's summary of its nodes.
func dumpNodes(ctx context.Context, f options.Inspect, stdout io.Writer) error {
	nodes, err := admin.NewClient(f.AdminSocket, snapshotTimeout).Nodes(ctx)
	switch {
	case errors.Is(err, admin.ErrNoPlugin):
		return fmt.Errorf("dump --nodes needs the running simulator: %w", err)
	case errors.Is(err, admin.ErrPermission):
		return fmt.Errorf("dump --nodes: %w; run as root or as the socket's owner", err)
	case err != nil:
		return fmt.Errorf("dump --nodes: %w", err)
	}
	return admin.PrintNodes(stdout, nodes, f.PrintOptions())
}

// parseSince reads an RFC 3339 time or a duration back from now.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("invalid --since=%q: want an RFC 3339 time (2026-11-30T08:00:00Z) or a duration (90m)", topology.Clip(v))
}
