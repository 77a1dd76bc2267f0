package nvidiasmi_test

import (
	"encoding/xml"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// h100MIG are the MIG devices of an H100 80GB HBM3 as the plugin writes
// them into status files (plugin/view: profile facts of topology/mig, GPU
// instance ids by placement): the all-balanced layout of GPU 0 (as a real
// H100 on driver 590.48.01 had it) and all-3g.40gb of GPU 1.
func h100MIG(i int) []status.MIGDevice {
	dev := func(profile string, id, start, size, gi, mib, sms, ce, dec, jpg, ofa int) status.MIGDevice {
		mid := topology.MIGID(i, profile, start)
		return status.MIGDevice{ID: mid, UUID: topology.DeriveMIGUUID("node-a", mid), Profile: profile, ProfileID: id, GPUInstanceID: gi,
			PlacementStart: start, PlacementSize: size, MemoryMiB: mib, Multiprocessors: sms, CopyEngines: ce, Decoders: dec, JPEGs: jpg, OFAs: ofa}
	}
	if i == 0 {
		return []status.MIGDevice{
			dev("3g.40gb", 9, 4, 4, 2, 40448, 60, 3, 3, 3, 0),
			dev("2g.20gb", 14, 0, 2, 3, 20096, 32, 2, 2, 2, 0),
			dev("1g.10gb", 19, 2, 1, 9, 9984, 16, 1, 1, 1, 0),
			dev("1g.10gb", 19, 3, 1, 10, 9984, 16, 1, 1, 1, 0),
		}
	}
	return []status.MIGDevice{dev("3g.40gb", 9, 0, 4, 1, 40448, 60, 3, 3, 3, 0), dev("3g.40gb", 9, 4, 4, 2, 40448, 60, 3, 3, 3, 0)}
}

// migFixture is a container of GPUs 0 and 1 of hgx-h100 with MIG on,
// holding the devices ids (GPU ids: whole; MIG device ids: those).
func migFixture(t *testing.T, ids ...string) *fixture {
	t.Helper()
	return migFixtureWith(t, nil, ids...)
}

// migFixtureWith is migFixture with the status files changed by mutate
// (nil: none) after their MIG devices are set.
func migFixtureWith(t *testing.T, mutate func(pos int, g *status.GPU), ids ...string) *fixture {
	t.Helper()
	f := newFixture(t, mustPreset(t, "hgx-h100"), []int{0, 1}, func(pos int, g *status.GPU) {
		g.MIGEnabled, g.MIGDevices = true, h100MIG(pos)
		if mutate != nil {
			mutate(pos, g)
		}
	})
	f.env[nvidiasmi.EnvIDs] = strings.Join(ids, ",")
	var uuids []string // one per GPU held, as the plugin sets them
	seen := map[int]bool{}
	for _, id := range ids {
		if i, ok := topology.GPUOf(id); ok && !seen[i] {
			seen[i] = true
			uuids = append(uuids, f.gpus[i].UUID)
		}
	}
	f.env[status.EnvUUIDs] = strings.Join(uuids, ",")
	return f
}

func TestMain_GoldenMIG(t *testing.T) {
	whole := func(t *testing.T) *fixture { return migFixture(t, "fake-0", "fake-1") }
	one := func(t *testing.T) *fixture {
		return migFixture(t, topology.MIGID(0, "1g.10gb", 3), topology.MIGID(1, "3g.40gb", 4))
	}
	noMIG := func(t *testing.T) *fixture { return newFixture(t, mustPreset(t, "hgx-h100"), []int{0}, nil) }
	busy := func(t *testing.T) *fixture {
		// This container's process on its 1g.10gb of GPU 0, using 4926 MiB of it.
		return migFixtureWith(t, func(pos int, g *status.GPU) {
			if pos == 0 {
				g.Telemetry.UtilizationGPUPercent, g.Telemetry.MemoryUsedMiB = 80, 4926
				g.Telemetry.Holders = []status.Holder{{Namespace: "ml", Pod: testPod, Container: "main", UtilizationGPUPercent: 80, MemoryUsedMiB: 4926}}
			}
		}, topology.MIGID(0, "1g.10gb", 3))
	}
	for _, tc := range []struct {
		name     string
		fixture  func(t *testing.T) *fixture
		args     []string
		wantCode int
	}{
		{"list-mig", whole, []string{"-L"}, 0},
		{"list-mig-devices", one, []string{"-L"}, 0},
		{"summary-mig", whole, nil, 0},
		{"summary-mig-devices", one, nil, 0},
		{"query-mig", one, []string{"-q", "-i", "0"}, 0},
		{"csv-mig", busy, []string{"--query-gpu=index,name,mig.mode.current,mig.mode.pending,utilization.gpu,utilization.memory,utilization.jpeg,memory.used", "--format=csv"}, 0},
		{"mig-lgi", whole, []string{"mig", "-lgi"}, 0},
		{"mig-lgi-devices", one, []string{"mig", "-lgi"}, 0},
		{"mig-lgi-no-mig", noMIG, []string{"mig", "-lgi"}, 6},
		{"summary-mig-procs", busy, nil, 0},
		{"query-mig-procs", busy, []string{"-q"}, 0},
		{"query-xml-mig", busy, []string{"-q", "-x", "-i", "0"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := tc.fixture(t).run(t, tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, got)
			}
			golden(t, tc.name, got)
		})
	}
}

