package options_test

import (
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
)

// TestLoad_KubeletAPI: -kubelet-api chooses the API (device-plugin by
// default, the seed's behaviour); the DRA driver's name and the kubelet's
// two directories have the kubelet's defaults and come clean from every
// source.
func TestLoad_KubeletAPI(t *testing.T) {
	c := mustLoad(t, nil, nil)
	if c.KubeletAPI != agent.KubeletAPIDevicePlugin {
		t.Errorf("default kubelet API %q, want device-plugin", c.KubeletAPI)
	}
	if c.DRA.DriverName != "gpu.unicore.mcyou.cc" || c.DRA.RegistryDir != "/var/lib/kubelet/plugins_registry" || c.DRA.PluginsDir != "/var/lib/kubelet/plugins" {
		t.Errorf("DRA defaults %+v", c.DRA)
	}
	c = mustLoad(t, []string{"-kubelet-api=dra", "-dra-driver-name=gpu.example.com", "-kubelet-registry-dir=/k/reg/", "-kubelet-plugins-dir=/k/x/../plugins"}, nil)
	if c.KubeletAPI != agent.KubeletAPIDRA || c.DRA.DriverName != "gpu.example.com" || c.DRA.RegistryDir != "/k/reg" || c.DRA.PluginsDir != "/k/plugins" {
		t.Errorf("flags: %q %+v", c.KubeletAPI, c.DRA)
	}
	if got := c.DRA.Socket(); got != "/k/plugins/gpu.example.com/dra.sock" {
		t.Errorf("driver socket %q", got)
	}
	c = mustLoad(t, nil, map[string]string{"VGPU_KUBELET_API": "dra", "VGPU_DRA_DRIVER_NAME": "gpu.example.org"})
	if c.KubeletAPI != agent.KubeletAPIDRA || c.DRA.DriverName != "gpu.example.org" {
		t.Errorf("env: %q %+v", c.KubeletAPI, c.DRA)
	}
}

// TestLoad_KubeletAPIBadInput: a wrong API or driver name, relative
// directories, and what only the device plugin serves (time-slicing
// replicas, writable telemetry) asked of the DRA driver are refused, each
// naming the setting.
func TestLoad_KubeletAPIBadInput(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown API", []string{"-kubelet-api=cdi"}, nil, `invalid -kubelet-api="cdi": must be one of device-plugin, dra`},
		{"unknown API by env", nil, map[string]string{"VGPU_KUBELET_API": "DRA"}, `invalid VGPU_KUBELET_API="DRA": must be one of device-plugin, dra`},
		{"driver name upper case", []string{"-dra-driver-name=GPU.example.com"}, nil, `invalid -dra-driver-name="GPU.example.com": must be a DNS subdomain in lower case`},
		{"driver name with a slash", []string{"-dra-driver-name=example.com/gpu"}, nil, `invalid -dra-driver-name="example.com/gpu"`},
		{"relative registry dir", []string{"-kubelet-registry-dir=plugins_registry"}, nil, `invalid -kubelet-registry-dir="plugins_registry": must be an absolute path`},
		{"relative plugins dir", nil, map[string]string{"VGPU_KUBELET_PLUGINS_DIR": "plugins"}, `invalid VGPU_KUBELET_PLUGINS_DIR="plugins": must be an absolute path`},
		{"replicas with dra", []string{"-kubelet-api=dra", "-replicas=4"}, nil,
			"invalid -replicas=4: time-slicing replicas are served through the device plugin only, not while -kubelet-api is dra: through DRA, pods share a GPU by sharing a ResourceClaim"},
		{"replicas with dra by env", nil, map[string]string{"VGPU_KUBELET_API": "dra", "VGPU_REPLICAS": "2"}, "not while VGPU_KUBELET_API is dra"},
		{"writable telemetry with dra", []string{"-kubelet-api=dra", "-telemetry-address=:9400", "-telemetry-writable"}, nil,
			"invalid -telemetry-writable=true: the per-allocation load sockets are served through the device plugin only, not while -kubelet-api is dra"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(tt.args, tt.env)
			checkInvalid(t, err, tt.want)
		})
	}
	// Replicas and writable telemetry stay the device plugin's.
	if c := mustLoad(t, []string{"-replicas=4", "-telemetry-address=:9400", "-telemetry-writable"}, nil); !c.GPUs.Sharing.Enabled() || !c.Telemetry.Writable {
		t.Errorf("device plugin: sharing %v, writable %v", c.GPUs.Sharing, c.Telemetry.Writable)
	}
}

// TestResolve_KubeletAPIProfile: a profile may choose the kubelet API, so
// a node pool runs the DRA driver; what it must not combine with it is
// refused naming the profile's line; the driver's name and the kubelet's
// directories are the process's and refused in a profile.
func TestResolve_KubeletAPIProfile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "dra.yaml", "version: v1\nflags:\n  devices: 8\n  kubeletAPI: dra\n")
	ps, err := options.LoadProfiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	o, err := options.Parse(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := ps.Lookup("dra")
	c, err := o.Resolve(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.KubeletAPI != agent.KubeletAPIDRA || c.GPUs.Machine.Len() != 8 {
		t.Errorf("profile dra: API %q, %d GPUs", c.KubeletAPI, c.GPUs.Machine.Len())
	}
	// The command line overrides the profile's choice.
	o, _ = options.Parse([]string{"-kubelet-api=device-plugin"}, env(nil))
	if c, err := o.Resolve(f); err != nil || c.KubeletAPI != agent.KubeletAPIDevicePlugin {
		t.Errorf("flag over profile: %v, API %q", err, c.KubeletAPI)
	}
	// -replicas on the command line cannot be combined with a DRA profile.
	o, _ = options.Parse([]string{"-replicas=2"}, env(nil))
	_, err = o.Resolve(f)
	checkInvalid(t, err, "invalid -replicas=2: time-slicing replicas are served through the device plugin only, not while flags.kubeletAPI ("+dir+"/dra.yaml:4) is dra")

	for _, line := range []string{"draDriverName: gpu.example.com", "kubeletRegistryDir: /r", "kubeletPluginsDir: /p"} {
		d := t.TempDir()
		p := writeFile(t, d, "bad.yaml", "version: v1\nflags:\n  "+line+"\n")
		_, err := options.LoadProfiles(d)
		checkInvalid(t, err, p+":3: flags.")
		checkInvalid(t, err, "a profile may not set a path or address")
	}
}
