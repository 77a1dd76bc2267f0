package telemetry

import (
	"math"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// sample computes one GPU's device-level values from the loads its holders
// put on it (after overrides), at one second. It scales the holders' loads
// in place so that they sum to the device's: utilization capped at 100 %,
// memory at the GPU's size.
//
//   - utilization: the sum of the holders', capped at 100;
//   - memory used: each holder's memFrac × size × (0.85 + 0.15 × util/100),
//     or its override, summed and capped at the size; free = size − used;
//   - memory copy utilization: Σ util × copyRate (at most 60 %);
//   - power: idle ± 2 % when the GPU does nothing (utilization below 0.5,
//     reported as 0 %); else idle + (limit −
//     idle) × (0.15 + 0.8 × util/100) ± 2 % of the range; never above the
//     limit;
//   - temperature: from the GPU's idle temperature (the family's + 0-4 °C)
//     up to the family's maximum in proportion to power, ± 0.5 °C;
//   - SM clock: the idle clock when the GPU does nothing (clock event reason
//     GPU idle), else the boost clock, falling towards base (half-way at
//     the power limit) above 80 % of the power range (SW power cap);
//   - tensor activity: Σ util × tensorRate / 100 (0..0.8);
//   - PCIe: 150 KB/s each way idle, plus a tenth of the memory copy
//     utilization's share of the link (receive; transmit 0.6 of it), ± 10 %;
//   - thermal (a thermal fault): at least 1 °C above the slowdown
//     temperature, the SM clock halved when busy, HW slowdown, HW and SW
//     thermal slowdown active.
func sample(hw *hardware, gk uint64, sec int64, loads []holderLoad, memMiB []float64, thermal bool) values {
	gm, prof := hw.gm, hw.prof
	var v values
	for _, l := range loads {
		v.util += l.util
	}
	if v.util > 100 {
		f := 100 / v.util
		for i := range loads {
			loads[i].util *= f
		}
		v.util = 100
	}
	size := float64(gm.MemoryMiB)
	for i, l := range loads {
		if memMiB[i] < 0 { // not overridden
			memMiB[i] = l.memFrac * size * (0.85 + 0.15*l.util/100)
		}
		v.memUsed += memMiB[i]
		v.memCopy += l.util * l.copyRate
		v.tensor += l.util * l.tensorRate / 100
	}
	if v.memUsed > size {
		f := size / v.memUsed
		for i := range memMiB {
			memMiB[i] *= f
		}
		v.memUsed = size
	}
	sk := secondKey(gk, sec)
	idle, limit := float64(gm.IdlePowerW), float64(gm.PowerLimitW)
	span := limit - idle
	busy := v.util >= 0.5 // reported as at least 1 %
	if !busy {
		v.power = idle * (1 + 0.02*signed(draw(sk, tagPower)))
	} else {
		v.power = idle + span*(0.15+0.8*v.util/100) + 0.02*span*signed(draw(sk, tagPower))
	}
	v.power = clamp(v.power, 0, limit)
	frac := clamp((v.power-idle)/span, 0, 1)
	idleTemp := prof.IdleTempC + 4*unit(draw(gk, tagTemp))
	v.temp = idleTemp + (prof.MaxTempC-idleTemp)*frac + 0.5*signed(draw(sk, tagTempNoise))
	if !busy {
		v.smClock = float64(prof.IdleClockMHz)
		v.reasons = topology.ClockEventGPUIdle
	} else {
		throttle := 0.5 * clamp((frac-0.8)/0.2, 0, 1)
		v.smClock = float64(prof.BoostClockMHz) - float64(prof.BoostClockMHz-prof.BaseClockMHz)*throttle
		if throttle > 0 {
			v.reasons = topology.ClockEventSWPowerCap
		}
	}
	if thermal {
		// Held at the slowdown temperature: the hardware halves the clocks
		// and both thermal slowdowns are active.
		v.temp = max(v.temp, float64(hw.thermalC)+0.5*signed(draw(sk, tagTempNoise)))
		if busy {
			v.smClock /= 2
		}
		v.reasons |= topology.ClockEventsThermal
	}
	// PCIe: a little housekeeping traffic, and the workload's copies
	// (a tenth of its memory copy rate's share of the link); receive
	// (host to device: inputs, weights) above transmit.
	moving := v.memCopy / 100 * 0.1 * hw.pcieBps
	v.pcieTx = (pcieIdleBps + moving*0.6) * (1 + 0.1*signed(draw(sk, tagPCIeTx)))
	v.pcieRx = (pcieIdleBps*1.3 + moving) * (1 + 0.1*signed(draw(sk, tagPCIeRx)))
	return v
}

// pcieIdleBps is an idle GPU's PCIe traffic each way, in bytes/s.
const pcieIdleBps = 150_000

// values are one GPU's device-level values before rounding.
type values struct {
	util, memUsed, memCopy, power, temp, smClock float64
	tensor                                       float64 // tensor pipe activity, 0..1
	pcieTx, pcieRx                               float64 // bytes/s
	reasons                                      uint64  // clock event reasons (topology.ClockEvent*)
}

// roundMilli rounds to 3 decimals, the precision DCGM reports power with.
func roundMilli(v float64) float64 { return math.Round(v*1000) / 1000 }
