package dra

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// The attributes of a device, as NVIDIA's DRA driver (gpu.nvidia.com) names
// them, so that a claim written for it ports by changing its class, and
// the standard ones of Kubernetes (resource.kubernetes.io). Unqualified
// names are in the driver's domain.
const (
	AttrType                  = "type"
	AttrUUID                  = "uuid"
	AttrProductName           = "productName"
	AttrBrand                 = "brand"
	AttrArchitecture          = "architecture"
	AttrCUDAComputeCapability = "cudaComputeCapability"
	AttrDriverVersion         = "driverVersion"
	AttrCUDADriverVersion     = "cudaDriverVersion"
	AttrIndex                 = "index"
	// AttrNVLinkDomain is ours: the GPU's NVLink domain
	// (topology.Machine.NVLinkDomains), so that matchAttribute on it asks
	// for GPUs that are all NVLinked pair by pair. A GPU without NVLinks
	// has none, and a constraint on it then cannot be met by that GPU.
	AttrNVLinkDomain = "nvlinkDomain"
	AttrPCIBusID     = "resource.kubernetes.io/pciBusID"
	AttrPCIeRoot     = "resource.kubernetes.io/pcieRoot"
	AttrNUMANode     = "resource.kubernetes.io/numaNode"
	// AttrParentUUID is a MIG device's GPU's UUID.
	AttrParentUUID = "parentUUID"
	// AttrProfile is a MIG device's profile ("3g.40gb").
	AttrProfile = "profile"
	// CapacityMemory is the GPU's memory, in bytes (as NVIDIA's driver).
	CapacityMemory = "memory"
	// DeviceType is the type attribute of a whole GPU.
	DeviceType = "gpu"
	// DeviceTypeMIG is the type attribute of a MIG device.
	DeviceTypeMIG = "mig"
)

// The capacities of a MIG device (and of a MIG-enabled GPU, the most any
// of its profiles has), as NVIDIA's driver names them, besides
// CapacityMemory: the profile's SMs, copy engines, NVDEC, NVENC, NVJPG and
// optical flow accelerators.
const (
	CapacityMultiprocessors = "multiprocessors"
	CapacityCopyEngines     = "copyEngines"
	CapacityDecoders        = "decoders"
	CapacityEncoders        = "encoders"
	CapacityJPEGEngines     = "jpegEngines"
	CapacityOFAEngines      = "ofaEngines"
)

// The counters of a MIG-enabled GPU's counter set, as NVIDIA's driver
// names them (its capacities in DNS-label form, and one counter of 1 per
// memory slice: CounterMemorySlice).
const (
	CounterMultiprocessors = "multiprocessors"
	CounterCopyEngines     = "copy-engines"
	CounterDecoders        = "decoders"
	CounterEncoders        = "encoders"
	CounterJPEGEngines     = "jpeg-engines"
	CounterOFAEngines      = "ofa-engines"
	CounterMemory          = "memory"
)

// Taint keys of an unhealthy GPU, under the driver's domain, as NVIDIA's
// gpu.nvidia.com/xid: TaintXID when the reason names an XID (the taint's
// value), TaintUnhealthy otherwise.
const (
	TaintXID       = "xid"
	TaintUnhealthy = "unhealthy"
)

// maxDevicesPerSlice is how many devices one ResourceSlice holds: the
// API's bound for slices whose devices may carry taints or consume
// counters, so that a GPU turning unhealthy never moves devices between
// slices.
const maxDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// maxCounterSetsPerSlice is how many counter sets one ResourceSlice holds
// (the API's bound).
const maxCounterSetsPerSlice = resourceapi.ResourceSliceMaxCounterSets

