package telemetry

import "sync"

// Counters integrates the exporter's counters over the clock's seconds:
// the energy (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, Σ power × 1 s) and the
// NVLink traffic (DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL) of each GPU, by UUID.
// A GPU starts at 0 the first second a reading sees it; each later reading
// adds every second since the last one, evaluated with the holders and
// overrides of that reading (the plugin reads every second, so they are
// those of the second). A counter never goes back: a reading of an earlier
// second adds nothing. A gap longer than maxCatchUp seconds is summed from
// maxCatchUp evenly spaced seconds, each weighing its share of the gap. It
// is safe for concurrent use; one Counters outlives the exporters that
// share it.
type Counters struct {
	mu   sync.Mutex
	gpus map[string]*counterState
}

// maxCatchUp is the longest gap counted second by second; a longer one is
// summed from gapSamples seconds.
const (
	maxCatchUp = 120
	gapSamples = 32
)

type counterState struct {
	last              int64   // the last second counted
	energyMJ, nvlinkK float64 // mJ, KiB
}

// NewCounters returns counters that have seen no GPU.
func NewCounters() *Counters { return &Counters{gpus: make(map[string]*counterState)} }

// nvlinkShare is the NVLink traffic per point of memory copy utilization,
// as a share of the links' bandwidth: at the most (60 % copy utilization)
// 15 % of the links' both ways.
const nvlinkShare = 0.25 / 100

// advance counts the seconds after the GPU's last one up to sec, the last
// with powerW and memCopy (the reading's), the others from at(s), and
// returns the energy in mJ and the NVLink traffic in KiB. nvlinkBps is the
// GPU's NVLink bandwidth one way (0: no NVLink).
func (c *Counters) advance(uuid string, sec int64, powerW, memCopy, nvlinkBps float64, at func(s int64) (powerW, memCopy float64)) (energyMJ, nvlinkKiB int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.gpus[uuid]
	if !ok {
		st = &counterState{last: sec}
		c.gpus[uuid] = st
	}
	add := func(p, mc, weight float64) {
		st.energyMJ += p * 1000 * weight
		st.nvlinkK += 2 * nvlinkBps * mc * nvlinkShare / 1024 * weight
	}
	if gap := sec - st.last; gap > 0 {
		// the seconds before sec, then sec itself
		if gap <= maxCatchUp {
			for s := st.last + 1; s < sec; s++ {
				p, mc := at(s)
				add(p, mc, 1)
			}
		} else {
			w := float64(gap-1) / gapSamples
			for k := range int64(gapSamples) {
				p, mc := at(st.last + 1 + k*(gap-1)/gapSamples)
				add(p, mc, w)
			}
		}
		add(powerW, memCopy, 1)
		st.last = sec
	}
	return int64(st.energyMJ), int64(st.nvlinkK)
}
