package nvidiasmi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// A recording is one real GPU's nvidia-smi output (testdata/real, see
// testdata/README.md) and the model of that product.
type recording struct {
	file                               string
	product, cc                        string
	memoryMiB, powerLimitW, idlePowerW int
}

var recordings = []recording{
	{"h200__590.48.01.txt", "NVIDIA H200", "9.0", 143771, 700, 77},
	{"h100-80gb-hbm3__590.48.01.txt", "NVIDIA H100 80GB HBM3", "9.0", 81559, 700, 70},
	{"l40s__595.80.txt", "NVIDIA L40S", "8.9", 46068, 350, 35},
}

// machine builds a one-GPU machine of the recorded product.
func (r recording) machine(t *testing.T) *topology.Machine {
	t.Helper()
	y := fmt.Sprintf(`apiVersion: virtual-gpu.unicore.mcyou.cc/v1
kind: Topology
name: real
gpu:
  product: %s
  memoryMiB: %d
  computeCapability: "%s"
  powerLimitW: %d
  idlePowerW: %d
numaNodes:
  - id: 0
    cpus: 0-15
    hostBridges:
      - count: 1
        switches:
          - gpus: 1
`, r.product, r.memoryMiB, r.cc, r.powerLimitW, r.idlePowerW)
	m, err := topology.ParseYAML("real", strings.NewReader(y))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// section returns the body of the recording's section with this title
// ("idle :: query (-q)").
func (r recording) section(t *testing.T, title string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "real", r.file))
	if err != nil {
		t.Fatal(err)
	}
	banner := strings.Repeat("#", 80)
	lines := strings.Split(string(data), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if lines[i] != banner || lines[i+1] != "# "+title {
			continue
		}
		j := i + 2
		for j < len(lines) && lines[j] != banner {
			j++
		}
		var body []string
		for k := j + 1; k < len(lines) && lines[k] != banner; k++ {
			body = append(body, lines[k])
		}
		return body
	}
	t.Fatalf("%s: no section %q", r.file, title)
	return nil
}

// csvValues reads a --query-gpu CSV of one GPU: property name (without
// its unit) → value.
func csvValues(t *testing.T, header, values string) map[string]string {
	t.Helper()
	h, v := strings.Split(header, ", "), strings.Split(values, ", ")
	if len(h) != len(v) {
		t.Fatalf("%d names for %d values", len(h), len(v))
	}
	m := make(map[string]string, len(h))
	for i, name := range h {
		name, _, _ = strings.Cut(name, " [")
		m[name] = v[i]
	}
	return m
}

// noValue reports whether nvidia-smi printed no value: [N/A], or N/A as
// some fields print it.
func noValue(v string) bool { return v == "[N/A]" || v == "N/A" }

// wordClasses are values of one vocabulary: a value's shape is its class,
// not the word, since which word a GPU shows depends on its state.
var wordClasses = map[string]string{
	"Enabled": "Enabled|Disabled", "Disabled": "Enabled|Disabled",
	"Yes": "Yes|No", "No": "Yes|No",
	"Active": "Active|Not Active", "Not Active": "Active|Not Active",
	"None": "None|HMM|ATS", "HMM": "None|HMM|ATS", "ATS": "None|HMM|ATS",
}

var (
	hexRE    = regexp.MustCompile(`^0x[0-9A-Fa-f]+$`)
	numberRE = regexp.MustCompile(`[0-9A-Fa-f]*[0-9][0-9A-Fa-f]*`)
)

// shape is the format of a value: its word class, "0x" and the width of a
// hex number, or the value with every run of digits (and hex letters next
// to them) as 9: "627.40 W" and "60.00 W" are "9.9 W", "96.00.A5.00.03"
// is "9.9.9.9.9", a UUID GPU-9-9-9-9-9.
func shape(v string) string {
	if c, ok := wordClasses[v]; ok {
		return c
	}
	if hexRE.MatchString(v) {
		return "0x" + strings.Repeat("h", len(v)-2)
	}
	return numberRE.ReplaceAllString(v, "9")
}

// csvExceptions are the properties a recorded GPU shows a value of, or a
// value of another shape, that this nvidia-smi legitimately does not.
var csvExceptions = map[string]string{
	// The NVLink fabric manager's state: real Hopper boards report their
	// fabric registration; no fabric is simulated.
	"fabric.state": "fabric", "fabric.status": "fabric", "fabric.cliqueId": "fabric", "fabric.clusterUuid": "fabric",
	// Drivers 590 and later print these deprecated; 580, the driver this
	// nvidia-smi is, still reports the clocks and the power management.
	"clocks.applications.graphics": "deprecated after 580", "clocks.applications.memory": "deprecated after 580",
	"clocks.default_applications.graphics": "deprecated after 580", "clocks.default_applications.memory": "deprecated after 580",
	"power.management": "deprecated after 580",
	// This nvidia-smi is driver 580.173.02 whatever the recording's.
	"driver_version": "the fake driver's version",
}