// Resources returns the node's pool of the set's GPUs, as the resourceslice
// controller publishes it: one pool named after the node, each GPU a
// device named by its id ("fake-0") with the attributes above, its memory,
// and a NoSchedule taint while it is unhealthy. devs are the set's devices
// with their health, stored the store's records (for the UUIDs).
//
// A MIG-enabled GPU (the set's MIG layout, served as DRA's partitionable
// devices: gpuset.MIG.Partitionable) is published as NVIDIA's driver
// publishes it: a counter set of its own (counterSetName: the most
// multiprocessors, copy engines, decoders, encoders, JPEG and OFA engines
// and memory any of its profiles has, and one counter of 1 per memory
// slice, CounterMemorySlice), the GPU whole consuming all of it, and a
// device for every valid placement of every profile (type "mig", its own
// UUID, parentUUID, profile, the parent's other attributes, the profile's
// capacities) consuming its profile's share and the memory slices of its
// placement. So the scheduler allocates the GPU whole or MIG devices that
// fit together on it, never two that share a memory slice.
//
// Slices are split as the API requires: the counter sets first, in slices
// of their own (a slice holds counter sets or devices, not both) of at
// most maxCounterSetsPerSlice; then the devices in slices of at most
// maxDevicesPerSlice, a GPU's devices (whole and MIG) in one slice. GPUs
// without MIG are published as before MIG existed.
func Resources(driver, pool string, gpus *gpuset.Set, devs []gpuset.Device, stored []store.Device) (resourceslice.DriverResources, error) {
	m := gpus.Machine()
	model := m.GPUModel()
	uuids := gpuset.UUIDs(stored)
	roots := m.PCIeRoots()
	domains := m.NVLinkDomains()
	cc, err := semver(model.Compute.String())
	if err != nil {
		return resourceslice.DriverResources{}, err
	}
	driverVersion, err := semver(topology.DriverVersion)
	if err != nil {
		return resourceslice.DriverResources{}, err
	}
	cudaVersion, err := semver(topology.CUDAVersion)
	if err != nil {
		return resourceslice.DriverResources{}, err
	}
	memory := resource.NewQuantity(int64(model.MemoryMiB)<<20, resource.BinarySI)
	product, mc := gpus.MIGProduct(), gpus.Config().MIG
	var whole share
	if product != nil {
		whole = wholeShare(product)
	}
	migUUIDs := map[string]string{}
	for _, d := range stored {
		if topology.IsMIGID(d.ID) && d.UUID != "" {
			migUUIDs[d.ID] = d.UUID
		}
	}
	var sets []resourceapi.CounterSet
	hasSet := map[int]bool{}
	devices := make([]resourceapi.Device, 0, len(devs))
	gpuOf := make([]int, 0, len(devs))
	for _, d := range devs {
		i := gpus.GPU(d)
		attrs := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, 16) // sized for a MIG device's, without growing
		attrs[AttrType] = resourceapi.DeviceAttribute{StringValue: ptr(DeviceType)}
		attrs[AttrProductName] = resourceapi.DeviceAttribute{StringValue: ptr(model.Product)}
		attrs[AttrBrand] = resourceapi.DeviceAttribute{StringValue: ptr(topology.Brand(model.Product))}
		attrs[AttrCUDAComputeCapability] = resourceapi.DeviceAttribute{VersionValue: ptr(cc)}
		attrs[AttrDriverVersion] = resourceapi.DeviceAttribute{VersionValue: ptr(driverVersion)}
		attrs[AttrCUDADriverVersion] = resourceapi.DeviceAttribute{VersionValue: ptr(cudaVersion)}
		attrs[AttrIndex] = resourceapi.DeviceAttribute{IntValue: ptr(int64(i))}
		attrs[AttrPCIBusID] = resourceapi.DeviceAttribute{StringValue: ptr(m.KubernetesPCIBusID(i))}
		attrs[AttrPCIeRoot] = resourceapi.DeviceAttribute{StringValue: ptr(roots[i])}
		if u := uuids[i]; u != "" {
			attrs[AttrUUID] = resourceapi.DeviceAttribute{StringValue: ptr(u)}
		}
		if a := topology.Architecture(model.Family); a != "" {
			attrs[AttrArchitecture] = resourceapi.DeviceAttribute{StringValue: ptr(a)}
		}
		if n := m.NUMA(i); n >= 0 {
			attrs[AttrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr(int64(n))}
		}
		if dom := domains[i]; dom >= 0 {
			attrs[AttrNVLinkDomain] = resourceapi.DeviceAttribute{StringValue: ptr(topology.NVLinkDomainName(dom))}
		}
		dev := resourceapi.Device{
			Name:       d.ID,
			Attributes: attrs,
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapacityMemory: {Value: *memory}},
		}
		partitioned := product != nil && mc.Enabled(i)
		if partitioned && !hasSet[i] {
			hasSet[i] = true
			sets = append(sets, resourceapi.CounterSet{Name: counterSetName(i), Counters: whole.counters(mig.Placement{Start: 0, Size: product.MemorySlices})})
		}
		switch {
		case topology.IsMIGID(d.ID):
			md, ok := gpus.MIGDevice(d.ID)
			if !ok || !partitioned {
				return resourceslice.DriverResources{}, fmt.Errorf("device %s: not a MIG device of a MIG-enabled GPU of the set", topology.QuoteID(d.ID))
			}
			sh := shareOf(md.Profile)
			attrs[AttrType] = resourceapi.DeviceAttribute{StringValue: ptr(DeviceTypeMIG)}
			attrs[AttrProfile] = resourceapi.DeviceAttribute{StringValue: ptr(md.Profile.Name)}
			delete(attrs, AttrUUID)
			if u := migUUIDs[d.ID]; u != "" {
				attrs[AttrUUID] = resourceapi.DeviceAttribute{StringValue: ptr(u)}
			}
			if u := uuids[i]; u != "" {
				attrs[AttrParentUUID] = resourceapi.DeviceAttribute{StringValue: ptr(u)}
			}
			dev.Capacity = sh.capacities()
			dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(i), Counters: sh.counters(md.Placement)}}
		case partitioned:
			for name, c := range whole.capacities() {
				if name != CapacityMemory {
					dev.Capacity[name] = c
				}
			}
			dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(i), Counters: whole.counters(mig.Placement{Start: 0, Size: product.MemorySlices})}}
		}
		if !d.Healthy {
			dev.Taints = []resourceapi.DeviceTaint{Taint(driver, d.Reason, since(stored, d.ID))}
		}
		devices = append(devices, dev)
		gpuOf = append(gpuOf, i)
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{pool: {Slices: split(sets, devices, gpuOf)}}}, nil
}

