package dra

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra/endpoint"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// newMIGRig returns a rig of machine m with the built-in MIG layout
// resolved on it, served through DRA (every placement of every profile of
// the MIG-enabled GPUs).
func newMIGRig(t testing.TB, m *topology.Machine, layout string) *rig {
	t.Helper()
	r := openRig(t)
	gpus := plugintest.GPUConfig(t, "hgx-h100", gpuset.Sharing{})
	gpus.Machine, gpus.Topology = m, m.Name()
	gpus = plugintest.WithMIG(t, gpus, nil, gpuset.MIG{Layout: layout, Partitionable: true})
	view := plugintest.ViewConfig(r.dir)
	view.VisibleDevicesEnv = true
	var err error
	if r.set, err = agent.NewSet(agent.Config{KubeletAPI: agent.KubeletAPIDRA, GPUs: gpus, View: view}, testNode); err != nil {
		t.Fatal(err)
	}
	plugintest.Served(t, r.st, r.set.GPUs)
	r.d = r.newDriver()
	return r
}

// pool returns the rig's pool as the driver publishes it.
func (r *rig) pool() resourceslice.Pool {
	r.t.Helper()
	stored := r.stored()
	devs, err := r.set.GPUs.Devices(stored)
	if err != nil {
		r.t.Fatal(err)
	}
	res, err := Resources(endpoint.DefaultDriverName, testNode, r.set.GPUs, devs, stored)
	if err != nil {
		r.t.Fatal(err)
	}
	pool, ok := res.Pools[testNode]
	if len(res.Pools) != 1 || !ok {
		r.t.Fatalf("pools %v: want one, the node's", res.Pools)
	}
	return pool
}

// productMachine is an HGX H100 whose GPUs are product's: the preset
// with the board replaced.
func productMachine(t testing.TB, product string) *topology.Machine {
	t.Helper()
	src, ok := topology.PresetSource("hgx-h100")
	if !ok {
		t.Fatal("no hgx-h100 preset")
	}
	cc := "9.0"
	if strings.Contains(product, "A100") {
		cc = "8.0"
	}
	text := strings.NewReplacer("product: NVIDIA H100 80GB HBM3", "product: "+product, `computeCapability: "9.0"`, `computeCapability: "`+cc+`"`,
		"name: hgx-h100", "name: hgx-"+topology.CompactProfile(product)).Replace(string(src))
	m, err := topology.ParseYAML("hgx-"+product, strings.NewReader(text))
	if err != nil {
		t.Fatalf("%s: %v", product, err)
	}
	if m.GPUModel().Product != product {
		t.Fatalf("machine of %s has %s", product, m.GPUModel().Product)
	}
	return m
}

// checkLimits fails the test for a slice over an API limit or one holding
// both devices and counter sets, and for a device consuming a counter its
// set lacks.
func checkLimits(t *testing.T, pool resourceslice.Pool) {
	t.Helper()
	sets := map[string]resourceapi.CounterSet{}
	for i, s := range pool.Slices {
		if len(s.Devices) > 0 && len(s.SharedCounters) > 0 {
			t.Errorf("slice %d has devices and counter sets: the API allows one or the other", i)
		}
		if len(s.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("slice %d has %d devices, over the API's %d for devices consuming counters", i, len(s.Devices), resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures)
		}
		if len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			t.Errorf("slice %d has %d counter sets, over the API's %d", i, len(s.SharedCounters), resourceapi.ResourceSliceMaxCounterSets)
		}
		for _, cs := range s.SharedCounters {
			if _, dup := sets[cs.Name]; dup {
				t.Errorf("counter set %s published twice", cs.Name)
			}
			sets[cs.Name] = cs
			if errs := validation.IsDNS1123Label(cs.Name); len(errs) > 0 {
				t.Errorf("counter set name %q: %v", cs.Name, errs)
			}
			if len(cs.Counters) == 0 || len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				t.Errorf("counter set %s has %d counters, the API allows 1 to %d", cs.Name, len(cs.Counters), resourceapi.ResourceSliceMaxCountersPerCounterSet)
			}
			for name := range cs.Counters {
				if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
					t.Errorf("counter %s/%s: %v", cs.Name, name, errs)
				}
			}
		}
	}
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				t.Errorf("%s: %d attributes and capacities, the API allows %d", d.Name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
			}
			if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
				t.Errorf("%s: %d counter consumptions, the API allows %d", d.Name, len(d.ConsumesCounters), resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
			}
			for _, c := range d.ConsumesCounters {
				cs, ok := sets[c.CounterSet]
				if !ok {
					t.Errorf("%s consumes from counter set %s, which the pool lacks", d.Name, c.CounterSet)
					continue
				}
				if len(c.Counters) > resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption {
					t.Errorf("%s: %d counters consumed, the API allows %d", d.Name, len(c.Counters), resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption)
				}
				for name := range c.Counters {
					if _, ok := cs.Counters[name]; !ok {
						t.Errorf("%s consumes %s/%s, which the set lacks", d.Name, c.CounterSet, name)
					}
				}
			}
		}
	}
}

