package gpuset

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// MIG partitions. A layout (MIG.Layout, resolved on the machine into
// MIG.GPUs) turns MIG on for some GPUs and places MIG devices on them; the
// store keeps every MIG device as a child of its GPU (store.DeviceSpec.MIG)
// with a UUID of its own, so that the container view shows them whatever
// the strategy. What is advertised depends on the kubelet API:
//
//   - the device plugin, by MIG.Strategy as NVIDIA's plugin does: none
//     advertises every GPU whole; single advertises the MIG devices under
//     the configuration's resource, every GPU MIG-enabled with one profile
//     (a node with no MIG-enabled GPU advertises its GPUs whole); mixed
//     advertises each profile's MIG devices as a resource of its own,
//     MIGResource ("unicore.mcyou.cc/mig-1g.10gb"), and the GPUs without
//     MIG whole under the configuration's resource;
//   - DRA (MIG.Partitionable): every MIG-enabled GPU whole and a device for
//     every valid placement of every profile of its product, which the
//     scheduler chooses among by their shared counters; the layout's own
//     devices do not matter there (the driver makes the chosen one real).
//
// A MIG device's Index is its GPU index × MIGStride + its placement's
// number among the product's placements (MIGPlacements, from 1); the GPU
// itself has GPU index × MIGStride. So devices of a GPU sort together and
// ids keep their index across layouts.

// MIGStrategy is how the device plugin advertises MIG devices (NVIDIA's
// -mig-strategy).
type MIGStrategy string

// The MIG strategies.
const (
	// MIGStrategyNone advertises every GPU whole, MIG or not.
	MIGStrategyNone MIGStrategy = "none"
	// MIGStrategySingle advertises the MIG devices under the resource of
	// the GPUs: every GPU MIG-enabled, all MIG devices of one profile.
	MIGStrategySingle MIGStrategy = "single"
	// MIGStrategyMixed advertises each profile's MIG devices as a resource
	// of its own, and GPUs without MIG whole.
	MIGStrategyMixed MIGStrategy = "mixed"
)

// MIGStrategies are the strategies, in the order the flag lists them.
var MIGStrategies = []MIGStrategy{MIGStrategyNone, MIGStrategySingle, MIGStrategyMixed}

// OrDefault returns s, or MIGStrategyNone when s is empty.
func (s MIGStrategy) OrDefault() MIGStrategy {
	if s == "" {
		return MIGStrategyNone
	}
	return s
}

// MIGStride is the distance between the indices of two GPUs' devices when
// a set has MIG devices: more than any product's placements.
const MIGStride = 64

// MIG is the MIG configuration of a set. The zero value has no MIG: every
// GPU whole.
type MIG struct {
	// Strategy is the device plugin's strategy (default none).
	Strategy MIGStrategy
	// Layout names the layout in force (a mig-parted configuration's, as
	// -mig-config names it); "" none.
	Layout string
	// GPUs is Layout resolved on the machine (mig.Resolve), by GPU index;
	// nil without a layout.
	GPUs []mig.GPU
	// Partitionable publishes every placement of the MIG-enabled GPUs, as
	// DRA's partitionable devices do, instead of the layout's devices.
	Partitionable bool
}

// Enabled reports whether GPU i has MIG mode on.
func (m MIG) Enabled(i int) bool { return i >= 0 && i < len(m.GPUs) && m.GPUs[i].MIGEnabled }

// anyEnabled reports whether some GPU has MIG mode on.
func (m MIG) anyEnabled() bool {
	return slices.ContainsFunc(m.GPUs, func(g mig.GPU) bool { return g.MIGEnabled })
}

// MIGDevice is one MIG device of a set: a GPU instance (with its full
// compute instance) of a MIG-enabled GPU.
type MIGDevice struct {
	// ID is its device id (topology.MIGID): "fake-0-mig-3g40gb-4".
	ID string
	// GPU is its GPU's index.
	GPU int
	// Profile is its profile on the GPU's product.
	Profile mig.Profile
	// Placement is the memory slices it occupies.
	Placement mig.Placement
	// Number is its placement's number among the product's placements
	// (MIGPlacements), from 1: its Index is GPU × MIGStride + Number.
	Number int
}

// MIGPlacements returns every valid placement of every profile of product
// p as a MIG device of GPU gpu, in the product's order (profiles as
// nvidia-smi mig -lgip lists them, placements by start), numbered from 1.
func MIGPlacements(p *mig.Product, gpu int) []MIGDevice {
	var out []MIGDevice
	for _, pr := range p.Profiles {
		for _, pl := range pr.Placements {
			out = append(out, MIGDevice{ID: topology.MIGID(gpu, pr.Name, pl.Start), GPU: gpu, Profile: pr, Placement: pl, Number: len(out) + 1})
		}
	}
	return out
}

