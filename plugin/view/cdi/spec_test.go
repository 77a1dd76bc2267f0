package cdi_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
)

// Container paths the plugin uses for the shared mounts.
const (
	smiPath    = "/usr/bin/nvidia-smi"
	statusPath = "/run/virtual-gpu"
)

// mustConfig returns a config of n GPUs fake-0 … fake-<n-1> (minor = index)
// backed by /dev/null, the default shared nodes and two mounts whose host
// paths are in a temp dir.
func mustConfig(t testing.TB, n int) cdi.Config {
	t.Helper()
	dir := t.TempDir()
	smi := filepath.Join(dir, "virtual-gpu-device-plugin")
	status := filepath.Join(dir, "status")
	if err := os.WriteFile(smi, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(status, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := cdi.Config{
		SharedNodes: cdi.DefaultSharedNodes(""),
		Mounts:      []cdi.Mount{{HostPath: smi, ContainerPath: smiPath}, {HostPath: status, ContainerPath: statusPath}},
	}
	for i := range n {
		cfg.GPUs = append(cfg.GPUs, cdi.GPU{ID: "fake-" + strconv.Itoa(i), Minor: i})
	}
	return cfg
}

func TestNames_FollowTheCDIConventions(t *testing.T) {
	k := cdi.DefaultKind
	if err := parser.ValidateVendorName(k.Vendor); err != nil {
		t.Errorf("vendor %q: %v", k.Vendor, err)
	}
	if err := parser.ValidateClassName(k.Class); err != nil {
		t.Errorf("class %q: %v", k.Class, err)
	}
	if v, c := parser.ParseQualifier(k.String()); v != k.Vendor || c != k.Class {
		t.Errorf("ParseQualifier(%q) = %q, %q", k, v, c)
	}
	if want := cdilib.GenerateSpecName(k.Vendor, k.Class) + ".yaml"; k.SpecFileName() != want {
		t.Errorf("SpecFileName = %q, the library names it %q", k.SpecFileName(), want)
	}
	if cdi.DefaultSpecDir != cdilib.DefaultDynamicDir {
		t.Errorf("DefaultSpecDir = %q, the library's dynamic dir is %q", cdi.DefaultSpecDir, cdilib.DefaultDynamicDir)
	}
	// Existing clusters keep their file and names.
	if k.String() != "unicore.mcyou.cc/gpu" || k.SpecFileName() != "unicore.mcyou.cc-gpu.yaml" || k.QualifiedName("fake-0") != "unicore.mcyou.cc/gpu=fake-0" {
		t.Errorf("DefaultKind %q, file %q, name %q; want unicore.mcyou.cc/gpu, unicore.mcyou.cc-gpu.yaml, unicore.mcyou.cc/gpu=fake-0",
			k, k.SpecFileName(), k.QualifiedName("fake-0"))
	}
}

// TestKindOf: the resource's domain is the vendor, its name the class; a
// resource name the CDI library cannot take as a kind is refused, naming
// the part and the rule.
func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		resource string
		want     cdi.Kind
		file     string
		err      string // "" accepted
	}{
		{"unicore.mcyou.cc/gpu", cdi.DefaultKind, "unicore.mcyou.cc-gpu.yaml", ""},
		{"example.com/vgpu", cdi.Kind{Vendor: "example.com", Class: "vgpu"}, "example.com-vgpu.yaml", ""},
		{"example.com/gpu.shared", cdi.Kind{Vendor: "example.com", Class: "gpu.shared"}, "example.com-gpu.shared.yaml", ""},
		{"example.com/Gpu_2", cdi.Kind{Vendor: "example.com", Class: "Gpu_2"}, "example.com-Gpu_2.yaml", ""},
		{"3dfx.com/gpu", cdi.Kind{}, "", `vendor "3dfx.com"`},
		{"example.com/2gpu", cdi.Kind{}, "", `class "2gpu"`},
		{"example.com/-gpu", cdi.Kind{}, "", `class "-gpu"`},
		{"gpu", cdi.Kind{}, "", "no '/'"},
		{"example.com/", cdi.Kind{}, "", `class ""`},
	} {
		t.Run(tc.resource, func(t *testing.T) {
			k, err := cdi.KindOf(tc.resource)
			if tc.err != "" {
				if !errors.Is(err, cdi.ErrInvalidKind) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.resource) {
					t.Fatalf("KindOf(%q) = %v, %v; want ErrInvalidKind naming %q and %s", tc.resource, k, err, tc.resource, tc.err)
				}
				return
			}
			if err != nil || k != tc.want || k.SpecFileName() != tc.file || k.String() != tc.resource {
				t.Fatalf("KindOf(%q) = %+v (file %q), %v; want %+v, %q", tc.resource, k, k.SpecFileName(), err, tc.want, tc.file)
			}
			if want := cdilib.GenerateSpecName(k.Vendor, k.Class) + ".yaml"; k.SpecFileName() != want {
				t.Errorf("file %q, the library names it %q", k.SpecFileName(), want)
			}
		})
	}
}

