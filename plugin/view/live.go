package view

import (
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Live writes rs, the exporter's readings at now, into the status
// directory's live file (status.WriteLive: one file for every GPU, without
// fsync), where nvidia-smi takes a GPU's values from (see liveTelemetry).
// GPUs without a reading are left out.
func (f *Files) Live(rs []telemetry.Reading, now time.Time) error {
	byUUID := make(map[string]*telemetry.Reading, len(rs))
	for i := range rs {
		byUUID[rs[i].UUID] = &rs[i]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l := status.NewLive(now)
	for _, g := range f.gpus {
		r := byUUID[g.UUID]
		if r == nil {
			continue
		}
		base := *g
		if prev, ok := f.lastLive[g.UUID]; ok {
			base.Telemetry = prev // the last XID and a lost GPU's last values stay
		}
		l.GPUs[g.UUID] = liveTelemetry(&base, r, now)
	}
	if err := f.status.WriteLive(l); err != nil {
		return err
	}
	f.lastLive = l.GPUs
	return nil
}

// DropLive removes the live file: without the telemetry nvidia-smi shows
// the status files' values, not those of an earlier run.
func (f *Files) DropLive() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastLive = nil
	return f.status.RemoveLive()
}

// liveTelemetry returns g's telemetry with reading r's values at now:
// utilization.gpu, utilization.memory, memory.used (at most total −
// reserved), temperature.gpu, power.draw, clocks.sm, clocks.mem,
// clocks.video, the encoder and decoder utilization, the PCIe throughput
// (bytes/s / 1000: KB/s), the energy, the clock event reasons, the memory
// errors and the holders' own use are the exporter's. A board with a memory
// sensor reads topology.MemoryTemperatureC, one with a fan turns at
// topology.FanSpeedPercent. An XID sets lastXid (and it stays); a lost GPU
// keeps its last values (nvidia-smi shows no value of a lost GPU).
func liveTelemetry(g *status.GPU, r *telemetry.Reading, now time.Time) status.Telemetry {
	t := g.Telemetry
	t.Updated = now.UTC()
	if r.XID > 0 {
		x := r.XID
		t.LastXID = &x
	}
	if r.Lost {
		return t
	}
	usable := g.MemoryTotalMiB - g.MemoryReservedMiB
	t.UtilizationGPUPercent = r.UtilizationPercent
	t.UtilizationMemoryPercent = r.MemoryUtilizationPercent
	t.MemoryUsedMiB = min(r.MemoryUsedMiB, usable)
	t.TemperatureC = r.TemperatureC
	if t.MemoryTemperatureC != nil {
		v := topology.MemoryTemperatureC(r.TemperatureC)
		t.MemoryTemperatureC = &v
	}
	t.PowerDrawW = r.PowerDrawW
	t.SMClockMHz = r.SMClockMHz
	if r.MemoryClockMHz > 0 {
		t.MemoryClockMHz = r.MemoryClockMHz
	}
	t.VideoClockMHz = r.VideoClockMHz
	if t.FanSpeedPercent != nil {
		v := topology.FanSpeedPercent(r.UtilizationPercent)
		t.FanSpeedPercent = &v
	}
	t.UtilizationEncoderPercent = r.EncoderUtilizationPercent
	t.UtilizationDecoderPercent = r.DecoderUtilizationPercent
	t.PCIeTxKBps, t.PCIeRxKBps = r.PCIeTxBytes/1000, r.PCIeRxBytes/1000
	t.TotalEnergyMJ = r.TotalEnergyMJ
	t.ClockEventReasons = r.ClockEventReasons & topology.ClockEventsSupported
	t.MemoryErrors = r.MemoryErrors
	t.Holders = nil
	for _, h := range r.Holders {
		t.Holders = append(t.Holders, status.Holder{Namespace: h.Namespace, Pod: h.Pod, Container: h.Container,
			UtilizationGPUPercent: h.UtilizationPercent, MemoryUsedMiB: min(h.MemoryUsedMiB, usable)})
	}
	return t
}
