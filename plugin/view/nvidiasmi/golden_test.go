package nvidiasmi_test

import (
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

// commonFields are the fields monitoring tools ask for in one call
// (nvidia_gpu_exporter, gpustat, telegraf, netdata ask for 10 to 30).
const commonFields = "index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,utilization.gpu,utilization.memory," +
	"temperature.gpu,temperature.memory,power.draw,power.limit,clocks.sm,clocks.mem,clocks.max.sm,fan.speed,pstate," +
	"driver_version,compute_cap,count,serial,persistence_mode,ecc.errors.uncorrected.volatile.total,timestamp"

func TestMain_Golden(t *testing.T) {
	h100 := func(t *testing.T) *fixture { return newFixture(t, mustPreset(t, "hgx-h100"), []int{2, 3, 5}, nil) }
	workstation := func(t *testing.T) *fixture {
		return newFixture(t, mustPreset(t, "workstation-4gpu"), []int{0, 1, 2, 3}, nil)
	}
	busy := func(t *testing.T) *fixture {
		return newFixture(t, mustPreset(t, "dgx-a100"), []int{6}, func(_ int, g *status.GPU) {
			temp := 61
			g.Telemetry.UtilizationGPUPercent, g.Telemetry.UtilizationMemoryPercent = 97, 43
			g.Telemetry.MemoryUsedMiB, g.Telemetry.PowerDrawW, g.Telemetry.SMClockMHz, g.Telemetry.VideoClockMHz = 31234, 352.61, 1410, 1290
			g.Telemetry.TemperatureC, g.Telemetry.MemoryTemperatureC = 58, &temp
		})
	}
	lost := func(t *testing.T) *fixture {
		return newFixture(t, mustPreset(t, "hgx-h100"), []int{0, 1, 2}, func(pos int, g *status.GPU) {
			if pos == 1 {
				xid := 79
				g.Health = status.Health{Reason: "XID 79: GPU has fallen off the bus", Since: testTime}
				g.Telemetry.LastXID = &xid
			}
		})
	}
	eccFault := func(t *testing.T) *fixture { return faultFixture(t, "hgx-h100", "XID 48: double bit ECC error") }
	thermal := func(t *testing.T) *fixture {
		return faultFixture(t, "hgx-h100", "thermal: GPU held at its slowdown temperature")
	}
	noStatus := func(t *testing.T) *fixture {
		f := newFixture(t, mustPreset(t, "pcie-8gpu"), []int{0, 1}, nil)
		delete(f.env, status.EnvUUIDs) // an older plugin: no UUIDs, no status files
		return f
	}
	var allFields []string
	for _, line := range strings.Split(helpQueryGPU(t), "\n") {
		if name, ok := strings.CutPrefix(line, `"`); ok {
			allFields = append(allFields, name[:strings.Index(name, `"`)])
		}
	}
	cases := []struct {
		name     string
		fixture  func(t *testing.T) *fixture
		args     []string
		wantCode int
	}{
		{"summary", h100, nil, 0},
		{"summary-workstation", workstation, nil, 0},
		{"summary-busy", busy, nil, 0},
		{"summary-lost-gpu", lost, nil, 255},
		{"summary-no-status", noStatus, nil, 0},
		{"list", h100, []string{"-L"}, 0},
		{"list-lost-gpu", lost, []string{"--list-gpus"}, 255},
		{"list-no-status", noStatus, []string{"-L"}, 0},
		{"topo-m", h100, []string{"topo", "-m"}, 0},
		{"topo-m-workstation", workstation, []string{"topo", "--matrix"}, 0},
		{"csv", h100, []string{"--query-gpu=" + commonFields, "--format=csv"}, 0},
		{"csv-noheader-nounits", h100, []string{"--query-gpu", commonFields, "--format", "csv,noheader,nounits"}, 0},
		{"csv-busy-nounits", busy, []string{"--query-gpu=" + commonFields, "--format=csv,nounits"}, 0},
		{"csv-workstation", workstation, []string{"--query-gpu=" + commonFields, "--format=csv"}, 0},
		{"csv-aliases", h100, []string{"--query-gpu=gpu_name,gpu_uuid,gpu_bus_id,clocks.gr,clocks.current.graphics,clocks_throttle_reasons.active,gpu.power.draw.average,retired_pages.sbe,remapped_rows.dbe", "--format=csv"}, 0},
		{"csv-every-field", busy, []string{"--query-gpu=" + strings.Join(allFields, ","), "--format=csv"}, 0},
		{"csv-lost-gpu", lost, []string{"--query-gpu=index,name,uuid,memory.used", "--format=csv"}, 255},
		{"csv-no-status", noStatus, []string{"--query-gpu=index,name,uuid,pci.bus_id,memory.total,temperature.gpu", "--format=csv"}, 0},
		{"query", busy, []string{"-q"}, 0},
		{"query-workstation-gpu1", workstation, []string{"-q", "-i", "1"}, 0},
		{"query-lost-gpu", lost, []string{"-q"}, 255},
		{"query-xml", busy, []string{"-q", "-x"}, 0},
		{"query-xml-lost-gpu", lost, []string{"--query", "--xml-format"}, 255},
		{"help-query-gpu", h100, []string{"--help-query-gpu"}, 0},
		{"help-query-compute-apps", h100, []string{"--help-query-compute-apps"}, 0},
		{"help-query-accounted-apps", h100, []string{"--help-query-accounted-apps"}, 0},
		{"summary-procs", procsFixture, nil, 0},
		{"query-procs", procsFixture, []string{"-q", "-i", "0"}, 0},
		{"query-xml-procs", procsFixture, []string{"-q", "-x", "-i", "0"}, 0},
		{"compute-apps", procsFixture, []string{"--query-compute-apps=timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_gpu_memory", "--format=csv"}, 0},
		{"summary-ecc-fault", eccFault, nil, 0},
		{"query-ecc-fault", eccFault, []string{"-q", "-i", "1"}, 0},
		{"csv-thermal-fault", thermal, []string{"--query-gpu=index,temperature.gpu,temperature.gpu.tlimit,clocks.sm,clocks_event_reasons.active,clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.sw_thermal_slowdown", "--format=csv"}, 0},
		{"version", h100, []string{"--version"}, 0},
		{"help", h100, []string{"-h"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, code := tc.fixture(t).run(t, tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, got)
			}
			golden(t, tc.name, got)
		})
	}
}

// helpQueryGPU returns the output of --help-query-gpu.
func helpQueryGPU(t testing.TB) string {
	out, code := runEnv(t, map[string]string{nvidiasmi.EnvIDs: "fake-0"}, "--help-query-gpu")
	if code != 0 {
		t.Fatalf("--help-query-gpu: exit code %d", code)
	}
	return out
}
