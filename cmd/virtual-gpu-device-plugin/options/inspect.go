package options

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate/scope"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Inspect are the flags shared by dump and health, parsed by
// ParseSubcommand and checked by Validate.
type Inspect struct {
	// StatePath is -state: the state file, or with Node or Nodes the
	// simulator's state directory (default DefaultStatePath, then
	// scope.DefaultStateDir).
	StatePath string
	// AdminSocket is -admin-socket (default admin.sock next to the state
	// file, or in the simulator's directory).
	AdminSocket string
	// Output is -o; NoHeaders is --no-headers.
	Output    string
	NoHeaders bool
	// Nodes asks for the simulator's summary of its nodes (dump --nodes;
	// the caller registers it).
	Nodes bool
	// Node names a node of the simulator (--node): StatePath is then its
	// state directory, and the node's state file is in it.
	Node string
}

// inspectEnvTwins are the flags of dump and health with an environment
// twin: those the serve job shares, so that `kubectl exec … dump` in the
// DaemonSet finds the same files.
var inspectEnvTwins = map[string]bool{"state": true, "admin-socket": true}

// PrintOptions are how the flags say to print a snapshot.
func (f Inspect) PrintOptions() admin.PrintOptions {
	return admin.PrintOptions{Format: f.Output, NoHeaders: f.NoHeaders}
}

// Register adds the flags to fset.
func (f *Inspect) Register(fset *flag.FlagSet) {
	fset.StringVar(&f.StatePath, "state", DefaultStatePath, "state `file`, read when no plugin answers on the admin socket")
	fset.StringVar(&f.AdminSocket, "admin-socket", "", "the running plugin's admin socket `path` (default: admin.sock next to -state)")
	fset.StringVar(&f.Output, "o", "table", "output `format`: "+strings.Join(admin.OutputFormats, ", "))
	fset.StringVar(&f.Output, "output", "table", "output `format` (same as -o)")
	fset.BoolVar(&f.NoHeaders, "no-headers", false, "table and wide output: print no header lines")
	fset.StringVar(&f.Node, "node", "", "a simulated node's `name` (simulate): -state is then the simulator's state directory (default "+scope.DefaultStateDir+")")
}

// Client returns the admin client: the plugin's, or with --node the
// simulated node's API on the simulator's socket.
func (f Inspect) Client(timeout time.Duration) *admin.Client {
	c := admin.NewClient(f.AdminSocket, timeout)
	if f.Node != "" {
		return c.ForNode(f.Node)
	}
	return c
}

// StateFile is the state file read when no process answers: -state, or
// with --node the node's file in the simulator's state directory.
func (f Inspect) StateFile() string {
	if f.Node != "" {
		return scope.StatePath(f.StatePath, f.Node)
	}
	return f.StatePath
}

// Validate checks the flags parsed into f from fset (or from the
// environment, getenv) and fills in the defaults; every error wraps
// ErrInvalid.
func (f *Inspect) Validate(fset *flag.FlagSet, getenv func(string) string) error {
	stateGiven := Given(fset, "state") || getenv(EnvName("state")) != ""
	if !slices.Contains(admin.OutputFormats, f.Output) {
		return invalidf("invalid -o=%q: must be one of %s", f.Output, strings.Join(admin.OutputFormats, ", "))
	}
	if f.Node != "" || f.Nodes {
		if f.Node != "" {
			if errs := validation.IsDNS1123Subdomain(f.Node); len(errs) > 0 {
				return invalidf("invalid --node=%q: not a node name: %s", topology.Clip(f.Node), errs[0])
			}
		}
		if !stateGiven {
			f.StatePath = scope.DefaultStateDir
		}
		if f.AdminSocket == "" {
			f.AdminSocket = filepath.Join(f.StatePath, AdminSocketName)
		}
	}
	if !filepath.IsAbs(f.StatePath) {
		return invalidf("invalid -state=%q: must be an absolute path", f.StatePath)
	}
	p, err := AdminSocketPath(f.AdminSocket, f.StatePath)
	if err != nil {
		return invalidf("invalid -admin-socket=%q: %w", f.AdminSocket, err)
	}
	f.AdminSocket = p
	return nil
}

// ParseSubcommand parses args of a subcommand whose flags may come before,
// between or after its positional arguments, filling the flags of
// inspectEnvTwins from their environment twins, and returns the positional
// arguments.
func ParseSubcommand(fset *flag.FlagSet, args []string, getenv func(string) string) ([]string, error) {
	fset.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fset.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, invalidf("%s: %w", fset.Name(), err)
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
		if v := getenv(EnvName(f.Name)); v != "" && inspectEnvTwins[f.Name] && !set[f.Name] && envErr == nil {
			if err := fset.Set(f.Name, v); err != nil {
				envErr = invalidf("invalid %s=%q: %w", EnvName(f.Name), v, err)
			}
		}
	})
	return pos, envErr
}

// PrintSubcommandUsage prints a subcommand's usage to w.
func PrintSubcommandUsage(fset *flag.FlagSet, w io.Writer, synopsis, about string) {
	fmt.Fprintln(w, "Usage: virtual-gpu-device-plugin "+synopsis)
	fmt.Fprintln(w, "\n"+about)
	fmt.Fprintln(w, "\nFlags (-state and -admin-socket have the environment twins VGPU_STATE and VGPU_ADMIN_SOCKET):")
	fset.SetOutput(w)
	fset.PrintDefaults()
}

// Given reports whether the flag name was set on the command line.
func Given(fset *flag.FlagSet, name string) bool {
	set := false
	fset.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