// A container holding one MIG device sees its GPU with that MIG device
// only, numbered 0, with its own UUID, as a real one does.
func TestList_MIGDeviceUnderItsGPU(t *testing.T) {
	id := topology.MIGID(0, "1g.10gb", 3)
	f := migFixture(t, id)
	got, code := f.run(t, "-L")
	want := "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + f.gpus[0].UUID + ")\n" +
		"  MIG 1g.10gb     Device  0: (UUID: " + topology.DeriveMIGUUID("node-a", id) + ")\n"
	if code != 0 || got != want {
		t.Errorf("nvidia-smi -L = %d\n%s\nwant 0\n%s", code, got, want)
	}
	// mig.mode.current says Enabled for the GPU, whatever the container holds of it.
	if got, _ := f.run(t, "--query-gpu=mig.mode.current", "--format=csv,noheader"); got != "Enabled\n" {
		t.Errorf("mig.mode.current = %q, want Enabled", got)
	}
}

// A MIG device id of a GPU whose status file does not list it shows the
// GPU without MIG devices: nothing the container does not hold.
func TestList_UnknownMIGDevice(t *testing.T) {
	f := migFixture(t, topology.MIGID(0, "7g.80gb", 0))
	got, code := f.run(t, "-L")
	if code != 0 || strings.Contains(got, "MIG") {
		t.Errorf("nvidia-smi -L = %d\n%s\nwant GPU 0 without MIG devices", code, got)
	}
}

// Options of nvidia-smi mig other than -lgi are refused.
func TestMIG_Options(t *testing.T) {
	f := migFixture(t, "fake-0", "fake-1")
	if got, code := f.run(t, "mig", "-cgi", "9"); code != nvidiasmi.ExitInvalidArgument || !strings.Contains(got, "-cgi") {
		t.Errorf("mig -cgi 9 = %d %q, want 2 naming -cgi", code, got)
	}
	if got, code := f.run(t, "mig", "-lgi", "-i", "1"); code != 0 || strings.Contains(got, "|   0  MIG") || !strings.Contains(got, "|   1  MIG 3g.40gb") {
		t.Errorf("mig -lgi -i 1 = %d\n%s\nwant GPU 1's instances only", code, got)
	}
}

// The MIG lines of -L and the summary's MIG devices table have the real
// H100's shapes (testdata/real/h100-mig__590.48.01.txt, the same
// all-balanced layout): -L's lines are the real ones but for the UUIDs;
// the table's fixed lines are the real ones, and each device line has its
// cells where the real one has them, with the same engines and totals.
func TestRealRecording_MIG(t *testing.T) {
	real := recording{file: "h100-mig__590.48.01.txt"}
	uuidRE := regexp.MustCompile(`(GPU|MIG)-[0-9a-f-]{36}`)
	f := migFixture(t, "fake-0")
	got, _ := f.run(t, "-L")
	want := strings.Join(real.section(t, "capabilities :: list (-L)"), "\n")
	mask := func(s string) string { return strings.TrimSpace(uuidRE.ReplaceAllString(s, "$1-UUID")) }
	if mask(got) != mask(want) {
		t.Errorf("-L:\n%s\nreal:\n%s", mask(got), mask(want))
	}
	summary, _ := f.run(t)
	table := func(lines []string) []string {
		start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| MIG devices:") })
		end := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| Processes:") })
		if start < 0 || end < start {
			t.Fatalf("no MIG devices table in\n%s", strings.Join(lines, "\n"))
		}
		return lines[start : end-2]
	}
	gotT, wantT := table(strings.Split(summary, "\n")), table(real.section(t, "idle :: nvidia-smi (default table)"))
	if len(gotT) != len(wantT) {
		t.Fatalf("MIG devices table of %d lines, real %d:\n%s", len(gotT), len(wantT), strings.Join(gotT, "\n"))
	}
	usedRE := regexp.MustCompile(`\d+MiB /`)
	for i := range gotT {
		// Memory used is the one difference: none is known per instance.
		g, w := usedRE.ReplaceAllString(gotT[i], "0MiB /"), usedRE.ReplaceAllString(wantT[i], "0MiB /")
		if !slices.Equal(bars(gotT[i]), bars(wantT[i])) || strings.ReplaceAll(g, " ", "") != strings.ReplaceAll(w, " ", "") {
			t.Errorf("line %d:\n%s\nreal:\n%s", i, gotT[i], wantT[i])
		}
	}
}

