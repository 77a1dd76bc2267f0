package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
)

func intp(n int) *int { return &n }

// snapshotFixture has a device the kubelet was told no NUMA node for, one
// whose reported node is unknown, a removed one, a reason with control
// characters, history and a damaged record.
func snapshotFixture() admin.Snapshot {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	return admin.Snapshot{
		APIVersion: admin.APIVersion, Kind: admin.KindSnapshot,
		Source: admin.SourceInfo{Type: admin.SourcePlugin, Path: "/run/vgpu/admin.sock"},
		Devices: []admin.Device{
			{ID: "fake-0", Index: 0, NUMANode: 0, ReportedNUMANode: intp(0), Healthy: true, Since: t0,
				Holder: &admin.Holder{Seq: 7, State: "held", Namespace: "default", Pod: "vgpu-demo", Container: "demo"}},
			{ID: "fake-1", Index: 1, NUMANode: 1, ReportedNUMANode: intp(-1), Healthy: false, Reason: "XID 79\n\x1b[2Jgone\tnow", Since: t0,
				Holder: &admin.Holder{Seq: 8, State: "allocated"}},
			{ID: "fake-2", Index: 2, NUMANode: 1, Healthy: true, Since: t0},
			{ID: "fake-3", Index: 3, NUMANode: 1, Healthy: true, Since: t0, Removed: true, RemovedAt: t0},
		},
		Allocations: []admin.Allocation{{Seq: 8, Time: t0, DeviceIDs: []string{"fake-1"}, State: "allocated"},
			{Seq: 7, Time: t0, DeviceIDs: []string{"fake-0"}, State: "held", Namespace: "default", Pod: "vgpu-demo", Container: "demo", HeldSince: t0}},
		HealthEvents:   []admin.HealthEvent{{Seq: 3, Time: t0, DeviceID: "fake-1", Reason: "XID 79\n\x1b[2Jgone\tnow", Cause: "admin"}},
		DamagedRecords: []admin.DamagedRecord{{Bucket: "allocations", Key: "0000000000000009", Reason: "not JSON: \x00\xff"}},
	}
}

