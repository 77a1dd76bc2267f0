package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

func intp(n int) *int { return &n }

// snapshotFixture has a device the kubelet was told no NUMA node for, one
// whose reported node is unknown, a removed one, a reason with control
// characters, device UUIDs (one not stored yet), history with configuration
// changes and a damaged record.
func snapshotFixture() Snapshot {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	return Snapshot{
		APIVersion: APIVersion, Kind: KindSnapshot,
		Source: SourceInfo{Type: SourcePlugin, Path: "/run/vgpu/sock"},
		Devices: []Device{
			{ID: "fake-0", Index: 0, UUID: "GPU-5e3f8a2c-1b4d-9e7f-0a6c-3d2b1e4f5a6b", NUMANode: 0, ReportedNUMANode: intp(0), Healthy: true, Since: t0,
				Holder: &Holder{Seq: 7, State: "held", Namespace: "default", Pod: "vgpu-demo", Container: "demo"}},
			{ID: "fake-1", Index: 1, UUID: "GPU-0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5", NUMANode: 1, ReportedNUMANode: intp(-1), Healthy: false, Reason: "XID 79\n\x1b[2Jgone\tnow", Since: t0,
				Holder: &Holder{Seq: 8, State: "allocated"}},
			{ID: "fake-2", Index: 2, NUMANode: 1, Healthy: true, Since: t0},
			{ID: "fake-3", Index: 3, NUMANode: 1, Healthy: true, Since: t0, Removed: true, RemovedAt: t0},
		},
		Allocations: []Allocation{{Seq: 8, Time: t0, DeviceIDs: []string{"fake-1"}, State: "allocated"},
			{Seq: 7, Time: t0, DeviceIDs: []string{"fake-0"}, State: "held", Namespace: "default", Pod: "vgpu-demo", Container: "demo", HeldSince: t0}},
		HealthEvents: []HealthEvent{{Seq: 3, Time: t0, DeviceID: "fake-1", Reason: "XID 79\n\x1b[2Jgone\tnow", Cause: "admin"}},
		ConfigEvents: []ConfigEvent{
			{Seq: 2, Time: t0, Profile: "three", PreviousProfile: "four", Why: "node-label", Detail: "unicore.mcyou.cc/gpu-profile=three\x1b",
				ResourceName: "unicore.mcyou.cc/gpu", Machine: "workstation-4gpu", Devices: 3, Replicas: 2, Removed: []string{"fake-3"}},
			{Seq: 1, Time: t0.Add(-time.Hour), Why: "flags", ResourceName: "unicore.mcyou.cc/gpu", Machine: "workstation-4gpu", Devices: 4,
				Added: []string{"fake-0", "fake-1", "fake-2", "fake-3"}},
		},
		DamagedRecords: []DamagedRecord{{Bucket: "allocations", Key: "0000000000000009", Reason: "not JSON: \x00\xff"}},
	}
}

