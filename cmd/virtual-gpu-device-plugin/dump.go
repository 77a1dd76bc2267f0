package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate"
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

// inspectFlags are the flags shared by dump and health.
type inspectFlags struct {
	statePath   string
	adminSocket string
	output      string
	noHeaders   bool
	// stateGiven: -state was set (flag or environment).
	stateGiven bool
	// nodes asks for the simulator's summary of its nodes (dump --nodes).
	nodes bool
	// node names a node of the simulator (simulate): -state is then its
	// state directory, and the node's state file is in it.
	node string
}

// inspectEnvTwins are the flags of dump and health with an environment
// twin: those the serve job shares, so that `kubectl exec … dump` in the
// DaemonSet finds the same files.
var inspectEnvTwins = map[string]bool{"state": true, "admin-socket": true}

// printOptions are how the flags say to print a snapshot.
func (f inspectFlags) printOptions() admin.PrintOptions {
	return admin.PrintOptions{Format: f.output, NoHeaders: f.noHeaders}
}

func (f *inspectFlags) register(fset *flag.FlagSet) {
	fset.StringVar(&f.statePath, "state", options.DefaultStatePath, "state `file`, read when no plugin answers on the admin socket")
	fset.StringVar(&f.adminSocket, "admin-socket", "", "the running plugin's admin socket `path` (default: admin.sock next to -state)")
	fset.StringVar(&f.output, "o", "table", "output `format`: "+strings.Join(admin.OutputFormats, ", "))
	fset.StringVar(&f.output, "output", "table", "output `format` (same as -o)")
	fset.BoolVar(&f.noHeaders, "no-headers", false, "table and wide output: print no header lines")
	fset.StringVar(&f.node, "node", "", "a simulated node's `name` (simulate): -state is then the simulator's state directory (default "+simulate.DefaultStateDir+")")
}

// client returns the admin client: the plugin's, or with --node the
// simulated node's API on the simulator's socket.
func (f inspectFlags) client(timeout time.Duration) *admin.Client {
	c := admin.NewClient(f.adminSocket, timeout)
	if f.node != "" {
		return c.ForNode(f.node)
	}
	return c
}

// stateFile is the state file read when no process answers: -state, or
// with --node the node's file in the simulator's state directory.
func (f inspectFlags) stateFile() string {
	if f.node != "" {
		return simulate.StatePath(f.statePath, f.node)
	}
	return f.statePath
}

func (f *inspectFlags) validate() error {
	if !slices.Contains(admin.OutputFormats, f.output) {
		return usagef("invalid -o=%q: must be one of %s", f.output, strings.Join(admin.OutputFormats, ", "))
	}
	if f.node != "" || f.nodes {
		if f.node != "" {
			if errs := validation.IsDNS1123Subdomain(f.node); len(errs) > 0 {
				return usagef("invalid --node=%q: not a node name: %s", topology.Clip(f.node), errs[0])
			}
		}
		if !f.stateGiven {
			f.statePath = simulate.DefaultStateDir
		}
		if f.adminSocket == "" {
			f.adminSocket = filepath.Join(f.statePath, options.AdminSocketName)
		}
	}
	if !filepath.IsAbs(f.statePath) {
		return usagef("invalid -state=%q: must be an absolute path", f.statePath)
	}
	p, err := options.AdminSocketPath(f.adminSocket, f.statePath)
	if err != nil {
		return usagef("invalid -admin-socket=%q: %w", f.adminSocket, err)
	}
	f.adminSocket = p
	return nil
}

// parseSubcommand parses args of a subcommand whose flags may come before,
// between or after its positional arguments, filling the flags of
// inspectEnvTwins from their environment twins, and returns the positional
// arguments.
func parseSubcommand(fset *flag.FlagSet, args []string, getenv func(string) string) ([]string, error) {
	fset.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fset.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %w", fset.Name(), err)
		}
		if fset.NArg() == 0 {
			break
		}
		pos = append(pos, fset.Arg(0))
		args = fset.Args()[1:]
	}
	set := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fset.VisitAll(func(f *flag.Flag) {
		if v := getenv(options.EnvName(f.Name)); v != "" && inspectEnvTwins[f.Name] && !set[f.Name] && envErr == nil {
			if err := fset.Set(f.Name, v); err != nil {
				envErr = usagef("invalid %s=%q: %w", options.EnvName(f.Name), v, err)
			}
		}
	})
	return pos, envErr
}

