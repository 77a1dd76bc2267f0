package options_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
)

// TestLoad_ContainerView_Defaults: nvidia-smi on, the rest off; the tools
// and status directories next to the state file, wherever it is.
func TestLoad_ContainerView_Defaults(t *testing.T) {
	c := mustLoad(t, nil, nil)
	if !c.View.NvidiaSMI || c.View.VisibleDevicesEnv || c.View.DeviceNodes {
		t.Errorf("nvidia-smi %v, visible devices env %v, device nodes %v: want true, false, false", c.View.NvidiaSMI, c.View.VisibleDevicesEnv, c.View.DeviceNodes)
	}
	for _, p := range []struct{ name, got, want string }{
		{"tools dir", c.View.ToolsDir, "/var/lib/virtual-gpu/bin"},
		{"status dir", c.View.StatusDir, "/var/lib/virtual-gpu/status"},
		{"cdi spec dir", c.View.CDISpecDir, "/var/run/cdi"},
		{"device node source", c.View.DeviceNodeSource, "/dev/null"},
	} {
		if p.got != p.want {
			t.Errorf("%s = %q, want %q", p.name, p.got, p.want)
		}
	}
	c = mustLoad(t, []string{"-state=/srv/vgpu/s.db"}, nil)
	if c.View.ToolsDir != "/srv/vgpu/bin" || c.View.StatusDir != "/srv/vgpu/status" {
		t.Errorf("with -state=/srv/vgpu/s.db: tools %q, status %q; want both next to it", c.View.ToolsDir, c.View.StatusDir)
	}
}