// split returns the pool's slices: the counter sets first, at most
// maxCounterSetsPerSlice a slice, then the devices, at most
// maxDevicesPerSlice a slice, a slice started early rather than a GPU's
// devices (gpuOf: by device; devices of a GPU are consecutive) split
// between two (a GPU of more than maxDevicesPerSlice devices fills
// slices). No devices and no counter sets is one empty slice.
func split(sets []resourceapi.CounterSet, devices []resourceapi.Device, gpuOf []int) []resourceslice.Slice {
	var out []resourceslice.Slice
	for len(sets) > 0 {
		n := min(len(sets), maxCounterSetsPerSlice)
		out = append(out, resourceslice.Slice{SharedCounters: sets[:n:n]})
		sets = sets[n:]
	}
	var cur resourceslice.Slice
	for k := 0; k < len(devices); {
		end := k + 1
		for end < len(devices) && gpuOf[end] == gpuOf[k] {
			end++
		}
		if len(cur.Devices) > 0 && len(cur.Devices)+end-k > maxDevicesPerSlice {
			out = append(out, cur)
			cur = resourceslice.Slice{}
		}
		for ; k < end; k++ {
			cur.Devices = append(cur.Devices, devices[k])
			if len(cur.Devices) == maxDevicesPerSlice {
				out = append(out, cur)
				cur = resourceslice.Slice{}
			}
		}
	}
	if len(cur.Devices) > 0 || len(out) == 0 {
		out = append(out, cur)
	}
	return out
}

// counterSetName is the name of GPU i's counter set, as NVIDIA's driver
// names it after the GPU's device: "fake-0-counter-set".
func counterSetName(i int) string { return topology.GPUID(i) + "-counter-set" }

// CounterMemorySlice is the counter of memory slice i of a MIG-enabled
// GPU's counter set, as NVIDIA's driver names it: "memory-slice-0".
func CounterMemorySlice(i int) string { return "memory-slice-" + strconv.Itoa(i) }

// share is what a MIG device (or a MIG-enabled GPU whole) has of its GPU.
type share struct {
	multiprocessors, copyEngines, decoders, encoders, jpegs, ofas int
	memoryMiB                                                     int
}

// shareOf is the share of a MIG device of profile p.
func shareOf(p mig.Profile) share {
	return share{multiprocessors: p.Multiprocessors, copyEngines: p.CopyEngines, decoders: p.Decoders, encoders: p.Encoders,
		jpegs: p.JPEGs, ofas: p.OFAs, memoryMiB: p.MemoryMiB}
}

