package dra

import (
	"fmt"
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// MIG devices through DRA. The pool offers a MIG-enabled GPU whole and
// every placement of every profile (Resources); the scheduler, by their
// counters, allocates only devices that fit together. A prepared MIG
// device is real for its claim's containers: its id in VIRTUAL_GPU_IDS,
// its GPU's device node, status file and nvidia-smi (plugin/view), its
// UUID in the store. Prepare checks what the counters promise, for a
// claim allocated otherwise (an allocation of another scheduler, a
// configuration changed since): a device that cannot be used with one
// prepared for another claim, or with another of the claim's own, is
// refused (ErrInUse).

// overlap reports whether devices a and b of set cannot be used at once:
// a MIG device and its GPU whole, or two MIG devices of one GPU whose
// placements share a memory slice. Distinct whole GPUs, and devices the
// set does not know as MIG devices, never overlap.
func overlap(set *gpuset.Set, a, b string) bool {
	if a == b || !topology.IsMIGID(a) && !topology.IsMIGID(b) {
		return false
	}
	ma, aMIG := set.MIGDevice(a)
	mb, bMIG := set.MIGDevice(b)
	switch {
	case aMIG && bMIG:
		return ma.GPU == mb.GPU && ma.Placement.Overlaps(mb.Placement)
	case aMIG:
		return b == topology.GPUID(ma.GPU)
	case bMIG:
		return a == topology.GPUID(mb.GPU)
	}
	return false
}

// checkOverlapLocked refuses a claim uid's devices ids (those it holds,
// not admin access) that cannot be used with a device another claim holds
// or with another of ids (overlap); the error wraps ErrInUse and names
// both devices and the holder. d.prep is held.
func (d *Driver) checkOverlapLocked(set *gpuset.Set, uid string, ids []string) error {
	held := make([]string, 0, len(d.held))
	for h, other := range d.held {
		if other != uid {
			held = append(held, h)
		}
	}
	slices.Sort(held)
	for k, id := range ids {
		for _, h := range held {
			if overlap(set, id, h) {
				holder := d.held[h]
				if c, err := d.st.Claim(holder); err == nil {
					holder = c.Namespace + "/" + c.Name + " (uid " + holder + ")"
				}
				return fmt.Errorf("device %s: %w: it shares memory slices of its GPU with %s, prepared for %s", topology.QuoteID(id), ErrInUse, topology.QuoteID(h), holder)
			}
		}
		for _, other := range ids[k+1:] {
			if overlap(set, id, other) {
				return fmt.Errorf("device %s: %w: it shares memory slices of its GPU with %s of the same claim", topology.QuoteID(id), ErrInUse, topology.QuoteID(other))
			}
		}
	}
	return nil
}
