package mig

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// GPU is what a layout makes of one GPU of a node.
type GPU struct {
	// Index is the GPU's index on the node (fake-<Index>).
	Index int
	// Product is the GPU's product name.
	Product string
	// Entry is the index of the layout entry that applies to the GPU (the
	// last that matches it), -1 if none does: the GPU keeps MIG disabled.
	Entry int
	// MIGEnabled reports MIG mode on.
	MIGEnabled bool
	// Devices are the GPU's MIG devices in ascending placement order;
	// empty with MIG disabled or mig-devices: {}.
	Devices []Device
}

// Device is one MIG device (a GPU instance with its full compute
// instance): its profile and where it sits.
type Device struct {
	// Profile is the device's profile on the GPU's product.
	Profile Profile
	// Placement is the memory slices it occupies.
	Placement Placement
}

// Resolve applies the layout of cfg to a node of gpus GPUs of one product
// and returns every GPU's MIG state, GPU 0 first. It is a pure function:
// the same arguments give the same placements.
//
// Entries apply as mig-parted applies them: one whose device-filter lists
// the product's PCI id (or has no filter) and whose devices include the
// GPU; of several, the last one. A GPU no entry matches keeps MIG
// disabled; a layout that matches no GPU at all fails with
// ErrNoMatchingEntry.
//
// The MIG devices of an entry are placed as Place places them. Errors name
// the layout, the GPU index and the profile, and wrap ErrUnknownLayout,
// ErrDeviceIndex (an index the node lacks, in an entry for this product),
// ErrNoMIG (MIG enabled on a product without it), ErrUnknownProfile or
// ErrDoesNotFit.
func Resolve(cfg *Config, layout, product string, gpus int) ([]GPU, error) {
	if cfg == nil {
		return nil, fmt.Errorf("mig layout %q: %w (no config)", layout, ErrUnknownLayout)
	}
	l, err := cfg.Layout(layout)
	if err != nil {
		return nil, err
	}
	if gpus < 1 {
		return nil, fmt.Errorf("mig layout %q: a node of %d GPUs: %w", layout, gpus, ErrDeviceIndex)
	}
	p, noMIG := LookupProduct(product)
	if noMIG != nil {
		p = nil
	}
	for i, e := range l {
		if !e.matchesFilter(p) {
			continue
		}
		for _, d := range e.Devices {
			if d < 0 || d >= gpus {
				return nil, fmt.Errorf("mig layout %q entry %d: devices: GPU %d: %w (the node has GPUs 0-%d)", layout, i, d, ErrDeviceIndex, gpus-1)
			}
		}
	}
	out := make([]GPU, gpus)
	matched := false
	for g := range gpus {
		out[g] = GPU{Index: g, Product: product, Entry: -1}
		for i, e := range l {
			if e.matchesFilter(p) && e.matchesIndex(g) {
				out[g].Entry = i
			}
		}
		if out[g].Entry < 0 {
			continue
		}
		matched = true
		e := l[out[g].Entry]
		if !e.MIGEnabled {
			continue
		}
		if p == nil {
			return nil, fmt.Errorf("mig layout %q entry %d: GPU %d: %w", layout, out[g].Entry, g, noMIG)
		}
		devs, err := Place(p, e.MIGDevices)
		if err != nil {
			return nil, fmt.Errorf("mig layout %q entry %d: GPU %d (%s): %w", layout, out[g].Entry, g, product, err)
		}
		out[g].MIGEnabled = true
		out[g].Devices = devs
	}
	if !matched {
		id := "no PCI id: no MIG"
		if p != nil {
			id = p.PCIDeviceID
		}
		return nil, fmt.Errorf("mig layout %q on %d × %s (%s): %w", layout, gpus, product, id, ErrNoMatchingEntry)
	}
	return out, nil
}