// bars are the columns of a table line's cell borders and its length.
func bars(line string) []int {
	var out []int
	for i, c := range line {
		if c == '|' || c == '+' {
			out = append(out, i)
		}
	}
	return append(out, len(line))
}

// A process on a MIG device has the real H100's Processes line: GPU, GI,
// CI and PID right-aligned in the same columns, the name and memory where
// the real one has them.
func TestRealRecording_MIGProcess(t *testing.T) {
	real := recording{file: "h100-mig__590.48.01.txt"}
	var want string
	for _, l := range real.section(t, "load :: nvidia-smi (default table)") {
		if strings.Contains(l, "      C   ") {
			want = l
			break
		}
	}
	f := migFixtureWith(t, func(pos int, g *status.GPU) {
		if pos == 0 {
			g.Telemetry.UtilizationGPUPercent, g.Telemetry.MemoryUsedMiB = 80, 2296
			g.Telemetry.Holders = []status.Holder{{Namespace: "ml", Pod: testPod, Container: "main", UtilizationGPUPercent: 80, MemoryUsedMiB: 2296}}
		}
	}, topology.MIGID(0, "3g.40gb", 4))
	out, _ := f.run(t)
	var got string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "      C   ") {
			got = l
		}
	}
	// Token ends: the real line is GPU 0, GI 2, CI 0, PID 21180, C, a name, 2296MiB.
	ends := func(l string) []int {
		var out []int
		for i := 1; i < len(l); i++ {
			if l[i] == ' ' && l[i-1] != ' ' || l[i] == '|' && i == len(l)-1 {
				out = append(out, i)
			}
		}
		return out
	}
	g, w := ends(got), ends(want)
	if len(g) < 5 || len(w) < 5 || !slices.Equal(g[:3], w[:3]) || g[len(g)-1] != w[len(w)-1] || len(got) != len(want) ||
		!strings.Contains(got, "2296MiB |") || strings.Index(got, " C ") != strings.Index(want, " C ") {
		t.Errorf("process line\n%s\nreal\n%s", got, want)
	}
}

// -q -x of a container holding two MIG devices of GPU 1 is well-formed and
// lists them as <mig_device> elements, in GPU instance id order.
func TestQueryXML_MIG(t *testing.T) {
	f := migFixture(t, topology.MIGID(1, "3g.40gb", 0), topology.MIGID(1, "3g.40gb", 4))
	out, code := f.run(t, "-q", "-x")
	var log struct {
		GPUs []struct {
			MIG struct {
				Devices []struct {
					Index int    `xml:"index"`
					GI    int    `xml:"gpu_instance_id"`
					SMs   int    `xml:"device_attributes>shared>multiprocessor_count"`
					Total string `xml:"fb_memory_usage>total"`
				} `xml:"mig_device"`
			} `xml:"mig_devices"`
			Mode string `xml:"mig_mode>current_mig"`
		} `xml:"gpu"`
	}
	if err := xml.Unmarshal([]byte(out), &log); err != nil || code != 0 {
		t.Fatalf("-q -x: exit %d, %v\n%s", code, err, out)
	}
	if len(log.GPUs) != 1 || log.GPUs[0].Mode != "Enabled" || len(log.GPUs[0].MIG.Devices) != 2 {
		t.Fatalf("-q -x: %+v, want GPU 1 with MIG on and two MIG devices", log)
	}
	for k, d := range log.GPUs[0].MIG.Devices {
		if d.Index != k || d.GI != k+1 || d.SMs != 60 || d.Total != "40448 MiB" {
			t.Errorf("MIG device %d: %+v, want index %d, GPU instance %d, 60 SMs, 40448 MiB", k, d, k, k+1)
		}
	}
}
