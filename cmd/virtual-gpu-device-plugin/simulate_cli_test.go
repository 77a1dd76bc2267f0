package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate/scope"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// TestSimulate_BadFlags: bad input to simulate is a usage error (exit 2)
// naming what was wrong, before anything is contacted.
func TestSimulate_BadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"empty selector", []string{"-node-selector="}, nil, "empty node selector"},
		{"bad selector", []string{"-node-selector", "a in (b"}, nil, `invalid -node-selector: node selector "a in (b"`},
		{"relative state", []string{"-state=state"}, nil, `invalid -state="state": must be an absolute directory path`},
		{"relative socket", []string{"-admin-socket=a.sock"}, nil, `invalid -admin-socket="a.sock"`},
		{"no workers", []string{"-workers=0"}, nil, "invalid -workers=0: must be at least 1"},
		{"bad env twin", nil, map[string]string{"VGPU_SIMULATE_WORKERS": "many"}, `invalid VGPU_SIMULATE_WORKERS="many"`},
		{"serve flag unknown", []string{"-no-such-flag"}, nil, "no-such-flag"},
		{"serve flag bad", []string{"-devices=0"}, nil, "-devices"},
		{"missing value", []string{"-state"}, nil, "flag needs an argument: -state"},
		{"no API access", []string{"-state=" + dir, "-kubeconfig=" + filepath.Join(dir, "none")}, map[string]string{"HOME": dir}, "simulate needs API access"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), append([]string{"simulate"}, tc.args...), io.Discard, io.Discard, env(tc.env))
			code := exitCode(err, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

func TestSimulate_Help(t *testing.T) {
	for _, args := range [][]string{{"simulate", "-h"}, {"help", "simulate"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, io.Discard, env(nil)); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Usage: virtual-gpu-device-plugin simulate", "-node-selector", scope.DefaultSelector, "-workers", "-config-default"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%q: help lacks %q:\n%s", args, want, out.String())
			}
		}
	}
}

// TestDump_Node: --node reads a simulated node's state file from the
// simulator's state directory when no simulator answers; --nodes needs
// the simulator; a name that is no node name is refused.
func TestDump_Node(t *testing.T) {
	dir := t.TempDir()
	path := scope.StatePath(dir, "kwok-1")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	st := storetest.MustOpenPath(t, path, store.Options{})
	if _, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"dump", "--node", "kwok-1", "-state", dir}, &out, io.Discard, env(nil)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "fake-0") || !strings.Contains(out.String(), path) {
		t.Errorf("dump --node: want the node's device and file:\n%s", out.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dump", "--nodes", "-state", dir}, "dump --nodes needs the running simulator"},
		{[]string{"dump", "--node", "../x", "-state", dir}, `invalid --node="../x": not a node name`},
		{[]string{"dump", "--nodes", "--node", "kwok-1", "-state", dir}, "dump --nodes: takes none of"},
		{[]string{"dump", "--node", "kwok-2", "-state", dir}, "no state file at " + scope.StatePath(dir, "kwok-2")},
		{[]string{"health", "set", "--node", "kwok-1", "fake-0", "unhealthy", "-state", dir}, "health set needs the running plugin"},
	} {
		var stderr bytes.Buffer
		exitCode(run(context.Background(), tc.args, io.Discard, io.Discard, env(nil)), &stderr)
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: stderr %q, want %q", tc.args, stderr.String(), tc.want)
		}
	}
}
