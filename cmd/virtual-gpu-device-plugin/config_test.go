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
	"syscall"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParseConfig_Defaults(t *testing.T) {
	cfg, err := parseConfig(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.devices != 4 || cfg.resourceName != "unicore.mcyou.cc/gpu" || cfg.devicePluginPath != "/var/lib/kubelet/device-plugins" ||
		cfg.socketName != "virtual-gpu.sock" || cfg.logFormat != "json" || cfg.logLevel != "info" {
		t.Errorf("defaults = %+v", cfg)
	}
}

func TestParseConfig_FlagsAndEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		devices int
		dir     string
	}{
		{"seed spelling", []string{"-devices=4"}, nil, 4, "/var/lib/kubelet/device-plugins"},
		{"double dash", []string{"--devices=8"}, nil, 8, "/var/lib/kubelet/device-plugins"},
		{"separate value", []string{"-devices", "2", "-device-plugin-path", "/tmp/dp/"}, nil, 2, "/tmp/dp"},
		{"env twin", nil, map[string]string{"VGPU_DEVICES": "16", "VGPU_DEVICE_PLUGIN_PATH": "/x"}, 16, "/x"},
		{"flag wins over env", []string{"-devices=3"}, map[string]string{"VGPU_DEVICES": "16"}, 3, "/var/lib/kubelet/device-plugins"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig(tt.args, env(tt.env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.devices != tt.devices || cfg.devicePluginPath != tt.dir {
				t.Errorf("devices=%d dir=%q, want %d %q", cfg.devices, cfg.devicePluginPath, tt.devices, tt.dir)
			}
		})
	}
}

func TestParseConfig_BadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"zero devices", []string{"-devices=0"}, nil, "invalid -devices=0: must be between 1 and 1024"},
		{"negative devices", []string{"-devices=-1"}, nil, "invalid -devices=-1"},
		{"absurd devices", []string{"-devices=100000"}, nil, "invalid -devices=100000"},
		{"devices not a number", []string{"-devices=four"}, nil, `invalid value "four" for flag -devices`},
		{"bad env", nil, map[string]string{"VGPU_DEVICES": "x"}, `invalid VGPU_DEVICES="x"`},
		{"unknown flag", []string{"-gpus=4"}, nil, "flag provided but not defined: -gpus"},
		{"stray argument", []string{"serve-now"}, nil, `unexpected argument "serve-now"`},
		{"resource without domain", []string{"-resource-name=gpu"}, nil, "invalid -resource-name=\"gpu\": must be <domain>/<name>"},
		{"resource in kubernetes.io", []string{"-resource-name=kubernetes.io/gpu"}, nil, "kubernetes.io domain is reserved"},
		{"resource in sub.kubernetes.io", []string{"-resource-name=x.kubernetes.io/gpu"}, nil, "kubernetes.io domain is reserved"},
		{"resource uppercase domain", []string{"-resource-name=Unicore.io/gpu"}, nil, "not a lowercase DNS subdomain"},
		{"resource bad name", []string{"-resource-name=unicore.io/-gpu"}, nil, `name "-gpu" must be`},
		{"resource name too long", []string{"-resource-name=unicore.io/" + strings.Repeat("g", 55)}, nil, "at most 54 characters"},
		{"relative dir", []string{"-device-plugin-path=var/lib"}, nil, "must be an absolute path"},
		{"socket with slash", []string{"-socket-name=a/b.sock"}, nil, "must be a plain file name"},
		{"kubelet socket", []string{"-socket-name=kubelet.sock"}, nil, "the kubelet's own socket"},
		{"socket path too long", []string{"-device-plugin-path=/" + strings.Repeat("d", 120)}, nil, "unix sockets allow 107"},
		{"log level", []string{"-log-level=loud"}, nil, `invalid -log-level="loud"`},
		{"log format", []string{"-log-format=xml"}, nil, `invalid -log-format="xml": must be json or console`},
		{"log level fatal", []string{"-log-level=fatal"}, nil, `invalid -log-level="fatal": must be one of trace, debug, info, warn, error`},
		{"log level panic", []string{"-log-level=panic"}, nil, `invalid -log-level="panic"`},
		{"log level disabled", []string{"-log-level=disabled"}, nil, `invalid -log-level="disabled"`},
		{"log level number", []string{"-log-level=5"}, nil, `invalid -log-level="5"`},
		{"log level uppercase", []string{"-log-level=INFO"}, nil, `invalid -log-level="INFO"`},
		{"metrics port too big", []string{"-metrics-address=:99999"}, nil, `invalid -metrics-address=":99999": port 99999 is out of range 0–65535`},
		{"metrics port negative", []string{"-metrics-address=:-1"}, nil, `port -1 is out of range`},
		{"metrics port unknown service", []string{"-metrics-address=:no-such-service"}, nil, `port "no-such-service" is neither a number`},
		{"metrics no port", []string{"-metrics-address=127.0.0.1:"}, nil, "no port"},
		{"metrics no colon", []string{"-metrics-address=9400"}, nil, "want host:port"},
		{"metrics bad host", []string{"-metrics-address=bad_host!:9400"}, nil, `host "bad_host!" is neither an IP address nor a DNS name`},
		{"metrics url", []string{"-metrics-address=http://x:9400"}, nil, "want host:port"},
		{"metrics bad host with port", []string{"-metrics-address=x/y:9400"}, nil, `host "x/y" is neither`},
		{"admin socket in the device-plugin dir", []string{"-device-plugin-path=/dp", "-admin-socket=/dp/admin.sock"}, nil,
			`invalid -admin-socket="/dp/admin.sock": must not be in -device-plugin-path /dp: the kubelet deletes the sockets there when it restarts`},
		{"admin socket is kubelet.sock", []string{"-admin-socket=/var/lib/kubelet/device-plugins/kubelet.sock"}, nil, "must not be in -device-plugin-path"},
		{"admin socket unclean path", []string{"-device-plugin-path=/dp", "-admin-socket=/dp/x/../a.sock"}, nil, "must not be in -device-plugin-path"},
		{"default admin socket in the device-plugin dir", []string{"-device-plugin-path=/dp", "-state=/dp/state.db"}, nil,
			"invalid -admin-socket (default /dp/admin.sock, next to -state): must not be in -device-plugin-path /dp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig(tt.args, env(tt.env), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if !errors.As(err, new(usageError)) {
				t.Errorf("err %v is not a usage error (exit code 2)", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

func TestParseConfig_GoodAddresses(t *testing.T) {
	for _, addr := range []string{":9400", "127.0.0.1:9400", "[::1]:9400", "[fe80::1%eth0]:9400", "localhost:9400", "node-1.example.com:0", ":65535", ":http"} {
		if _, err := parseConfig([]string{"-metrics-address=" + addr}, env(nil), io.Discard); err != nil {
			t.Errorf("-metrics-address=%s: %v", addr, err)
		}
	}
	// An admin socket below the device-plugin dir, not in it, is safe: the
	// kubelet only deletes the sockets directly in the dir.
	if _, err := parseConfig([]string{"-device-plugin-path=/dp", "-state=/dp/state/state.db"}, env(nil), io.Discard); err != nil {
		t.Errorf("state and admin socket in a subdirectory: %v", err)
	}
}

// TestParseConfig_WrapsCauses: errors.Is reaches the cause through the
// usage error.
func TestParseConfig_WrapsCauses(t *testing.T) {
	_, err := parseConfig([]string{"-faults=down:fake-1"}, env(nil), io.Discard)
	if !errors.Is(err, faults.ErrBadPlan) || !errors.As(err, new(usageError)) {
		t.Errorf("-faults: %v does not wrap faults.ErrBadPlan in a usage error", err)
	}
	err = run(context.Background(), []string{"-topology=no-such-preset", "-state=" + filepath.Join(t.TempDir(), "s.db")}, io.Discard, io.Discard, env(nil))
	if !errors.Is(err, topology.ErrUnknownTopology) || !errors.As(err, new(usageError)) {
		t.Errorf("-topology: %v does not wrap topology.ErrUnknownTopology in a usage error", err)
	}
}

// TestParseConfig_NonBlockingInputs: a FIFO where the state file or the
// host's NUMA directory should be would block the start-up read; it is
// refused before anything starts.
func TestParseConfig_NonBlockingInputs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "state.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sysfs := filepath.Join(dir, "sys")
	if err := os.MkdirAll(filepath.Join(sysfs, "devices", "system"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(sysfs, "devices", "system", "node"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"state is a FIFO", []string{"-state=" + fifo}, "is not a regular file"},
		{"state is a directory", []string{"-state=" + dir}, "is not a regular file"},
		{"NUMA dir is a FIFO", []string{"-sysfs-root=" + sysfs}, "devices/system/node is not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig(tt.args, env(nil), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.As(err, new(usageError)) {
				t.Errorf("err = %v, want a usage error containing %q", err, tt.want)
			}
		})
	}
	if _, err := parseConfig([]string{"-sysfs-root=" + sysfs, "-numa-report=never"}, env(nil), io.Discard); err != nil {
		t.Errorf("-numa-report=never does not read sysfs: %v", err)
	}
}

