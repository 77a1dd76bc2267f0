package dra

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra/endpoint"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// resourcesOf returns the rig's resources as the driver publishes them,
// with the given devices unhealthy for the reason.
func (r *rig) resourcesOf(unhealthy map[string]string) []resourceapi.Device {
	r.t.Helper()
	stored := r.stored()
	for i := range stored {
		if reason, ok := unhealthy[stored[i].ID]; ok {
			stored[i].Healthy, stored[i].Reason, stored[i].Since = false, reason, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		}
	}
	devs, err := r.set.GPUs.Devices(stored)
	if err != nil {
		r.t.Fatal(err)
	}
	res, err := Resources(endpoint.DefaultDriverName, testNode, r.set.GPUs, devs, stored)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(res.Pools) != 1 {
		r.t.Fatalf("%d pools, want one: the node's", len(res.Pools))
	}
	pool, ok := res.Pools[testNode]
	if !ok {
		r.t.Fatalf("pools %v: none named after the node %s", res.Pools, testNode)
	}
	var out []resourceapi.Device
	for i, s := range pool.Slices {
		if len(s.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			r.t.Errorf("slice %d has %d devices, over the API's %d for slices with taints", i, len(s.Devices), resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures)
		}
		out = append(out, s.Devices...)
	}
	return out
}

// TestResources_Attributes: every GPU is a device named by its id with the
// attributes NVIDIA's driver publishes (under our domain), the topology's
// places, and its memory, each value valid for the API.
func TestResources_Attributes(t *testing.T) {
	r := newRig(t, "dgx-a100")
	devs := r.resourcesOf(nil)
	m := r.set.GPUs.Machine()
	if len(devs) != m.Len() {
		t.Fatalf("%d devices, want %d", len(devs), m.Len())
	}
	uuids := gpuset.UUIDs(r.stored())
	busID := regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	for i, d := range devs {
		if d.Name != topology.GPUID(i) {
			t.Errorf("device %d is named %q, want %q", i, d.Name, topology.GPUID(i))
		}
		if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
			t.Errorf("device name %q: %v", d.Name, errs)
		}
		str := func(name resourceapi.QualifiedName) string {
			a, ok := d.Attributes[name]
			if !ok || a.StringValue == nil {
				t.Errorf("%s: no string attribute %s (%v)", d.Name, name, d.Attributes)
				return ""
			}
			return *a.StringValue
		}
		ver := func(name resourceapi.QualifiedName) string {
			a, ok := d.Attributes[name]
			if !ok || a.VersionValue == nil {
				t.Errorf("%s: no version attribute %s", d.Name, name)
				return ""
			}
			return *a.VersionValue
		}
		num := func(name resourceapi.QualifiedName) int64 {
			a, ok := d.Attributes[name]
			if !ok || a.IntValue == nil {
				t.Errorf("%s: no int attribute %s", d.Name, name)
				return -1
			}
			return *a.IntValue
		}
		for name, want := range map[resourceapi.QualifiedName]string{
			AttrType: "gpu", AttrUUID: uuids[i], AttrProductName: "NVIDIA A100-SXM4-40GB", AttrBrand: topology.Brand("NVIDIA A100-SXM4-40GB"), AttrArchitecture: "Ampere",
			AttrNVLinkDomain: "nvlink-0", AttrPCIeRoot: m.PCIeRoots()[i],
		} {
			if got := str(name); got != want {
				t.Errorf("%s: %s = %q, want %q", d.Name, name, got, want)
			}
		}
		if uuids[i] == "" {
			t.Errorf("%s: the store has no UUID", d.Name)
		}
		if got := str(AttrPCIBusID); !busID.MatchString(got) {
			t.Errorf("%s: pciBusID %q is not <domain>:<bus>:<device>.<function>", d.Name, got)
		}
		for name, want := range map[resourceapi.QualifiedName]string{
			AttrCUDAComputeCapability: "8.0.0", AttrDriverVersion: semverOrFail(t, topology.DriverVersion), AttrCUDADriverVersion: semverOrFail(t, topology.CUDAVersion),
		} {
			if got := ver(name); got != want {
				t.Errorf("%s: %s = %q, want %q", d.Name, name, got, want)
			}
		}
		if got := num(AttrIndex); got != int64(i) {
			t.Errorf("%s: index %d, want %d", d.Name, got, i)
		}
		if got, want := num(AttrNUMANode), int64(m.NUMA(i)); got != want {
			t.Errorf("%s: numaNode %d, want %d", d.Name, got, want)
		}
		memory := d.Capacity[CapacityMemory].Value
		if got, want := memory.Value(), int64(m.GPUModel().MemoryMiB)<<20; got != want {
			t.Errorf("%s: memory %d bytes, want %d", d.Name, got, want)
		}
		if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
			t.Errorf("%s: %d attributes and capacities, the API allows %d", d.Name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
		}
		for name, a := range d.Attributes {
			for _, v := range []*string{a.StringValue, a.VersionValue} {
				if v != nil && len(*v) > resourceapi.DeviceAttributeMaxValueLength {
					t.Errorf("%s: %s is %d characters, the API allows %d", d.Name, name, len(*v), resourceapi.DeviceAttributeMaxValueLength)
				}
			}
		}
		if len(d.Taints) > 0 {
			t.Errorf("%s: healthy, but tainted %v", d.Name, d.Taints)
		}
	}
}