// A spec of another kind: its kind field and its devices' names.
func TestBuild_Kind(t *testing.T) {
	cfg := mustConfig(t, 1)
	cfg.Kind = cdi.Kind{Vendor: "example.com", Class: "vgpu"}
	spec, err := cdi.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Kind != "example.com/vgpu" || spec.Version != "0.5.0" {
		t.Errorf("kind %q version %q, want example.com/vgpu 0.5.0", spec.Kind, spec.Version)
	}
	cfg.Kind = cdi.Kind{Vendor: "example.com", Class: "gpu.shared"}
	if spec, err = cdi.Build(cfg); err != nil || spec.Version != "0.6.0" {
		t.Errorf("class with a dot: version %q, %v; want 0.6.0, the first that allows it", spec.Version, err)
	}
	cfg.Kind = cdi.Kind{Vendor: "example.com", Class: "-x"}
	if _, err := cdi.Build(cfg); !errors.Is(err, cdi.ErrInvalidKind) || !errors.Is(err, cdi.ErrInvalidConfig) {
		t.Errorf("invalid kind: %v, want ErrInvalidKind and ErrInvalidConfig", err)
	}
}

func TestQualifiedNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ids     []string
		want    []string
		wantErr bool
	}{
		{"two in the given order", []string{"fake-3", "fake-0"}, []string{"unicore.mcyou.cc/gpu=fake-3", "unicore.mcyou.cc/gpu=fake-0"}, false},
		{"replica id", []string{"fake-0::1"}, []string{"unicore.mcyou.cc/gpu=fake-0::1"}, false},
		{"none", []string{}, []string{}, false},
		{"empty id", []string{""}, nil, true},
		{"slash", []string{"fake/0"}, nil, true},
		{"leading dash", []string{"-fake"}, nil, true},
		{"space", []string{"fake 0"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cdi.DefaultKind.QualifiedNames(tc.ids)
			if (err != nil) != tc.wantErr {
				t.Fatalf("QualifiedNames(%q) error %v, want error %v", tc.ids, err, tc.wantErr)
			}
			if err != nil {
				if !errors.Is(err, cdi.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.ids[0]+`"`) {
					t.Errorf("error %q: want ErrInvalidConfig naming the id", err)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("QualifiedNames(%q) = %q, want %q", tc.ids, got, tc.want)
			}
			for _, n := range got {
				if _, _, _, err := parser.ParseQualifiedName(n); err != nil {
					t.Errorf("the library does not parse %q: %v", n, err)
				}
			}
		})
	}
}

func TestBuild_TwoGPUs(t *testing.T) {
	cfg := mustConfig(t, 2)
	spec, err := cdi.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := &specs.Spec{
		Version: "0.5.0", // hostPath on device nodes needs 0.5.0; nothing newer
		Kind:    "unicore.mcyou.cc/gpu",
		Devices: []specs.Device{
			{Name: "fake-0", ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia0", HostPath: "/dev/null", Permissions: "rw"}}}},
			{Name: "fake-1", ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia1", HostPath: "/dev/null", Permissions: "rw"}}}},
		},
		ContainerEdits: specs.ContainerEdits{
			DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidiactl", HostPath: "/dev/null", Permissions: "rw"}, {Path: "/dev/nvidia-uvm", HostPath: "/dev/null", Permissions: "rw"}},
			Mounts: []*specs.Mount{
				{HostPath: cfg.Mounts[0].HostPath, ContainerPath: smiPath, Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}},
				{HostPath: cfg.Mounts[1].HostPath, ContainerPath: statusPath, Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}},
			},
		},
	}
	if !reflect.DeepEqual(spec, want) {
		got, _ := cdi.Marshal(spec)
		exp, _ := cdi.Marshal(want)
		t.Errorf("Build:\n%s\nwant:\n%s", got, exp)
	}
	if len(spec.ContainerEdits.Env) != 0 || len(spec.Devices[0].ContainerEdits.Env) != 0 {
		t.Error("the spec sets environment variables; they belong in the Allocate answer")
	}
}

