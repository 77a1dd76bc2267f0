package options_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
)

// TestSharing_NVIDIAConfigs: NVIDIA's time-slicing examples (their README,
// "Shared Access to GPUs"), the resource name changed, are read as NVIDIA
// reads them.
func TestSharing_NVIDIAConfigs(t *testing.T) {
	for _, tc := range []struct {
		file    string
		args    []string
		want    gpuset.Sharing
		gpus    int
		ignored []string
	}{
		{"nvidia-time-slicing.yaml", nil,
			gpuset.Sharing{Replicas: 10, ResourceName: "unicore.mcyou.cc/gpu", PolicyName: "distributed"}, 4, nil},
		{"nvidia-time-slicing-rename.yaml", nil,
			gpuset.Sharing{Replicas: 10, ResourceName: "unicore.mcyou.cc/gpu.shared", Renamed: true, PolicyName: "distributed"}, 4, nil},
		{"nvidia-flags.yaml", nil,
			gpuset.Sharing{Replicas: 1, ResourceName: "unicore.mcyou.cc/gpu", PolicyName: "distributed"}, 4,
			[]string{"flags.failOnInitError", "flags.nvidiaDriverRoot", "flags.plugin.passDeviceSpecs", "flags.plugin.deviceIDStrategy"}},
		{"nvidia-every-field.yaml", nil,
			gpuset.Sharing{Replicas: 4, ResourceName: "unicore.mcyou.cc/gpu-shared", Renamed: true, FailRequestsGreaterThanOne: true, GPUs: []int{0, 1, 3}, PolicyName: "packed"}, 4,
			[]string{"flags.failOnInitError", "flags.mpsRoot", "flags.nvidiaDriverRoot", "flags.nvidiaDevRoot", "flags.gdrcopyEnabled",
				"flags.gdsEnabled", "flags.mofedEnabled", "flags.useNodeFeatureAPI", "flags.deviceDiscoveryStrategy", "flags.plugin.passDeviceSpecs",
				"flags.plugin.deviceIDStrategy", "flags.plugin.cdiAnnotationPrefix", "flags.plugin.nvidiaCTKPath", "flags.plugin.containerDriverRoot",
				"flags.gfd", "resources", "imex"}},
		{"nvidia-gpu-operator-time-slicing-fine.yaml", nil,
			gpuset.Sharing{Replicas: 8, ResourceName: "unicore.mcyou.cc/gpu", PolicyName: "distributed"}, 4,
			[]string{"sharing.timeSlicing.resources[1]", "sharing.timeSlicing.resources[2]", "sharing.timeSlicing.resources[3]", "sharing.timeSlicing.resources[4]"}},
		{"nvidia-running-config-log.yaml", nil,
			gpuset.Sharing{Replicas: 4, ResourceName: "unicore.mcyou.cc/gpu", PolicyName: "distributed"}, 4,
			[]string{"flags.failOnInitError", "flags.mpsRoot", "flags.nvidiaDriverRoot", "flags.nvidiaDevRoot", "flags.gdrcopyEnabled",
				"flags.gdsEnabled", "flags.mofedEnabled", "flags.useNodeFeatureAPI", "flags.deviceDiscoveryStrategy", "flags.plugin.passDeviceSpecs",
				"flags.plugin.deviceIDStrategy", "flags.plugin.cdiAnnotationPrefix", "flags.plugin.nvidiaCTKPath", "flags.plugin.containerDriverRoot",
				"resources", "imex"}},
		{"nvidia-time-slicing.yaml", []string{"-replicas=3"},
			gpuset.Sharing{Replicas: 3, ResourceName: "unicore.mcyou.cc/gpu", PolicyName: "distributed"}, 4, nil},
		{"nvidia-time-slicing-rename.yaml", []string{"-replicas=1"},
			gpuset.Sharing{Replicas: 1, ResourceName: "unicore.mcyou.cc/gpu", PolicyName: "distributed"}, 4, nil},
		{"nvidia-every-field.yaml", []string{"-shared-devices-allocation-policy=lowest-index"},
			gpuset.Sharing{Replicas: 4, ResourceName: "unicore.mcyou.cc/gpu-shared", Renamed: true, FailRequestsGreaterThanOne: true, GPUs: []int{0, 1, 3}, PolicyName: "lowest-index"}, 4, nil},
	} {
		t.Run(tc.file+strings.Join(tc.args, ""), func(t *testing.T) {
			path, err := filepath.Abs(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			c := mustLoad(t, append([]string{"-config=" + path}, tc.args...), nil)
			got := c.GPUs.Sharing
			if got.Replicas != tc.want.Replicas || got.ResourceName != tc.want.ResourceName || got.Renamed != tc.want.Renamed ||
				got.FailRequestsGreaterThanOne != tc.want.FailRequestsGreaterThanOne || !slices.Equal(got.GPUs, tc.want.GPUs) || got.PolicyName != tc.want.PolicyName {
				t.Errorf("sharing = %+v\nwant      %+v", got, tc.want)
			}
			if c.GPUs.Machine.Len() != tc.gpus {
				t.Errorf("%d GPUs, want %d", c.GPUs.Machine.Len(), tc.gpus)
			}
			if tc.args != nil {
				return
			}
			var fields []string
			for _, n := range c.Ignored {
				fields = append(fields, n.Field)
				if n.File != path || n.Line < 1 || !strings.HasPrefix(n.Why, "a field of NVIDIA's device plugin, ignored: ") {
					t.Errorf("note %v", n)
				}
			}
			if !slices.Equal(fields, tc.ignored) {
				t.Errorf("ignored %q\nwant    %q", fields, tc.ignored)
			}
		})
	}
	c := mustLoad(t, []string{"-config=testdata/nvidia-every-field.yaml"}, nil)
	if !slices.Equal(c.View.DeviceListStrategies, []view.DeviceListStrategy{view.DeviceListEnvVar, view.DeviceListCDICRI}) {
		t.Errorf("deviceListStrategy from flags.plugin: %v", c.View.DeviceListStrategies)
	}
	if !c.GPUs.Sharing.Shares(3) || c.GPUs.Sharing.Shares(2) {
		t.Errorf("Shares: GPU 3 %v, GPU 2 %v", c.GPUs.Sharing.Shares(3), c.GPUs.Sharing.Shares(2))
	}
	if c.GPUs.MIG.Strategy != "none" { // NVIDIA's flags.migStrategy is ours
		t.Errorf("flags.migStrategy none read as %q", c.GPUs.MIG.Strategy)
	}
	if got := c.Ignored[0].String(); got != c.File+":6: flags.failOnInitError: a field of NVIDIA's device plugin, ignored: a configuration or start-up error always ends the plugin (exit 2 or 1), as failOnInitError true" {
		t.Errorf("note = %q", got)
	}
}

func TestSharing_Flag(t *testing.T) {
	c := mustLoad(t, []string{"-replicas=4", "-devices=2"}, nil)
	if s := c.GPUs.Sharing; !s.Enabled() || s.Replicas != 4 || s.ResourceName != "unicore.mcyou.cc/gpu" || s.Renamed || s.GPUs != nil || !s.Shares(1) {
		t.Errorf("-replicas=4: %+v", s)
	}
	c = mustLoad(t, nil, map[string]string{"VGPU_REPLICAS": "2", "VGPU_SHARED_DEVICES_ALLOCATION_POLICY": "packed"})
	if s := c.GPUs.Sharing; s.Replicas != 2 || s.PolicyName != "packed" || c.Source("replicas") != options.SourceEnv {
		t.Errorf("VGPU_REPLICAS=2: %+v", s)
	}
}

func TestSharing_Errors(t *testing.T) {
	dir := t.TempDir()
	ts := func(extra, entry string) string {
		return "version: v1\n" + extra + "sharing:\n  timeSlicing:\n" + "    resources:\n    - name: unicore.mcyou.cc/gpu\n      replicas: 2\n" + entry
	}
	for _, tc := range []struct {
		name, file string
		args       []string
		want       string
	}{
		{"another resource", strings.Replace(ts("", ""), "unicore.mcyou.cc/gpu", "nvidia.com/gpu", 1), nil,
			`:5: invalid sharing.timeSlicing.resources[0].name="nvidia.com/gpu": the plugin serves unicore.mcyou.cc/gpu (-resource-name), the one resource it can share`},
		{"resource renamed by flag", ts("", ""), []string{"-resource-name=example.com/gpu"},
			`:5: invalid sharing.timeSlicing.resources[0].name="unicore.mcyou.cc/gpu": the plugin serves example.com/gpu (-resource-name)`},
		{"bad rename", ts("", "      rename: Bad_Name-\n"), nil, `:7: invalid sharing.timeSlicing.resources[0].rename="Bad_Name-": name "Bad_Name-" must be`},
		{"rename in kubernetes.io", ts("", "      rename: kubernetes.io/gpu\n"), nil, `:7: invalid sharing.timeSlicing.resources[0].rename="kubernetes.io/gpu": the kubernetes.io domain is reserved`},
		{"GPU out of range", ts("", "      devices: [0, 4]\n"), nil, `:7: invalid sharing.timeSlicing.resources[0].devices: GPU 4: the machine has GPUs 0–3`},
		{"GPU id out of range", ts("", "      devices:\n      - fake-9\n"), nil, `:8: invalid sharing.timeSlicing.resources[0].devices: "fake-9" is neither a GPU index nor the id of a GPU (fake-0–fake-3)`},
		{"GPU listed twice", ts("", "      devices: [1, fake-1]\n"), nil, `:7: invalid sharing.timeSlicing.resources[0].devices: GPU 1 listed twice`},
		{"index with a sign", ts("", "      devices: [\"+1\"]\n"), nil, `:7: invalid sharing.timeSlicing.resources[0].devices: "+1" is neither a GPU index`},
		{"shared policy", ts("flags:\n  plugin:\n    sharedDevicesAllocationPolicy: spread\n", ""), nil,
			`:4: invalid flags.plugin.sharedDevicesAllocationPolicy="spread": must be one of distributed, lowest-index, packed`},
		{"device list strategy", ts("flags:\n  plugin:\n    deviceListStrategy: [envvar, volume-mounts]\n", ""), nil,
			`:4: invalid flags.plugin.deviceListStrategy="envvar,volume-mounts": NVIDIA's volume-mounts is not supported here: want envvar or cdi-cri`},
		{"renamed name too long", strings.Replace(ts("flags:\n  resourceName: unicore.mcyou.cc/"+strings.Repeat("g", 54)+"\n", ""), "name: unicore.mcyou.cc/gpu", "name: unicore.mcyou.cc/"+strings.Repeat("g", 54), 1) +
			"", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.file)
			_, err := load(append([]string{"-config=" + p}, tc.args...), nil)
			if tc.want == "" {
				if err != nil {
					t.Error(err)
				}
				return
			}
			checkInvalid(t, err, p+tc.want)
		})
	}
	p := writeFile(t, dir, "long.yaml", "version: v1\nflags:\n  resourceName: unicore.mcyou.cc/"+strings.Repeat("g", 54)+
		"\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: unicore.mcyou.cc/"+strings.Repeat("g", 54)+"\n      replicas: 2\n")
	_, err := load([]string{"-config=" + p}, nil)
	checkInvalid(t, err, p+":6: invalid sharing.timeSlicing.renameByDefault: unicore.mcyou.cc/"+strings.Repeat("g", 54)+".shared: name")
}
