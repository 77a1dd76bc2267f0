package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
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

func TestParseConfig_Help(t *testing.T) {
	var out bytes.Buffer
	cfg, err := parseConfig([]string{"-h"}, env(nil), &out)
	if err != nil || !cfg.showHelp {
		t.Fatalf("cfg.showHelp=%v err=%v", cfg.showHelp, err)
	}
	if !strings.Contains(out.String(), "-devices") || !strings.Contains(out.String(), "VGPU_") {
		t.Errorf("help output lacks flags or env names:\n%s", out.String())
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
