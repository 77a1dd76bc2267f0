package plugintest

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Machine returns the preset name, or n generic GPUs for "generic-<n>",
// failing the test if there is no such machine.
func Machine(t testing.TB, name string) *topology.Machine {
	t.Helper()
	var m *topology.Machine
	var err error
	if n, ok := strings.CutPrefix(name, "generic-"); ok {
		var gpus int
		if gpus, err = strconv.Atoi(n); err == nil {
			m, err = topology.Generic(gpus)
		}
	} else {
		m, err = topology.Preset(name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// GPUConfig is the GPU configuration of machine name (Machine) with
// sharing sh, as the flags' defaults make it: the default resource name
// (for the shared GPUs too, unless sh names one), best-connected and
// distributed placement, no NUMA node reported.
func GPUConfig(t testing.TB, name string, sh gpuset.Sharing) gpuset.Config {
	t.Helper()
	if sh.Replicas == 0 {
		sh.Replicas = 1
	}
	if sh.ResourceName == "" {
		sh.ResourceName = "unicore.mcyou.cc/gpu"
	}
	if sh.PolicyName == "" {
		sh.PolicyName = allocator.SharedPolicyDistributed
	}
	return gpuset.Config{ResourceName: "unicore.mcyou.cc/gpu", Topology: name, Machine: Machine(t, name), NUMAReport: topology.NUMAReportNever,
		AllocationPolicy: allocator.PolicyBestConnected, Sharing: sh}
}

// ViewConfig is the container view the flags' defaults give, its host
// files under dir: the envvar strategy, nvidia-smi mounted, /dev/null
// behind device nodes (when on), the state file dir/state.db.
func ViewConfig(dir string) view.Config {
	return view.Config{DeviceListStrategies: []view.DeviceListStrategy{view.DeviceListEnvVar}, NvidiaSMI: true, DeviceNodeSource: "/dev/null",
		ToolsDir: filepath.Join(dir, "bin"), StatusDir: filepath.Join(dir, "status"), CDISpecDir: filepath.Join(dir, "cdi"),
		Owner: filepath.Join(dir, "state.db"), LoadSocketDir: filepath.Join(dir, "load")}
}

// Served reconciles st with set's devices, as the agent does when it
// applies a set, and returns set's devices as the store then has them.
func Served(t testing.TB, st *store.Store, set *gpuset.Set) []gpuset.Device {
	t.Helper()
	if _, err := st.Reconcile(set.Specs()); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	devs, err := set.Devices(stored)
	if err != nil {
		t.Fatal(err)
	}
	return devs
}