// devicesOfPool returns the pool's devices by name, and its counter sets.
func devicesOfPool(pool resourceslice.Pool) (map[string]resourceapi.Device, map[string]resourceapi.CounterSet) {
	devs := map[string]resourceapi.Device{}
	sets := map[string]resourceapi.CounterSet{}
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			devs[d.Name] = d
		}
		for _, cs := range s.SharedCounters {
			sets[cs.Name] = cs
		}
	}
	return devs, sets
}

// fit reports whether the devices can be allocated together by their
// counters, as the scheduler counts them: for every counter of every set,
// what they consume at most what the set has.
func fit(sets map[string]resourceapi.CounterSet, devs ...resourceapi.Device) bool {
	used := map[string]map[string]*resource.Quantity{}
	for _, d := range devs {
		for _, c := range d.ConsumesCounters {
			if used[c.CounterSet] == nil {
				used[c.CounterSet] = map[string]*resource.Quantity{}
			}
			for name, v := range c.Counters {
				q := used[c.CounterSet][name]
				if q == nil {
					q = &resource.Quantity{}
					used[c.CounterSet][name] = q
				}
				q.Add(v.Value)
			}
		}
	}
	for set, counters := range used {
		for name, q := range counters {
			have, ok := sets[set].Counters[name]
			if !ok || q.Cmp(have.Value) > 0 {
				return false
			}
		}
	}
	return true
}

// memorySlices returns the memory slices a device consumes, ascending.
func memorySlices(d resourceapi.Device) []int {
	var out []int
	for _, c := range d.ConsumesCounters {
		for name := range c.Counters {
			var i int
			if _, err := fmt.Sscanf(name, "memory-slice-%d", &i); err == nil && name == CounterMemorySlice(i) {
				out = append(out, i)
			}
		}
	}
	slices.Sort(out)
	return out
}

