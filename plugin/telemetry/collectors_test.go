package telemetry_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// dcgm-exporter's own default counters file is read without a warning and
// serves what DefaultCollectors does.
func TestParseCollectors_DefaultCountersFile(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "default-counters-4.5.3-4.8.2.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cs, warnings, err := telemetry.ParseCollectors(f)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("parse: %v, warnings %q", err, warnings)
	}
	want := telemetry.DefaultCollectors()
	key := func(c telemetry.Collector) string { return c.Field + "|" + c.Type + "|" + c.Help }
	got := make([]string, len(cs))
	for i, c := range cs {
		got[i] = key(c)
	}
	wantKeys := make([]string, len(want))
	for i, c := range want {
		wantKeys[i] = key(c)
	}
	slices.Sort(got)
	slices.Sort(wantKeys)
	if !slices.Equal(got, wantKeys) {
		t.Errorf("collectors of the default file:\n%q\nDefaultCollectors:\n%q", got, wantKeys)
	}
}

// A collectors file chooses the fields, their types and help, and whether
// the driver version label is there; fields this fake does not simulate
// are left out with a warning naming them.
func TestParseCollectors_ChoosesTheSet(t *testing.T) {
	const file = `# my set
DCGM_FI_DEV_GPU_UTIL, gauge, My utilization.
DCGM_FI_DEV_POWER_USAGE ,counter, Power.
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.
DCGM_FI_DEV_SERIAL, label, Device Serial Number
`
	cs, warnings, err := telemetry.ParseCollectors(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || len(warnings) != 2 || !strings.Contains(warnings[0], "line 4: DCGM_FI_DEV_ECC_SBE_VOL_TOTAL") ||
		!strings.Contains(warnings[1], "line 5: label DCGM_FI_DEV_SERIAL") {
		t.Fatalf("collectors %+v, warnings %q", cs, warnings)
	}
	m := mustMachine(t, "pcie-8gpu")
	e := mustNew(t, telemetry.Config{GPUs: machineGPUs(m, nil)[:1], GPUModel: m.GPUModel(), DriverVersion: "580.173.02",
		Collectors: cs, Clock: storetest.NewClock(t, epoch)})
	text := exposition(t, e)
	for _, want := range []string{
		"# HELP DCGM_FI_DEV_POWER_USAGE Power.\n# TYPE DCGM_FI_DEV_POWER_USAGE counter\n",
		"# HELP DCGM_FI_DEV_GPU_UTIL My utilization.\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "# TYPE "); n != 2 || strings.Contains(text, "DCGM_FI_DRIVER_VERSION") ||
		strings.Index(text, "POWER_USAGE") > strings.Index(text, "GPU_UTIL") {
		t.Errorf("want POWER_USAGE (155) then GPU_UTIL (203), without the driver label:\n%s", text)
	}
}

func TestParseCollectors_Errors(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"two values", "DCGM_FI_DEV_GPU_UTIL, gauge\n", "line 1: \"DCGM_FI_DEV_GPU_UTIL,gauge\": want 3 values"},
		{"help with a comma", "# c\nDCGM_FI_DEV_GPU_UTIL, gauge, a, b\n", "line 2"},
		{"type", "DCGM_FI_DEV_GPU_UTIL, gauges, x\n", "line 1: DCGM_FI_DEV_GPU_UTIL: type \"gauges\""},
		{"not a DCGM field", "GPU_UTIL, gauge, x\n", "line 1: \"GPU_UTIL\" is not a DCGM field"},
		{"twice", "DCGM_FI_DEV_GPU_UTIL, gauge, x\n\nDCGM_FI_DEV_GPU_UTIL, gauge, y\n", "line 3: DCGM_FI_DEV_GPU_UTIL is listed on line 1"},
		{"empty", "# nothing\n", "no field this fake serves"},
		{"only unsimulated", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, x\n", "no field this fake serves"},
		{"bare quote", "DCGM_FI_DEV_GPU_UTIL, gauge, a \"b\n", "line 1"},
		{"too big", strings.Repeat("#", telemetry.MaxCollectorsBytes+1), "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := telemetry.ParseCollectors(strings.NewReader(tc.file))
			if !errors.Is(err, telemetry.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrInvalidConfig naming %q", err, tc.want)
			}
		})
	}
}

