package telemetry_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// heldA100 is an exporter of a DGX A100's first two GPUs, GPU 0 held.
func heldA100(t *testing.T, clock *storetest.Clock, counters *telemetry.Counters) *telemetry.Exporter {
	t.Helper()
	m := mustMachine(t, "dgx-a100")
	gpus := machineGPUs(m, nil)[:2]
	hs := &holdings{}
	hs.Set(hold("ml", "train", "main", "fake-0"))
	return mustNew(t, telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel(), Holders: hs, Seed: 3, Clock: clock,
		Counters: counters, Model: telemetry.ModelWave, ReservedMiB: 250})
}

// The energy counter is the integral of the power series: over a minute of
// the fake clock, read every second, its increase is the sum of the
// second's power × 1 s; read only every 15 s (a scrape interval) it counts
// the seconds between alike; and it never goes back.
func TestEnergy_IntegralOfPower(t *testing.T) {
	every := storetest.NewClock(t, epoch)
	e := heldA100(t, every, nil)
	sparse := storetest.NewClock(t, epoch)
	e15 := heldA100(t, sparse, nil)
	first := mustReadings(t, e)
	mustReadings(t, e15)
	var sumW [2]float64
	var last []telemetry.Reading
	for s := 1; s <= 60; s++ {
		every.Advance(time.Second)
		last = mustReadings(t, e)
		for g := range 2 {
			sumW[g] += last[g].PowerDrawW
		}
		if s%15 == 0 {
			sparse.Advance(15 * time.Second)
			r15 := mustReadings(t, e15)
			for g := range 2 {
				if d := math.Abs(float64(r15[g].TotalEnergyMJ - last[g].TotalEnergyMJ)); d > 0.01*float64(last[g].TotalEnergyMJ) {
					t.Errorf("after %d s GPU %d: %d mJ read every 15 s, %d mJ read every second", s, g, r15[g].TotalEnergyMJ, last[g].TotalEnergyMJ)
				}
			}
		}
	}
	for g := range 2 {
		got := float64(last[g].TotalEnergyMJ - first[g].TotalEnergyMJ)
		want := sumW[g] * 1000
		if math.Abs(got-want) > 0.01*want {
			t.Errorf("GPU %d: energy rose %.0f mJ in 60 s, the power series sums to %.0f mJ", g, got, want)
		}
	}
	if last[0].TotalEnergyMJ <= last[1].TotalEnergyMJ {
		t.Errorf("the held GPU used %d mJ, the idle one %d mJ: want more", last[0].TotalEnergyMJ, last[1].TotalEnergyMJ)
	}
	// An earlier second adds nothing and takes nothing back.
	before, err := e.ReadingsAt(epoch.Add(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if before[0].TotalEnergyMJ != last[0].TotalEnergyMJ {
		t.Errorf("a reading of an earlier second moved the counter: %d, then %d mJ", last[0].TotalEnergyMJ, before[0].TotalEnergyMJ)
	}
}

// An exporter rebuilt with the same Counters goes on counting; one with
// its own starts again at 0. A day without a reading is counted from a
// bounded sample of its seconds, near idle power × a day for an idle GPU.
func TestCounters_SurviveRebuildAndGaps(t *testing.T) {
	clock := storetest.NewClock(t, epoch)
	counters := telemetry.NewCounters()
	e := heldA100(t, clock, counters)
	mustReadings(t, e)
	for range 30 {
		clock.Advance(time.Second)
		mustReadings(t, e)
	}
	was := mustReadings(t, e)[1].TotalEnergyMJ
	rebuilt := heldA100(t, clock, counters)
	clock.Advance(time.Second)
	if now := mustReadings(t, rebuilt)[1].TotalEnergyMJ; now <= was {
		t.Errorf("rebuilt exporter: energy %d mJ after %d mJ, want it to go on", now, was)
	}
	if fresh := mustReadings(t, heldA100(t, clock, nil))[1].TotalEnergyMJ; fresh != 0 {
		t.Errorf("an exporter with its own counters starts at %d mJ, want 0", fresh)
	}
	before := mustReadings(t, rebuilt)[1].TotalEnergyMJ
	clock.Advance(24 * time.Hour)
	after := mustReadings(t, rebuilt)[1].TotalEnergyMJ
	idleW := float64(mustMachine(t, "dgx-a100").GPUModel().IdlePowerW)
	if got, want := float64(after-before), idleW*86400*1000; math.Abs(got-want) > 0.03*want {
		t.Errorf("a day idle: %.0f mJ, want about %.0f (idle power × a day)", got, want)
	}
}

// NVLink traffic counts on an NVLinked GPU at work, and stays 0 on an idle
// one and on a GPU without NVLink.
func TestNVLinkBandwidth(t *testing.T) {
	clock := storetest.NewClock(t, epoch)
	e := heldA100(t, clock, nil)
	mustReadings(t, e)
	for range 10 {
		clock.Advance(time.Second)
	}
	rs := mustReadings(t, e)
	if rs[0].NVLinkKiB <= 0 || rs[1].NVLinkKiB != 0 {
		t.Errorf("NVLink KiB: held %d, idle %d; want > 0 and 0", rs[0].NVLinkKiB, rs[1].NVLinkKiB)
	}
	if n := telemetry.NVLinksOf(mustMachine(t, "dgx-a100"), 0); n != 12 {
		t.Errorf("an A100 of a DGX A100 has %d NVLinks, want 12", n)
	}
	if n := telemetry.NVLinksOf(mustMachine(t, "dgx1-volta"), 0); n != 6 {
		t.Errorf("a V100 of a DGX-1 has %d NVLinks, want 6", n)
	}
	pcie := mustMachine(t, "pcie-8gpu")
	hs := &holdings{}
	hs.Set(hold("ml", "p", "c", "fake-0"))
	pe := mustNew(t, telemetry.Config{GPUs: machineGPUs(pcie, nil), GPUModel: pcie.GPUModel(), Holders: hs, Clock: clock})
	mustReadings(t, pe)
	clock.Advance(10 * time.Second)
	if r := mustReadings(t, pe)[0]; r.NVLinkKiB != 0 || r.UtilizationPercent == 0 {
		t.Errorf("busy PCIe GPU: NVLink %d KiB at %d %%, want 0 KiB", r.NVLinkKiB, r.UtilizationPercent)
	}
	if !strings.Contains(exposition(t, pe), "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{gpu=\"0\"") {
		t.Error("a GPU without NVLink has no DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL series, want one at 0")
	}
}

// Used + free + reserved is the whole memory; the values that follow the
// load agree with each other.
func TestReading_Coherent(t *testing.T) {
	clock := storetest.NewClock(t, epoch)
	e := heldA100(t, clock, nil)
	m := mustMachine(t, "dgx-a100")
	board := m.GPUModel().Board()
	for range 20 {
		clock.Advance(7 * time.Second)
		for _, r := range mustReadings(t, e) {
			if r.MemoryUsedMiB+r.MemoryFreeMiB+r.MemoryReservedMiB != m.GPUModel().MemoryMiB+250 || r.MemoryReservedMiB != 250 {
				t.Fatalf("GPU %d: used %d + free %d + reserved %d MiB", r.Index, r.MemoryUsedMiB, r.MemoryFreeMiB, r.MemoryReservedMiB)
			}
			if math.Abs(r.DRAMActive-float64(r.MemoryUtilizationPercent)/100) > 0.006 {
				t.Errorf("GPU %d: DRAM active %f, memory copy utilization %d %%", r.Index, r.DRAMActive, r.MemoryUtilizationPercent)
			}
			if r.TensorActive > r.GREngineActive || r.TensorActive < 0 {
				t.Errorf("GPU %d: tensor active %f above graphics engine active %f", r.Index, r.TensorActive, r.GREngineActive)
			}
			if r.MemoryClockMHz != board.MaxClocks.MemoryMHz || r.VideoClockMHz != board.VideoClockMHz(r.SMClockMHz) {
				t.Errorf("GPU %d: memory clock %d, video %d at SM %d", r.Index, r.MemoryClockMHz, r.VideoClockMHz, r.SMClockMHz)
			}
			if r.MemoryTemperatureC != r.TemperatureC+3 {
				t.Errorf("GPU %d: HBM at %d °C, GPU at %d °C", r.Index, r.MemoryTemperatureC, r.TemperatureC)
			}
			idle := r.UtilizationPercent == 0
			if idle != (r.ClockEventReasons&0x1 != 0) {
				t.Errorf("GPU %d at %d %%: clock event reasons %#x", r.Index, r.UtilizationPercent, r.ClockEventReasons)
			}
			if idle && (r.PCIeTxBytes > 200_000 || r.PCIeRxBytes > 250_000) || !idle && r.PCIeRxBytes < 1_000_000 {
				t.Errorf("GPU %d at %d %%: PCIe tx %d rx %d B/s", r.Index, r.UtilizationPercent, r.PCIeTxBytes, r.PCIeRxBytes)
			}
		}
	}
}
