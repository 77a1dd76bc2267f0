package agent

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// Set is what one configuration serves, built in one place (NewSet) so that
// the start and every live change serve the same thing for the same
// configuration: its configuration, the GPU set (devices, replicas,
// placement, environment), what containers get (the view), the node's GPU
// labels and how the history describes it. It is immutable; a kubelet API
// (a Target) serves it.
type Set struct {
	// Config is the configuration the set was built from.
	Config Config
	// GPUs is the GPU set: what is advertised, and how it is placed.
	GPUs *gpuset.Set
	// View is what a container of its GPUs gets besides the environment.
	View *view.View

	labels kube.LabelSpec
	event  store.ConfigEvent
}

// NewSet builds the set of cfg. identity is what GPU UUIDs are derived from
// (topology.NodeIdentity); "" derives none. It reads the host's NUMA nodes
// (gpuset.New) and nothing else.
func NewSet(cfg Config, identity string) (*Set, error) {
	gpus, err := gpuset.New(cfg.GPUs, identity)
	if err != nil {
		return nil, err
	}
	s := &Set{Config: cfg, GPUs: gpus, View: view.New(cfg.View, gpus)}
	m := cfg.GPUs.Machine
	s.labels = kube.LabelSpec{Machine: m, Topology: cfg.GPUs.Topology, Profile: cfg.Profile}
	s.event = store.ConfigEvent{Profile: cfg.Profile, ResourceName: gpus.Resource(), Machine: m.Name(), Devices: gpus.Len()}
	if sh := cfg.GPUs.Sharing; sh.Enabled() {
		s.labels.Replicas, s.labels.Renamed = sh.Replicas, sh.Renamed
		s.event.Replicas = sh.Replicas
	}
	if mc := cfg.GPUs.MIG; mc.Layout != "" {
		s.event.MIGStrategy, s.event.MIGLayout = string(mc.Strategy.OrDefault()), mc.Layout
	}
	s.labels.MIG = migLabels(gpus, m.GPUModel().Product)
	return s, nil
}

// migLabels describes the MIG devices gpus advertises for the node's
// labels, as GFD does: with the single or mixed strategy and a layout,
// the count and attributes of each profile's devices. DRA's partitionable
// devices are not the device plugin's: only mig.capable.
func migLabels(gpus *gpuset.Set, product string) kube.MIGSpec {
	spec := kube.MIGSpec{Capable: mig.HasMIG(product)}
	mc := gpus.Config().MIG
	st := mc.Strategy.OrDefault()
	if mc.Layout == "" || mc.Partitionable || st == gpuset.MIGStrategyNone {
		return spec
	}
	spec.Strategy, spec.Whole = string(st), gpus.CountOf(gpus.Resource())
	byProfile := map[string]int{}
	for i := range gpus.Machine().Len() {
		for _, d := range gpus.MIGOf(i) {
			p, ok := byProfile[d.Profile.Name]
			if !ok {
				p = len(spec.Profiles)
				byProfile[d.Profile.Name] = p
				pr := d.Profile
				spec.Profiles = append(spec.Profiles, kube.MIGProfileSpec{Name: pr.Name, Resource: gpuset.MIGResource(gpus.Resource(), pr.Name),
					MemoryMiB: pr.MemoryMiB, Multiprocessors: pr.Multiprocessors, Slices: pr.ComputeSlices,
					CopyEngines: pr.CopyEngines, Decoders: pr.Decoders, Encoders: pr.Encoders, JPEGs: pr.JPEGs, OFAs: pr.OFAs})
			}
			spec.Profiles[p].Count++
		}
	}
	slices.SortFunc(spec.Profiles, func(a, b kube.MIGProfileSpec) int { return strings.Compare(a.Name, b.Name) })
	return spec
}

// Resource returns the extended resource the set's devices are advertised
// as.
func (s *Set) Resource() string { return s.GPUs.Resource() }

// Resources returns every extended resource the set advertises devices
// under: Resource, and with the mixed MIG strategy one per profile
// (gpuset.Set.Resources), Resource first even when it has no devices.
func (s *Set) Resources() []string {
	out := []string{s.Resource()}
	for _, r := range s.GPUs.Resources() {
		if r != s.Resource() {
			out = append(out, r)
		}
	}
	return out
}

// Labels describes the machine for the node's GPU labels.
func (s *Set) Labels() kube.LabelSpec { return s.labels }

// Event describes the configuration for the history: the caller adds why,
// when and what the reconcile did.
func (s *Set) Event() store.ConfigEvent { return s.event }

// Equal reports whether s and o serve the same: the same GPU set (its
// derived devices, UUIDs included, and NUMA nodes) from the same
// configuration (compared whole: a field added later is compared too). A
// new configuration equal to the one in force changes nothing, not even a
// ListAndWatch message. A nil set equals nothing.
func (s *Set) Equal(o *Set) bool {
	if s == nil || o == nil {
		return false
	}
	return s.GPUs.Equal(o.GPUs) && reflect.DeepEqual(s.Config, o.Config)
}

// changes says what of the configuration differs from prev to s, for the
// reload's line: "devices 4 -> 8".
func (s *Set) changes(prev *Set) []string {
	var out []string
	diff := func(what, a, b string) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %q -> %q", what, a, b))
		}
	}
	diff("profile", prev.Config.Profile, s.Config.Profile)
	diff("resource", prev.Resource(), s.Resource())
	diff("topology", prev.Config.GPUs.Machine.Name(), s.Config.GPUs.Machine.Name())
	diff("MIG layout", prev.Config.GPUs.MIG.Layout, s.Config.GPUs.MIG.Layout)
	diff("MIG strategy", string(prev.Config.GPUs.MIG.Strategy.OrDefault()), string(s.Config.GPUs.MIG.Strategy.OrDefault()))
	if a, b := prev.GPUs.Len(), s.GPUs.Len(); a != b {
		out = append(out, fmt.Sprintf("devices %d -> %d", a, b))
	}
	if len(out) == 0 {
		out = append(out, "other settings (the same devices)")
	}
	return out
}