func renderSnapshot(t *testing.T, snap Snapshot, o PrintOptions) string {
	t.Helper()
	var out bytes.Buffer
	if err := Print(&out, snap, o); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestPrint_Table(t *testing.T) {
	out := renderSnapshot(t, snapshotFixture(), PrintOptions{Format: "table"})
	t.Logf("\n%s", out)
	for _, want := range []string{
		"source: plugin /run/vgpu/sock",
		"DEVICE  NUMA     HEALTH",
		`XID 79\n\x1b[2Jgone\tnow`,
		"CONFIG EVENT",
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
		if got := plugintest.Fields(t, out, prefix)[1]; got != numa {
			t.Errorf("%sNUMA = %q, want %q", prefix, got, numa)
		}
	}
	if got := plugintest.Fields(t, out, "fake-0 "); got[len(got)-1] != "default/vgpu-demo/demo" {
		t.Errorf("fake-0 holder = %v", got)
	}
	if got := plugintest.Fields(t, out, "fake-1 "); got[len(got)-2] != "#8" || got[len(got)-1] != "(allocated)" {
		t.Errorf("fake-1 holder = %v", got)
	}
	if strings.Contains(out, "GPU-") {
		t.Errorf("UUIDs are for wide output only:\n%s", out)
	}
	if h := plugintest.Fields(t, out, "CONFIG EVENT"); strings.Join(h, " ") != "CONFIG EVENT TIME PROFILE WHY MACHINE DEVICES CHANGES" {
		t.Errorf("config event header = %v", h)
	}
	if got := strings.Join(plugintest.Fields(t, out, "2 "), " "); got != "2 2026-11-30T08:00:00Z three node-label workstation-4gpu 3 removed fake-3" {
		t.Errorf("config event 2 = %q", got)
	}
	if got := strings.Join(plugintest.Fields(t, out, "1 "), " "); got != "1 2026-11-30T07:00:00Z - flags workstation-4gpu 4 added fake-0,fake-1,fake-2,fake-3" {
		t.Errorf("config event 1 = %q", got)
	}
	// Newest first, before the damaged records.
	if i, j, k := strings.Index(out, "\n2  "), strings.Index(out, "\n1  "), strings.Index(out, "DAMAGED"); !(0 <= i && i < j && j < k) {
		t.Errorf("config events out of order:\n%s", out)
	}
}

func TestPrint_Wide(t *testing.T) {
	out := renderSnapshot(t, snapshotFixture(), PrintOptions{Format: "wide"})
	if h := plugintest.Fields(t, out, "DEVICE"); strings.Join(h, " ") != "DEVICE INDEX UUID NUMA TOPOLOGY NUMA HEALTH REASON SINCE HOLDER ALLOCATION" {
		t.Errorf("wide header = %v", h)
	}
	// fake-1: its UUID, told no NUMA node, topology node 1.
	if got := plugintest.Fields(t, out, "fake-1 "); got[1] != "1" || got[2] != "GPU-0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5" || got[3] != "-" || got[4] != "1" || got[len(got)-2] != "#8" {
		t.Errorf("fake-1 wide = %v, want index 1, its UUID, NUMA -, topology NUMA 1, allocation #8", got)
	}
	// fake-2 has no UUID stored yet.
	if got := plugintest.Fields(t, out, "fake-2 "); got[2] != "-" {
		t.Errorf("fake-2 wide = %v, want UUID -", got)
	}
	if h := plugintest.Fields(t, out, "CONFIG EVENT"); strings.Join(h, " ") != "CONFIG EVENT TIME PROFILE PREVIOUS WHY DETAIL RESOURCE MACHINE DEVICES REPLICAS CHANGES" {
		t.Errorf("wide config event header = %v", h)
	}
	want := `2 2026-11-30T08:00:00Z three four node-label unicore.mcyou.cc/gpu-profile=three\x1b unicore.mcyou.cc/gpu workstation-4gpu 3 2 removed fake-3`
	if got := strings.Join(plugintest.Fields(t, out, "2 "), " "); got != want {
		t.Errorf("wide config event 2 = %q\nwant %q", got, want)
	}
	if got := plugintest.Fields(t, out, "1 "); got[3] != "-" || got[len(got)-3] != "-" {
		t.Errorf("wide config event 1 = %v, want no previous profile, no replicas", got)
	}
}

func TestPrint_NoHeaders(t *testing.T) {
	snap := snapshotFixture()
	snap.Allocations, snap.HealthEvents, snap.DamagedRecords = []Allocation{}, []HealthEvent{}, []DamagedRecord{}
	snap.ConfigEvents = []ConfigEvent{}
	out := renderSnapshot(t, snap, PrintOptions{Format: "table", NoHeaders: true})
	for _, absent := range []string{"source:", "DEVICE", "SEQ", "EVENT", "(no ", "DAMAGED"} {
		if strings.Contains(out, absent) {
			t.Errorf("--no-headers output has %q:\n%s", absent, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 4 {
		t.Errorf("--no-headers output has %d lines, want the 4 devices:\n%s", n, out)
	}
	devs := renderSnapshot(t, Snapshot{Devices: snap.Devices}, PrintOptions{Format: "table"})
	if strings.Contains(devs, "source:") || strings.Contains(devs, "SEQ") || strings.Count(devs, "\n") != 5 {
		t.Errorf("a devices-only snapshot prints more than the device table:\n%s", devs)
	}
}

// TestPrint_EmptyHistory: every history section says it is empty;
// an answer without configEvents (a plugin older than them) reads as none.
func TestPrint_EmptyHistory(t *testing.T) {
	snap := snapshotFixture()
	snap.Allocations, snap.HealthEvents, snap.ConfigEvents = []Allocation{}, []HealthEvent{}, nil
	out := renderSnapshot(t, snap, PrintOptions{Format: "table"})
	for _, want := range []string{"(no allocations)", "(no health events)", "CONFIG EVENT", "(no config events)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestPrint_NoDamageNoSection(t *testing.T) {
	snap := snapshotFixture()
	snap.DamagedRecords = []DamagedRecord{}
	if out := renderSnapshot(t, snap, PrintOptions{Format: "table"}); strings.Contains(out, "DAMAGED") {
		t.Errorf("damaged-record section without damaged records:\n%s", out)
	}
}

// TestPrint_YAMLIsTheJSONDocument: -o yaml is the same document as
// -o json, key for key.
func TestPrint_YAMLIsTheJSONDocument(t *testing.T) {
	snap := snapshotFixture()
	var fromJSON, fromYAML Snapshot
	if err := json.Unmarshal([]byte(renderSnapshot(t, snap, PrintOptions{Format: "json"})), &fromJSON); err != nil {
		t.Fatal(err)
	}
	y := renderSnapshot(t, snap, PrintOptions{Format: "yaml"})
	if err := yaml.UnmarshalStrict([]byte(y), &fromYAML); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Errorf("json and yaml differ:\n%#v\n%#v", fromJSON, fromYAML)
	}
	for _, want := range []string{"apiVersion: virtual-gpu.unicore.mcyou.cc/v1\n", "kind: Snapshot\n", "  reportedNUMANode: -1\n", "healthEvents:\n", "configEvents:\n", "  uuid: GPU-5e3f8a2c-1b4d-9e7f-0a6c-3d2b1e4f5a6b\n", "damagedRecords:\n"} {
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

// sharedSnapshotFixture has fake-0 shared as 3 replicas, two in use (one
// held by a pod, one allocated), and fake-1 whole.
func sharedSnapshotFixture() Snapshot {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	held := Holder{Seq: 9, State: "held", Namespace: "default", Pod: "a", Container: "c"}
	alloc := Holder{Seq: 8, State: "allocated"}
	replica := func(j int, h *Holder) Device {
		return Device{ID: fmt.Sprintf("fake-0::%d", j), GPU: "fake-0", Replica: intp(j), ReportedNUMANode: intp(0), Healthy: true, Since: t0, Holder: h}
	}
	withIDs := func(h Holder, ids ...string) Holder { h.DeviceIDs = ids; return h }
	return Snapshot{
		APIVersion: APIVersion, Kind: KindSnapshot,
		Devices: []Device{
			{ID: "fake-0", ReportedNUMANode: intp(0), Healthy: true, Since: t0,
				Replicas: &ReplicaUse{Total: 3, InUse: 2, Holders: []Holder{withIDs(held, "fake-0::2"), withIDs(alloc, "fake-0::0")}}},
			replica(0, &alloc), replica(1, nil), replica(2, &held),
			{ID: "fake-1", Index: 1, NUMANode: 1, ReportedNUMANode: intp(1), Healthy: true, Since: t0, Holder: &alloc},
		},
	}
}

// The table folds a shared GPU's replicas into its row: in use out of the
// total, and their holders; wide lists the replicas too.
func TestPrint_Replicas(t *testing.T) {
	out := renderSnapshot(t, sharedSnapshotFixture(), PrintOptions{Format: "table", NoHeaders: false})
	t.Logf("\n%s", out)
	if h := strings.Join(plugintest.Fields(t, out, "DEVICE"), " "); h != "DEVICE NUMA HEALTH REASON SINCE REPLICAS HOLDER" {
		t.Errorf("header = %q", h)
	}
	if got := strings.Join(plugintest.Fields(t, out, "fake-0 "), " "); got != "fake-0 0 Healthy - 2026-11-30T08:00:00Z 2/3 default/a/c,#8 (allocated)" {
		t.Errorf("fake-0 = %q", got)
	}
	if got := strings.Join(plugintest.Fields(t, out, "fake-1 "), " "); got != "fake-1 1 Healthy - 2026-11-30T08:00:00Z - #8 (allocated)" {
		t.Errorf("fake-1 = %q", got)
	}
	if strings.Contains(out, "fake-0::") {
		t.Errorf("replica rows in the table:\n%s", out)
	}
	wide := renderSnapshot(t, sharedSnapshotFixture(), PrintOptions{Format: "wide"})
	t.Logf("\n%s", wide)
	if got := strings.Join(plugintest.Fields(t, wide, "fake-0 "), " "); !strings.HasSuffix(got, "2/3 default/a/c,#8 (allocated) #9 held,#8 allocated") {
		t.Errorf("wide fake-0 = %q", got)
	}
	if got := strings.Join(plugintest.Fields(t, wide, "fake-0::2 "), " "); !strings.HasSuffix(got, "Healthy - 2026-11-30T08:00:00Z - default/a/c #9 held") {
		t.Errorf("wide fake-0::2 = %q", got)
	}
	if got := plugintest.Fields(t, wide, "fake-0::1 "); got[len(got)-3] != "-" || got[len(got)-1] != "-" {
		t.Errorf("wide fake-0::1 = %v, want free", got)
	}
}

func TestCompactIDs(t *testing.T) {
	for _, tc := range []struct {
		ids  []string
		want string
	}{
		{nil, ""},
		{[]string{"fake-0", "fake-1", "fake-2"}, "fake-0,fake-1,fake-2"},
		{[]string{"fake-10", "fake-2", "fake-1"}, "fake-1,fake-2,fake-10"},
		{[]string{"fake-0::0", "fake-0::1", "fake-0::2", "fake-0::3"}, "fake-0::0-3"},
		{[]string{"fake-0::0", "fake-0::1", "fake-0::10", "fake-0::11", "fake-0::2"}, "fake-0::0-2,fake-0::10-11"},
		{[]string{"fake-1::0", "fake-0::3", "fake-1", "fake-0::2"}, "fake-0::2-3,fake-1,fake-1::0"},
		{[]string{"odd", "fake-0::0", "fake-00::1"}, "fake-0::0,odd,fake-00::1"},
	} {
		if got := compactIDs(tc.ids); got != tc.want {
			t.Errorf("compactIDs(%q) = %q, want %q", tc.ids, got, tc.want)
		}
	}
}

// claimsSnapshotFixture is snapshotFixture on a node that also has claims:
// fake-2 held by a prepared claim for two pods, an unprepared claim between
// the two allocations, and a prepared one newer than both.
func claimsSnapshotFixture() Snapshot {
	snap := snapshotFixture()
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	snap.Allocations[0].Time = t0.Add(2 * time.Minute) // 8 at +2m, 7 at +0m
	snap.Devices[2].Holder = &Holder{Seq: 3, State: ClaimPrepared, Namespace: "team", Claim: "train", ClaimUID: "uid-3", Pods: []string{"w0", "w1"}}
	snap.Claims = []Claim{
		{Seq: 3, UID: "uid-3", Namespace: "team", Name: "train", DeviceIDs: []string{"fake-2"}, State: ClaimPrepared, PreparedAt: t0.Add(3 * time.Minute),
			ReservedFor: []ClaimConsumer{{Resource: "pods", Name: "w0", UID: "pod-uid-w0"}, {Resource: "pods", Name: "w1", UID: "pod-uid-w1"}}},
		{Seq: 2, UID: "uid-2", Namespace: "team", Name: "old\x1b", DeviceIDs: []string{"fake-0", "fake-1"}, State: ClaimUnprepared,
			PreparedAt: t0.Add(time.Minute), UnpreparedAt: t0.Add(90 * time.Second),
			ReservedFor: []ClaimConsumer{{Resource: "jobs", Name: "j", UID: "job-uid"}}},
		{Seq: 1, UID: "uid-1", Namespace: "team", Name: "first", DeviceIDs: []string{"fake-1"}, State: ClaimUnprepared,
			PreparedAt: t0, UnpreparedAt: t0.Add(30 * time.Second)},
	}
	return snap
}

// TestPrint_OneHistory: with claims, the allocations section lists
// allocations and claims together, newest first across the kinds (an
// allocation first on a tie), a KIND column saying which; a claim shows
// its namespace/name, its pods and when it was unprepared; wide adds the
// claim's uid and its consumers' uids. A device held by a claim names it.
func TestPrint_OneHistory(t *testing.T) {
	out := renderSnapshot(t, claimsSnapshotFixture(), PrintOptions{Format: "table"})
	t.Logf("\n%s", out)
	if h := strings.Join(plugintest.Fields(t, out, "SEQ"), " "); h != "SEQ KIND TIME DEVICES STATE NAME POD HELD SINCE RELEASED" {
		t.Errorf("history header = %q", h)
	}
	var rows []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && (f[1] == "allocation" || f[1] == "claim") {
			rows = append(rows, strings.Join(f, " "))
		}
	}
	want := []string{
		"3 claim 2026-11-30T08:03:00Z fake-2 prepared team/train team/w0,team/w1 - -",
		"8 allocation 2026-11-30T08:02:00Z fake-1 allocated - - - -",
		`2 claim 2026-11-30T08:01:00Z fake-0,fake-1 unprepared team/old\x1b team/j (jobs) - 2026-11-30T08:01:30Z`,
		"7 allocation 2026-11-30T08:00:00Z fake-0 held - default/vgpu-demo/demo 2026-11-30T08:00:00Z -",
		"1 claim 2026-11-30T08:00:00Z fake-1 unprepared team/first - - 2026-11-30T08:00:30Z",
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("history rows:\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(out, "uid-3") || strings.Contains(out, "(no allocations)") {
		t.Errorf("uids are for wide output only, and the history is not empty:\n%s", out)
	}
	if got := strings.Join(plugintest.Fields(t, out, "fake-2 "), " "); !strings.HasSuffix(got, "team/train (claim)") {
		t.Errorf("fake-2 = %q, want held by the claim team/train", got)
	}
	if strings.ContainsAny(out, "\x1b") {
		t.Errorf("a raw control character reached the table")
	}

	wide := renderSnapshot(t, claimsSnapshotFixture(), PrintOptions{Format: "wide"})
	t.Logf("\n%s", wide)
	if h := strings.Join(plugintest.Fields(t, wide, "SEQ"), " "); h != "SEQ KIND TIME DEVICES STATE NAME UID POD POD UIDS HELD SINCE RELEASED" {
		t.Errorf("wide history header = %q", h)
	}
	for prefix, want := range map[string]string{
		"3 ": "3 claim 2026-11-30T08:03:00Z fake-2 prepared team/train uid-3 team/w0,team/w1 pod-uid-w0,pod-uid-w1 - -",
		"8 ": "8 allocation 2026-11-30T08:02:00Z fake-1 allocated - - - - - -",
		"1 ": "1 claim 2026-11-30T08:00:00Z fake-1 unprepared team/first uid-1 - - - 2026-11-30T08:00:30Z",
	} {
		if got := strings.Join(plugintest.Fields(t, wide, prefix), " "); got != want {
			t.Errorf("wide row %q\nwant     %q", got, want)
		}
	}
	if got := strings.Join(plugintest.Fields(t, wide, "fake-2 "), " "); !strings.HasSuffix(got, "team/train (claim) claim #3 prepared") {
		t.Errorf("wide fake-2 = %q, want the claim as holder and allocation", got)
	}
}

// TestPrint_NoClaims_HistoryAsBefore: without claims the allocations
// section is what it always was, in table and wide: no KIND column, no
// claim columns.
func TestPrint_NoClaims_HistoryAsBefore(t *testing.T) {
	for _, format := range []string{"table", "wide"} {
		out := renderSnapshot(t, snapshotFixture(), PrintOptions{Format: format})
		if h := strings.Join(plugintest.Fields(t, out, "SEQ"), " "); h != "SEQ TIME DEVICES STATE POD HELD SINCE RELEASED" {
			t.Errorf("%s: allocations header = %q", format, h)
		}
		if got := strings.Join(plugintest.Fields(t, out, "7 "), " "); got != "7 2026-11-30T08:00:00Z fake-0 held default/vgpu-demo/demo 2026-11-30T08:00:00Z -" {
			t.Errorf("%s: allocation 7 = %q", format, got)
		}
		if strings.Contains(out, "KIND") || strings.Contains(out, "claim") {
			t.Errorf("%s: a snapshot without claims prints claim columns:\n%s", format, out)
		}
	}
	empty := snapshotFixture()
	empty.Allocations, empty.Claims = []Allocation{}, nil
	if out := renderSnapshot(t, empty, PrintOptions{Format: "table"}); !strings.Contains(out, "(no allocations)") {
		t.Errorf("no allocations and no claims: no placeholder:\n%s", out)
	}
}

// TestPrint_ClaimsJSON: json has no "claims" key without claims; with
// claims, yaml is still the json document.
func TestPrint_ClaimsJSON(t *testing.T) {
	if out := renderSnapshot(t, snapshotFixture(), PrintOptions{Format: "json"}); strings.Contains(out, "claim") {
		t.Errorf("json without claims mentions claims:\n%s", out)
	}
	snap := claimsSnapshotFixture()
	var fromJSON, fromYAML Snapshot
	if err := json.Unmarshal([]byte(renderSnapshot(t, snap, PrintOptions{Format: "json"})), &fromJSON); err != nil {
		t.Fatal(err)
	}
	y := renderSnapshot(t, snap, PrintOptions{Format: "yaml"})
	if err := yaml.UnmarshalStrict([]byte(y), &fromYAML); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) || !reflect.DeepEqual(fromJSON.Claims, snap.Claims) {
		t.Errorf("json and yaml differ, or lose the claims:\n%#v\n%#v", fromJSON, fromYAML)
	}
	for _, want := range []string{"claims:\n", "  reservedFor:\n", "  unpreparedAt: \"2026-11-30T08:01:30Z\"\n", "    claimUID: uid-3\n", "    pods:\n    - w0\n"} {
		if !strings.Contains(y, want) {
			t.Errorf("yaml lacks %q:\n%s", want, y)
		}
	}
}