// wholeShare is what a MIG-enabled GPU of product p has, as NVIDIA's
// driver counts it: per dimension the most any of its profiles has (the
// whole-GPU profile's, on every product of the model).
func wholeShare(p *mig.Product) share {
	var w share
	for _, pr := range p.Profiles {
		s := shareOf(pr)
		w = share{multiprocessors: max(w.multiprocessors, s.multiprocessors), copyEngines: max(w.copyEngines, s.copyEngines),
			decoders: max(w.decoders, s.decoders), encoders: max(w.encoders, s.encoders), jpegs: max(w.jpegs, s.jpegs), ofas: max(w.ofas, s.ofas),
			memoryMiB: max(w.memoryMiB, s.memoryMiB)}
	}
	return w
}

// capacities are the share as a device's capacities.
func (s share) capacities() map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapacityMultiprocessors: {Value: count(s.multiprocessors)},
		CapacityCopyEngines:     {Value: count(s.copyEngines)},
		CapacityDecoders:        {Value: count(s.decoders)},
		CapacityEncoders:        {Value: count(s.encoders)},
		CapacityJPEGEngines:     {Value: count(s.jpegs)},
		CapacityOFAEngines:      {Value: count(s.ofas)},
		CapacityMemory:          {Value: *resource.NewQuantity(int64(s.memoryMiB)<<20, resource.BinarySI)},
	}
}

// counters are the share as counters, with a counter of 1 for each memory
// slice of placement at.
func (s share) counters(at mig.Placement) map[string]resourceapi.Counter {
	out := make(map[string]resourceapi.Counter, 7+at.Size)
	out[CounterMultiprocessors] = resourceapi.Counter{Value: count(s.multiprocessors)}
	out[CounterCopyEngines] = resourceapi.Counter{Value: count(s.copyEngines)}
	out[CounterDecoders] = resourceapi.Counter{Value: count(s.decoders)}
	out[CounterEncoders] = resourceapi.Counter{Value: count(s.encoders)}
	out[CounterJPEGEngines] = resourceapi.Counter{Value: count(s.jpegs)}
	out[CounterOFAEngines] = resourceapi.Counter{Value: count(s.ofas)}
	out[CounterMemory] = resourceapi.Counter{Value: *resource.NewQuantity(int64(s.memoryMiB)<<20, resource.BinarySI)}
	for i := at.Start; i < at.End(); i++ {
		out[CounterMemorySlice(i)] = resourceapi.Counter{Value: count(1)}
	}
	return out
}

// count is n as a quantity.
func count(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.DecimalSI) }

// Taint is the device taint of an unhealthy GPU with the given reason,
// since then: key <driver>/xid with the XID as its value when the reason
// names one (topology.ParseXID: "XID 79: …"), else <driver>/unhealthy;
// effect NoSchedule, so no new claim gets the GPU and claims that hold it
// keep it.
func Taint(driver, reason string, since metav1.Time) resourceapi.DeviceTaint {
	t := resourceapi.DeviceTaint{Key: driver + "/" + TaintUnhealthy, Effect: resourceapi.DeviceTaintEffectNoSchedule}
	if xid, ok := topology.ParseXID(reason); ok {
		t.Key, t.Value = driver+"/"+TaintXID, strconv.Itoa(xid)
	}
	if !since.IsZero() {
		t.TimeAdded = &since
	}
	return t
}

// since is when the stored device id turned unhealthy, zero if unknown.
func since(stored []store.Device, id string) metav1.Time {
	for _, d := range stored {
		if d.ID == id {
			return metav1.NewTime(d.Since.Truncate(1e9))
		}
	}
	return metav1.Time{}
}

// semver makes a dotted version a semantic version with three numbers and
// no leading zeros, as a DRA version attribute must be: "8.0" is 8.0.0,
// the driver's "580.173.02" is 580.173.2.
func semver(v string) (string, error) {
	parts := strings.Split(v, ".")
	if len(parts) == 0 || len(parts) > 3 {
		return "", fmt.Errorf("version %q: want one to three numbers", v)
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return "", fmt.Errorf("version %q: %q is not a number", v, p)
		}
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, "."), nil
}

func ptr[T any](v T) *T { return &v }