// printUsage prints a subcommand's usage to w.
func printUsage(fset *flag.FlagSet, w io.Writer, synopsis, about string) {
	fmt.Fprintln(w, "Usage: virtual-gpu-device-plugin "+synopsis)
	fmt.Fprintln(w, "\n"+about)
	fmt.Fprintln(w, "\nFlags (-state and -admin-socket have the environment twins VGPU_STATE and VGPU_ADMIN_SOCKET):")
	fset.SetOutput(w)
	fset.PrintDefaults()
}

// readSnapshot asks the running plugin for the snapshot q selects or, when
// no plugin answers, reads it from the state file opened read-only.
func readSnapshot(ctx context.Context, f inspectFlags, q admin.Query) (admin.Snapshot, error) {
	timeout := dumpTimeout
	if !q.DevicesOnly {
		timeout = snapshotTimeout
	}
	snap, err := f.client(timeout).Snapshot(ctx, q)
	switch {
	case err == nil:
		return snap, nil
	case errors.Is(err, admin.ErrPermission):
		return snap, fmt.Errorf("%w; run as root or as the socket's owner", err)
	case errors.Is(err, admin.ErrNotSimulated):
		// Not simulated now: its state file, closed, holds its history.
		if _, serr := os.Stat(f.stateFile()); serr != nil {
			return snap, err
		}
	case !errors.Is(err, admin.ErrNoPlugin):
		return snap, err
	}
	path := f.stateFile()
	st, err := store.Open(path, store.Options{ReadOnly: true, Timeout: dumpTimeout})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return snap, fmt.Errorf("no plugin answers on %s and there is no state file at %s", f.adminSocket, path)
	case errors.Is(err, store.ErrLocked):
		return snap, fmt.Errorf("no plugin answers on %s, and %s is held by another process (a plugin with another -admin-socket?): %w", f.adminSocket, path, err)
	case err != nil:
		return snap, err
	}
	defer st.Close()
	snap, err = admin.Read(admin.StoreSource{Store: st}, q, nil)
	snap.Source = admin.SourceInfo{Type: admin.SourceFile, Path: path}
	return snap, err
}

const dumpSynopsis = "dump [-o table|wide|json|yaml] [--no-headers] [--device ID] [--since TIME|DURATION] [--limit N] [--active]"

// given reports whether the flag name was set on the command line.
func given(fset *flag.FlagSet, name string) bool {
	set := false
	fset.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// dump prints the devices and the history.
func dump(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	var (
		f      inspectFlags
		device string
		since  string
		limit  int
		active bool
	)
	fset := flag.NewFlagSet("dump", flag.ContinueOnError)
	f.register(fset)
	fset.StringVar(&device, "device", "", "only history of this device `id`")
	fset.StringVar(&since, "since", "", "only history since this RFC 3339 `time` or this long ago (e.g. 1h)")
	fset.IntVar(&limit, "limit", 0, "at most this many history records of each kind, newest first; 0 means all")
	fset.BoolVar(&active, "active", false, "only allocations and claims that still hold their devices")
	fset.BoolVar(&f.nodes, "nodes", false, "the simulator's summary of its nodes (simulate): allocated and free devices per node and profile")
	pos, err := parseSubcommand(fset, args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(fset, stdout, dumpSynopsis, "Shows the devices (health, NUMA node, holder), the history of allocations and DRA claims, the health events and the\n"+
			"configuration changes, newest first, from the running plugin or, when none runs, from the state file (read-only).")
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("dump: unexpected argument %q", pos[0])
	}
	f.stateGiven = given(fset, "state") || getenv(options.EnvName("state")) != ""
	if err := f.validate(); err != nil {
		return err
	}
	if f.nodes {
		if f.node != "" || device != "" || since != "" || limit != 0 || active {
			return usagef("dump --nodes: takes none of --node, --device, --since, --limit, --active")
		}
		return dumpNodes(ctx, f, stdout)
	}
	if limit < 0 {
		return usagef("invalid --limit=%d: must be 0 (all) or positive", limit)
	}
	if device == "" && given(fset, "device") {
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
	return admin.Print(stdout, snap, f.printOptions())
}

// dumpNodes prints the running simulator's summary of its nodes.
func dumpNodes(ctx context.Context, f inspectFlags, stdout io.Writer) error {
	nodes, err := admin.NewClient(f.adminSocket, snapshotTimeout).Nodes(ctx)
	switch {
	case errors.Is(err, admin.ErrNoPlugin):
		return fmt.Errorf("dump --nodes needs the running simulator: %w", err)
	case errors.Is(err, admin.ErrPermission):
		return fmt.Errorf("dump --nodes: %w; run as root or as the socket's owner", err)
	case err != nil:
		return fmt.Errorf("dump --nodes: %w", err)
	}
	return admin.PrintNodes(stdout, nodes, f.printOptions())
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