// TestRealRecordings_QueryGPU: for each recorded product, every property of
// 580 the real GPU shows a value of has one here, of the same shape.
func TestRealRecordings_QueryGPU(t *testing.T) {
	fields := allFieldNames(t)
	for _, r := range recordings {
		for _, state := range []string{"idle", "load"} {
			t.Run(r.product+"/"+state, func(t *testing.T) { compareQueryGPU(t, r, state, fields) })
		}
	}
}

// compareQueryGPU compares --query-gpu of a GPU of r's product, idle or
// busy, with the recording of that state.
func compareQueryGPU(t *testing.T, r recording, state string, fields []string) {
	body := r.section(t, state+" :: query-gpu (csv, what the exporter parses)")
	real := csvValues(t, body[0], body[1])
	f := newFixture(t, r.machine(t), []int{0}, func(_ int, g *status.GPU) {
		if state == "load" {
			g.Telemetry.UtilizationGPUPercent, g.Telemetry.UtilizationMemoryPercent = 100, 7
			g.Telemetry.MemoryUsedMiB, g.Telemetry.PowerDrawW = g.MemoryTotalMiB/4, float64(g.PowerLimitW)*0.9
			g.Telemetry.SMClockMHz, g.Telemetry.VideoClockMHz = g.MaxClocks.SMMHz, g.MaxClocks.VideoMHz
			g.Telemetry.TemperatureC = 52
		}
	})
	out, code := f.run(t, "--query-gpu="+strings.Join(fields, ","), "--format=csv")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("exit code %d, output:\n%s", code, out)
	}
	ours := csvValues(t, lines[0], lines[1])
	compared := 0
	for _, name := range fields {
		rv, ok := real[name]
		if !ok || noValue(rv) {
			continue // not in this driver's list, or no value on the real GPU
		}
		compared++
		if why, ok := csvExceptions[name]; ok {
			t.Logf("%s: exception (%s): real %q, ours %q", name, why, rv, ours[name])
			continue
		}
		switch ov := ours[name]; {
		case noValue(ov):
			t.Errorf("%s: [N/A], the real %s shows %q", name, r.product, rv)
		case shape(ov) != shape(rv):
			t.Errorf("%s: %q (shape %q), the real %s shows %q (shape %q)", name, ov, shape(ov), r.product, rv, shape(rv))
		}
	}
	if compared < 130 {
		t.Errorf("compared only %d properties", compared)
	}
}

// allFieldNames are the canonical names of --help-query-gpu.
func allFieldNames(t testing.TB) []string {
	var names []string
	for _, line := range strings.Split(helpQueryGPU(t), "\n") {
		if name, ok := strings.CutPrefix(line, `"`); ok {
			names = append(names, name[:strings.Index(name, `"`)])
		}
	}
	return names
}

// qLabels reads the labels of one GPU's block of -q, each with its
// section path: "Temperature/GPU T.Limit Temp", and their values (""
// for a section). Processes entries (which depend on what runs) are left
// out.
func qLabels(lines []string) ([]string, map[string]string) {
	var out, path []string
	values := map[string]string{}
	in := false
	for _, l := range lines {
		if strings.HasPrefix(l, "GPU 0000") {
			in = true
			continue
		}
		if !in || strings.TrimSpace(l) == "" {
			continue
		}
		depth := (len(l) - len(strings.TrimLeft(l, " "))) / 4
		label, value, _ := strings.Cut(strings.TrimSpace(l), ": ")
		label = strings.TrimSpace(label)
		if depth < 1 {
			continue
		}
		path = append(path[:min(len(path), depth-1)], label)
		p := strings.Join(path, "/")
		if strings.HasPrefix(p, "Processes/") {
			continue
		}
		out = append(out, p)
		values[p] = value
	}
	return out, values
}

// qExceptions are -q labels of a recorded GPU this nvidia-smi does not
// print, or prints N/A where the real GPU has a value.
var qExceptions = map[string]string{
	"EDPp Multiplier": "590 and later only",
}

// qValueExceptions are -q labels the real GPU has a value of and this
// nvidia-smi prints N/A for: what is not simulated.
var qValueExceptions = map[string]string{
	"Board Part Number": "not simulated",
	"GPU Part Number":   "not simulated",
	"GPU Memory Power Readings/Average Power Draw": "not simulated",
	"PCI/Atomic Caps Outbound":                     "the host's PCIe root port's (N/A on the recorded H200)",
	"PCI/Atomic Caps Inbound":                      "the host's PCIe root port's",
	"Fabric/State":                                 "fabric", "Fabric/Status": "fabric", "Fabric/CliqueId": "fabric", "Fabric/ClusterUUID": "fabric",
}

