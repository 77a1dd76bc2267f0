package view_test

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// viewOf is the view of a machine (a preset, or n generic GPUs for
// "generic-<n>") shared replicas ways (1: not shared), with the settings
// the flags give by default changed by opts, for node identity "node-a";
// and its devices as a fresh state file would store them.
func viewOf(t testing.TB, machine string, replicas int, opts ...func(*view.Config)) (*view.View, []store.Device) {
	t.Helper()
	set, err := gpuset.New(plugintest.GPUConfig(t, machine, gpuset.Sharing{Replicas: replicas}), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	cfg := plugintest.ViewConfig(t.TempDir())
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Uses(view.DeviceListCDICRI) {
		cfg.CDIKind = cdi.DefaultKind
	}
	stored := make([]store.Device, 0, len(set.Specs()))
	for _, sp := range set.Specs() {
		stored = append(stored, store.Device{ID: sp.ID, Index: sp.Index, NUMA: sp.NUMA, Healthy: true, UUID: sp.UUID, GPU: sp.GPU, Replica: sp.Replica})
	}
	return view.New(cfg, set), stored
}

// strategies sets the device list strategies.
func strategies(s ...view.DeviceListStrategy) func(*view.Config) {
	return func(c *view.Config) { c.DeviceListStrategies = s }
}

// answerFor answers record 7 for ids with v over the stored devices.
func answerFor(t *testing.T, v *view.View, stored []store.Device, ids ...string) view.Container {
	t.Helper()
	all, err := v.Set().Devices(stored)
	if err != nil {
		t.Fatal(err)
	}
	var devs []gpuset.Device
	for _, d := range all {
		if slices.Contains(ids, d.ID) {
			devs = append(devs, d)
		}
	}
	spec, err := v.Answer(gpuset.UUIDs(stored), 7, nil, devs)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// Replicas of shared GPUs: the container sees the physical GPUs, once each,
// whatever replicas it got.
func TestView_Replicas(t *testing.T) {
	set, stored := viewOf(t, "generic-4", 4, strategies(view.DeviceListEnvVar, view.DeviceListCDICRI), func(c *view.Config) { c.DeviceNodes = true })
	spec := answerFor(t, set, stored, "fake-1::0", "fake-1::3", "fake-3::2")
	uuids := strings.Split(spec.Envs[status.EnvUUIDs], ",")
	want := []string{topology.DeriveUUID("node-a", "fake-1"), topology.DeriveUUID("node-a", "fake-3")}
	if !slices.Equal(uuids, want) {
		t.Errorf("%s = %v, want the UUIDs of fake-1 and fake-3 once each: %v", status.EnvUUIDs, uuids, want)
	}
	var nodes []string
	for _, n := range spec.DeviceNodes {
		nodes = append(nodes, n.ContainerPath)
	}
	if !slices.Equal(nodes, []string{"/dev/nvidia1", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"}) {
		t.Errorf("device nodes = %v", nodes)
	}
	if !slices.Equal(spec.CDIDevices, []string{"unicore.mcyou.cc/gpu=fake-1", "unicore.mcyou.cc/gpu=fake-3"}) {
		t.Errorf("CDI devices = %v", spec.CDIDevices)
	}
}

func TestView_Answer(t *testing.T) {
	uuid := func(id string) string { return topology.DeriveUUID("node-a", id) }
	uuids := uuid("fake-2") + "," + uuid("fake-5")
	smi := func(set *view.View) view.Mount {
		return view.Mount{ContainerPath: "/usr/bin/nvidia-smi", HostPath: filepath.Join(set.Config().ToolsDir, "nvidia-smi"), ReadOnly: true}
	}
	statusMount := func(set *view.View) view.Mount {
		return view.Mount{ContainerPath: "/run/virtual-gpu", HostPath: set.Config().StatusDir, ReadOnly: true}
	}
	nodes := func(source string) []view.DeviceNode {
		var out []view.DeviceNode
		for _, p := range []string{"/dev/nvidia2", "/dev/nvidia5", "/dev/nvidiactl", "/dev/nvidia-uvm"} {
			out = append(out, view.DeviceNode{ContainerPath: p, HostPath: source, Permissions: "rw"})
		}
		return out
	}
	tests := []struct {
		name string
		opts []func(*view.Config)
		want func(set *view.View) view.Container
	}{
		{"defaults: UUIDs, nvidia-smi and status", nil, func(set *view.View) view.Container {
			return view.Container{Envs: map[string]string{"VIRTUAL_GPU_UUIDS": uuids}, Mounts: []view.Mount{smi(set), statusMount(set)}}
		}},
		{"no nvidia-smi", []func(*view.Config){func(c *view.Config) { c.NvidiaSMI = false }}, func(set *view.View) view.Container {
			return view.Container{Envs: map[string]string{"VIRTUAL_GPU_UUIDS": uuids}, Mounts: []view.Mount{statusMount(set)}}
		}},
		{"visible devices", []func(*view.Config){func(c *view.Config) { c.VisibleDevicesEnv = true }}, func(set *view.View) view.Container {
			return view.Container{Envs: map[string]string{"VIRTUAL_GPU_UUIDS": uuids, "NVIDIA_VISIBLE_DEVICES": uuids}, Mounts: []view.Mount{smi(set), statusMount(set)}}
		}},
		{"device nodes", []func(*view.Config){func(c *view.Config) { c.DeviceNodes, c.DeviceNodeSource = true, "/dev/zero" }}, func(set *view.View) view.Container {
			return view.Container{Envs: map[string]string{"VIRTUAL_GPU_UUIDS": uuids}, Mounts: []view.Mount{smi(set), statusMount(set)}, DeviceNodes: nodes("/dev/zero")}
		}},
		{"cdi only: names, the rest from the spec", []func(*view.Config){strategies(view.DeviceListCDICRI), func(c *view.Config) { c.DeviceNodes = true }}, func(*view.View) view.Container {
			return view.Container{Envs: map[string]string{"VIRTUAL_GPU_UUIDS": uuids}, CDIDevices: []string{"unicore.mcyou.cc/gpu=fake-2", "unicore.mcyou.cc/gpu=fake-5"}}
		}},
		{"both strategies", []func(*view.Config){strategies(view.DeviceListCDICRI, view.DeviceListEnvVar), func(c *view.Config) { c.DeviceNodes = true }}, func(set *view.View) view.Container {
			return view.Container{Envs: map[string]string{"VIRTUAL_GPU_UUIDS": uuids}, Mounts: []view.Mount{smi(set), statusMount(set)},
				DeviceNodes: nodes("/dev/null"), CDIDevices: []string{"unicore.mcyou.cc/gpu=fake-2", "unicore.mcyou.cc/gpu=fake-5"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, stored := viewOf(t, "dgx1-volta", 1, tt.opts...)
			got := answerFor(t, set, stored, "fake-2", "fake-5")
			if want := tt.want(set); !reflect.DeepEqual(got, want) {
				t.Errorf("spec =\n%+v\nwant\n%+v", got, want)
			}
			// Deterministic: the same record gives the same answer.
			if again := answerFor(t, set, stored, "fake-2", "fake-5"); !reflect.DeepEqual(again, got) {
				t.Errorf("second answer differs:\n%+v\n%+v", again, got)
			}
		})
	}
}

// TestView_StoredUUIDs: the answer carries the stored UUIDs (a
// renamed node keeps them), and none when a GPU has none (no identity).
func TestView_StoredUUIDs(t *testing.T) {
	set, stored := viewOf(t, "generic-4", 1, func(c *view.Config) { c.VisibleDevicesEnv = true })
	stored[1].UUID = topology.DeriveUUID("old-name", "fake-1")
	if got := answerFor(t, set, stored, "fake-1").Envs["VIRTUAL_GPU_UUIDS"]; got != stored[1].UUID {
		t.Errorf("VIRTUAL_GPU_UUIDS = %q, want the stored %q", got, stored[1].UUID)
	}
	stored[0].UUID = ""
	spec := answerFor(t, set, stored, "fake-0", "fake-1")
	if _, ok := spec.Envs["VIRTUAL_GPU_UUIDS"]; ok {
		t.Errorf("envs %v: a GPU without a UUID, want neither UUID variable", spec.Envs)
	}
	if _, ok := spec.Envs["NVIDIA_VISIBLE_DEVICES"]; ok {
		t.Errorf("envs %v: a GPU without a UUID, want neither UUID variable", spec.Envs)
	}
	if len(spec.Mounts) != 2 {
		t.Errorf("mounts %v: want nvidia-smi and status all the same", spec.Mounts)
	}
}

// TestView_LoadSocket: with -telemetry-writable the record stores
// VIRTUAL_GPU_LOAD_SOCKET and its answer mounts the allocation's socket
// directory read-only, whatever the strategy; the same record gets the same
// answer; a record without the variable gets no mount, whatever the
// configuration in force.
func TestView_LoadSocket(t *testing.T) {
	for _, strategy := range []view.DeviceListStrategy{view.DeviceListEnvVar, view.DeviceListCDICRI} {
		v, stored := viewOf(t, "generic-4", 1, strategies(strategy), func(c *view.Config) { c.LoadSockets = true })
		devs, err := v.Set().Devices(stored)
		if err != nil {
			t.Fatal(err)
		}
		envs := v.Env(devs[1:3])
		if envs[loadsock.EnvSocket] != loadsock.ContainerPath || envs[gpuset.EnvIDs] != "fake-1,fake-2" {
			t.Errorf("%s: stored variables %v, want %s=%s", strategy, envs, loadsock.EnvSocket, loadsock.ContainerPath)
		}
		uuids := gpuset.UUIDs(stored)
		spec, err := v.Answer(uuids, 41, envs, devs[1:3])
		if err != nil {
			t.Fatal(err)
		}
		want := view.Mount{ContainerPath: "/run/virtual-gpu-load", HostPath: filepath.Join(v.Config().LoadSocketDir, "41"), ReadOnly: true}
		if !slices.Contains(spec.Mounts, want) {
			t.Errorf("%s: mounts %v, want %v", strategy, spec.Mounts, want)
		}
		again, _ := v.Answer(uuids, 41, envs, devs[1:3])
		if fmt.Sprint(again) != fmt.Sprint(spec) {
			t.Errorf("%s: the same record answered twice differently:\n%v\n%v", strategy, spec, again)
		}
		spec, _ = v.Answer(uuids, 41, nil, devs[1:3])
		for _, m := range spec.Mounts {
			if m.ContainerPath == loadsock.ContainerDir {
				t.Errorf("%s: a record without %s mounts a load socket", strategy, loadsock.EnvSocket)
			}
		}
	}
	v, stored := viewOf(t, "generic-4", 1)
	devs, _ := v.Set().Devices(stored)
	if _, ok := v.Env(devs[:1])[loadsock.EnvSocket]; ok {
		t.Error("without -telemetry-writable the record says it has a load socket")
	}
}

// TestView_Claim: a DRA claim's container gets what the envvar strategy
// gives (the UUIDs, nvidia-smi, the status directory, device nodes when
// on) whatever device-list strategies are in force, and never a CDI name
// of the device plugin's kind.
func TestView_Claim(t *testing.T) {
	for _, s := range [][]view.DeviceListStrategy{{view.DeviceListEnvVar}, {view.DeviceListCDICRI}} {
		v, stored := viewOf(t, "dgx1-volta", 1, strategies(s...), func(c *view.Config) { c.DeviceNodes, c.VisibleDevicesEnv = true, true })
		all, err := v.Set().Devices(stored)
		if err != nil {
			t.Fatal(err)
		}
		got, err := v.Claim(gpuset.UUIDs(stored), []gpuset.Device{all[2], all[5]})
		if err != nil {
			t.Fatal(err)
		}
		uuids := topology.DeriveUUID("node-a", "fake-2") + "," + topology.DeriveUUID("node-a", "fake-5")
		if got.Envs["VIRTUAL_GPU_UUIDS"] != uuids || got.Envs["NVIDIA_VISIBLE_DEVICES"] != uuids {
			t.Errorf("%v: envs %v", s, got.Envs)
		}
		if len(got.CDIDevices) != 0 {
			t.Errorf("%v: CDI devices %v, want none", s, got.CDIDevices)
		}
		var paths []string
		for _, m := range got.Mounts {
			paths = append(paths, m.ContainerPath)
		}
		for _, n := range got.DeviceNodes {
			paths = append(paths, n.ContainerPath)
		}
		want := []string{"/usr/bin/nvidia-smi", "/run/virtual-gpu", "/dev/nvidia2", "/dev/nvidia5", "/dev/nvidiactl", "/dev/nvidia-uvm"}
		if !slices.Equal(paths, want) {
			t.Errorf("%v: mounts and nodes %v, want %v", s, paths, want)
		}
	}
}