func TestBuild_HostNodeEqualToPathIsOmitted(t *testing.T) {
	spec, err := cdi.Build(cdi.Config{GPUs: []cdi.GPU{{ID: "gpu-null", Minor: 0, HostNode: "/dev/null"}}, SharedNodes: []cdi.DeviceNode{{Path: "/dev/null", HostNode: "/dev/null"}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.ContainerEdits.DeviceNodes[0]; n.Path != "/dev/null" || n.HostPath != "" {
		t.Errorf("shared node %+v, want path /dev/null without a hostPath", n)
	}
}

func TestBuild_Deterministic(t *testing.T) {
	cfg := mustConfig(t, 4)
	first, err := cdi.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := cdi.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	shuffled := cfg
	shuffled.GPUs = []cdi.GPU{cfg.GPUs[2], cfg.GPUs[0], cfg.GPUs[3], cfg.GPUs[1]}
	for i, c := range []cdi.Config{cfg, cfg, shuffled} {
		spec, err := cdi.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cdi.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("build %d differs:\n%s\nwant:\n%s", i, got, want)
		}
	}
	if !slices.Equal(cfg.GPUs, mustConfig(t, 4).GPUs) {
		t.Error("Build reordered the caller's GPUs")
	}
}

func TestBuild_InvalidConfig(t *testing.T) {
	base := mustConfig(t, 2)
	for _, tc := range []struct {
		name   string
		edit   func(*cdi.Config)
		naming string // the error names it
	}{
		{"no GPUs", func(c *cdi.Config) { c.GPUs = nil }, "no GPUs"},
		{"empty id", func(c *cdi.Config) { c.GPUs[0].ID = "" }, `gpu ""`},
		{"id with slash", func(c *cdi.Config) { c.GPUs[0].ID = "fake/0" }, `"fake/0"`},
		{"id ending in dash", func(c *cdi.Config) { c.GPUs[0].ID = "fake-" }, `"fake-"`},
		{"duplicate id", func(c *cdi.Config) { c.GPUs[1].ID = c.GPUs[0].ID }, `"fake-0" twice`},
		{"duplicate minor", func(c *cdi.Config) { c.GPUs[1].Minor = 0 }, "/dev/nvidia0"},
		{"negative minor", func(c *cdi.Config) { c.GPUs[0].Minor = -1 }, "minor number -1"},
		{"minor of nvidiactl", func(c *cdi.Config) { c.GPUs[0].Minor = 255 }, "minor number 255"},
		{"relative host node", func(c *cdi.Config) { c.GPUs[0].HostNode = "dev/null" }, `"dev/null"`},
		{"unclean host node", func(c *cdi.Config) { c.GPUs[0].HostNode = "/dev/../dev/null" }, `"/dev/../dev/null"`},
		{"relative shared node", func(c *cdi.Config) { c.SharedNodes[0].Path = "nvidiactl" }, `"nvidiactl"`},
		{"shared node on a GPU's path", func(c *cdi.Config) { c.SharedNodes[0].Path = "/dev/nvidia1" }, "/dev/nvidia1 is also gpu \"fake-1\""},
		{"relative mount host path", func(c *cdi.Config) { c.Mounts[0].HostPath = "nvidia-smi" }, `"nvidia-smi"`},
		{"empty mount container path", func(c *cdi.Config) { c.Mounts[1].ContainerPath = "" }, "empty path"},
		{"two mounts on one path", func(c *cdi.Config) { c.Mounts[1].ContainerPath = smiPath }, smiPath + " is also mount of"},
		{"mount over a device node", func(c *cdi.Config) { c.Mounts[0].ContainerPath = "/dev/nvidia-uvm" }, "/dev/nvidia-uvm is also shared device node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.GPUs = slices.Clone(base.GPUs)
			cfg.SharedNodes = slices.Clone(base.SharedNodes)
			cfg.Mounts = slices.Clone(base.Mounts)
			tc.edit(&cfg)
			spec, err := cdi.Build(cfg)
			if err == nil {
				t.Fatalf("Build accepted it: %+v", spec)
			}
			if !errors.Is(err, cdi.ErrInvalidConfig) {
				t.Errorf("error %q does not wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.naming) {
				t.Errorf("error %q does not contain %q", err, tc.naming)
			}
		})
	}
}

func TestBuild_HostNodeMustBeADeviceNode(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "null-link")
	if err := os.Symlink("/dev/null", link); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nvidia7")
	for _, tc := range []struct {
		name     string
		edit     func(*cdi.Config)
		naming   []string
		notExist bool
	}{
		{"missing GPU node", func(c *cdi.Config) { c.GPUs[1].HostNode = missing }, []string{`gpu "fake-1"`, "/dev/nvidia1 backed by " + missing, "no such file"}, true},
		{"GPU node is a regular file", func(c *cdi.Config) { c.GPUs[0].HostNode = regular }, []string{`gpu "fake-0"`, "regular file, not a character or block device"}, false},
		{"GPU node is a directory", func(c *cdi.Config) { c.GPUs[0].HostNode = dir }, []string{"directory"}, false},
		{"GPU node is a symbolic link", func(c *cdi.Config) { c.GPUs[0].HostNode = link }, []string{"symbolic link"}, false},
		{"missing shared node", func(c *cdi.Config) { c.SharedNodes = cdi.DefaultSharedNodes(missing) }, []string{"shared device node /dev/nvidiactl", "backed by " + missing}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustConfig(t, 2)
			tc.edit(&cfg)
			_, err := cdi.Build(cfg)
			if !errors.Is(err, cdi.ErrDeviceNode) {
				t.Fatalf("error %v, want ErrDeviceNode", err)
			}
			if errors.Is(err, fs.ErrNotExist) != tc.notExist {
				t.Errorf("error %q: wraps fs.ErrNotExist %v, want %v", err, !tc.notExist, tc.notExist)
			}
			for _, s := range tc.naming {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestBuild_MountHostPathsNeedNotExistYet(t *testing.T) {
	cfg := mustConfig(t, 1)
	cfg.Mounts = []cdi.Mount{{HostPath: filepath.Join(t.TempDir(), "later"), ContainerPath: statusPath}}
	if _, err := cdi.Build(cfg); err != nil {
		t.Fatalf("a mount whose host path the plugin creates later: %v", err)
	}
}

// FuzzBuild checks that every spec Build accepts is one the CDI library
// loads, with the devices Build named, and that QualifiedNames agrees with
// Build on which ids are valid.
func FuzzBuild(f *testing.F) {
	for _, s := range []struct {
		id    string
		minor int
	}{{"fake-0", 0}, {"fake-0::1", 3}, {"a", 254}, {"x.y_z:1", 9}, {"", 0}, {"-", 1}, {"fake/0", 2}, {"ü", 0}} {
		f.Add(s.id, s.minor)
	}
	dir := f.TempDir()
	w, err := cdi.NewWriter(dir, cdi.DefaultKind, cdi.Owner{ID: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id string, minor int) {
		cfg := cdi.Config{GPUs: []cdi.GPU{{ID: id, Minor: minor}}, SharedNodes: cdi.DefaultSharedNodes("")}
		spec, err := cdi.Build(cfg)
		_, nameErr := cdi.DefaultKind.QualifiedNames([]string{id})
		if err != nil {
			if !errors.Is(err, cdi.ErrInvalidConfig) {
				t.Fatalf("Build(%q, %d): %v does not wrap ErrInvalidConfig", id, minor, err)
			}
			return
		}
		if nameErr != nil {
			t.Fatalf("Build accepted id %q, QualifiedNames refused it: %v", id, nameErr)
		}
		if err := w.Write(cfg); err != nil {
			t.Fatalf("Write of a config Build accepted (%q, %d): %v", id, minor, err)
		}
		loaded, err := cdilib.ReadSpec(w.Path(), 0)
		if err != nil {
			t.Fatalf("the library refuses the written spec of %q: %v", id, err)
		}
		if loaded.GetDevice(id) == nil || len(spec.Devices) != 1 {
			t.Fatalf("the library's spec has no device %q", id)
		}
	})
}