// TestRealRecordings_QueryLabels: for each recorded product, -q prints the
// labels of the real GPU's -q, in the same sections and order.
func TestRealRecordings_QueryLabels(t *testing.T) {
	for _, r := range recordings {
		t.Run(r.product, func(t *testing.T) {
			real, realValues := qLabels(r.section(t, "idle :: query (-q)"))
			if len(real) < 200 {
				t.Fatalf("read only %d labels of the recording", len(real))
			}
			f := newFixture(t, r.machine(t), []int{0}, nil)
			out, code := f.run(t, "-q")
			if code != 0 {
				t.Fatalf("exit code %d", code)
			}
			ours, ourValues := qLabels(strings.Split(out, "\n"))
			for _, l := range real {
				if rv, ov := realValues[l], ourValues[l]; rv != "" && !noValue(rv) && noValue(ov) {
					if _, ok := qValueExceptions[l]; !ok {
						t.Errorf("-q %s: N/A, the real %s shows %q", l, r.product, rv)
					}
				}
			}
			i := 0
			for _, l := range real {
				if _, ok := qExceptions[l]; ok {
					continue
				}
				j := slices.Index(ours[i:], l)
				if j < 0 {
					if slices.Contains(ours, l) {
						t.Errorf("-q label %q out of the real order", l)
					} else {
						t.Errorf("-q label %q missing", l)
					}
					continue
				}
				i += j + 1
			}
		})
	}
}

// TestGeForce_NoECC: a GeForce board has no ECC mode: N/A in the summary
// and for ecc.mode.*, as a real GeForce RTX 2080 SUPER shows (driver
// 595.71.05, in the same captures); a workstation board's is Disabled,
// "Off" in the summary.
func TestGeForce_NoECC(t *testing.T) {
	for _, tc := range []struct {
		r          recording
		cell, mode string
	}{
		{recording{product: "NVIDIA GeForce RTX 2080 SUPER", cc: "7.5", memoryMiB: 8192, powerLimitW: 250, idlePowerW: 40}, "N/A", "[N/A]"},
		{recording{product: "NVIDIA RTX A6000", cc: "8.6", memoryMiB: 49140, powerLimitW: 300, idlePowerW: 25}, "Off", "Disabled"},
	} {
		f := newFixture(t, tc.r.machine(t), []int{0}, nil)
		out, _ := f.run(t)
		if want := fmt.Sprintf(" Off |%21s |\n", tc.cell); !strings.Contains(out, want) {
			t.Errorf("%s summary: no ECC cell %q:\n%s", tc.r.product, tc.cell, out)
		}
		out, _ = f.run(t, "--query-gpu=ecc.mode.current,ecc.mode.pending", "--format=csv,noheader")
		if want := tc.mode + ", " + tc.mode + "\n"; out != want {
			t.Errorf("%s ecc.mode: %q, want %q", tc.r.product, out, want)
		}
	}
}

// TestRealRecordings_Processes: the process lists of a busy GPU have the
// real tool's shapes: --query-compute-apps' header and values,
// --query-accounted-apps' header alone, and the summary's process lines
// column for column.
func TestRealRecordings_Processes(t *testing.T) {
	const apps = "timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_gpu_memory"
	const accounted = "timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,gpu_util,mem_util,max_memory_usage,time"
	for _, r := range recordings {
		t.Run(r.product, func(t *testing.T) {
			f := newFixture(t, r.machine(t), []int{0}, nil)
			f.writeLive(t, func(_ int, tel *status.Telemetry) {
				tel.UtilizationGPUPercent, tel.MemoryUsedMiB = 100, 28234
				tel.Holders = []status.Holder{{Namespace: "ml", Pod: testPod, Container: "main", UtilizationGPUPercent: 100, MemoryUsedMiB: 28234}}
			})
			real := r.section(t, "load :: query-compute-apps (per-process)")
			out, code := f.run(t, "--query-compute-apps="+apps, "--format=csv")
			ours := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if code != 0 || len(ours) != 2 || ours[0] != real[0] {
				t.Fatalf("exit %d:\n%s\nwant the header %q", code, out, real[0])
			}
			rv, ov := strings.Split(real[1], ", "), strings.Split(ours[1], ", ")
			for i, name := range strings.Split(apps, ",") {
				if name != "process_name" && shape(ov[i]) != shape(rv[i]) {
					t.Errorf("%s: %q, the real tool prints %q", name, ov[i], rv[i])
				}
			}
			real = r.section(t, "load :: query-accounted-apps")
			if out, code := f.run(t, "--query-accounted-apps="+accounted, "--format=csv"); code != 0 || out != real[0]+"\n" {
				t.Errorf("accounted apps: exit %d %q, want %q", code, out, real[0]+"\n")
			}
			var realLine string
			for _, l := range r.section(t, "load :: nvidia-smi (default table)") {
				if strings.HasPrefix(l, "|    0   N/A  N/A ") {
					realLine = l
					break
				}
			}
			out, _ = f.run(t)
			var ourLine string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "|    0   N/A  N/A ") {
					ourLine = l
				}
			}
			columns := func(l string) []int { // where each cell ends
				var ends []int
				for i := 1; i < len(l); i++ {
					if l[i] == ' ' && l[i-1] != ' ' {
						ends = append(ends, i)
					}
				}
				return ends
			}
			rc, oc := columns(realLine), columns(ourLine)
			// GPU, GI, CI, PID, type, then (after the name) memory and the border.
			if len(ourLine) != len(realLine) || !slices.Equal(oc[:5], rc[:5]) || oc[len(oc)-1] != rc[len(rc)-1] {
				t.Errorf("summary process line\n%q\nthe real one\n%q", ourLine, realLine)
			}
		})
	}
}
