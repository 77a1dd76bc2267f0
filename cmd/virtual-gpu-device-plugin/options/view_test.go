package options_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/cdi"
)

// TestLoad_ContainerView_Defaults: nvidia-smi on, the rest off; the tools
// and status directories next to the state file, wherever it is.
func TestLoad_ContainerView_Defaults(t *testing.T) {
	c := mustLoad(t, nil, nil)
	if !c.NvidiaSMI || c.VisibleDevicesEnv || c.DeviceNodes {
		t.Errorf("nvidia-smi %v, visible devices env %v, device nodes %v: want true, false, false", c.NvidiaSMI, c.VisibleDevicesEnv, c.DeviceNodes)
	}
	for _, p := range []struct{ name, got, want string }{
		{"tools dir", c.ToolsDir, "/var/lib/virtual-gpu/bin"},
		{"status dir", c.StatusDir, "/var/lib/virtual-gpu/status"},
		{"cdi spec dir", c.CDISpecDir, "/var/run/cdi"},
		{"device node source", c.DeviceNodeSource, "/dev/null"},
	} {
		if p.got != p.want {
			t.Errorf("%s = %q, want %q", p.name, p.got, p.want)
		}
	}
	c = mustLoad(t, []string{"-state=/srv/vgpu/s.db"}, nil)
	if c.ToolsDir != "/srv/vgpu/bin" || c.StatusDir != "/srv/vgpu/status" {
		t.Errorf("with -state=/srv/vgpu/s.db: tools %q, status %q; want both next to it", c.ToolsDir, c.StatusDir)
	}
}

// TestLoad_ContainerView_Set: every flag by the command line, its variable
// and a file, typed.
func TestLoad_ContainerView_Set(t *testing.T) {
	check := func(t *testing.T, c *options.Config) {
		t.Helper()
		if c.NvidiaSMI || !c.VisibleDevicesEnv || !c.DeviceNodes || c.ToolsDir != "/opt/tools" || c.CDISpecDir != "/etc/cdi" ||
			c.DeviceNodeSource != "/dev/zero" || !c.Uses(options.DeviceListCDICRI) || !c.Uses(options.DeviceListEnvVar) {
			t.Errorf("got nvidia-smi %v, visible %v, nodes %v, tools %q, cdi %q, source %q, strategies %v",
				c.NvidiaSMI, c.VisibleDevicesEnv, c.DeviceNodes, c.ToolsDir, c.CDISpecDir, c.DeviceNodeSource, c.DeviceListStrategies)
		}
	}
	t.Run("flags", func(t *testing.T) {
		check(t, mustLoad(t, []string{"-nvidia-smi=false", "-visible-devices-env", "-device-nodes", "-tools-dir=/opt/tools/",
			"-cdi-spec-dir=/etc/cdi", "-device-node-source=/dev/zero", "-device-list-strategy=envvar,cdi-cri"}, nil))
	})
	t.Run("variables", func(t *testing.T) {
		check(t, mustLoad(t, nil, map[string]string{"VGPU_NVIDIA_SMI": "false", "VGPU_VISIBLE_DEVICES_ENV": "true", "VGPU_DEVICE_NODES": "1",
			"VGPU_TOOLS_DIR": "/opt/tools", "VGPU_CDI_SPEC_DIR": "/etc/cdi", "VGPU_DEVICE_NODE_SOURCE": "/dev/zero", "VGPU_DEVICE_LIST_STRATEGY": "cdi-cri,envvar"}))
	})
	t.Run("file", func(t *testing.T) {
		p := writeFile(t, t.TempDir(), "c.yaml", `version: v1
flags:
  nvidiaSmi: false
  visibleDevicesEnv: true
  deviceNodes: true
  toolsDir: /opt/tools
  cdiSpecDir: /etc/cdi
  deviceNodeSource: /dev/zero
  deviceListStrategy: [envvar, cdi-cri]
`)
		c := mustLoad(t, []string{"-config=" + p}, nil)
		check(t, c)
		if !slices.Equal(c.DeviceListStrategies, []options.DeviceListStrategy{options.DeviceListEnvVar, options.DeviceListCDICRI}) {
			t.Errorf("strategies %v, want the file's order", c.DeviceListStrategies)
		}
	})
}