// MIGResource returns the resource MIG devices of profile are advertised
// as with the mixed strategy: "mig-<profile>" in the domain of resource,
// a "+" of the profile written ".", as NVIDIA's plugin does (a resource
// name has no "+"): unicore.mcyou.cc/gpu and 1g.10gb+me give
// unicore.mcyou.cc/mig-1g.10gb.me.
func MIGResource(resource, profile string) string {
	domain, _, _ := strings.Cut(resource, "/")
	return domain + "/mig-" + strings.ReplaceAll(profile, "+", ".")
}

// migLayout resolves what the set's MIG configuration keeps and
// advertises: the MIG devices by GPU (into s.mig) and, per GPU, whether it
// is advertised whole and under which resource its MIG devices are. It
// refuses a strategy its layout does not allow, naming the GPU and the
// profile.
func (s *Set) migLayout() error {
	mc := s.cfg.MIG
	m := s.cfg.Machine
	if mc.Strategy.OrDefault() != MIGStrategyNone && !slices.Contains(MIGStrategies, mc.Strategy) {
		return fmt.Errorf("MIG strategy %q: want one of none, single, mixed: %w", mc.Strategy, ErrMIG)
	}
	if len(mc.GPUs) == 0 || !mc.anyEnabled() {
		return nil
	}
	if len(mc.GPUs) != m.Len() {
		return fmt.Errorf("MIG layout %q: resolved for %d GPUs, the machine has %d: %w", mc.Layout, len(mc.GPUs), m.Len(), ErrMIG)
	}
	product, err := mig.LookupProduct(m.GPUModel().Product)
	if err != nil {
		return fmt.Errorf("MIG layout %q: %w", mc.Layout, err)
	}
	if s.cfg.Sharing.Enabled() && (mc.Partitionable || mc.Strategy.OrDefault() != MIGStrategyNone) {
		return fmt.Errorf("MIG layout %q with time-slicing: sharing MIG devices is not modelled; share whole GPUs (MIG strategy none) or turn sharing off: %w", mc.Layout, ErrMIG)
	}
	s.migProduct = product
	s.mig = make([][]MIGDevice, m.Len())
	all := MIGPlacements(product, 0)
	type place struct {
		profile string
		at      mig.Placement
	}
	number := make(map[place]int, len(all))
	for _, d := range all {
		number[place{d.Profile.Name, d.Placement}] = d.Number
	}
	for i, g := range mc.GPUs {
		if !g.MIGEnabled {
			continue
		}
		if mc.Partitionable {
			s.mig[i] = MIGPlacements(product, i)
			continue
		}
		for _, d := range g.Devices {
			n, ok := number[place{d.Profile.Name, d.Placement}]
			if !ok {
				return fmt.Errorf("MIG layout %q: GPU %s: %s at %s is not a placement of %s: %w", mc.Layout, m.ID(i), d.Profile.Name, d.Placement, product.Name, ErrMIG)
			}
			s.mig[i] = append(s.mig[i], MIGDevice{ID: topology.MIGID(i, d.Profile.Name, d.Placement.Start), GPU: i, Profile: d.Profile, Placement: d.Placement, Number: n})
		}
	}
	if mc.Partitionable || mc.Strategy.OrDefault() != MIGStrategySingle {
		return nil
	}
	profile, first := "", ""
	for i := range m.Len() {
		if !mc.Enabled(i) {
			return fmt.Errorf("MIG strategy single: GPU %s has MIG disabled in layout %q: single wants every GPU MIG-enabled with one profile (use mixed): %w", m.ID(i), mc.Layout, ErrMIG)
		}
		for _, d := range s.mig[i] {
			switch {
			case profile == "":
				profile, first = d.Profile.Name, m.ID(i)
			case d.Profile.Name != profile:
				return fmt.Errorf("MIG strategy single: GPU %s has %s, GPU %s %s in layout %q: single wants one profile on every GPU (use mixed): %w",
					m.ID(i), d.Profile.Name, first, profile, mc.Layout, ErrMIG)
			}
		}
	}
	return nil
}

// CheckMIG reports whether a set of cfg can serve its MIG layout (the
// strategy's rules, the product's MIG model), without building the set:
// the error New would return for it.
func CheckMIG(cfg Config) error {
	if cfg.Machine == nil {
		return errors.New("no machine")
	}
	s := &Set{cfg: cfg}
	return s.migLayout()
}