func semverOrFail(t *testing.T, v string) string {
	t.Helper()
	s, err := semver(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestResources_Places: the NVLink domain and the PCIe root follow the
// machine: DGX-1's two NVLink quads, one domain on NVSwitch machines,
// none without NVLink; GPUs behind one host bridge share a root.
func TestResources_Places(t *testing.T) {
	for _, tc := range []struct {
		machine string
		domains []string // by GPU; "" none
		roots   []int    // by GPU: GPUs with the same number share a root
	}{
		{"dgx1-volta", []string{"nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-1", "nvlink-1", "nvlink-1", "nvlink-1"}, []int{0, 0, 0, 0, 1, 1, 1, 1}},
		{"hgx-h100", []string{"nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0"}, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"pcie-8gpu", []string{"", "", "", "", "", "", "", ""}, []int{0, 0, 1, 1, 2, 2, 3, 3}},
	} {
		t.Run(tc.machine, func(t *testing.T) {
			devs := newRig(t, tc.machine).resourcesOf(nil)
			rootOf := map[int]string{}
			for i, d := range devs {
				a, ok := d.Attributes[AttrNVLinkDomain]
				switch {
				case tc.domains[i] == "" && ok:
					t.Errorf("%s: nvlinkDomain %q on a GPU without NVLinks", d.Name, *a.StringValue)
				case tc.domains[i] != "" && (!ok || *a.StringValue != tc.domains[i]):
					t.Errorf("%s: nvlinkDomain %v, want %q", d.Name, a.StringValue, tc.domains[i])
				}
				root := *d.Attributes[AttrPCIeRoot].StringValue
				if prev, seen := rootOf[tc.roots[i]]; seen && prev != root {
					t.Errorf("%s: pcieRoot %q, want %q as its peers", d.Name, root, prev)
				}
				for n, other := range rootOf {
					if n != tc.roots[i] && other == root {
						t.Errorf("%s: pcieRoot %q is also another group's", d.Name, root)
					}
				}
				rootOf[tc.roots[i]] = root
			}
		})
	}
}

// TestResources_ManyGPUs: 1,024 GPUs are one pool in slices within the
// API's bound, every GPU once.
func TestResources_ManyGPUs(t *testing.T) {
	devs := newRig(t, "generic-1024").resourcesOf(nil)
	seen := map[string]bool{}
	for _, d := range devs {
		if seen[d.Name] {
			t.Errorf("%s published twice", d.Name)
		}
		seen[d.Name] = true
	}
	if len(seen) != 1024 {
		t.Fatalf("%d devices, want 1024", len(seen))
	}
}

// TestResources_Taints: an unhealthy GPU is tainted NoSchedule, under
// <driver>/xid with the XID as the value when its reason names one, else
// <driver>/unhealthy, since it turned unhealthy; healthy ones are not.
func TestResources_Taints(t *testing.T) {
	devs := newRig(t, "dgx-a100").resourcesOf(map[string]string{"fake-1": "XID 79: GPU has fallen off the bus", "fake-2": "too hot"})
	want := map[string]resourceapi.DeviceTaint{
		"fake-1": {Key: endpoint.DefaultDriverName + "/xid", Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule},
		"fake-2": {Key: endpoint.DefaultDriverName + "/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule},
	}
	for _, d := range devs {
		w, unhealthy := want[d.Name]
		if !unhealthy {
			if len(d.Taints) > 0 {
				t.Errorf("%s: healthy, but tainted %v", d.Name, d.Taints)
			}
			continue
		}
		if len(d.Taints) != 1 {
			t.Fatalf("%s: taints %v, want one", d.Name, d.Taints)
		}
		got := d.Taints[0]
		if got.Key != w.Key || got.Value != w.Value || got.Effect != w.Effect {
			t.Errorf("%s: taint %s=%s:%s, want %s=%s:%s", d.Name, got.Key, got.Value, got.Effect, w.Key, w.Value, w.Effect)
		}
		if got.TimeAdded == nil || !got.TimeAdded.Time.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) {
			t.Errorf("%s: taint added %v, want when it turned unhealthy", d.Name, got.TimeAdded)
		}
		if errs := validation.IsValidLabelValue(got.Value); len(errs) > 0 {
			t.Errorf("%s: taint value %q: %v", d.Name, got.Value, errs)
		}
	}
}

func TestSemver(t *testing.T) {
	for in, want := range map[string]string{"8.0": "8.0.0", "580.173.02": "580.173.2", "13": "13.0.0", "12.4.1": "12.4.1"} {
		if got, err := semver(in); err != nil || got != want {
			t.Errorf("semver(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "8.x", "1.2.3.4", "-1.0"} {
		if got, err := semver(in); err == nil {
			t.Errorf("semver(%q) = %q, want an error", in, got)
		}
	}
}

// TestTaint_Since: a device's taint carries the time the store says it
// turned unhealthy, to the second.
func TestTaint_Since(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 500_000_000, time.UTC)
	tt := Taint(endpoint.DefaultDriverName, "XID 48: double bit ECC", since([]store.Device{{ID: "fake-0", Since: at}}, "fake-0"))
	if tt.TimeAdded == nil || !tt.TimeAdded.Time.Equal(at.Truncate(time.Second)) {
		t.Errorf("TimeAdded %v, want %v", tt.TimeAdded, at.Truncate(time.Second))
	}
	if tt.Value != fmt.Sprint(48) {
		t.Errorf("value %q, want 48", tt.Value)
	}
}
