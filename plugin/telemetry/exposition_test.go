package telemetry_test

import (
	"encoding/csv"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// scenario is the cluster of the golden files: an 8-GPU L40S machine
// (pcie-8gpu) where
//
//	GPU 0, 6     free
//	GPU 1, 2     held by one container (ml/train-0/trainer) together
//	GPU 3        shared by two containers through replicas fake-3::0, fake-3::1
//	GPU 4        held, unhealthy "XID 79: GPU has fallen off the bus"
//	GPU 5        free, unhealthy without an XID ("admin: drain")
//	GPU 7        held, and its holder drives it at 100 % and 30000 MiB
func scenario(t testing.TB, m telemetry.Model, perPod bool) *telemetry.Exporter {
	t.Helper()
	machine := mustMachine(t, "pcie-8gpu")
	gpus := machineGPUs(machine, map[int]int{3: 2})
	devs := newDevices(gpus)
	devs.SetHealth(4, false, "XID 79: GPU has fallen off the bus")
	devs.SetHealth(5, false, "admin: drain")
	hs := &holdings{}
	hs.Set(
		hold("ml", "train-0", "trainer", "fake-1", "fake-2"),
		hold("team-a", "infer-a", "server", "fake-3::0"),
		hold("team-b", "infer-b", "server", "fake-3::1"),
		hold("ml", "broken", "main", "fake-4"),
		hold("bench", "burn", "burn", "fake-7"),
	)
	e := mustNew(t, telemetry.Config{
		GPUs: gpus, GPUModel: machine.GPUModel(), Hostname: "node-1", DriverVersion: "550.54.15",
		Devices: devs, Holders: hs, Model: m, Seed: 42, Clock: storetest.NewClock(t, epoch), PerPod: perPod,
	})
	if err := e.SetOverride(7, telemetry.Holder{Namespace: "bench", Pod: "burn", Container: "burn"},
		telemetry.Override{UtilizationPercent: ptr(100.0), MemoryUsedMiB: ptr(30000)}); err != nil {
		t.Fatalf("override: %v", err)
	}
	return e
}

var goldens = []struct {
	file   string
	model  telemetry.Model
	perPod bool
}{
	{"steady.golden", telemetry.ModelSteady, false},
	{"steady-perpod.golden", telemetry.ModelSteady, true},
	{"idle.golden", telemetry.ModelIdle, false},
	{"wave.golden", telemetry.ModelWave, false},
	{"random-walk.golden", telemetry.ModelRandomWalk, false},
}

// checkGolden compares the exposition got with testdata/file, which
// -update rewrites first.
func checkGolden(t *testing.T, file, got string) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("exposition differs from %s (go test -run Golden -update rewrites it):\n%s", path, diff(string(want), got))
	}
}

// The exposition for a fixed seed and clock is exactly the golden file's.
func TestExposition_Golden(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			got := exposition(t, scenario(t, g.model, g.perPod))
			checkGolden(t, g.file, got)
		})
	}
}

// diff returns the first differing lines of want and got.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for i := 0; i < max(len(w), len(g)) && len(out) < 10; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			out = append(out, "line "+strconv.Itoa(i+1)+":\n  want "+wl+"\n  got  "+gl)
		}
	}
	return strings.Join(out, "\n")
}

// defaultCounters are the fields of dcgm-exporter 4.5.3-4.8.2's
// etc/default-counters.csv (a copy in testdata), read here with the CSV
// package alone: what a dcgm-exporter with its defaults serves.
func defaultCounters(t *testing.T) map[string]counterSpec {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "default-counters-4.5.3-4.8.2.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comment = '#'
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]counterSpec{}
	for _, rec := range recs {
		if len(rec) != 3 {
			t.Fatalf("default counters: record %q", rec)
		}
		name, typ, help := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1]), strings.TrimSpace(rec[2])
		if typ != "label" {
			out[name] = counterSpec{typ, help}
		}
	}
	if len(out) != 25 {
		t.Fatalf("default counters: %d fields, want 25", len(out))
	}
	return out
}

type counterSpec struct{ typ, help string }

// gddrLeftOut are the default counters DCGM has no value for on a GDDR
// board (the L40S of the goldens), which dcgm-exporter leaves out.
var gddrLeftOut = []string{"DCGM_FI_DEV_MEMORY_TEMP"}