// advertisesMIG reports whether GPU i is advertised as its MIG devices
// (with Partitionable: besides itself).
func (s *Set) advertisesMIG(i int) bool {
	if s.mig == nil || !s.cfg.MIG.Enabled(i) {
		return false
	}
	return s.cfg.MIG.Partitionable || s.cfg.MIG.Strategy.OrDefault() != MIGStrategyNone
}

// advertisesWhole reports whether GPU i is advertised itself.
func (s *Set) advertisesWhole(i int) bool { return !s.advertisesMIG(i) || s.cfg.MIG.Partitionable }

// migResource is the resource the MIG devices of profile are advertised
// as.
func (s *Set) migResource(profile string) string {
	if s.cfg.MIG.Strategy == MIGStrategyMixed {
		return MIGResource(s.cfg.ResourceName, profile)
	}
	return s.resource
}

// MIGProduct returns the MIG model of the machine's product when some GPU
// has MIG on; nil otherwise.
func (s *Set) MIGProduct() *mig.Product { return s.migProduct }

// MIGOf returns the MIG devices the store keeps for GPU i: its layout's,
// or every placement with Partitionable; nil with MIG off.
func (s *Set) MIGOf(i int) []MIGDevice {
	if i < 0 || i >= len(s.mig) {
		return nil
	}
	return slices.Clone(s.mig[i])
}

// MIGDevice returns the MIG device of that id, if the set keeps it.
func (s *Set) MIGDevice(id string) (MIGDevice, bool) {
	i, ok := topology.GPUOf(id)
	if !ok || !topology.IsMIGID(id) || i >= len(s.mig) {
		return MIGDevice{}, false
	}
	for _, d := range s.mig[i] {
		if d.ID == id {
			return d, true
		}
	}
	return MIGDevice{}, false
}

// Resources returns the resources the set advertises devices under, the
// set's own (Resource) first if it has devices, then the others sorted:
// one per profile with the mixed strategy.
func (s *Set) Resources() []string {
	seen := map[string]bool{}
	for _, sl := range s.slots {
		seen[sl.resource] = true
	}
	out := make([]string, 0, len(seen))
	for r := range seen {
		if r != s.resource {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	if seen[s.resource] {
		out = slices.Insert(out, 0, s.resource)
	}
	return out
}

// CountOf returns the number of devices the set advertises under
// resource.
func (s *Set) CountOf(resource string) int {
	n := 0
	for _, sl := range s.slots {
		if sl.resource == resource {
			n++
		}
	}
	return n
}

// OfResource returns the devices of devs advertised under resource, in
// order.
func OfResource(devs []Device, resource string) []Device {
	var out []Device
	for _, d := range devs {
		if d.Resource == resource {
			out = append(out, d)
		}
	}
	return out
}

// preferMIG chooses size MIG devices from available, every one of
// mustInclude among them, packing: the devices of mustInclude, then more on
// their GPUs, then, for what is left, the GPU that holds it alone with the
// fewest devices to spare (a partly used GPU fills before a free one is
// broken into), else the GPUs with the most available devices first;
// lower GPU index first among equals, and by placement number on a GPU.
func (s *Set) preferMIG(available, mustInclude []Device, size int) []string {
	byGPU := map[int][]Device{}
	var gpus []int
	for _, d := range available {
		g := s.GPU(d)
		if byGPU[g] == nil {
			gpus = append(gpus, g)
		}
		byGPU[g] = append(byGPU[g], d)
	}
	taken := map[string]bool{}
	ids := make([]string, 0, size)
	take := func(d Device) {
		if len(ids) < size && !taken[d.ID] {
			taken[d.ID] = true
			ids = append(ids, d.ID)
		}
	}
	for _, d := range mustInclude {
		take(d)
	}
	used := map[int]bool{}
	for _, d := range mustInclude {
		g := s.GPU(d)
		if !used[g] {
			used[g] = true
			for _, x := range byGPU[g] {
				take(x)
			}
		}
	}
	rest := slices.DeleteFunc(slices.Clone(gpus), func(g int) bool { return used[g] })
	need := size - len(ids)
	best := -1
	for _, g := range rest {
		if n := len(byGPU[g]); n >= need && (best < 0 || n < len(byGPU[best])) {
			best = g
		}
	}
	if best >= 0 {
		rest = []int{best}
	} else {
		slices.SortStableFunc(rest, func(a, b int) int { return cmp.Compare(len(byGPU[b]), len(byGPU[a])) })
	}
	for _, g := range rest {
		for _, d := range byGPU[g] {
			take(d)
		}
	}
	return ids
}