// Place places MIG devices (profile name to count, as mig-devices) on one
// GPU of product p and returns them in ascending placement order.
//
// NVIDIA documents which placements are valid, not which one the driver
// picks for a GPU instance created without one (mig-parted creates them
// that way, larger profiles first, trying other orders when one fails).
// Place reproduces what real GPUs show: the devices go in mig-parted's
// order (more compute slices first, then more memory slices, then by
// name), each at the free valid placement that leaves the most placements
// of the product's profiles free, the lowest start of equals. That puts
// all-balanced on an H100 at 3g.40gb 4:4, 2g.20gb 0:2, 1g.10gb 2:1 and 3:1,
// as nvidia-smi mig -lgi shows it on H100s (NVIDIA/DCGM issue 138) and an
// H200 (nvidia_gpu_exporter's capture), and the first of two 3g at 4:4.
// When that greedy choice leaves a later device no room, Place backtracks
// over the other placements, so devices that fit in some arrangement are
// placed.
//
// Errors name the profile and wrap ErrUnknownProfile (a profile p lacks,
// or a compute-instance profile "1c.3g.40gb", which the model does not
// partition) or ErrDoesNotFit (more instances than the profile allows, more
// compute slices than the GPU has, or placements that overlap in every
// arrangement); a nil p is ErrNoMIG.
func Place(p *Product, migDevices map[string]int) ([]Device, error) {
	if p == nil {
		return nil, fmt.Errorf("MIG devices %s: %w (no product)", describeCounts(migDevices), ErrNoMIG)
	}
	names := slices.Sorted(maps.Keys(migDevices))
	var todo []Profile
	compute := 0
	for _, name := range names {
		count := migDevices[name]
		if count == 0 {
			continue
		}
		pr, ok := p.Profile(name)
		if !ok {
			why := ""
			if n, err := ParseProfileName(name); err == nil && n.C != n.G {
				why = "; compute-instance profiles are not modelled"
			}
			return nil, fmt.Errorf("profile %s: %w: %s has %s%s", name, ErrUnknownProfile, p.Name, strings.Join(p.ProfileNames(), ", "), why)
		}
		if count < 0 || count > pr.Instances {
			return nil, fmt.Errorf("profile %s: %d instances: %w: at most %d per GPU", name, count, ErrDoesNotFit, pr.Instances)
		}
		compute += count * pr.ComputeSlices
		for range count {
			todo = append(todo, pr)
		}
	}
	if compute > p.ComputeSlices {
		return nil, fmt.Errorf("profiles %s: %d compute slices: %w: the GPU has %d", describeCounts(migDevices), compute, ErrDoesNotFit, p.ComputeSlices)
	}
	slices.SortStableFunc(todo, func(a, b Profile) int {
		return cmp.Or(cmp.Compare(b.ComputeSlices, a.ComputeSlices), cmp.Compare(b.MemorySlices, a.MemorySlices), strings.Compare(a.Name, b.Name))
	})
	pl := placer{p: p, todo: todo, failed: map[placeState]bool{}, chosen: make([]Placement, len(todo))}
	if !pl.place(0, 0) {
		return nil, fmt.Errorf("profiles %s: %w: their placements overlap in every arrangement (%s)", describeCounts(migDevices), ErrDoesNotFit, describePlacements(todo))
	}
	devs := make([]Device, len(todo))
	for i, pr := range todo {
		devs[i] = Device{Profile: pr, Placement: pl.chosen[i]}
	}
	slices.SortFunc(devs, func(a, b Device) int {
		return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.Placement.Size, b.Placement.Size))
	})
	return devs, nil
}

// placeState is a point of the search: the next device and the memory
// slices taken.
type placeState struct {
	next int
	used uint64
}

// placer searches placements depth first, remembering dead ends.
type placer struct {
	p      *Product
	todo   []Profile
	chosen []Placement
	failed map[placeState]bool
}

// mask is the memory-slice bit set of a placement.
func mask(pl Placement) uint64 { return (uint64(1)<<pl.Size - 1) << pl.Start }

// free counts the placements of every profile of the product that do not
// touch used.
func (pl *placer) free(used uint64) int {
	n := 0
	for _, pr := range pl.p.Profiles {
		for _, c := range pr.Placements {
			if mask(c)&used == 0 {
				n++
			}
		}
	}
	return n
}

func (pl *placer) place(next int, used uint64) bool {
	if next == len(pl.todo) {
		return true
	}
	st := placeState{next, used}
	if pl.failed[st] {
		return false
	}
	type cand struct {
		at   Placement
		left int
	}
	var cands []cand
	for _, c := range pl.todo[next].Placements {
		if mask(c)&used == 0 {
			cands = append(cands, cand{c, pl.free(used | mask(c))})
		}
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(b.left, a.left), cmp.Compare(a.at.Start, b.at.Start))
	})
	for _, c := range cands {
		pl.chosen[next] = c.at
		if pl.place(next+1, used|mask(c.at)) {
			return true
		}
	}
	pl.failed[st] = true
	return false
}

// describeCounts writes mig-devices as "3g.40gb ×2, 4g.40gb ×1".
func describeCounts(m map[string]int) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		if m[n] > 0 {
			parts = append(parts, n+" ×"+strconv.Itoa(m[n]))
		}
	}
	return strings.Join(parts, ", ")
}

// describePlacements writes the valid placements of the profiles, as
// nvidia-smi mig -lgipp does: "3g.40gb {0,4}:4".
func describePlacements(todo []Profile) string {
	var parts []string
	seen := map[string]bool{}
	for _, pr := range todo {
		if seen[pr.Name] {
			continue
		}
		seen[pr.Name] = true
		parts = append(parts, pr.Name+" "+PlacementsString(pr.Placements))
	}
	return strings.Join(parts, ", ")
}
