package gpuset

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// EnvIDs is the environment variable a container gets its GPUs in: their
// device ids, joined by commas, in device order; the physical GPUs (each
// once) when it was allocated replicas of shared ones.
const EnvIDs = "VIRTUAL_GPU_IDS"

// EnvReplicas is the environment variable a container of shared GPUs gets
// besides EnvIDs: the device ids it was allocated, joined by commas in
// device order: replica ids fake-<i>::<j>, and the ids of whole GPUs when
// only some GPUs are shared.
const EnvReplicas = "VIRTUAL_GPU_REPLICAS"

// FailRequestsRule names the setting that limits a container to one shared
// device, in the refusal's message.
const FailRequestsRule = "sharing.timeSlicing.failRequestsGreaterThanOne"

// Set is everything one configuration advertises, built in one place (New)
// so that the start and every live change serve the same thing for the
// same configuration: the resource name, the devices the store keeps, the
// devices advertised and how they map to GPUs, and how requests for them
// are placed and described. It is immutable; its methods are safe for
// concurrent use.
//
// Shared GPUs are advertised as replicas: Specs lists every GPU and the
// replicas of the shared ones, the advertised devices are the replicas of
// the shared GPUs and the others whole. A device's Index is GPU index ×
// PerGPU + replica number (a GPU not shared is advertised as itself at
// replica number 0), so that the devices of a GPU sort together and the
// order of the indices is the order of the GPUs; without sharing PerGPU is
// 1 and an Index is a GPU index.
type Set struct {
	cfg      Config
	resource string
	specs    []store.DeviceSpec
	slots    map[string]slot
	numa     topology.ReportedNUMA
	perGPU   int    // replicas per shared GPU; 1 without sharing
	shared   []bool // by GPU index; nil without sharing
	policy   allocator.Policy
	replicas allocator.SharedPolicy // nil without sharing

	mig        [][]MIGDevice // by GPU index; nil without MIG (see mig.go)
	migProduct *mig.Product  // nil without MIG
}

// slot is where an advertised device sits: its Index, its GPU and the
// resource it is advertised under.
type slot struct {
	index    int // Device.Index
	gpu      int // the GPU's index on the machine
	resource string
}

// New builds the set of cfg. identity is what GPU UUIDs are derived from
// (topology.NodeIdentity); "" derives none. It reads the host's NUMA nodes
// from cfg.SysfsRoot (in the auto NUMA report) and nothing else. A
// configuration without a machine, or with a policy name the allocator
// lacks, is an error.
func New(cfg Config, identity string) (*Set, error) {
	m := cfg.Machine
	if m == nil || m.Len() == 0 {
		return nil, errors.New("device set: no machine")
	}
	policy, ok := allocator.Policies[cfg.AllocationPolicy]
	if !ok {
		return nil, fmt.Errorf("device set: allocation policy %q: want one of %s", cfg.AllocationPolicy, strings.Join(allocator.PolicyNames(), ", "))
	}
	s := &Set{cfg: cfg, resource: cfg.ResourceName, perGPU: 1, policy: policy}
	if sh := cfg.Sharing; sh.Enabled() {
		if s.replicas, ok = allocator.SharedPolicies[sh.PolicyName]; !ok {
			return nil, fmt.Errorf("device set: shared devices allocation policy %q: want one of %s", sh.PolicyName, strings.Join(allocator.SharedPolicyNames(), ", "))
		}
		s.resource = sh.ResourceName
		s.perGPU = sh.Replicas
		s.shared = make([]bool, m.Len())
		for i := range s.shared {
			s.shared[i] = sh.Shares(i)
		}
	}
	if err := s.migLayout(); err != nil {
		return nil, fmt.Errorf("device set: %w", err)
	}
	if s.mig != nil {
		s.perGPU = MIGStride
	}
	s.numa = m.ReportNUMA(cfg.NUMAReport, os.DirFS(cfg.SysfsRoot))
	s.specs, s.slots = s.layout(identity)
	if len(s.slots) == 0 {
		return nil, fmt.Errorf("device set: MIG layout %q leaves no device to advertise (every GPU MIG-enabled without MIG devices): %w", cfg.MIG.Layout, ErrMIG)
	}
	return s, nil
}