func TestParseConfig_Version(t *testing.T) {
	cfg, err := parseConfig([]string{"-version"}, env(map[string]string{"VGPU_DEVICES": "x", "VGPU_FAULTS": "nonsense"}), io.Discard)
	if err != nil || !cfg.showVersion {
		t.Errorf("-version with bad VGPU_* variables: %v, showVersion %v", err, cfg.showVersion)
	}
	cfg, err = parseConfig(nil, env(map[string]string{"VGPU_VERSION": "true"}), io.Discard)
	if err != nil || cfg.showVersion {
		t.Errorf("VGPU_VERSION=true turned serve into a version printer: %v, showVersion %v", err, cfg.showVersion)
	}
}

func TestParseConfig_Help(t *testing.T) {
	var out bytes.Buffer
	cfg, err := parseConfig([]string{"-h"}, env(nil), &out)
	if err != nil || !cfg.showHelp {
		t.Fatalf("cfg.showHelp=%v err=%v", cfg.showHelp, err)
	}
	help := out.String()
	if !strings.Contains(help, "-devices") || !strings.Contains(help, "VGPU_") {
		t.Errorf("help output lacks flags or env names:\n%s", help)
	}
	for _, c := range commands {
		if !regexp.MustCompile(`(?m)^  ` + c.name + ` +\S`).MatchString(help) {
			t.Errorf("help does not list the command %s on a line of its own:\n%s", c.name, help)
		}
	}
	for _, want := range []string{"  -topology preset|file\n", "  -metrics-address host:port\n", "  -state file\n", "  -log-level level\n"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks the line %q:\n%s", want, help)
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
		{"help unknown", []string{"help", "reboot"}, 2, []string{`help: unknown command "reboot" (commands: serve, dump, health, help, version)`}},
		{"unknown command", []string{"reboot"}, 2, []string{`unknown command "reboot"`}},
		{"version with argument", []string{"version", "now"}, 2, []string{`version: unexpected argument "now"`}},
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
	cfg := config{logLevel: "info", logFormat: "console"}
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
