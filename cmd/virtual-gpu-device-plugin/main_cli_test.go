package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// TestRun_ConfigErrorsAreUsageErrors: a bad flag, variable or file exits 2
// with one line, and errors.Is reaches the cause through it.
func TestRun_ConfigErrorsAreUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: v1\nflags:\n  devicez: 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := "-state=" + filepath.Join(dir, "s.db")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		is   error
		want string
	}{
		{"flag", []string{"-devices=0"}, nil, nil, "invalid -devices=0: must be between 1 and 1024"},
		{"variable", nil, map[string]string{"VGPU_DEVICES": "0"}, nil, "invalid VGPU_DEVICES=0: must be between 1 and 1024"},
		{"faults", []string{"-faults=down:fake-1", state}, nil, faults.ErrBadPlan, "invalid -faults"},
		{"topology", []string{"-topology=no-such-preset", state}, nil, topology.ErrUnknownTopology, `invalid -topology="no-such-preset"`},
		{"file", []string{"-config=" + bad, state}, nil, nil, bad + `:3: flags.devicez: unknown field "devicez" (did you mean "devices"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), tc.args, io.Discard, io.Discard, env(tc.env))
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v does not wrap %v", err, tc.is)
			}
			if code := exitCode(err, &stderr); code != 2 || !strings.HasPrefix(stderr.String(), "virtual-gpu-device-plugin: "+tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
			if strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("stderr is not one line: %q", stderr.String())
			}
		})
	}
}

func TestRun_HelpListsFlagsAndPrecedence(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, &out, io.Discard, env(nil)); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, c := range commands {
		if !regexp.MustCompile(`(?m)^  ` + c.name + ` +\S`).MatchString(help) {
			t.Errorf("help does not list the command %s on a line of its own:\n%s", c.name, help)
		}
	}
	for _, want := range []string{"  -topology preset|file\n", "  -metrics-address host:port\n", "  -state file\n", "  -log-level level\n",
		"  -config file\n", "  -config-default name\n", "  -replicas int\n", "  -shared-devices-allocation-policy policy\n",
		"VGPU_DEVICES", "line wins over its variable, a variable over the -config file or the node's profile", "(default 64Mi)"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "-topology nvidia-smi") {
		t.Errorf("-topology shows a command as its value name:\n%s", help)
	}
}

func TestRun_Help(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"-h", []string{"-h"}, 0, []string{"Commands:", "  dump ", "Serve flags", "-devices"}},
		{"help", []string{"help"}, 0, []string{"Commands:", "Serve flags"}},
		{"help serve", []string{"help", "serve"}, 0, []string{"Commands:", "-devices"}},
		{"help dump", []string{"help", "dump"}, 0, []string{"Usage: virtual-gpu-device-plugin dump", "-no-headers", "-since"}},
		{"help health", []string{"help", "health"}, 0, []string{"Usage: virtual-gpu-device-plugin health list", "-reason"}},
		{"help version", []string{"help", "version"}, 0, []string{"Usage: virtual-gpu-device-plugin version"}},
		{"dump -h", []string{"dump", "-h"}, 0, []string{"Usage: virtual-gpu-device-plugin dump"}},
		{"help unknown", []string{"help", "reboot"}, 2, []string{`help: unknown command "reboot" (commands: serve, dump, health, simulate, help, version)`}},
		{"unknown command", []string{"reboot"}, 2, []string{`unknown command "reboot"`}},
		{"version with argument", []string{"version", "now"}, 2, []string{`version: unexpected argument "now"`}},
		{"-version with argument", []string{"-version", "now"}, 2, []string{`unexpected argument "now"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := exitCode(run(context.Background(), tt.args, &stdout, &stderr, env(nil)), &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tt.code, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout.String()+stderr.String(), w) {
					t.Errorf("output lacks %q:\n%s%s", w, stdout.String(), stderr.String())
				}
			}
		})
	}
}

func TestNewLogger_ConsoleColourOnlyOnATerminal(t *testing.T) {
	cfg := &options.Config{LogLevel: zerolog.InfoLevel, LogFormat: options.LogConsole}
	var buf bytes.Buffer
	log := newLogger(cfg, &buf)
	log.Info().Str("device", "fake-0").Msg("hello")
	if strings.Contains(buf.String(), "\x1b[") || !strings.Contains(buf.String(), "hello") {
		t.Errorf("console log to a buffer = %q, want plain text", buf.String())
	}
	pipeR, pipeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pipeR.Close()
	defer pipeW.Close()
	if isTerminal(pipeW) {
		t.Error("a pipe taken for a terminal")
	}
	tty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to test the colour case: %v", err)
	}
	defer tty.Close()
	if !isTerminal(tty) {
		t.Error("a pseudo-terminal not taken for a terminal")
	}
}

func TestExitCode(t *testing.T) {
	var buf bytes.Buffer
	if got := exitCode(nil, &buf); got != 0 || buf.Len() != 0 {
		t.Errorf("nil: code %d, output %q", got, buf.String())
	}
	if got := exitCode(usagef("bad flag"), &buf); got != 2 {
		t.Errorf("usage: code %d, want 2", got)
	}
	if got := exitCode(errors.New("boom"), &buf); got != 1 {
		t.Errorf("runtime: code %d, want 1", got)
	}
	if want := "virtual-gpu-device-plugin: bad flag\nvirtual-gpu-device-plugin: boom\n"; buf.String() != want {
		t.Errorf("output %q, want %q", buf.String(), want)
	}
}
