package gpuset

import (
	"cmp"
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// MIGInstance is a MIG device of the layout in force as the container
// view and the telemetry show it: the device and its GPU instance id.
type MIGInstance struct {
	MIGDevice
	// GPUInstanceID is its GPU instance id (nvidia-smi mig -lgi, the
	// dcgm-exporter label GPU_I_ID); see GPUInstanceID.
	GPUInstanceID int
}

// GPUInstanceID is the GPU instance id a GPU of memorySlices memory slices
// gives an instance at placement start of size slices: the slot's number
// in the binary tree of the slices, numbered as a heap (the whole GPU 0,
// its halves 1 and 2, its quarters 3 to 6, its eighths 7 to 14), so that
// it depends only on where the instance sits. A real H100 80GB HBM3 on
// driver 590.48.01 numbers so (3g.40gb at 4:4 is GPU instance 2, 2g.20gb
// at 0:2 is 3, 1g.10gb at 2:1 and 3:1 are 9 and 10), as an A100's seven
// 1g.5gb at 0..6 are 7 to 13. A size that does not divide the slices
// (never on a product of the model) numbers from the smallest slots.
func GPUInstanceID(memorySlices, start, size int) int {
	if size <= 0 || memorySlices <= 0 || memorySlices%size != 0 {
		return memorySlices - 1 + start
	}
	return memorySlices/size - 1 + start/size
}

// MIGInstances returns the MIG devices of GPU i in the layout in force,
// as a container sees them: the layout's devices (with Partitionable
// too, whose other placements are only offers), in GPU instance id order
// (nvidia-smi -L numbers them so); nil when GPU i has MIG off.
func (s *Set) MIGInstances(i int) []MIGInstance {
	layout := map[string]bool{}
	if s.migProduct != nil && s.cfg.MIG.Enabled(i) {
		for _, d := range s.cfg.MIG.GPUs[i].Devices {
			layout[topology.MIGID(i, d.Profile.Name, d.Placement.Start)] = true
		}
	}
	return s.instances(i, func(id string) bool { return layout[id] })
}

// MIGInstancesHeld returns the MIG devices of GPU i a container sees: of
// a Partitionable set, whose placements are offers, those held reports
// held (a claim holds them: through DRA a MIG device exists while a
// prepared claim holds it), in GPU instance id order; of any other set
// MIGInstances.
func (s *Set) MIGInstancesHeld(i int, held func(id string) bool) []MIGInstance {
	if !s.cfg.MIG.Partitionable {
		return s.MIGInstances(i)
	}
	return s.instances(i, held)
}

// instances returns the MIG devices of GPU i the set keeps that keep
// reports, with their GPU instance ids, in that order; nil when GPU i has
// MIG off.
func (s *Set) instances(i int, keep func(id string) bool) []MIGInstance {
	if s.migProduct == nil || !s.cfg.MIG.Enabled(i) {
		return nil
	}
	var out []MIGInstance
	for _, d := range s.MIGOf(i) {
		if keep(d.ID) {
			out = append(out, MIGInstance{MIGDevice: d, GPUInstanceID: GPUInstanceID(s.migProduct.MemorySlices, d.Placement.Start, d.Placement.Size)})
		}
	}
	slices.SortFunc(out, func(a, b MIGInstance) int { return cmp.Compare(a.GPUInstanceID, b.GPUInstanceID) })
	return out
}