func renderSnapshot(t *testing.T, snap admin.Snapshot, f inspectFlags) string {
	t.Helper()
	var out bytes.Buffer
	if err := writeSnapshot(&out, snap, f); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// fields returns the cells of the output line starting with prefix.
func fields(t *testing.T, out, prefix string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return strings.Fields(line)
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", prefix, out)
	return nil
}

func TestWriteSnapshot_Table(t *testing.T) {
	out := renderSnapshot(t, snapshotFixture(), inspectFlags{output: "table"})
	t.Logf("\n%s", out)
	for _, want := range []string{
		"source: plugin /run/vgpu/admin.sock",
		"DEVICE  NUMA     HEALTH",
		`XID 79\n\x1b[2Jgone\tnow`,
		"DAMAGED RECORD",
		`not JSON: \x00\xff`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.ContainsAny(out, "\x1b\t\x00") || !utf8.ValidString(out) {
		t.Errorf("raw control characters or invalid UTF-8 reached the table: %q", out)
	}
	// The NUMA column is what the kubelet was told.
	for prefix, numa := range map[string]string{"fake-0 ": "0", "fake-1 ": "-", "fake-2 ": "unknown", "fake-3 ": "-"} {
		if got := fields(t, out, prefix)[1]; got != numa {
			t.Errorf("%sNUMA = %q, want %q", prefix, got, numa)
		}
	}
	if got := fields(t, out, "fake-0 "); got[len(got)-1] != "default/vgpu-demo/demo" {
		t.Errorf("fake-0 holder = %v", got)
	}
	if got := fields(t, out, "fake-1 "); got[len(got)-2] != "#8" || got[len(got)-1] != "(allocated)" {
		t.Errorf("fake-1 holder = %v", got)
	}
}

func TestWriteSnapshot_Wide(t *testing.T) {
	out := renderSnapshot(t, snapshotFixture(), inspectFlags{output: "wide"})
	if h := fields(t, out, "DEVICE"); strings.Join(h, " ") != "DEVICE INDEX NUMA TOPOLOGY NUMA HEALTH REASON SINCE HOLDER ALLOCATION" {
		t.Errorf("wide header = %v", h)
	}
	// fake-1: told no NUMA node, topology node 1.
	if got := fields(t, out, "fake-1 "); got[1] != "1" || got[2] != "-" || got[3] != "1" || got[len(got)-2] != "#8" {
		t.Errorf("fake-1 wide = %v, want index 1, NUMA -, topology NUMA 1, allocation #8", got)
	}
}

func TestWriteSnapshot_NoHeaders(t *testing.T) {
	snap := snapshotFixture()
	snap.Allocations, snap.HealthEvents, snap.DamagedRecords = []admin.Allocation{}, []admin.HealthEvent{}, []admin.DamagedRecord{}
	out := renderSnapshot(t, snap, inspectFlags{output: "table", noHeaders: true})
	for _, absent := range []string{"source:", "DEVICE", "SEQ", "EVENT", "(no ", "DAMAGED"} {
		if strings.Contains(out, absent) {
			t.Errorf("--no-headers output has %q:\n%s", absent, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 4 {
		t.Errorf("--no-headers output has %d lines, want the 4 devices:\n%s", n, out)
	}
	devs := renderSnapshot(t, admin.Snapshot{Devices: snap.Devices}, inspectFlags{output: "table"})
	if strings.Contains(devs, "source:") || strings.Contains(devs, "SEQ") || strings.Count(devs, "\n") != 5 {
		t.Errorf("a devices-only snapshot prints more than the device table:\n%s", devs)
	}
}

func TestWriteSnapshot_NoDamageNoSection(t *testing.T) {
	snap := snapshotFixture()
	snap.DamagedRecords = []admin.DamagedRecord{}
	if out := renderSnapshot(t, snap, inspectFlags{output: "table"}); strings.Contains(out, "DAMAGED") {
		t.Errorf("damaged-record section without damaged records:\n%s", out)
	}
}

// TestWriteSnapshot_YAMLIsTheJSONDocument: -o yaml is the same document as
// -o json, key for key.
func TestWriteSnapshot_YAMLIsTheJSONDocument(t *testing.T) {
	snap := snapshotFixture()
	var fromJSON, fromYAML admin.Snapshot
	if err := json.Unmarshal([]byte(renderSnapshot(t, snap, inspectFlags{output: "json"})), &fromJSON); err != nil {
		t.Fatal(err)
	}
	y := renderSnapshot(t, snap, inspectFlags{output: "yaml"})
	if err := yaml.UnmarshalStrict([]byte(y), &fromYAML); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Errorf("json and yaml differ:\n%#v\n%#v", fromJSON, fromYAML)
	}
	for _, want := range []string{"apiVersion: virtual-gpu.unicore.mcyou.cc/v1\n", "kind: Snapshot\n", "  reportedNUMANode: -1\n", "healthEvents:\n", "damagedRecords:\n"} {
		if !strings.Contains(y, want) {
			t.Errorf("yaml lacks %q:\n%s", want, y)
		}
	}
}

func TestCell(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "-"},
		{"XID 79", "XID 79"},
		{"a\nb", `a\nb`},
		{"tab\there", `tab\there`},
		{"\x1b[31mred", `\x1b[31mred`},
		{"bad \xff byte", `bad \xff byte`},
		{"rtl \u202e override", `rtl \u202e override`},
		{"ünïcödé ✓", "ünïcödé ✓"},
	}
	for _, tt := range tests {
		if got := cell(tt.in); got != tt.want {
			t.Errorf("cell(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzCell: whatever a stored string holds, its cell is valid UTF-8 without
// a character that could break a column or drive the terminal.
func FuzzCell(f *testing.F) {
	for _, s := range []string{"", "fake-0", "a\nb", "\x1b[2J", "\xff\xfe", "\u202e", "\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := cell(s)
		if !utf8.ValidString(c) {
			t.Fatalf("cell(%q) = %q: invalid UTF-8", s, c)
		}
		for _, r := range c {
			if r != ' ' && !unicode.IsPrint(r) {
				t.Fatalf("cell(%q) = %q holds %U", s, c, r)
			}
		}
	})
}
