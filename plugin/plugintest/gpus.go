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
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
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

// WithMIG returns cfg with the MIG configuration mc, its layout mc.Layout
// of layouts (nil: the built-in mig-parted configuration) resolved on
// cfg's machine into mc.GPUs, failing the test if it does not resolve.
func WithMIG(t testing.TB, cfg gpuset.Config, layouts *mig.Config, mc gpuset.MIG) gpuset.Config {
	t.Helper()
	if layouts == nil {
		var err error
		if layouts, err = mig.BuiltinConfig(); err != nil {
			t.Fatal(err)
		}
	}
	gpus, err := mig.Resolve(layouts, mc.Layout, cfg.Machine.GPUModel().Product, cfg.Machine.Len())
	if err != nil {
		t.Fatal(err)
	}
	mc.GPUs = gpus
	cfg.MIG = mc
	return cfg
}

// MIGSet is the GPU set of preset machine name with MIG configuration mc
// (WithMIG of the built-in layouts), for the node identity "node-a".
func MIGSet(t testing.TB, name string, mc gpuset.MIG) *gpuset.Set {
	t.Helper()
	set, err := gpuset.New(WithMIG(t, GPUConfig(t, name, gpuset.Sharing{}), nil, mc), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	return set
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