// layout returns the devices the store keeps, UUIDs derived from identity
// ("" derives none): every GPU, then the replicas of the shared ones (see
// store's "Shared GPUs"); and the advertised devices by id.
func (s *Set) layout(identity string) ([]store.DeviceSpec, map[string]slot) {
	m := s.cfg.Machine
	n := m.Len()
	specs := make([]store.DeviceSpec, n)
	slots := make(map[string]slot, n)
	for i := range n {
		id := m.ID(i)
		specs[i] = store.DeviceSpec{ID: id, Index: i, NUMA: m.NUMA(i)}
		if identity != "" {
			specs[i].UUID = topology.DeriveUUID(identity, id)
		}
		if s.mig != nil {
			for _, d := range s.mig[i] {
				spec := store.DeviceSpec{ID: d.ID, Index: i, NUMA: m.NUMA(i), GPU: id, Replica: d.Number, MIG: d.Profile.Name}
				if identity != "" {
					spec.UUID = topology.DeriveMIGUUID(identity, d.ID)
				}
				specs = append(specs, spec)
				if s.advertisesMIG(i) {
					slots[d.ID] = slot{index: i*s.perGPU + d.Number, gpu: i, resource: s.migResource(d.Profile.Name)}
				}
			}
			if s.advertisesWhole(i) {
				slots[id] = slot{index: i * s.perGPU, gpu: i, resource: s.resource}
			}
			continue
		}
		if !s.Shares(i) {
			slots[id] = slot{index: i * s.perGPU, gpu: i, resource: s.resource}
			continue
		}
		for j := range s.perGPU {
			rid := topology.ReplicaID(i, j)
			specs = append(specs, store.DeviceSpec{ID: rid, Index: i, NUMA: m.NUMA(i), GPU: id, Replica: j})
			slots[rid] = slot{index: i*s.perGPU + j, gpu: i, resource: s.resource}
		}
	}
	return specs, slots
}

// Config returns the configuration the set was built from.
func (s *Set) Config() Config { return s.cfg }

// Machine returns the modelled machine.
func (s *Set) Machine() *topology.Machine { return s.cfg.Machine }

// Resource returns the extended resource the devices are advertised as:
// the configuration's, or the shared GPUs' (Sharing.ResourceName). With the
// mixed MIG strategy the MIG devices have resources of their own
// (Resources).
func (s *Set) Resource() string { return s.resource }

// Specs returns the devices to reconcile the store with, UUIDs derived:
// every GPU, and the replicas of the shared ones.
func (s *Set) Specs() []store.DeviceSpec { return slices.Clone(s.specs) }

// NUMA returns the NUMA node each GPU reports, and what to log about it.
func (s *Set) NUMA() topology.ReportedNUMA { return s.numa }

// Len returns the number of advertised devices (a shared GPU counts as
// its replicas, a GPU advertised as MIG devices as those).
func (s *Set) Len() int { return len(s.slots) }

// PerGPU returns the number of replicas per shared GPU; 1 without sharing;
// MIGStride with MIG devices.
func (s *Set) PerGPU() int { return s.perGPU }

// Shares reports whether GPU i is advertised as replicas.
func (s *Set) Shares(i int) bool { return s.shared != nil && s.shared[i] }

// GPUIDs returns the ids of the machine's GPUs, by index: what health and
// fault plans name (a shared GPU's health reaches its replicas: Members).
func (s *Set) GPUIDs() []string {
	m := s.cfg.Machine
	ids := make([]string, m.Len())
	for i := range ids {
		ids[i] = m.ID(i)
	}
	return ids
}

// DeviceIDsOf returns the ids a device of GPU i may carry: the GPU's own
// id and, when the set shares it, its replicas' ids. Allocations of an
// earlier configuration may hold either.
func (s *Set) DeviceIDsOf(i int) []string {
	ids := []string{s.cfg.Machine.ID(i)}
	if s.Shares(i) {
		for j := range s.perGPU {
			ids = append(ids, topology.ReplicaID(i, j))
		}
	}
	for _, d := range s.MIGOf(i) {
		ids = append(ids, d.ID)
	}
	return ids
}

