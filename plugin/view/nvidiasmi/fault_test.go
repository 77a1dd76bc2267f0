package nvidiasmi_test

import (
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// faultFixture is a container with GPUs 0-2 of a preset, GPU 1 unhealthy
// with reason, and the values a GPU with that fault shows, as the plugin
// writes them: the memory errors of its model (topology.MemoryErrors),
// and for a thermal fault the slowdown temperature and clock event
// reasons.
func faultFixture(t *testing.T, preset, reason string) *fixture {
	m := mustPreset(t, preset)
	model := m.GPUModel()
	fault := topology.ParseFault(reason)
	return newFixture(t, m, []int{0, 1, 2}, func(pos int, g *status.GPU) {
		if pos != 1 {
			return
		}
		g.Health = status.Health{Reason: reason, Since: testTime}
		if fault.XID != 0 {
			xid := fault.XID
			g.Telemetry.LastXID = &xid
		}
		g.Telemetry.MemoryErrors = model.MemoryErrors(fault)
		if fault.Kind == topology.FaultThermal {
			g.Telemetry.UtilizationGPUPercent = 100
			g.Telemetry.TemperatureC = model.Thresholds().SlowdownC
			g.Telemetry.SMClockMHz = g.MaxClocks.SMMHz / 2
			g.Telemetry.ClockEventReasons = topology.ClockEventHWSlowdown | topology.ClockEventHWThermalSlowdown | topology.ClockEventSWThermalSlowdown
		}
	})
}

// TestFault_AnswersOrLost: an unhealthy GPU whose fault is ECC or thermal
// answers with its values; one lost (XID 79, or a reason naming no such
// fault) is "Unable to determine the device handle".
func TestFault_AnswersOrLost(t *testing.T) {
	const q = "--query-gpu=index,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure,retired_pages.sbe,retired_pages.dbe,retired_pages.pending,clocks_event_reasons.hw_thermal_slowdown,temperature.gpu"
	lostLine := func(f *fixture) string {
		return "Unable to determine the device handle for GPU" + strings.TrimPrefix(f.gpus[1].PCIBusID, "0000") + ": Unknown Error\n"
	}
	for _, tc := range []struct {
		name, preset, reason string
		wantGPU1             string // the --query-gpu line of GPU 1; "" lost
	}{
		{"dbe h100", "hgx-h100", "XID 48: double bit ECC", "1, 1, 0, 0, 1, Yes, No, [N/A], [N/A], [N/A], Not Active, 33\n"},
		{"remap failure a100", "dgx-a100", "XID 64", "1, 1, 0, 0, 0, Yes, Yes, [N/A], [N/A], [N/A], Not Active, 33\n"},
		{"sbe storm v100", "dgx1-volta", "XID 92: high single-bit ECC error rate", "1, 0, 120, [N/A], [N/A], [N/A], [N/A], 1, 0, No, Not Active, 33\n"},
		{"dbe v100", "dgx1-volta", "ECC uncorrectable", "1, 1, 0, [N/A], [N/A], [N/A], [N/A], 0, 1, Yes, Not Active, 33\n"},
		{"thermal h100", "hgx-h100", "thermal slowdown", "1, 0, 0, 0, 0, No, No, [N/A], [N/A], [N/A], Active, 89\n"},
		{"xid 79", "hgx-h100", "XID 79: GPU has fallen off the bus", ""},
		{"operator", "hgx-h100", "drained by operator", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := faultFixture(t, tc.preset, tc.reason)
			out, code := f.run(t, q, "--format=csv,noheader")
			lines := strings.SplitAfter(out, "\n")
			if len(lines) < 3 {
				t.Fatalf("output:\n%s", out)
			}
			if tc.wantGPU1 == "" {
				if code != 255 || lines[1] != lostLine(f) {
					t.Errorf("lost GPU: exit %d, line %q", code, lines[1])
				}
				if out, code := f.run(t, "-L"); code != 255 || !strings.Contains(out, lostLine(f)) {
					t.Errorf("-L: exit %d\n%s", code, out)
				}
				return
			}
			if code != 0 || lines[1] != tc.wantGPU1 {
				t.Errorf("exit %d, GPU 1 %q, want %q", code, lines[1], tc.wantGPU1)
			}
			if out, code := f.run(t, "-L"); code != 0 || strings.Contains(out, "Unable") {
				t.Errorf("-L: exit %d\n%s", code, out)
			}
			sum, code := f.run(t)
			if code != 0 || strings.Contains(sum, "Unable") {
				t.Errorf("summary: exit %d\n%s", code, sum)
			}
		})
	}
}
