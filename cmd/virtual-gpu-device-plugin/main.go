// Command virtual-gpu-device-plugin is a Kubernetes device plugin that
// advertises virtual GPUs with a realistic NUMA/link topology.
//
// Usage:
//
//	virtual-gpu-device-plugin [serve] [flags]   serve the device plugin (the main job)
//	virtual-gpu-device-plugin dump [flags]      show devices and allocation history
//	virtual-gpu-device-plugin health list|set   show or change device health
//	virtual-gpu-device-plugin -version          print the version
//
// Every flag has an environment twin: -devices is VGPU_DEVICES, and so on; a
// flag given on the command line wins over its environment variable.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is stamped at build time with
// -ldflags "-X main.version=<version>".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is an error in how the command was called: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError.
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

// run is the whole program: it parses args and runs the chosen job until ctx
// ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) > 0 {
		var err error
		switch args[0] {
		case "dump":
			err = dump(ctx, args[1:], stdout, getenv)
		case "health":
			err = health(ctx, args[1:], stdout, getenv)
		case "serve":
			args = args[1:]
		}
		if args[0] == "dump" || args[0] == "health" {
			if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
				return fmt.Errorf("interrupted: %w", err)
			}
			return err
		}
	}
	cfg, err := parseConfig(args, getenv, stdout)
	if err != nil {
		return err
	}
	if cfg.showVersion {
		fmt.Fprintln(stdout, version)
		return nil
	}
	if cfg.showHelp {
		return nil
	}
	return serve(ctx, cfg, stderr)
}