func str(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func capacity(d resourceapi.Device, name resourceapi.QualifiedName) int64 {
	c := d.Capacity[name]
	return c.Value.Value()
}

// TestResources_MIG_CounterSets: through DRA every MIG-enabled GPU of an
// HGX H100 and a DGX A100 has a counter set of NVIDIA's counters (the
// whole-GPU profile's SMs, engines and memory, a counter per memory
// slice), which the GPU whole consumes entirely; each of its placements is
// a MIG device with NVIDIA's attributes and its profile's capacities; every
// slice is within the API's limits.
func TestResources_MIG_CounterSets(t *testing.T) {
	for _, machine := range []string{"hgx-h100", "dgx-a100"} {
		t.Run(machine, func(t *testing.T) {
			r := newMIGRig(t, plugintest.Machine(t, machine), "all-enabled")
			pool := r.pool()
			checkLimits(t, pool)
			devs, sets := devicesOfPool(pool)
			m := r.set.GPUs.Machine()
			product := r.set.GPUs.MIGProduct()
			full := product.Profiles[len(product.Profiles)-1] // 7g, as nvidia-smi lists it last
			per := len(gpuset.MIGPlacements(product, 0))
			if len(devs) != m.Len()*(per+1) || len(sets) != m.Len() {
				t.Fatalf("%d devices and %d counter sets, want %d and %d", len(devs), len(sets), m.Len()*(per+1), m.Len())
			}
			if n := len(pool.Slices); n != 1+m.Len()*(per+1)/resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures+1 {
				t.Errorf("%d slices: want one of counter sets and the devices two GPUs a slice", n)
			}
			for _, sl := range pool.Slices[1:] {
				gpus := map[int]bool{}
				for _, d := range sl.Devices {
					g, _ := topology.GPUOf(d.Name)
					gpus[g] = true
				}
				if len(sl.Devices) != 2*(per+1) && len(sl.Devices) != per+1 || len(gpus)*(per+1) != len(sl.Devices) {
					t.Errorf("a slice of %d devices of GPUs %v: want a GPU's %d devices in one slice", len(sl.Devices), slices.Sorted(maps.Keys(gpus)), per+1)
				}
			}
			if len(pool.Slices[0].SharedCounters) != m.Len() {
				t.Errorf("first slice has %d counter sets, want all %d", len(pool.Slices[0].SharedCounters), m.Len())
			}
			uuids := gpuset.UUIDs(r.stored())
			migUUIDs := map[string]string{}
			for _, d := range r.stored() {
				if topology.IsMIGID(d.ID) {
					migUUIDs[d.ID] = d.UUID
				}
			}
			for i := range m.Len() {
				cs, ok := sets[topology.GPUID(i)+"-counter-set"]
				if !ok {
					t.Fatalf("no counter set fake-%d-counter-set (sets %v)", i, slices.Collect(maps.Keys(sets)))
				}
				want := map[string]int64{CounterMultiprocessors: int64(full.Multiprocessors), CounterCopyEngines: int64(full.CopyEngines),
					CounterDecoders: int64(full.Decoders), CounterEncoders: int64(full.Encoders), CounterJPEGEngines: int64(full.JPEGs),
					CounterOFAEngines: int64(full.OFAs), CounterMemory: int64(full.MemoryMiB) << 20}
				for s := range product.MemorySlices {
					want[CounterMemorySlice(s)] = 1
				}
				got := map[string]int64{}
				for name, c := range cs.Counters {
					got[name] = c.Value.Value()
				}
				if !maps.Equal(got, want) {
					t.Errorf("%s: counters %v, want %v", cs.Name, got, want)
				}
				whole := devs[topology.GPUID(i)]
				if len(whole.ConsumesCounters) != 1 || whole.ConsumesCounters[0].CounterSet != cs.Name {
					t.Fatalf("%s consumes %+v, want its set %s", whole.Name, whole.ConsumesCounters, cs.Name)
				}
				consumed := map[string]int64{}
				for name, c := range whole.ConsumesCounters[0].Counters {
					consumed[name] = c.Value.Value()
				}
				if !maps.Equal(consumed, want) {
					t.Errorf("%s consumes %v, want every counter of its set %v", whole.Name, consumed, want)
				}
				if str(whole, AttrType) != DeviceType || capacity(whole, CapacityMemory) != int64(m.GPUModel().MemoryMiB)<<20 ||
					capacity(whole, CapacityMultiprocessors) != int64(full.Multiprocessors) {
					t.Errorf("%s: type %q, memory %d, multiprocessors %d", whole.Name, str(whole, AttrType), capacity(whole, CapacityMemory), capacity(whole, CapacityMultiprocessors))
				}
				for _, md := range r.set.GPUs.MIGOf(i) {
					d, ok := devs[md.ID]
					if !ok {
						t.Errorf("MIG device %s not published", md.ID)
						continue
					}
					for name, want := range map[resourceapi.QualifiedName]string{
						AttrType: DeviceTypeMIG, AttrProfile: md.Profile.Name, AttrUUID: migUUIDs[md.ID], AttrParentUUID: uuids[i],
						AttrProductName: m.GPUModel().Product, AttrPCIBusID: str(whole, AttrPCIBusID), AttrPCIeRoot: str(whole, AttrPCIeRoot),
						AttrNVLinkDomain: str(whole, AttrNVLinkDomain),
					} {
						if got := str(d, name); got != want || want == "" {
							t.Errorf("%s: %s = %q, want %q", d.Name, name, got, want)
						}
					}
					if !strings.HasPrefix(str(d, AttrUUID), "MIG-") {
						t.Errorf("%s: uuid %q, want MIG-…", d.Name, str(d, AttrUUID))
					}
					if a := d.Attributes[AttrIndex]; a.IntValue == nil || *a.IntValue != int64(i) {
						t.Errorf("%s: index %v, want its GPU's %d", d.Name, a.IntValue, i)
					}
					for name, want := range map[resourceapi.QualifiedName]int{
						CapacityMultiprocessors: md.Profile.Multiprocessors, CapacityCopyEngines: md.Profile.CopyEngines, CapacityDecoders: md.Profile.Decoders,
						CapacityEncoders: md.Profile.Encoders, CapacityJPEGEngines: md.Profile.JPEGs, CapacityOFAEngines: md.Profile.OFAs,
						CapacityMemory: md.Profile.MemoryMiB << 20,
					} {
						if got := capacity(d, name); got != int64(want) {
							t.Errorf("%s: capacity %s = %d, want %d", d.Name, name, got, want)
						}
					}
					var slots []int
					for s := md.Placement.Start; s < md.Placement.End(); s++ {
						slots = append(slots, s)
					}
					if got := memorySlices(d); !slices.Equal(got, slots) {
						t.Errorf("%s at %s consumes memory slices %v, want %v", d.Name, md.Placement, got, slots)
					}
					if fit(sets, whole, d) {
						t.Errorf("%s fits with its GPU whole", d.Name)
					}
				}
			}
		})
	}
}

// TestResources_MIG_Placements is the property that the published
// placements are exactly NVIDIA's: for every product the MIG model knows,
// the MIG devices of each GPU, by profile, sit at exactly the product's
// valid placements (their memory-slice counters), every profile there, and
// nothing else.
func TestResources_MIG_Placements(t *testing.T) {
	products := mig.Products()
	if len(products) < 5 {
		t.Fatalf("MIG products %q: want at least the A100s, H100 and H200", products)
	}
	for _, name := range products {
		t.Run(topology.CompactProfile(name), func(t *testing.T) {
			product, err := mig.LookupProduct(name)
			if err != nil {
				t.Fatal(err)
			}
			r := newMIGRig(t, productMachine(t, name), "all-enabled")
			pool := r.pool()
			checkLimits(t, pool)
			devs, _ := devicesOfPool(pool)
			for i := range r.set.GPUs.Machine().Len() {
				got := map[string][]mig.Placement{}
				for _, d := range devs {
					if g, ok := topology.GPUOf(d.Name); !ok || g != i || str(d, AttrType) != DeviceTypeMIG {
						continue
					}
					s := memorySlices(d)
					if len(s) == 0 || s[len(s)-1]-s[0] != len(s)-1 {
						t.Errorf("%s: memory slices %v, want a run of consecutive ones", d.Name, s)
						continue
					}
					got[str(d, AttrProfile)] = append(got[str(d, AttrProfile)], mig.Placement{Start: s[0], Size: len(s)})
				}
				want := map[string][]mig.Placement{}
				for _, pr := range product.Profiles {
					want[pr.Name] = pr.Placements
				}
				for p := range got {
					slices.SortFunc(got[p], func(a, b mig.Placement) int { return a.Start - b.Start })
				}
				if !maps.EqualFunc(got, want, slices.Equal) {
					t.Errorf("GPU %d: published placements %v, want the product's %v", i, got, want)
				}
			}
		})
	}
}

// TestResources_MIG_CountersAllocate: the counters let the scheduler
// allocate what a real GPU allows and nothing more: two MIG devices of a
// GPU whose placements share a memory slice never fit, two that do not
// share one fit unless both have the media extensions (one per GPU, as
// NVIDIA's +me profiles have one instance), and every built-in layout
// that resolves on the product fits whole, for every product.
func TestResources_MIG_CountersAllocate(t *testing.T) {
	builtin, err := mig.BuiltinConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range mig.Products() {
		t.Run(topology.CompactProfile(name), func(t *testing.T) {
			r := newMIGRig(t, productMachine(t, name), "all-enabled")
			devs, sets := devicesOfPool(r.pool())
			placed := r.set.GPUs.MIGOf(0)
			for a, da := range placed {
				for _, db := range placed[a+1:] {
					both := fit(sets, devs[da.ID], devs[db.ID])
					overlaps := da.Placement.Overlaps(db.Placement)
					media := strings.HasSuffix(da.Profile.Name, "+me") && strings.HasSuffix(db.Profile.Name, "+me")
					if both != (!overlaps && !media) {
						t.Errorf("%s at %s and %s at %s: fit %v; want %v (overlap %v, both +me %v)", da.Profile.Name, da.Placement, db.Profile.Name, db.Placement,
							both, !overlaps && !media, overlaps, media)
					}
				}
			}
			product := r.set.GPUs.MIGProduct()
			fitted := 0
			for _, layout := range builtin.Names() {
				gpus, err := mig.Resolve(builtin, layout, product.Name, 1)
				if err != nil || !gpus[0].MIGEnabled || len(gpus[0].Devices) == 0 {
					continue
				}
				var chosen []resourceapi.Device
				for _, d := range gpus[0].Devices {
					chosen = append(chosen, devs[topology.MIGID(0, d.Profile.Name, d.Placement.Start)])
				}
				if !fit(sets, chosen...) {
					t.Errorf("layout %s (%d devices) does not fit the counters", layout, len(chosen))
				}
				fitted++
			}
			if fitted < 3 {
				t.Errorf("%d built-in layouts resolve on %s, want several", fitted, name)
			}
		})
	}
}

// TestResources_MIG_Mixed: a layout enabling MIG on some GPUs only gives
// those counter sets and MIG devices; the others are published as without
// MIG, consuming nothing.
func TestResources_MIG_Mixed(t *testing.T) {
	r := newMIGRig(t, plugintest.Machine(t, "hgx-h100"), "all-balanced")
	plain := newRig(t, "hgx-h100").resourcesOf(nil)
	gpus := r.set.GPUs.Config()
	gpus.MIG.GPUs = slices.Clone(gpus.MIG.GPUs)
	for i := 4; i < 8; i++ {
		gpus.MIG.GPUs[i] = mig.GPU{}
	}
	cfg := r.set.Config
	cfg.GPUs = gpus
	set, err := agent.NewSet(cfg, testNode)
	if err != nil {
		t.Fatal(err)
	}
	r.set = set
	plugintest.Served(t, r.st, set.GPUs)
	pool := r.pool()
	checkLimits(t, pool)
	devs, sets := devicesOfPool(pool)
	if len(sets) != 4 {
		t.Errorf("%d counter sets, want 4 (GPUs 0-3)", len(sets))
	}
	for i := 4; i < 8; i++ {
		d := devs[topology.GPUID(i)]
		if len(d.ConsumesCounters) > 0 || len(d.Capacity) != 1 || str(d, AttrType) != DeviceType {
			t.Errorf("%s without MIG: consumes %v, capacity %v", d.Name, d.ConsumesCounters, d.Capacity)
		}
		if !apiequality.Semantic.DeepEqual(d, plain[i]) {
			t.Errorf("%s without MIG differs from the same GPU of a node without MIG:\n%+v\n%+v", d.Name, d, plain[i])
		}
	}
}

// TestRun_MIG: a running driver of an HGX H100 with every GPU MIG-enabled
// has the library publish the pool as Resources splits it (a slice of the
// 8 counter sets and 4 of two GPUs' devices, all the node's); a GPU turning
// unhealthy taints its whole device and its MIG devices where they are,
// moving none; a MIG device is prepared through NodePrepareResources.
func TestRun_MIG(t *testing.T) {
	r := newMIGRig(t, plugintest.Machine(t, "hgx-h100"), "all-enabled")
	// client-go's fake does not name objects from generateName as the API
	// server does: the controller's second slice would collide with the
	// first.
	var named atomic.Int64
	r.client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			s.Name = s.GenerateName + strconv.FormatInt(named.Add(1), 10)
		}
		return false, nil, nil
	})
	ctx := r.run(t)
	plugintest.WaitFor(t, 10*time.Second, "the node's 5 slices", func() bool { return len(r.slices(ctx)) == 5 })
	where := func() (map[string]string, int, int) {
		at := map[string]string{}
		sets, tainted := 0, 0
		for _, s := range r.slices(ctx) {
			if s.Spec.NodeName == nil || *s.Spec.NodeName != testNode || s.Spec.Pool.ResourceSliceCount != 5 {
				t.Errorf("slice %s: node %v, pool %+v", s.Name, s.Spec.NodeName, s.Spec.Pool)
			}
			sets += len(s.Spec.SharedCounters)
			for _, d := range s.Spec.Devices {
				at[d.Name] = s.Name
				if len(d.Taints) > 0 {
					tainted++
				}
			}
		}
		return at, sets, tainted
	}
	before, sets, _ := where()
	per := len(r.set.GPUs.MIGOf(0)) + 1
	if len(before) != 8*per || sets != 8 {
		t.Fatalf("%d devices and %d counter sets published, want %d and 8", len(before), sets, 8*per)
	}
	members, err := r.set.GPUs.Members("fake-2")
	if err != nil || len(members) != per {
		t.Fatalf("Members(fake-2) = %d, %v", len(members), err)
	}
	if err := r.d.SetHealth("fake-2", members, false, "XID 79: GPU has fallen off the bus"); err != nil {
		t.Fatal(err)
	}
	plugintest.WaitFor(t, 10*time.Second, "GPU 2's devices tainted", func() bool { _, _, n := where(); return n == per })
	if after, _, _ := where(); !maps.Equal(after, before) {
		t.Error("a taint moved devices between slices")
	}

	id := topology.MIGID(5, "2g.20gb", 2)
	claim := claimOf(uidA, "mig", result("gpu", id))
	if _, err := r.client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dra := drapbv1.NewDRAPluginClient(dial(t, r.d.cfg.Socket()))
	resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{{Namespace: "default", Name: "mig", Uid: uidA}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Claims[uidA]; got == nil || got.Error != "" || len(got.Devices) != 1 || got.Devices[0].DeviceName != id || len(got.Devices[0].CdiDeviceIds) != 1 {
		t.Fatalf("NodePrepareResources: %v", resp)
	}
}
