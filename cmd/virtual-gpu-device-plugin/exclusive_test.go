package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

// TestBinary_SecondInstance_LeavesTheFilesAlone: a second plugin that
// cannot run (its admin socket, device-plugin socket, metrics or telemetry
// address is the running one's) fails before it writes into the
// directories it shares with the running one: the running plugin's status
// files, with an unhealthy GPU, stay byte for byte as they were, and its
// live telemetry file stays. A second plugin once rewrote them with every
// GPU healthy before it failed on the admin socket.
func TestBinary_SecondInstance_LeavesTheFilesAlone(t *testing.T) {
	n := newNode(t)
	p, _ := n.start(t, "-node-name=node-a", "-metrics-address=127.0.0.1:0", "-telemetry-address=127.0.0.1:0")
	address := func(msg string) string {
		t.Helper()
		var line struct{ Address string }
		if err := json.Unmarshal([]byte(p.logs.waitLine(t, msg)), &line); err != nil || line.Address == "" {
			t.Fatalf("address from the log line %q: %v", msg, err)
		}
		return line.Address
	}
	metricsAddr, telemetryAddr := address("serving /metrics"), address("serving GPU telemetry")
	if _, errOut, code := cli(t, "health", "set", "fake-1", "unhealthy", "--reason", "XID 79", "-state="+n.state); code != 0 {
		t.Fatalf("health set: exit %d: %s", code, errOut)
	}
	statusDir := filepath.Join(filepath.Dir(n.state), "status")
	before := statusFiles(t, statusDir)
	if len(before) != 4 {
		t.Fatalf("status files %v, want one per GPU", slices.Sorted(maps.Keys(before)))
	}
	otherDir := filepath.Join(n.dir, "dp2")
	if err := os.Mkdir(otherDir, 0o755); err != nil {
		t.Fatal(err)
	}
	otherAdmin := "-admin-socket=" + filepath.Join(filepath.Dir(n.state), "b-admin.sock")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"admin socket", []string{"-device-plugin-path=" + otherDir},
			"admin API: socket " + filepath.Join(filepath.Dir(n.state), "admin.sock") + ": another process is listening on it"},
		{"device-plugin socket", []string{"-device-plugin-path=" + n.dir, otherAdmin},
			"socket " + filepath.Join(n.dir, "virtual-gpu.sock") + ": another process is listening on it; stop that process"},
		{"metrics address", []string{"-device-plugin-path=" + otherDir, otherAdmin, "-metrics-address=" + metricsAddr}, "-metrics-address: "},
		{"telemetry address", []string{"-device-plugin-path=" + otherDir, otherAdmin, "-telemetry-address=" + telemetryAddr}, "-telemetry-address: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Another state file in the same directory: the same status
			// directory, tools directory and load socket directory.
			args := append([]string{"-state=" + filepath.Join(filepath.Dir(n.state), "b.db"), "-node-name=node-a",
				"-pod-resources-socket=" + n.podResources()}, tc.args...)
			_, errOut, code := cli(t, args...)
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			if last := lines[len(lines)-1]; code != 1 || !strings.Contains(last, tc.want) {
				t.Errorf("second plugin: exit %d, last line %q; want exit 1 and %q", code, last, tc.want)
			}
			after := statusFiles(t, statusDir)
			for name, b := range before {
				if !slices.Equal(after[name], b) {
					t.Errorf("status file %s changed:\nbefore %s\nafter  %s", name, b, after[name])
				}
			}
			if len(after) != len(before) {
				t.Errorf("status files %v, want %v", slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
			}
			if _, err := os.Stat(filepath.Join(statusDir, status.LiveFileName)); err != nil {
				t.Errorf("the running plugin's live telemetry file: %v", err)
			}
		})
	}
	// The running plugin still says fake-1 is unhealthy where it counts.
	out, errOut, code := cli(t, "health", "list", "-state="+n.state)
	if code != 0 || !strings.Contains(out, "XID 79") {
		t.Errorf("health list after the second plugins: exit %d %s\n%s", code, errOut, out)
	}
	p.stop(t)
}

// statusFiles returns the content of each GPU status file in dir, by name
// (the live telemetry file, which the running plugin rewrites, left out).
func statusFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if e.Name() == status.LiveFileName || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}
