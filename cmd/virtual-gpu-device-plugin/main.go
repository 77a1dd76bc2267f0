// Command virtual-gpu-device-plugin is a Kubernetes device plugin that
// advertises virtual GPUs with a realistic NUMA/link topology.
//
// Usage:
//
//	virtual-gpu-device-plugin [serve] [flags]   serve the device plugin (the main job)
//	virtual-gpu-device-plugin dump [flags]      show devices, allocation history and health events
//	virtual-gpu-device-plugin health list|set   show or change device health
//	virtual-gpu-device-plugin simulate [flags]  give KWOK nodes GPUs (one Deployment for many nodes)
//	virtual-gpu-device-plugin help [command]    show a command's usage
//	virtual-gpu-device-plugin version           print the version, commit and Go version
//	nvidia-smi [options]                        the fake nvidia-smi, when run under that name
//
// Every serve flag has an environment twin: -devices is VGPU_DEVICES, and so
// on. A -config file (or a directory of profiles, one chosen per node by a
// label) may set them too, under flags:. The command line wins over the
// variable, the variable over the file or profile, that over the default.
// The serve command's configuration is the options package; main keeps
// the dispatch and the wiring.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/mattn/go-isatty"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
)

// version and revision are stamped at build time by `make build`:
// -ldflags "-X main.version=<release or git describe> -X main.revision=<commit>".
var (
	version  = "dev"
	revision = "unknown"
)

// main installs the signal handling before anything reads input: every
// start-up read either honours ctx (sockets, the admin API) or cannot block
// (config validation refuses a FIFO as the state file or sysfs directory;
// the state file's lock wait is bounded). The first SIGINT or SIGTERM ends
// ctx; a second one gets the default action, so a stuck shutdown can still
// be interrupted.
func main() {
	if filepath.Base(os.Args[0]) == "nvidia-smi" { // multi-call: the fake nvidia-smi in containers
		os.Exit(nvidiasmi.Main(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is an error in how the command was called: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError; %w wraps as in fmt.Errorf.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitCode prints err as one line and maps it to the process exit code:
// 0 success, 2 bad usage, 1 anything else.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "virtual-gpu-device-plugin: %v\n", err)
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

// commands are the subcommands, with the line -h and help show for each.
var commands = []struct{ name, summary string }{
	{"serve", "serve the device plugin to the kubelet (the default command)"},
	{"dump", "show the devices, the allocation history and the health events"},
	{"health", "list device health, or set a device healthy or unhealthy"},
	{"simulate", "give kubelet-less (KWOK) nodes the GPUs of their profile: capacity, labels, ResourceSlices, history"},
	{"help", "show the usage of a command: help [serve|dump|health|simulate|version]"},
	{"version", "print the version, the commit and the Go version"},
}

// run is the whole program: it parses args and runs the chosen command
// until it is done or ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	name, rest := "serve", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, rest = args[0], args[1:]
	}
	err := runCommand(ctx, name, rest, stdout, stderr, getenv)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted: %w", err)
	}
	return err
}

func runCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	switch name {
	case "serve":
		o, err := options.Parse(args, getenv)
		switch {
		case err != nil:
			return usageError{err}
		case o.Help:
			printHelp(stdout)
			return nil
		case o.Version:
			printVersion(stdout)
			return nil
		}
		cfg, profiles, err := o.Load()
		if err != nil {
			return usageError{err}
		}
		return serve(ctx, o, cfg, profiles, stderr, defaultServeEnv())
	case "dump":
		return dump(ctx, args, stdout, getenv)
	case "health":
		return health(ctx, args, stdout, getenv)
	case "simulate":
		return runSimulate(ctx, args, stdout, stderr, getenv)
	case "version":
		if len(args) == 1 && isHelpFlag(args[0]) {
			fmt.Fprintln(stdout, "Usage: virtual-gpu-device-plugin version\n\nPrints the version, the commit it was built from and the Go version.")
			return nil
		}
		if len(args) > 0 {
			return usagef("version: unexpected argument %q", args[0])
		}
		printVersion(stdout)
		return nil
	case "help":
		switch {
		case len(args) == 0, args[0] == "help":
			printHelp(stdout)
			return nil
		case len(args) > 1:
			return usagef("help: want one command, got %q", strings.Join(args, " "))
		}
		for _, c := range commands {
			if c.name == args[0] {
				return runCommand(ctx, args[0], []string{"-h"}, stdout, stderr, getenv)
			}
		}
		return usagef("help: unknown command %q (commands: %s)", args[0], commandNames())
	}
	return usagef("unknown command %q (commands: %s; -h for help)", name, commandNames())
}

// printHelp prints the commands, one line each, then the serve flags.
func printHelp(w io.Writer) {
	fmt.Fprintln(w, "Usage: virtual-gpu-device-plugin [command] [flags]")
	fmt.Fprintln(w, "\nA Kubernetes device plugin that advertises virtual GPUs with a realistic NUMA/NVLink/PCIe topology.")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'virtual-gpu-device-plugin help <command>' for the flags of dump and health.")
	fmt.Fprintln(w)
	options.PrintUsage(w)
}

// isTerminal reports whether w is a terminal, for colour in console logs.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func isHelpFlag(a string) bool {
	switch a {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// printVersion prints the version, the commit and the Go version as
// "key: value" lines (valid YAML).
func printVersion(w io.Writer) {
	fmt.Fprintf(w, "version: %s\ncommit: %s\ngo: %s %s/%s\n", version, commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// commit is the stamped revision or, when none was stamped, the VCS
// revision the Go toolchain recorded ("-dirty" when the tree had changes).
func commit() string {
	if revision != "unknown" && revision != "" {
		return revision
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case dirty:
		return rev + "-dirty"
	}
	return rev
}