// Devices returns the advertised devices as the store has them after
// reconciling it with Specs, sorted by Index: with their stored health (a
// replica's is its GPU's) and the NUMA node each reports. Removed devices,
// devices the set does not configure and shared GPUs themselves
// (advertised as their replicas) are left out; a configured device the
// store lacks is an error wrapping store.ErrUnknownDevice.
func (s *Set) Devices(stored []store.Device) ([]Device, error) {
	devices := make([]Device, 0, len(s.slots))
	for _, d := range stored {
		sl, ok := s.slots[d.ID]
		if !ok || d.Removed {
			continue
		}
		devices = append(devices, Device{ID: d.ID, Index: sl.index, NUMA: s.numa.Node(sl.gpu), Healthy: d.Healthy, Reason: d.Reason, Resource: sl.resource})
	}
	if len(devices) != len(s.slots) {
		return nil, fmt.Errorf("device set: %d of %d configured devices are in the state file: %w", len(devices), len(s.slots), store.ErrUnknownDevice)
	}
	slices.SortFunc(devices, func(a, b Device) int { return a.Index - b.Index })
	return devices, nil
}

// GPU returns the GPU index of an advertised device of this set.
func (s *Set) GPU(d Device) int { return d.Index / s.perGPU }

// GPUs returns the distinct GPU indices of devs (devices of this set), in
// ascending order: the GPUs whose UUIDs, device nodes and CDI devices a
// container of devs gets.
func (s *Set) GPUs(devs []Device) []int {
	gpus := make([]int, 0, len(devs))
	for _, d := range devs {
		gpus = append(gpus, s.GPU(d))
	}
	slices.Sort(gpus)
	return slices.Compact(gpus)
}

// Members returns the advertised devices whose health is GPU id's: its
// replicas when it is shared, its MIG devices when it is advertised as
// those (and itself too with Partitionable), itself otherwise; none for a
// MIG-enabled GPU without MIG devices. A replica or MIG device id is
// refused: health is per GPU. An id that is no GPU of the machine wraps
// store.ErrUnknownDevice.
func (s *Set) Members(id string) ([]string, error) {
	m := s.cfg.Machine
	if topology.IsMIGID(id) {
		gpu, ok := topology.GPUOf(id)
		if !ok || gpu >= m.Len() {
			return nil, fmt.Errorf("%q: %w", id, store.ErrUnknownDevice)
		}
		return nil, fmt.Errorf("%s is a MIG device of %s: health is per GPU, set %s (its MIG devices follow)", id, m.ID(gpu), m.ID(gpu))
	}
	if topology.IsReplicaID(id) {
		gpu, _, err := topology.ParseReplicaID(id)
		if err != nil || gpu >= m.Len() {
			return nil, fmt.Errorf("%q: %w", id, store.ErrUnknownDevice)
		}
		return nil, fmt.Errorf("%s is a replica of %s: health is per GPU, set %s (all its replicas follow)", id, m.ID(gpu), m.ID(gpu))
	}
	i, ok := m.Index(id)
	if !ok {
		return nil, fmt.Errorf("%q: %w", id, store.ErrUnknownDevice)
	}
	if s.advertisesMIG(i) {
		var ids []string
		if s.advertisesWhole(i) {
			ids = append(ids, id)
		}
		for _, d := range s.mig[i] {
			ids = append(ids, d.ID)
		}
		return ids, nil
	}
	if !s.Shares(i) {
		return []string{id}, nil
	}
	ids := make([]string, s.perGPU)
	for j := range ids {
		ids[j] = topology.ReplicaID(i, j)
	}
	return ids, nil
}

// Score rates a preferred set of device indices by the connectivity of
// their distinct GPUs, for the metrics.
func (s *Set) Score(chosen []int) int {
	if s.perGPU == 1 {
		return allocator.Score(s.cfg.Machine, chosen)
	}
	gpus := make([]int, len(chosen))
	for i, idx := range chosen {
		gpus[i] = idx / s.perGPU
	}
	return allocator.Score(s.cfg.Machine, gpus)
}

// Limit returns the most devices one container may get (0: no limit) and
// the setting that says so: one with Sharing.FailRequestsGreaterThanOne.
func (s *Set) Limit() (max int, rule string) {
	if s.cfg.Sharing.Enabled() && s.cfg.Sharing.FailRequestsGreaterThanOne {
		return 1, FailRequestsRule
	}
	return 0, ""
}

