package topology_test

import (
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// TestGPUSpec_PresetsAreKnown: every built-in machine's GPU has a known
// board (its clocks, the status files' and nvidia-smi's) and a known
// family (the telemetry's clocks and temperatures), consistent with each
// other: the family's boost clock is the board's max SM clock or below.
func TestGPUSpec_PresetsAreKnown(t *testing.T) {
	for _, name := range append(topology.PresetNames(), "") {
		m, err := topology.Resolve(name, 4, name == "")
		if err != nil {
			t.Fatal(err)
		}
		g := m.GPUModel()
		b, th := g.Board(), g.Thermal()
		if b.MaxClocks.SMMHz == 0 || b.IdleSMClockMHz == 0 {
			t.Errorf("%s (%s, %s): no board known: %+v", m.Name(), g.Product, g.Compute, b)
		}
		if th.BoostClockMHz > b.MaxClocks.SMMHz || th.BaseClockMHz >= th.BoostClockMHz || th.IdleTempC >= th.MaxTempC {
			t.Errorf("%s (%s): family %s's load values %+v do not fit its board %+v", m.Name(), g.Product, g.Family, th, b.MaxClocks)
		}
	}
}

func TestGPUSpec_Curves(t *testing.T) {
	if got := topology.ReservedMiB(81559); got != 489 {
		t.Errorf("ReservedMiB(81559) = %d, want 489 (0.6 %%, rounded down)", got)
	}
	if got := topology.MemoryTemperatureC(40); got != 43 {
		t.Errorf("MemoryTemperatureC(40) = %d, want 43", got)
	}
	if lo, hi := topology.FanSpeedPercent(0), topology.FanSpeedPercent(100); lo != topology.IdleFanSpeedPercent || hi != 70 {
		t.Errorf("FanSpeedPercent(0, 100) = %d, %d; want %d, 70", lo, hi, topology.IdleFanSpeedPercent)
	}
	h200 := topology.GPUModel{Product: "NVIDIA H200", Compute: topology.ComputeCapability{Major: 9}}
	if got := h200.Board().MaxClocks.MemoryMHz; got != 3201 {
		t.Errorf("H200 memory clock %d, want its own 3201", got)
	}
	if !(topology.GPUModel{Product: "NVIDIA RTX A6000"}).Board().Fan || (topology.GPUModel{Product: "NVIDIA A100-SXM4-40GB"}).Board().Fan {
		t.Error("a workstation card has a fan, a data-center board none")
	}
}
