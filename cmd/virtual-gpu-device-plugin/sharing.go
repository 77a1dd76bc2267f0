package main

import (
	"fmt"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// EnvReplicas is the environment variable a container of shared GPUs gets
// besides plugin.EnvIDs (which then lists the physical GPUs): the device
// ids it was allocated, the kubelet's, joined by commas in device order:
// replica ids fake-<i>::<j>, and the ids of whole GPUs when only some GPUs
// are shared.
const EnvReplicas = "VIRTUAL_GPU_REPLICAS"

// failRequestsRule names the setting that limits a container to one shared
// device, in the refusal's message.
const failRequestsRule = "sharing.timeSlicing.failRequestsGreaterThanOne"

// slot is where an advertised device sits: its catalog Index and its GPU.
type slot struct {
	index int // gpuset.Device.Index
	gpu   int // the GPU's index on the machine
}

// layout maps the devices a configuration advertises to GPUs and back.
// Device Index = GPU index × perGPU + replica number: a GPU not shared is
// advertised as itself at replica number 0, so that the devices of a GPU
// sort together and the order of the indices is the order of the GPUs.
// Without sharing perGPU is 1 and an Index is a GPU index. It is immutable
// and safe for concurrent use.
type layout struct {
	m      *topology.Machine
	perGPU int    // replicas per shared GPU; 1 without sharing
	shared []bool // by GPU index; nil without sharing
}

// newLayout returns the layout of cfg's machine and sharing.
func newLayout(cfg *options.Config) layout {
	l := layout{m: cfg.Machine, perGPU: 1}
	if !cfg.Sharing.Enabled() {
		return l
	}
	l.perGPU = cfg.Sharing.Replicas
	l.shared = make([]bool, l.m.Len())
	for i := range l.shared {
		l.shared[i] = cfg.Sharing.Shares(i)
	}
	return l
}

// shares reports whether GPU i is advertised as replicas.
func (l layout) shares(i int) bool { return l.shared != nil && l.shared[i] }

// gpu returns the GPU index of the device at catalog index idx.
func (l layout) gpu(idx int) int { return idx / l.perGPU }

// specs returns the devices the store keeps, UUIDs derived from identity
// ("" derives none): every GPU, then the replicas of the shared ones (see
// store's "Shared GPUs"); and the advertised devices by id.
func (l layout) specs(identity string) ([]store.DeviceSpec, map[string]slot) {
	n := l.m.Len()
	specs := make([]store.DeviceSpec, n)
	slots := make(map[string]slot, n)
	for i := range n {
		id := l.m.ID(i)
		specs[i] = store.DeviceSpec{ID: id, Index: i, NUMA: l.m.NUMA(i)}
		if identity != "" {
			specs[i].UUID = topology.DeriveUUID(identity, id)
		}
		if !l.shares(i) {
			slots[id] = slot{index: i * l.perGPU, gpu: i}
			continue
		}
		for j := range l.perGPU {
			rid := topology.ReplicaID(i, j)
			specs = append(specs, store.DeviceSpec{ID: rid, Index: i, NUMA: l.m.NUMA(i), GPU: id, Replica: j})
			slots[rid] = slot{index: i*l.perGPU + j, gpu: i}
		}
	}
	return specs, slots
}

// gpus returns the distinct GPU indices of devs (sorted by Index), in order.
func (l layout) gpus(devs []gpuset.Device) []int {
	out := make([]int, 0, len(devs))
	for _, d := range devs {
		if g := l.gpu(d.Index); len(out) == 0 || out[len(out)-1] != g {
			out = append(out, g)
		}
	}
	return out
}

// members returns the advertised devices whose health is GPU id's: its
// replicas when it is shared, itself otherwise. A replica id is refused:
// health is per GPU. An id that is no GPU of the machine wraps
// store.ErrUnknownDevice.
func (l layout) members(id string) ([]string, error) {
	if topology.IsReplicaID(id) {
		gpu, _, err := topology.ParseReplicaID(id)
		if err != nil || gpu >= l.m.Len() {
			return nil, fmt.Errorf("%q: %w", id, store.ErrUnknownDevice)
		}
		return nil, fmt.Errorf("%s is a replica of %s: health is per GPU, set %s (all its replicas follow)", id, l.m.ID(gpu), l.m.ID(gpu))
	}
	i, ok := l.m.Index(id)
	if !ok {
		return nil, fmt.Errorf("%q: %w", id, store.ErrUnknownDevice)
	}
	if !l.shares(i) {
		return []string{id}, nil
	}
	ids := make([]string, l.perGPU)
	for j := range ids {
		ids[j] = topology.ReplicaID(i, j)
	}
	return ids, nil
}

// score rates a preferred set of catalog indices by the connectivity of
// their distinct GPUs.
func (l layout) score(chosen []int) int {
	if l.perGPU == 1 {
		return allocator.Score(l.m, chosen)
	}
	gpus := make([]int, len(chosen))
	for i, idx := range chosen {
		gpus[i] = l.gpu(idx)
	}
	return allocator.Score(l.m, gpus)
}

// sharedCatalog fills the parts of a catalog of shared GPUs: Prefer, Env
// and Limit. cfg.Sharing must be enabled.
func (l layout) sharedCatalog(cat *plugin.Catalog, cfg *options.Config) {
	shared, whole := cfg.Sharing.Policy, cfg.Policy
	cat.Prefer = func(available, mustInclude []gpuset.Device, size int) ([]string, error) {
		return l.prefer(shared, whole, available, mustInclude, size)
	}
	cat.Env = l.env
	if cfg.Sharing.FailRequestsGreaterThanOne {
		cat.Limit = plugin.Limit{Max: 1, Rule: failRequestsRule}
	}
}

// prefer places a request on replicas first, by the shared policy, and on
// whole GPUs (a set that shares only some GPUs) only for what the replicas
// cannot hold, or must include, by the whole-GPU policy. The kubelet's
// request cannot say which kind it wants; whole GPUs are the scarce ones,
// which the configuration keeps apart from sharing (NVIDIA's packed policy
// also takes a free whole GPU last).
func (l layout) prefer(shared allocator.SharedPolicy, whole allocator.Policy, available, mustInclude []gpuset.Device, size int) ([]string, error) {
	availR, availW := l.split(available)
	mustR, mustW := l.split(mustInclude)
	nR := min(size-len(mustW), len(availR)) // at least len(mustR): the Server checked the request
	ids := make([]string, 0, size)
	if nR > 0 {
		chosen, err := shared(l.m, l.perGPU, availR, mustR, nR)
		if err != nil {
			return nil, err
		}
		for _, r := range chosen {
			ids = append(ids, r.String())
		}
	}
	if nW := size - nR; nW > 0 {
		chosen, err := whole(l.m, availW, mustW, nW)
		if err != nil {
			return nil, err
		}
		for _, g := range chosen {
			ids = append(ids, l.m.ID(g))
		}
	}
	return ids, nil
}

// split returns the replicas of devs and the GPU indices of its whole GPUs.
func (l layout) split(devs []gpuset.Device) ([]allocator.Replica, []int) {
	var replicas []allocator.Replica
	var whole []int
	for _, d := range devs {
		g := l.gpu(d.Index)
		if l.shares(g) {
			replicas = append(replicas, allocator.Replica{GPU: g, Index: d.Index % l.perGPU})
		} else {
			whole = append(whole, g)
		}
	}
	return replicas, whole
}

// env is the environment of a container of devs: plugin.EnvIDs lists the
// physical GPUs (each once, in device order), EnvReplicas the devices, and
// the topology variables describe the GPUs.
func (l layout) env(devs []gpuset.Device) map[string]string {
	gpus := l.gpus(devs)
	env := l.m.ContainerEnv(gpus)
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = l.m.ID(g)
	}
	env[plugin.EnvIDs] = strings.Join(ids, ",")
	devIDs := make([]string, len(devs))
	for i, d := range devs {
		devIDs[i] = d.ID
	}
	env[EnvReplicas] = strings.Join(devIDs, ",")
	return env
}
