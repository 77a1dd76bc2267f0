package topology_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func TestNodeIdentity(t *testing.T) {
	const mid = "0123456789abcdef0123456789ABCDEF"
	for _, tc := range []struct {
		name, nodeName, machineID string
		want, source, err         string
	}{
		{name: "node name wins", nodeName: "node-a", machineID: mid, want: "node-a", source: topology.IdentityNodeName},
		{name: "node name trimmed", nodeName: " node-a\n", want: "node-a", source: topology.IdentityNodeName},
		{name: "machine id, newline dropped, lower case", machineID: mid + "\n", want: strings.ToLower(mid), source: topology.IdentityMachineID},
		{name: "blank node name falls back", nodeName: "  ", machineID: mid, want: strings.ToLower(mid), source: topology.IdentityMachineID},
		{name: "neither", err: "set -node-name, or provide /etc/machine-id"},
		{name: "empty machine id file", machineID: "\n", err: "set -node-name, or provide /etc/machine-id"},
		{name: "uninitialized", machineID: "uninitialized\n", err: `machine id "uninitialized" is not 32 hexadecimal digits`},
		{name: "too short", machineID: "0123", err: `machine id "0123" is not`},
		{name: "not hex", machineID: "0123456789abcdef0123456789abcdeg", err: "not 32 hexadecimal digits"},
		{name: "long garbage clipped", machineID: strings.Repeat("x", 100), err: strings.Repeat("x", 64) + "…\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, source, err := topology.NodeIdentity(tc.nodeName, tc.machineID)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("NodeIdentity = %q, %q, %v; want an error containing %q", got, source, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || source != tc.source {
				t.Errorf("NodeIdentity = %q, %q, %v; want %q, %q", got, source, err, tc.want, tc.source)
			}
		})
	}
}

// TestReadMachineID: the file's content; "" for a missing file, a
// directory and a file too big to be a machine id.
func TestReadMachineID(t *testing.T) {
	dir := t.TempDir()
	id := filepath.Join(dir, "machine-id")
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(id, []byte("0123456789abcdef0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{id: "0123456789abcdef0123456789abcdef\n", big: "", dir: "", filepath.Join(dir, "none"): ""} {
		if got := topology.ReadMachineID(path); got != want {
			t.Errorf("ReadMachineID(%s) = %q, want %q", path, got, want)
		}
	}
}
