package telemetry

import (
	"fmt"
	"math"
	"slices"
)

// MIG devices. dcgm-exporter reports a MIG-enabled GPU as its GPU
// instances: every sample of the GPU's fields carries GPU_I_PROFILE (the
// profile, "3g.40gb") and GPU_I_ID (the GPU instance id) after modelName,
// one series per instance and none for the GPU itself. Here a MIG device
// reports its own memory (FB_USED, FB_FREE of the instance, FB_RESERVED
// 0, as nvidia-smi -q shows a MIG device's) and profiling ratios, and its
// GPU's values for the device-level fields (clocks, temperatures, power,
// energy, XID, remapped rows, NVLink, PCIe replays); its readings'
// memory used is its MIG devices' (Reading.MIG); utilization
// (DCGM_FI_DEV_GPU_UTIL, MEM_COPY_UTIL), which NVML does not report under
// MIG (nvidia-smi's GPU-Util N/A), is left out. Each series carries the
// labels of the containers holding that MIG device. A holder loads its MIG
// devices: its load counts for their compute share of the GPU
// (MIGInstance.ComputeShare) and its memory for their size.

// MIGInstance is one MIG device of a GPU (GPU.MIG).
type MIGInstance struct {
	// ID is its device id (topology.MIGID), one of its GPU's DeviceIDs:
	// holders holding it are its holders.
	ID string
	// Profile is the GPU_I_PROFILE label, "3g.40gb".
	Profile string
	// GPUInstanceID is the GPU_I_ID label (gpuset.GPUInstanceID).
	GPUInstanceID int
	// MemoryMiB is the instance's memory.
	MemoryMiB int
	// ComputeShare is its share of the GPU's compute: its compute slices
	// over the GPU's (3/7 for 3g.40gb on an H100), more than 0 and at most
	// 1. Its holders' load counts for that much of the GPU's (power,
	// temperature, clocks).
	ComputeShare float64
}

// MIGReading is one MIG device's share of its GPU's reading.
type MIGReading struct {
	// ID, Profile and GPUInstanceID identify the MIG device (MIGInstance).
	ID            string `json:"id"`
	Profile       string `json:"profile"`
	GPUInstanceID int    `json:"gpu_instance_id"`
	// MemoryTotalMiB is the instance's memory; MemoryUsedMiB and
	// MemoryFreeMiB its DCGM_FI_DEV_FB_USED and FB_FREE: each holder uses
	// the fraction of the instance it would of the whole GPU.
	MemoryTotalMiB int `json:"memory_total_mib"`
	MemoryUsedMiB  int `json:"memory_used_mib"`
	MemoryFreeMiB  int `json:"memory_free_mib"`
	// UtilizationPercent is the instance's activity: its holders'
	// utilizations, at most 100.
	UtilizationPercent int `json:"utilization_gpu"`
	// GREngineActive is DCGM_FI_PROF_GR_ENGINE_ACTIVE of the instance
	// (UtilizationPercent / 100); TensorActive and DRAMActive are the
	// GPU's ratios scaled by the instance's activity over the GPU's, at
	// most 1.
	GREngineActive float64 `json:"gr_engine_active"`
	TensorActive   float64 `json:"pipe_tensor_active"`
	DRAMActive     float64 `json:"dram_active"`
	// Holders are the containers holding the instance, in holding order,
	// with their use of it.
	Holders []HolderReading `json:"holders,omitempty"`

	holders []int // their positions in the GPU's Reading.Holders
}

// checkMIG checks the MIG devices of g (named gpu in errors), whose GPU has
// gpuMiB of memory.
func checkMIG(gpu string, g GPU, gpuMiB int) error {
	seen, gis := map[string]bool{}, map[int]bool{}
	for _, m := range g.MIG {
		switch {
		case !slices.Contains(g.DeviceIDs, m.ID) || seen[m.ID]:
			return fmt.Errorf("%s: MIG device %q: want one of the GPU's device ids, once: %w", gpu, m.ID, ErrInvalidConfig)
		case m.Profile == "" || checkLabel(m.Profile) != nil:
			return fmt.Errorf("%s: MIG device %s: profile %q: want a printable profile like 3g.40gb: %w", gpu, m.ID, m.Profile, ErrInvalidConfig)
		case m.GPUInstanceID < 0 || m.GPUInstanceID > 1024 || gis[m.GPUInstanceID]:
			return fmt.Errorf("%s: MIG device %s: GPU instance id %d: want 0..1024, one per device: %w", gpu, m.ID, m.GPUInstanceID, ErrInvalidConfig)
		case m.MemoryMiB < 1 || m.MemoryMiB > gpuMiB:
			return fmt.Errorf("%s: MIG device %s: %d MiB: want 1..%d (the GPU's): %w", gpu, m.ID, m.MemoryMiB, gpuMiB, ErrInvalidConfig)
		case !(m.ComputeShare > 0 && m.ComputeShare <= 1): // also refuses NaN
			return fmt.Errorf("%s: MIG device %s: compute share %v: want more than 0, at most 1: %w", gpu, m.ID, m.ComputeShare, ErrInvalidConfig)
		}
		seen[m.ID], gis[m.GPUInstanceID] = true, true
	}
	return nil
}

