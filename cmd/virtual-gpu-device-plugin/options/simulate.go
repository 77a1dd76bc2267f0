package options

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate/scope"
)

// Simulate is the simulate command's configuration: its own flags, which
// serve has not (-state and -admin-socket name a directory and its socket
// there), and serve's Options for every other flag — the profiles, the
// default profile, the logging, the metrics address, and the settings a
// node without a profile gets.
type Simulate struct {
	// Serve is serve's flags, parsed by Parse; Serve.Help is -h.
	Serve *Options
	// Selector is -node-selector (default scope.DefaultSelector).
	Selector scope.Selector
	// StateDir is -state, absolute and clean (default
	// scope.DefaultStateDir).
	StateDir string
	// AdminSocket is -admin-socket, absolute (default admin.sock in
	// StateDir).
	AdminSocket string
	// Workers is -workers (default scope.DefaultWorkers).
	Workers int
}

// simulateOwn are simulate's own flags, with their environment twins.
var simulateOwn = map[string]string{
	"node-selector": "VGPU_NODE_SELECTOR",
	"state":         "VGPU_SIMULATE_STATE",
	"admin-socket":  "VGPU_SIMULATE_ADMIN_SOCKET",
	"workers":       "VGPU_SIMULATE_WORKERS",
}

type simulateFlags struct {
	selector, stateDir, adminSocket string
	workers                         int
}

func newSimulateFlagSet(f *simulateFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.selector, "node-selector", scope.DefaultSelector, "the nodes to simulate: a `selector` in label-selector syntax, matched against each node's labels and annotations")
	fs.StringVar(&f.stateDir, "state", scope.DefaultStateDir, "state `directory`: one state file per simulated node, in nodes/<node>.db")
	fs.StringVar(&f.adminSocket, "admin-socket", "", "admin API socket `path`, used by dump --node/--nodes and health --node (default: admin.sock in -state)")
	fs.IntVar(&f.workers, "workers", scope.DefaultWorkers, "how many nodes are brought up to date at once")
	return fs
}

// ParseSimulate parses simulate's arguments: its own flags (or their
// environment twins), then the rest with Parse, serve's variables for
// -state and -admin-socket left unread. Every error wraps ErrInvalid and
// names the flag or variable.
func ParseSimulate(args []string, getenv func(string) string) (*Simulate, error) {
	own, rest, err := splitSimulateArgs(args)
	if err != nil {
		return nil, err
	}
	var f simulateFlags
	fs := newSimulateFlagSet(&f)
	if err := fs.Parse(own); err != nil {
		return nil, invalidf("simulate: %w", err)
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for name, env := range simulateOwn {
		if v := getenv(env); v != "" && !set[name] {
			if err := fs.Set(name, v); err != nil {
				return nil, invalidf("invalid %s=%q: %w", env, v, err)
			}
		}
	}
	o, err := Parse(rest, func(k string) string {
		if k == EnvName("state") || k == EnvName("admin-socket") {
			return ""
		}
		return getenv(k)
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("simulate: %w", err)
	case o.Help:
		return &Simulate{Serve: o}, nil
	}
	s := &Simulate{Serve: o, Workers: f.workers}
	if !filepath.IsAbs(f.stateDir) {
		return nil, invalidf("invalid -state=%q: must be an absolute directory path", f.stateDir)
	}
	s.StateDir = filepath.Clean(f.stateDir)
	switch {
	case f.adminSocket == "":
		s.AdminSocket = filepath.Join(s.StateDir, AdminSocketName)
	case !filepath.IsAbs(f.adminSocket):
		return nil, invalidf("invalid -admin-socket=%q: must be an absolute path", f.adminSocket)
	default:
		s.AdminSocket = filepath.Clean(f.adminSocket)
	}
	if f.workers < 1 {
		return nil, invalidf("invalid -workers=%d: must be at least 1", f.workers)
	}
	if s.Selector, err = scope.ParseSelector(f.selector); err != nil {
		return nil, invalidf("invalid -node-selector: %w", err)
	}
	return s, nil
}

// splitSimulateArgs takes simulate's own flags out of args and returns
// the rest, for serve's parser. A flag's value may follow it ("-state
// DIR") or be joined ("-state=DIR"); "--" ends the flags.
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
				return nil, nil, invalidf("simulate: flag needs an argument: %s", a)
			}
			i++
			own = append(own, args[i])
		}
	}
	return own, rest, nil
}

// PrintSimulateUsage prints simulate's usage: its own flags, then serve's.
func PrintSimulateUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: virtual-gpu-device-plugin simulate [-node-selector SEL] [-state DIR] [-admin-socket PATH] [-workers N] [serve's flags]")
	fmt.Fprintln(w, "\nGives kubelet-less nodes (KWOK's) the GPUs of their profile: the extended resources and GPU labels, or the")
	fmt.Fprintln(w, "ResourceSlices of DRA profiles, and records what the pods and claims bound there took, one state file per node.")
	fmt.Fprintln(w, "\nFlags of simulate (environment twins VGPU_NODE_SELECTOR, VGPU_SIMULATE_STATE, VGPU_SIMULATE_ADMIN_SOCKET, VGPU_SIMULATE_WORKERS):")
	fs := newSimulateFlagSet(&simulateFlags{})
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nEvery other flag is serve's (below): -config and -config-default choose each node's profile by its label, as the")
	fmt.Fprintln(w, "DaemonSet's do; the others are the settings of a node without a profile.")
	fmt.Fprintln(w)
	PrintUsage(w)
}
