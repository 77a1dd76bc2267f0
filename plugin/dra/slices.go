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
	// CapacityMemory is the GPU's memory, in bytes (as NVIDIA's driver).
	CapacityMemory = "memory"
	// DeviceType is the type attribute of a whole GPU.
	DeviceType = "gpu"
)

// Taint keys of an unhealthy GPU, under the driver's domain, as NVIDIA's
// gpu.nvidia.com/xid: TaintXID when the reason names an XID (the taint's
// value), TaintUnhealthy otherwise.
const (
	TaintXID       = "xid"
	TaintUnhealthy = "unhealthy"
)

// maxDevicesPerSlice is how many devices one ResourceSlice holds: the
// API's bound for slices whose devices may carry taints, so that a GPU
// turning unhealthy never moves devices between slices.
const maxDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// Resources returns the node's pool of the set's GPUs, as the resourceslice
// controller publishes it: one pool named after the node, in slices of at
// most maxDevicesPerSlice devices, each GPU a device named by its id
// ("fake-0") with the attributes above, its memory, and a NoSchedule
// taint while it is unhealthy. devs are the set's devices with their
// health, stored the store's records (for the UUIDs).
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
	var slices []resourceslice.Slice
	var cur resourceslice.Slice
	for _, d := range devs {
		i := gpus.GPU(d)
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:                  {StringValue: ptr(DeviceType)},
			AttrProductName:           {StringValue: ptr(model.Product)},
			AttrBrand:                 {StringValue: ptr(topology.Brand(model.Product))},
			AttrCUDAComputeCapability: {VersionValue: ptr(cc)},
			AttrDriverVersion:         {VersionValue: ptr(driverVersion)},
			AttrCUDADriverVersion:     {VersionValue: ptr(cudaVersion)},
			AttrIndex:                 {IntValue: ptr(int64(i))},
			AttrPCIBusID:              {StringValue: ptr(m.KubernetesPCIBusID(i))},
			AttrPCIeRoot:              {StringValue: ptr(roots[i])},
		}
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
		if !d.Healthy {
			dev.Taints = []resourceapi.DeviceTaint{Taint(driver, d.Reason, since(stored, d.ID))}
		}
		cur.Devices = append(cur.Devices, dev)
		if len(cur.Devices) == maxDevicesPerSlice {
			slices = append(slices, cur)
			cur = resourceslice.Slice{}
		}
	}
	if len(cur.Devices) > 0 || len(slices) == 0 {
		slices = append(slices, cur)
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{pool: {Slices: slices}}}, nil
}

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
