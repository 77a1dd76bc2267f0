package dra

import (
	"path/filepath"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra/endpoint"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

const testNode = "node-a"

// rig is a driver over a real state file and a CDI directory in a
// temporary directory; the API server is client-go's fake clientset (the
// API server cannot run in a unit test; the e2e suite runs a real one).
type rig struct {
	t      testing.TB
	dir    string
	st     *store.Store
	set    *agent.Set
	client *fake.Clientset
	d      *Driver
	// changed is what the driver told DriverConfig.Changed, in order.
	changed [][]string
}

// openRig returns a rig without a set or a driver: its state file open
// until the test ends, a fake clientset.
func openRig(t testing.TB) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), client: fake.NewClientset()}
	st, err := store.Open(filepath.Join(r.dir, "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r.st = st
	return r
}

// newRig returns a rig of machine name, its store open until the test
// ends.
func newRig(t testing.TB, machine string) *rig {
	t.Helper()
	r := openRig(t)
	r.set = r.newSet(machine)
	r.d = r.newDriver()
	return r
}

// newSet builds the set of machine, stored.
func (r *rig) newSet(machine string) *agent.Set {
	r.t.Helper()
	set, err := agent.NewSet(agent.Config{KubeletAPI: agent.KubeletAPIDRA, GPUs: plugintest.GPUConfig(r.t, machine, gpuset.Sharing{}),
		View: plugintest.ViewConfig(r.dir)}, testNode)
	if err != nil {
		r.t.Fatal(err)
	}
	plugintest.Served(r.t, r.st, set.GPUs)
	return set
}

// stored returns the store's devices.
func (r *rig) stored() []store.Device {
	r.t.Helper()
	stored, err := r.st.Devices()
	if err != nil {
		r.t.Fatal(err)
	}
	return stored
}

// newDriver returns a driver of the rig's set, as a new process would
// build it over the same state file and directories.
func (r *rig) newDriver() *Driver {
	r.t.Helper()
	d, err := NewDriver(DriverConfig{Config: endpoint.Config{DriverName: endpoint.DefaultDriverName, RegistryDir: filepath.Join(r.dir, "registry"),
		PluginsDir: filepath.Join(r.dir, "plugins")}, NodeName: testNode, Client: r.client, Store: r.st, Set: r.set, Stored: r.stored(),
		Changed: func(ids []string) { r.changed = append(r.changed, ids) }})
	if err != nil {
		r.t.Fatal(err)
	}
	return d
}

// cdiDir is where the claims' specs are.
func (r *rig) cdiDir() string { return filepath.Join(r.dir, "cdi") }

// inject lets the CDI library (what containerd and CRI-O use) inject the
// CDI devices of a Prepare answer into an OCI spec, as the runtime does
// for a container of the claim, and returns the spec.
func (r *rig) inject(devs []kubeletplugin.Device) *oci.Spec {
	r.t.Helper()
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(r.cdiDir()), cdilib.WithAutoRefresh(false))
	if err != nil {
		r.t.Fatal(err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.CDIDeviceIDs...)
	}
	s := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{Resources: &oci.LinuxResources{}}}
	if unresolved, err := cache.InjectDevices(s, names...); err != nil {
		r.t.Fatalf("InjectDevices(%q): %v (unresolved %q)", names, err, unresolved)
	}
	return s
}

// claimOf returns an allocated claim uid (default/name) with the results.
func claimOf(uid, name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name + "-pod", UID: types.UID(uid + "-pod")}},
		},
	}
}

// result is the allocation of device to request, in the node's pool.
func result(request, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: endpoint.DefaultDriverName, Pool: testNode, Device: device}
}

// withConfig adds an opaque configuration of the driver for requests
// (none: all) to the claim's allocation.
func withConfig(c *resourceapi.ResourceClaim, raw string, requests ...string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source:   resourceapi.AllocationConfigSourceClaim,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: endpoint.DefaultDriverName, Parameters: runtime.RawExtension{Raw: []byte(raw)}}},
	})
	return c
}

// envOf returns the environment of an OCI spec as a map.
func envOf(s *oci.Spec) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Process.Env {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				out[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	return out
}