// Label names of dcgm-exporter 4.5.3-4.8.2: the GPU labels of
// internal/pkg/rendermetrics/render_metrics.go (gpu, UUID, pci_bus_id,
// device, modelName, Hostname), the label counter DCGM_FI_DRIVER_VERSION,
// XID's err_code and err_msg (internal/pkg/collector/gpu_collector.go), the
// pod attributes of internal/pkg/transformation/const.go.
var (
	gpuLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
	podLabels = []string{"namespace", "pod", "container"}
	xidLabels = []string{"err_code", "err_msg"}
)

// parse parses an exposition with Prometheus' own text parser.
func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse exposition: %v\n%s", err, text)
	}
	return mfs
}

// Every golden file is valid text exposition (Prometheus' parser) whose
// names, types, HELP and label sets are exactly dcgm-exporter's, with no
// two samples of one name sharing their labels.
func TestExposition_DCGMNamesAndLabels(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			text := exposition(t, scenario(t, g.model, g.perPod))
			mfs := parse(t, text)
			counters := defaultCounters(t)
			var want []string
			for name := range counters {
				if !slices.Contains(gddrLeftOut, name) {
					want = append(want, name)
				}
			}
			if got := slices.Sorted(maps.Keys(mfs)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Errorf("families %v, want %v", got, slices.Sorted(slices.Values(want)))
			}
			for name, mf := range mfs {
				if got, want := strings.ToLower(mf.GetType().String()), counters[name].typ; got != want {
					t.Errorf("%s: type %s, want %s", name, got, want)
				}
				if mf.GetHelp() != counters[name].help {
					t.Errorf("%s: help %q, want %q", name, mf.GetHelp(), counters[name].help)
				}
				seen := map[string]bool{}
				for _, m := range mf.GetMetric() {
					labels := map[string]string{}
					var sig []string
					for _, lp := range m.GetLabel() {
						labels[lp.GetName()] = lp.GetValue()
						sig = append(sig, lp.GetName()+"="+lp.GetValue())
					}
					if key := strings.Join(sig, ","); seen[key] {
						t.Errorf("%s: duplicate series {%s}", name, key)
					} else {
						seen[key] = true
					}
					want := slices.Clone(gpuLabels)
					if _, ok := labels["pod"]; ok {
						want = append(want, podLabels...)
					}
					if name == "DCGM_FI_DEV_XID_ERRORS" {
						want = append(want, xidLabels...)
					}
					if _, ok := labels["vgpu"]; ok && g.perPod {
						want = append(want, "vgpu")
					}
					if got := slices.Sorted(maps.Keys(labels)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
						t.Errorf("%s: labels %v, want %v", name, got, slices.Sorted(slices.Values(want)))
					}
					if labels["device"] != "nvidia"+labels["gpu"] {
						t.Errorf("%s: device %q for gpu %q", name, labels["device"], labels["gpu"])
					}
				}
			}
		})
	}
}

// Labels are printed in dcgm-exporter's order: its template's GPU labels,
// then the label counters, then the attributes in name order.
func TestExposition_LabelOrder(t *testing.T) {
	text := exposition(t, scenario(t, telemetry.ModelSteady, true))
	for _, want := range []string{
		`DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="` + uuid(0) + `",pci_bus_id="00000000:01:00.0",device="nvidia0",modelName="NVIDIA L40S",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"} 210` + "\n",
		`DCGM_FI_DEV_XID_ERRORS{gpu="4",UUID="` + uuid(4) + `",pci_bus_id="` + mustMachine(t, "pcie-8gpu").PCIBusID(4) +
			`",device="nvidia4",modelName="NVIDIA L40S",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",err_code="79",err_msg="GPU has fallen off the bus",namespace="ml",pod="broken"} 79` + "\n",
		`,DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="team-b",pod="infer-b",vgpu="1"} `,
		`,DCGM_FI_DRIVER_VERSION="550.54.15",err_code="0",err_msg="No Error"} 0` + "\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q:\n%s", want, text)
		}
	}
	// Field id order.
	var order []string
	for _, line := range strings.Split(text, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			order = append(order, strings.Fields(name)[0])
		}
	}
	// (go-dcgm const_fields.go: 100, 101, 150, 155, 156, 202, 203, 204, 206,
	// 207, 230, 251, 252, 253, 393, 394, 395, 449, 526, 1001, 1004, 1005,
	// 1009, 1010; MEMORY_TEMP, 140, is not on this GDDR board)
	want := []string{"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
		"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL",
		"DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
		"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
		"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
		"DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
		"DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"}
	if !slices.Equal(order, want) {
		t.Errorf("field order %v, want %v", order, want)
	}
}