func FuzzParseCollectors(f *testing.F) {
	f.Add("DCGM_FI_DEV_GPU_UTIL, gauge, x\n")
	f.Add("# c\nDCGM_FI_DEV_SM_CLOCK,counter,\"a, b\"\nDCGM_FI_DRIVER_VERSION, label, v\n")
	f.Add("DCGM_FI_DEV_X, gauge, y\nDCGM_FI_DEV_FB_USED, summary, z")
	f.Fuzz(func(t *testing.T, file string) {
		cs, _, err := telemetry.ParseCollectors(strings.NewReader(file))
		if err != nil {
			if !errors.Is(err, telemetry.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		m := mustMachine(t, "pcie-8gpu")
		e, err := telemetry.New(telemetry.Config{GPUs: machineGPUs(m, nil)[:1], GPUModel: m.GPUModel(), Collectors: cs,
			Clock: storetest.NewClock(t, epoch)})
		if err != nil {
			t.Fatalf("collectors %+v parsed but refused: %v", cs, err)
		}
		parse(t, exposition(t, e))
	})
}

// What promlint (promtool check metrics) says of the exposition is exactly
// what it says of dcgm-exporter's: its naming, not Prometheus style, which
// dashboards need as it is. Anything else is a new problem.
func TestExposition_Promlint(t *testing.T) {
	text := exposition(t, scenario(t, telemetry.ModelSteady, true))
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Metric+": "+p.Text)
	}
	slices.Sort(got)
	for _, p := range got {
		switch {
		case strings.Contains(p, "metric names should be written in 'snake_case' not 'camelCase'"),
			strings.Contains(p, "counter metrics should have \"_total\" suffix"),
			strings.Contains(p, "label names should be written in 'snake_case' not 'camelCase'"),
			strings.Contains(p, "metric name should not include type 'counter'"),
			strings.Contains(p, "use base unit"),
			strings.Contains(p, "non-base units"):
		default:
			t.Errorf("promlint: %s", p)
		}
	}
	t.Logf("promlint, as of dcgm-exporter's names:\n%s", strings.Join(got, "\n"))
	if len(got) == 0 {
		t.Error("promlint found nothing: dcgm-exporter's names (DCGM_FI_…, modelName, counters without _total) should show")
	}
}

// Where DCGM has no value for a field on the product, dcgm-exporter leaves
// it out: no profiling fields on a workstation board or a Pascal GPU, no
// memory temperature without HBM, no remapped rows where pages are retired
// or there is no ECC.
func TestExposition_PerProduct(t *testing.T) {
	for _, tc := range []struct {
		machine string
		absent  []string
		present []string
	}{
		{"workstation-4gpu", []string{"DCGM_FI_PROF_", "DCGM_FI_DEV_MEMORY_TEMP", "REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"},
			[]string{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}},
		{"dgx1-pascal", []string{"DCGM_FI_PROF_", "REMAPPED_ROWS"}, []string{"DCGM_FI_DEV_MEMORY_TEMP"}},
		{"dgx1-volta", []string{"REMAPPED_ROWS"}, []string{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_MEMORY_TEMP"}},
		{"hgx-h100", nil, []string{"DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_ROW_REMAP_FAILURE"}},
		{"pcie-8gpu", []string{"DCGM_FI_DEV_MEMORY_TEMP"}, []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"}},
	} {
		t.Run(tc.machine, func(t *testing.T) {
			m := mustMachine(t, tc.machine)
			e := mustNew(t, telemetry.Config{GPUs: machineGPUs(m, nil)[:1], GPUModel: m.GPUModel(), Clock: storetest.NewClock(t, epoch)})
			text := exposition(t, e)
			for _, s := range tc.absent {
				if strings.Contains(text, s) {
					t.Errorf("%s (%s) serves %s", tc.machine, m.GPUModel().Product, s)
				}
			}
			for _, s := range tc.present {
				if !strings.Contains(text, s) {
					t.Errorf("%s (%s) lacks %s", tc.machine, m.GPUModel().Product, s)
				}
			}
		})
	}
}