// TestLoad_ContainerView_Set: every flag by the command line, its variable
// and a file, typed.
func TestLoad_ContainerView_Set(t *testing.T) {
	check := func(t *testing.T, c *options.Config) {
		t.Helper()
		if c.View.NvidiaSMI || !c.View.VisibleDevicesEnv || !c.View.DeviceNodes || c.View.ToolsDir != "/opt/tools" || c.View.CDISpecDir != "/etc/cdi" ||
			c.View.DeviceNodeSource != "/dev/zero" || !c.View.Uses(view.DeviceListCDICRI) || !c.View.Uses(view.DeviceListEnvVar) {
			t.Errorf("got nvidia-smi %v, visible %v, nodes %v, tools %q, cdi %q, source %q, strategies %v",
				c.View.NvidiaSMI, c.View.VisibleDevicesEnv, c.View.DeviceNodes, c.View.ToolsDir, c.View.CDISpecDir, c.View.DeviceNodeSource, c.View.DeviceListStrategies)
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
		if !slices.Equal(c.View.DeviceListStrategies, []view.DeviceListStrategy{view.DeviceListEnvVar, view.DeviceListCDICRI}) {
			t.Errorf("strategies %v, want the file's order", c.View.DeviceListStrategies)
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
		{"regular file as node source with cdi", []string{"-device-list-strategy=cdi-cri", "-device-node-source=" + file}, "is not a character device"},
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
	if c, err := load([]string{"-resource-name=example.com/2gpu"}, nil); err != nil || c.View.CDIKind != (cdi.Kind{}) {
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
		if c := mustLoad(t, tc.args, nil); c.View.CDIKind != tc.want {
			t.Errorf("%q: CDI kind %+v, want %+v", tc.args, c.View.CDIKind, tc.want)
		}
	}
	p := writeFile(t, t.TempDir(), "c.yaml", "version: v1\nflags:\n  deviceListStrategy: cdi-cri\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n      - name: unicore.mcyou.cc/gpu\n        replicas: 2\n")
	if c := mustLoad(t, []string{"-config=" + p}, nil); c.View.CDIKind != cdi.DefaultKind || c.GPUs.Sharing.ResourceName != "unicore.mcyou.cc/gpu.shared" {
		t.Errorf("renamed by sharing: CDI kind %+v (shared as %s), want the resource name's", c.View.CDIKind, c.GPUs.Sharing.ResourceName)
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
	if c.View.NvidiaSMI || !c.View.VisibleDevicesEnv || !c.View.DeviceNodes || !slices.Equal(c.View.DeviceListStrategies, []view.DeviceListStrategy{view.DeviceListCDICRI}) {
		t.Errorf("profile: nvidia-smi %v, visible %v, nodes %v, strategies %v", c.View.NvidiaSMI, c.View.VisibleDevicesEnv, c.View.DeviceNodes, c.View.DeviceListStrategies)
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

// mknod makes a device node of type mode (syscall.S_IFCHR or S_IFBLK) and
// numbers major:minor at path, or skips the test where it may not (not
// root).
func mknod(t *testing.T, path string, mode uint32, major, minor uint32) {
	t.Helper()
	if err := syscall.Mknod(path, mode|0o600, int(unix.Mkdev(major, minor))); err != nil {
		t.Skipf("mknod %s: %v (needs root)", path, err)
	}
}

// TestLoad_DeviceNodeSource: every GPU container gets the source read-write
// as its GPU device nodes. The harmless memory devices are accepted, known
// by their numbers, whatever their name; another character device only with
// -allow-unsafe-device-node-source, and then with a warning; a block
// device, or anything but a device node, never.
func TestLoad_DeviceNodeSource(t *testing.T) {
	const refusedChar = "not one of the harmless ones (/dev/null 1:3, /dev/zero 1:5, /dev/full 1:7, /dev/random 1:8, /dev/urandom 1:9): every GPU container would get it read-write as its GPU device nodes; -allow-unsafe-device-node-source accepts it anyway"
	dir := t.TempDir()
	node := func(name string, mode, major, minor uint32) func(t *testing.T) string {
		return func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), name)
			mknod(t, p, mode, major, minor)
			return p
		}
	}
	host := func(p string) func(t *testing.T) string {
		return func(t *testing.T) string {
			if _, err := os.Lstat(p); err != nil {
				t.Skipf("%s: %v", p, err)
			}
			return p
		}
	}
	link := filepath.Join(dir, "null")
	if err := os.Symlink("/dev/kmsg", link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		source func(t *testing.T) string
		allow  bool
		want   string // "" accepted without a warning; "warn: …" accepted with one
	}{
		{"/dev/null", host("/dev/null"), false, ""},
		{"/dev/zero", host("/dev/zero"), false, ""},
		{"/dev/full", host("/dev/full"), false, ""},
		{"/dev/random", host("/dev/random"), false, ""},
		{"/dev/urandom", host("/dev/urandom"), false, ""},
		{"/dev/null renamed", node("gpu-backing", syscall.S_IFCHR, 1, 3), false, ""},
		{"/dev/null acknowledged needlessly", host("/dev/null"), true, ""},
		{"/dev/kmsg", host("/dev/kmsg"), false, "is character device 1:11, " + refusedChar},
		{"/dev/kmsg acknowledged", host("/dev/kmsg"), true, "warn: is character device 1:11, not a harmless one"},
		{"/dev/mem under the name null", node("null", syscall.S_IFCHR, 1, 1), false, "is character device 1:1, " + refusedChar},
		{"a symlink named null", func(*testing.T) string { return link }, true, "is not a character device"},
		{"a block device", node("vda", syscall.S_IFBLK, 254, 0), false, "is block device 254:0: every GPU container would get it read-write as its GPU device nodes; a block device is never accepted"},
		{"a block device acknowledged", node("loop0", syscall.S_IFBLK, 7, 0), true, "is block device 7:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.source(t)
			args := []string{"-device-nodes", "-device-node-source=" + src}
			if tc.allow {
				args = append(args, "-allow-unsafe-device-node-source")
			}
			c, err := load(args, nil)
			switch {
			case tc.want == "":
				if err != nil || len(c.Warnings) != 0 {
					t.Fatalf("%s: %v, warnings %q; want accepted without a warning", src, err, c.Warnings)
				}
			case strings.HasPrefix(tc.want, "warn: "):
				if err != nil {
					t.Fatal(err)
				}
				if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], src) || !strings.Contains(c.Warnings[0], strings.TrimPrefix(tc.want, "warn: ")) {
					t.Errorf("warnings %q, want one naming %s", c.Warnings, src)
				}
			default:
				checkInvalid(t, err, `invalid -device-node-source="`+src+`": `+tc.want)
			}
		})
	}
	// The acknowledgement is a setting of the process: a variable or a
	// file may give it, a profile may not.
	profiles := t.TempDir()
	bad := writeFile(t, profiles, "p.yaml", "version: v1\nflags:\n  allowUnsafeDeviceNodeSource: true\n")
	_, err := options.LoadProfiles(profiles)
	checkInvalid(t, err, bad+":3: flags.allowUnsafeDeviceNodeSource:")
	kmsg := host("/dev/kmsg")(t)
	if c, err := load([]string{"-device-nodes", "-device-node-source=" + kmsg}, map[string]string{"VGPU_ALLOW_UNSAFE_DEVICE_NODE_SOURCE": "true"}); err != nil || len(c.Warnings) != 1 {
		t.Errorf("acknowledged by the variable: %v", err)
	}
	p := writeFile(t, dir, "c.yaml", "version: v1\nflags:\n  deviceNodes: true\n  deviceNodeSource: "+kmsg+"\n  allowUnsafeDeviceNodeSource: true\n")
	if c, err := load([]string{"-config=" + p}, nil); err != nil || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "flags.allowUnsafeDeviceNodeSource") {
		t.Errorf("acknowledged by the file: %v", err)
	}
}