// TestLoad_ContainerView_BadInput: each path must be absolute; an existing
// one must be a directory; the device node source must be a device when
// device nodes are given, and only then.
func TestLoad_ContainerView_BadInput(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "file", "x")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"relative tools dir", []string{"-tools-dir=bin"}, `invalid -tools-dir="bin": must be an absolute path`},
		{"tools dir is a file", []string{"-tools-dir=" + file}, "is not a directory"},
		{"relative cdi spec dir", []string{"-cdi-spec-dir=cdi"}, `invalid -cdi-spec-dir="cdi": must be an absolute path`},
		{"cdi spec dir is a file", []string{"-cdi-spec-dir=" + file}, "is not a directory"},
		{"relative node source", []string{"-device-node-source=null"}, `invalid -device-node-source="null": must be an absolute path`},
		{"missing node source with device nodes", []string{"-device-nodes", "-device-node-source=/no/such/dev"}, `invalid -device-node-source="/no/such/dev": device nodes (-device-nodes or the cdi-cri strategy) need it`},
		{"regular file as node source with cdi", []string{"-device-list-strategy=cdi-cri", "-device-node-source=" + file}, "is not a character or block device"},
		{"cdi with more GPUs than minor numbers", []string{"-device-list-strategy=cdi-cri", "-devices=256"}, `invalid -device-list-strategy="cdi-cri": cdi-cri gives each GPU its device node /dev/nvidia<minor>, minors 0–254: at most 255 GPUs, the machine has 256`},
		{"resource name that makes no CDI kind, with cdi", []string{"-device-list-strategy=cdi-cri", "-resource-name=example.com/2gpu"},
			`invalid -resource-name="example.com/2gpu": must make a valid CDI kind with the cdi-cri strategy (-device-list-strategy): invalid CDI kind "example.com/2gpu": class "2gpu"`},
		{"bool flag with a value it cannot read", []string{"-nvidia-smi=maybe"}, `invalid boolean value "maybe" for -nvidia-smi`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(tt.args, nil)
			checkInvalid(t, err, tt.want)
		})
	}
	// Without cdi-cri the resource name need not make a CDI kind.
	if c, err := load([]string{"-resource-name=example.com/2gpu"}, nil); err != nil || c.CDIKind != (cdi.Kind{}) {
		t.Errorf("resource name without cdi-cri: %v; want accepted, no CDI kind", err)
	}
	// Not used: not checked (a missing /dev node on a build host is fine).
	if _, err := load([]string{"-device-node-source=/no/such/dev"}, nil); err != nil {
		t.Errorf("device node source unused but checked: %v", err)
	}
}

// TestLoad_CDIKind: with cdi-cri the CDI kind is the resource name's; the
// default resource keeps the kind (and the file) it always had; sharing's
// rename does not change it.
func TestLoad_CDIKind(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want cdi.Kind
	}{
		{[]string{"-device-list-strategy=cdi-cri"}, cdi.DefaultKind},
		{[]string{"-device-list-strategy=envvar,cdi-cri", "-resource-name=example.com/vgpu"}, cdi.Kind{Vendor: "example.com", Class: "vgpu"}},
		{[]string{"-device-list-strategy=envvar"}, cdi.Kind{}},
	} {
		if c := mustLoad(t, tc.args, nil); c.CDIKind != tc.want {
			t.Errorf("%q: CDI kind %+v, want %+v", tc.args, c.CDIKind, tc.want)
		}
	}
	p := writeFile(t, t.TempDir(), "c.yaml", "version: v1\nflags:\n  deviceListStrategy: cdi-cri\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n      - name: unicore.mcyou.cc/gpu\n        replicas: 2\n")
	if c := mustLoad(t, []string{"-config=" + p}, nil); c.CDIKind != cdi.DefaultKind || c.Sharing.ResourceName != "unicore.mcyou.cc/gpu.shared" {
		t.Errorf("renamed by sharing: CDI kind %+v (shared as %s), want the resource name's", c.CDIKind, c.Sharing.ResourceName)
	}
}

// TestLoadProfiles_ContainerView: a profile may set the behaviour, not the
// paths.
func TestLoadProfiles_ContainerView(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "ok.yaml", "version: v1\nflags:\n  nvidiaSmi: false\n  visibleDevicesEnv: true\n  deviceNodes: true\n  deviceListStrategy: cdi-cri\n")
	ps, err := options.LoadProfiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := options.Parse(nil, env(nil))
	f, _ := ps.Lookup("ok")
	c, err := o.Resolve(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.NvidiaSMI || !c.VisibleDevicesEnv || !c.DeviceNodes || !slices.Equal(c.DeviceListStrategies, []options.DeviceListStrategy{options.DeviceListCDICRI}) {
		t.Errorf("profile: nvidia-smi %v, visible %v, nodes %v, strategies %v", c.NvidiaSMI, c.VisibleDevicesEnv, c.DeviceNodes, c.DeviceListStrategies)
	}
	for _, line := range []string{"toolsDir: /opt/tools", "cdiSpecDir: /etc/cdi", "deviceNodeSource: /dev/zero"} {
		t.Run(line, func(t *testing.T) {
			dir := t.TempDir()
			p := writeFile(t, dir, "bad.yaml", "version: v1\nflags:\n  "+line+"\n")
			_, err := options.LoadProfiles(dir)
			key, _, _ := strings.Cut(line, ":")
			checkInvalid(t, err, p+":3: flags."+key+": a profile may not set a path or address")
		})
	}
}
