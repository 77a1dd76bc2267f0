package cdi_test

import (
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
)

// newOCISpec is the part of an OCI runtime spec a runtime has filled in
// when it injects CDI devices: a process and a Linux section.
func newOCISpec() *oci.Spec {
	return &oci.Spec{
		Process: &oci.Process{Env: []string{"VIRTUAL_GPU_IDS=fake-1"}},
		Linux:   &oci.Linux{Resources: &oci.LinuxResources{}},
		Mounts:  []oci.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
	}
}

func devicePaths(s *oci.Spec) []string {
	var paths []string
	for _, d := range s.Linux.Devices {
		paths = append(paths, d.Path)
	}
	return paths
}

func mountByDestination(s *oci.Spec, dst string) *oci.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dst {
			return &s.Mounts[i]
		}
	}
	return nil
}

// TestInject_OCISpec writes the spec of 3 GPUs and lets the CDI library's
// cache (what containerd and CRI-O use) inject CDI names into OCI runtime
// specs, as a runtime does for the CdiDevices of an Allocate answer.
func TestInject_OCISpec(t *testing.T) {
	cfg := mustConfig(t, 3)
	w := mustWriter(t, t.TempDir())
	if err := w.Write(cfg); err != nil {
		t.Fatal(err)
	}
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(w.Dir()), cdilib.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ids     []string
		devices []string // the container's device nodes, in order
	}{
		{"one GPU", []string{"fake-1"}, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"}},
		{"two GPUs, shared edits once", []string{"fake-2", "fake-0"}, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia2", "/dev/nvidia0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, err := cdi.DefaultKind.QualifiedNames(tc.ids)
			if err != nil {
				t.Fatal(err)
			}
			s := newOCISpec()
			if unresolved, err := cache.InjectDevices(s, names...); err != nil {
				t.Fatalf("InjectDevices(%q): %v (unresolved %q)", names, err, unresolved)
			}
			if got := devicePaths(s); !slices.Equal(got, tc.devices) {
				t.Errorf("device nodes %q, want %q", got, tc.devices)
			}
			for _, d := range s.Linux.Devices {
				// Backed by /dev/null: the runtime read its numbers from the host.
				if d.Type != "c" || d.Major != 1 || d.Minor != 3 || d.FileMode == nil {
					t.Errorf("device %s: type %q %d:%d mode %v, want /dev/null's c 1:3 with a mode", d.Path, d.Type, d.Major, d.Minor, d.FileMode)
				}
			}
			var allowed int
			for _, r := range s.Linux.Resources.Devices {
				if r.Allow && r.Type == "c" && r.Major != nil && *r.Major == 1 && r.Minor != nil && *r.Minor == 3 && r.Access == "rw" {
					allowed++
				}
			}
			if allowed != len(tc.devices) {
				t.Errorf("%d cgroup rules allow c 1:3 rw (no mknod), want one per device node (%d): %+v", allowed, len(tc.devices), s.Linux.Resources.Devices)
			}
			for _, m := range cfg.Mounts {
				got := mountByDestination(s, m.ContainerPath)
				if got == nil {
					t.Errorf("no mount at %s; mounts %+v", m.ContainerPath, s.Mounts)
					continue
				}
				if got.Source != m.HostPath || !slices.Contains(got.Options, "ro") || !slices.Contains(got.Options, "rbind") {
					t.Errorf("mount %s: %+v, want a read-only bind of %s", m.ContainerPath, got, m.HostPath)
				}
			}
			if mountByDestination(s, "/proc") == nil {
				t.Error("injection dropped the container's own /proc mount")
			}
			if !slices.Equal(s.Process.Env, []string{"VIRTUAL_GPU_IDS=fake-1"}) {
				t.Errorf("env %q: the spec must leave the Allocate answer's env alone", s.Process.Env)
			}
		})
	}
	t.Run("unknown device", func(t *testing.T) {
		unresolved, err := cache.InjectDevices(newOCISpec(), cdi.DefaultKind.QualifiedName("fake-9"))
		if err == nil || !slices.Equal(unresolved, []string{"unicore.mcyou.cc/gpu=fake-9"}) {
			t.Errorf("InjectDevices(fake-9) = %q, %v; want it unresolved", unresolved, err)
		}
	})
}

// TestInject_RuntimeFailsWhenTheHostNodeGoes shows why Build stats host
// nodes: the runtime refuses to create a container whose device node's host
// side is missing. The spec is written with a node that exists, which is then
// removed.
func TestInject_RuntimeFailsWhenTheHostNodeGoes(t *testing.T) {
	dir := t.TempDir()
	w := mustWriter(t, dir)
	if err := w.Write(mustConfig(t, 1)); err != nil {
		t.Fatal(err)
	}
	spec, err := cdilib.ReadSpec(w.Path(), 0)
	if err != nil {
		t.Fatal(err)
	}
	spec.Devices[0].ContainerEdits.DeviceNodes[0].HostPath = dir + "/gone"
	err = spec.GetDevice("fake-0").ApplyEdits(newOCISpec())
	if err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("injecting a device whose host node is missing: %v, want the library to refuse", err)
	}
}