// migIdentities returns the idle readings of the MIG devices of the GPU at
// pos: nothing used; nil with MIG off.
func (e *Exporter) migIdentities(pos int) []MIGReading {
	ms := e.gpus[pos].MIG
	if len(ms) == 0 {
		return nil
	}
	out := make([]MIGReading, len(ms))
	for k, m := range ms {
		out[k] = MIGReading{ID: m.ID, Profile: m.Profile, GPUInstanceID: m.GPUInstanceID, MemoryTotalMiB: m.MemoryMiB, MemoryFreeMiB: m.MemoryMiB}
	}
	return out
}

// migOf returns the compute share (at most 1) and the memory of the MIG
// devices of the GPU at pos that holder h holds; 0, 0 for none.
func (e *Exporter) migOf(pos int, h gpuHolder) (share float64, memMiB int) {
	for _, m := range e.gpus[pos].MIG {
		if slices.Contains(h.ids, m.ID) {
			share += m.ComputeShare
			memMiB += m.MemoryMiB
		}
	}
	return min(share, 1), memMiB
}

// migShares fills the MIG device readings of r, the GPU at pos, from its
// holders hs (with their device ids) and their GPU-level loads and memory
// (loadsAt, sample); then, with MIG on, the
// GPU's memory used is its MIG devices' and each holder's the sum of its
// shares of them, so that nvidia-smi agrees with the MIG series.
func (e *Exporter) migShares(r *Reading, pos int, hs []gpuHolder, loads []holderLoad, mem []float64) {
	if len(r.MIG) == 0 {
		return
	}
	defer func() {
		used := 0
		mine := make([]int, len(r.Holders))
		for k := range r.MIG {
			used += r.MIG[k].MemoryUsedMiB
			for j, i := range r.MIG[k].holders {
				mine[i] += r.MIG[k].Holders[j].MemoryUsedMiB
			}
		}
		r.MemoryUsedMiB, r.MemoryFreeMiB = used, r.MemoryTotalMiB-used
		for i := range r.Holders {
			r.Holders[i].MemoryUsedMiB = mine[i]
		}
	}()
	for k := range r.MIG {
		m := &r.MIG[k]
		util, used := 0, 0
		for i, h := range hs {
			if !slices.Contains(h.ids, m.ID) {
				continue
			}
			// The holder's GPU-level shares (loadsAt) back into this MIG
			// device's: its utilization of each of its MIG devices, its
			// memory split among them by their size.
			hr := r.Holders[i]
			share, migMiB := e.migOf(pos, h)
			hr.UtilizationPercent = min(100, int(math.Round(loads[i].util/share)))
			hr.MemoryUsedMiB = min(m.MemoryTotalMiB, int(math.Round(mem[i]*float64(m.MemoryTotalMiB)/float64(migMiB))))
			util += hr.UtilizationPercent
			used += hr.MemoryUsedMiB
			m.Holders = append(m.Holders, hr)
			m.holders = append(m.holders, i)
		}
		m.UtilizationPercent = min(100, util)
		m.MemoryUsedMiB = min(m.MemoryTotalMiB, used)
		m.MemoryFreeMiB = m.MemoryTotalMiB - m.MemoryUsedMiB
		m.GREngineActive = float64(m.UtilizationPercent) / 100
		if r.GREngineActive > 0 {
			scale := m.GREngineActive / r.GREngineActive
			m.TensorActive = math.Round(min(1, r.TensorActive*scale)*1e6) / 1e6
			m.DRAMActive = math.Round(min(1, r.DRAMActive*scale)*1e6) / 1e6
		}
	}
}

// appendMIGSamples appends the samples of family f for the MIG devices of
// the GPU at pos (reading r, its holders' label segments hs): per MIG
// device, labelled with its holders as a GPU is with its own (see
// AppendExposition).
func (e *Exporter) appendMIGSamples(b []byte, f *servedFamily, pos int, r *Reading, hs []holderSegment) []byte {
	for k := range r.MIG {
		m := &r.MIG[k]
		prefix := e.migPrefix[pos][k]
		v := f.device(r)
		if f.mig != nil {
			v = f.mig(r, m)
		}
		switch n := len(m.holders); {
		case n == 0:
			b = e.appendSampleWith(b, f.family, prefix, r, nil, v)
		case !e.perPod:
			b = e.appendSampleWith(b, f.family, prefix, r, &hs[m.holders[n-1]], v)
		case f.perProcess:
			b = e.appendSampleWith(b, f.family, prefix, r, nil, v)
			for j, i := range m.holders {
				b = e.appendSampleWith(b, f.family, prefix, r, &hs[i], f.holder(&m.Holders[j]))
			}
		default:
			for _, i := range m.holders {
				b = e.appendSampleWith(b, f.family, prefix, r, &hs[i], v)
			}
		}
	}
	return b
}