// Prefer chooses size devices from available, including every device of
// mustInclude (devices of this set, sorted by Index, checked by the
// caller as plugin.PreferFunc says), and returns their ids in any order.
// Without sharing it is the allocation policy over the GPUs. With sharing
// a request is placed on replicas first, by the shared policy, and on
// whole GPUs (a set that shares only some GPUs) only for what the replicas
// cannot hold, or must include, by the whole-GPU policy. The kubelet's
// request cannot say which kind it wants; whole GPUs are the scarce ones,
// which the configuration keeps apart from sharing (NVIDIA's packed policy
// also takes a free whole GPU last).
func (s *Set) Prefer(available, mustInclude []Device, size int) ([]string, error) {
	m := s.cfg.Machine
	if len(available) > 0 && topology.IsMIGID(available[0].ID) {
		return s.preferMIG(available, mustInclude, size), nil
	}
	if s.replicas == nil {
		chosen, err := s.policy(m, s.gpuIndices(available), s.gpuIndices(mustInclude), size)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(chosen))
		for i, g := range chosen {
			pos, found := slices.BinarySearchFunc(available, g*s.perGPU, func(d Device, idx int) int { return d.Index - idx })
			if !found {
				return nil, fmt.Errorf("GPU %d is not an available device: %w", g, ErrInvalidChoice)
			}
			ids[i] = available[pos].ID
		}
		return ids, nil
	}
	availR, availW := s.split(available)
	mustR, mustW := s.split(mustInclude)
	nR := min(size-len(mustW), len(availR)) // at least len(mustR): the caller checked the request
	ids := make([]string, 0, size)
	if nR > 0 {
		chosen, err := s.replicas(m, s.perGPU, availR, mustR, nR)
		if err != nil {
			return nil, err
		}
		for _, r := range chosen {
			ids = append(ids, r.String())
		}
	}
	if nW := size - nR; nW > 0 {
		chosen, err := s.policy(m, availW, mustW, nW)
		if err != nil {
			return nil, err
		}
		for _, g := range chosen {
			ids = append(ids, m.ID(g))
		}
	}
	return ids, nil
}

// gpuIndices returns the GPU index of each device, in order: for whole
// GPUs, what a policy over GPUs takes.
func (s *Set) gpuIndices(devs []Device) []int {
	out := make([]int, len(devs))
	for i, d := range devs {
		out[i] = s.GPU(d)
	}
	return out
}

// split returns the replicas of devs and the GPU indices of its whole GPUs.
func (s *Set) split(devs []Device) ([]allocator.Replica, []int) {
	var replicas []allocator.Replica
	var whole []int
	for _, d := range devs {
		g := s.GPU(d)
		if s.Shares(g) {
			replicas = append(replicas, allocator.Replica{GPU: g, Index: d.Index % s.perGPU})
		} else {
			whole = append(whole, g)
		}
	}
	return replicas, whole
}

// Env is the environment of a container of devs (devices of this set,
// sorted by Index): EnvIDs lists the physical GPUs (each once, in device
// order), the topology variables describe them (topology.Machine.
// ContainerEnv), and with sharing EnvReplicas lists the devices. It is
// deterministic in the devices.
func (s *Set) Env(devs []Device) map[string]string {
	m := s.cfg.Machine
	if s.replicas == nil {
		env := m.ContainerEnv(s.GPUs(devs))
		ids := make([]string, len(devs))
		for i, d := range devs {
			ids[i] = d.ID
		}
		env[EnvIDs] = strings.Join(ids, ",")
		return env
	}
	gpus := s.GPUs(devs)
	env := m.ContainerEnv(gpus)
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = m.ID(g)
	}
	env[EnvIDs] = strings.Join(ids, ",")
	devIDs := make([]string, len(devs))
	for i, d := range devs {
		devIDs[i] = d.ID
	}
	env[EnvReplicas] = strings.Join(devIDs, ",")
	return env
}

// Equal reports whether s and o serve the same: the same derived devices
// (UUIDs included), NUMA nodes and resource, from the same configuration
// (compared whole, reflect.DeepEqual: a field added to Config later is
// compared too). A nil set equals nothing.
func (s *Set) Equal(o *Set) bool {
	if s == nil || o == nil {
		return false
	}
	return s.resource == o.resource && slices.Equal(s.specs, o.specs) && slices.Equal(s.numa.Nodes, o.numa.Nodes) &&
		reflect.DeepEqual(s.cfg, o.cfg)
}

// UUIDs returns the stored UUID of each whole GPU, by index; GPUs without
// one (the node has no identity) are left out.
func UUIDs(stored []store.Device) map[int]string {
	out := make(map[int]string, len(stored))
	for _, d := range stored {
		if i, ok := topology.GPUOf(d.ID); ok && d.UUID != "" && !d.IsReplica() && !topology.IsReplicaID(d.ID) && !topology.IsMIGID(d.ID) {
			out[i] = d.UUID
		}
	}
	return out
}
