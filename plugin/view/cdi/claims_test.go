package cdi_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
)

const testDriver = "gpu.unicore.mcyou.cc"

func mustClaimWriter(t testing.TB, dir, owner string) *cdi.ClaimWriter {
	t.Helper()
	k, err := cdi.ClaimKind(testDriver)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cdi.NewClaimWriter(dir, k, cdi.Owner{ID: owner})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// claimConfig is a claim of two requests: "gpus" of fake-0 and fake-1,
// "one" of fake-2.
func claimConfig(t testing.TB, uid string) cdi.ClaimConfig {
	t.Helper()
	status := t.TempDir()
	return cdi.ClaimConfig{
		UID: uid,
		Devices: []cdi.ClaimDevice{
			{Name: uid + "-gpus", Envs: map[string]string{"VIRTUAL_GPU_IDS": "fake-0,fake-1"},
				Nodes: []cdi.DeviceNode{{Path: "/dev/nvidia0"}, {Path: "/dev/nvidia1"}}},
			{Name: uid + "-one", Envs: map[string]string{"VIRTUAL_GPU_IDS": "fake-2"}, Nodes: []cdi.DeviceNode{{Path: "/dev/nvidia2"}}},
		},
		SharedNodes: cdi.DefaultSharedNodes(""),
		Mounts:      []cdi.Mount{{HostPath: status, ContainerPath: statusPath}},
	}
}

// TestClaimKind: the claims' kind is k8s.<driver>/claim, as NVIDIA's DRA
// driver names its own; a driver name that makes no CDI vendor is an
// error.
func TestClaimKind(t *testing.T) {
	k, err := cdi.ClaimKind(testDriver)
	if err != nil || k.String() != "k8s.gpu.unicore.mcyou.cc/claim" {
		t.Errorf("ClaimKind = %v, %v", k, err)
	}
	if _, err := cdi.ClaimKind("bad/driver"); !errors.Is(err, cdi.ErrInvalidKind) {
		t.Errorf("ClaimKind(bad/driver) = %v, want ErrInvalidKind", err)
	}
}

// TestClaimWriter_SpecsTheLibraryInjects: each claim is its own file; the
// CDI library loads them, lists one device per request and injects a
// request's VIRTUAL_GPU_IDS, its nodes and the shared edits; UIDs lists
// the claims (removing a crashed writer's temporary file), Remove removes
// one and is idempotent.
func TestClaimWriter_SpecsTheLibraryInjects(t *testing.T) {
	dir := t.TempDir()
	w := mustClaimWriter(t, dir, testOwner)
	for _, uid := range []string{"uid-b", "uid-a"} {
		if err := w.Write(claimConfig(t, uid)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := w.Path("uid-a"), filepath.Join(dir, "k8s.gpu.unicore.mcyou.cc-claim_uid-a.yaml"); got != want {
		t.Errorf("Path = %s, want %s", got, want)
	}
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(dir), cdilib.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the library's cache reports errors: %v", errs)
	}
	k := w.Kind().String()
	want := []string{k + "=uid-a-gpus", k + "=uid-a-one", k + "=uid-b-gpus", k + "=uid-b-one"}
	if got := cache.ListDevices(); !slices.Equal(got, want) {
		t.Errorf("devices %q, want %q", got, want)
	}
	ctr := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(ctr, k+"=uid-a-gpus"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ctr.Process.Env, "VIRTUAL_GPU_IDS=fake-0,fake-1") {
		t.Errorf("env %q, want the request's VIRTUAL_GPU_IDS", ctr.Process.Env)
	}
	var nodes []string
	for _, n := range ctr.Linux.Devices {
		nodes = append(nodes, n.Path)
	}
	if !slices.Contains(nodes, "/dev/nvidia0") || !slices.Contains(nodes, "/dev/nvidia1") || slices.Contains(nodes, "/dev/nvidia2") || !slices.Contains(nodes, "/dev/nvidiactl") {
		t.Errorf("device nodes %q, want the request's and the shared ones", nodes)
	}

	tmp := filepath.Join(dir, ".k8s.gpu.unicore.mcyou.cc-claim.tmp-123")
	if err := os.WriteFile(tmp, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "unicore.mcyou.cc-gpu.yaml"), []byte("kind: unicore.mcyou.cc/gpu\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	uids, err := w.UIDs()
	if err != nil || !slices.Equal(uids, []string{"uid-a", "uid-b"}) {
		t.Errorf("UIDs = %q, %v; want uid-a, uid-b", uids, err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("temporary file after UIDs: %v, want removed", err)
	}
	for i, want := range []bool{true, false} {
		if removed, err := w.Remove("uid-a"); err != nil || removed != want {
			t.Errorf("Remove #%d = %v, %v; want %v", i+1, removed, err, want)
		}
	}
	if ok, err := w.Exists("uid-a"); ok || err != nil {
		t.Errorf("Exists(uid-a) after Remove = %v, %v", ok, err)
	}
	if ok, err := w.Exists("uid-b"); !ok || err != nil {
		t.Errorf("Exists(uid-b) = %v, %v", ok, err)
	}
}

// TestClaimWriter_RefusesAnotherOwnersSpec: a claim spec another instance
// wrote is neither replaced nor removed, and the error names it and its
// owner.
func TestClaimWriter_RefusesAnotherOwnersSpec(t *testing.T) {
	dir := t.TempDir()
	first := mustClaimWriter(t, dir, testOwner)
	if err := first.Write(claimConfig(t, "uid-a")); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, first.Path("uid-a"))
	second := mustClaimWriter(t, dir, "/srv/other/state.db")
	for name, err := range map[string]error{"Write": second.Write(claimConfig(t, "uid-a")), "Remove": func() error { _, err := second.Remove("uid-a"); return err }()} {
		if !errors.Is(err, cdi.ErrForeignSpec) || !strings.Contains(err.Error(), first.Path("uid-a")) || !strings.Contains(err.Error(), testOwner) {
			t.Errorf("second owner's %s = %v, want ErrForeignSpec naming the file and its owner", name, err)
		}
	}
	if !bytes.Equal(readFile(t, first.Path("uid-a")), before) {
		t.Error("the refused calls changed the first owner's spec")
	}
	// Another kind's config is refused by the writer.
	cfg := claimConfig(t, "uid-b")
	cfg.Kind = cdi.DefaultKind
	if err := first.Write(cfg); !errors.Is(err, cdi.ErrInvalidConfig) {
		t.Errorf("Write of another kind = %v, want ErrInvalidConfig", err)
	}
}

// TestBuildClaim_BadInput: what cannot make a valid spec is refused,
// naming what is wrong.
func TestBuildClaim_BadInput(t *testing.T) {
	k, _ := cdi.ClaimKind(testDriver)
	for _, tt := range []struct {
		name   string
		change func(*cdi.ClaimConfig)
		is     error
		want   string
	}{
		{"no kind", func(c *cdi.ClaimConfig) { c.Kind = cdi.Kind{} }, cdi.ErrInvalidConfig, ""},
		{"bad uid", func(c *cdi.ClaimConfig) { c.UID = "a/b" }, cdi.ErrInvalidConfig, `claim uid "a/b"`},
		{"no devices", func(c *cdi.ClaimConfig) { c.Devices = nil }, cdi.ErrInvalidConfig, "claim u1: no devices"},
		{"device twice", func(c *cdi.ClaimConfig) { c.Devices[1].Name = c.Devices[0].Name }, cdi.ErrInvalidConfig, `claim device "u1-gpus" twice`},
		{"bad device name", func(c *cdi.ClaimConfig) { c.Devices[0].Name = "u1 gpus" }, cdi.ErrInvalidConfig, `claim device "u1 gpus"`},
		{"env with =", func(c *cdi.ClaimConfig) { c.Devices[0].Envs["A=B"] = "x" }, cdi.ErrInvalidConfig, `environment variable "A=B"`},
		{"node on a mount's path", func(c *cdi.ClaimConfig) { c.Devices[0].Nodes[0].Path = statusPath }, cdi.ErrInvalidConfig, "container path " + statusPath + " is also mount of"},
		{"node twice in a device", func(c *cdi.ClaimConfig) { c.Devices[0].Nodes[1].Path = "/dev/nvidia0" }, cdi.ErrInvalidConfig, "is also another of its nodes"},
		{"relative node path", func(c *cdi.ClaimConfig) { c.Devices[0].Nodes[0].Path = "dev/nvidia0" }, nil, `claim device "u1-gpus": container path`},
		{"missing host node", func(c *cdi.ClaimConfig) { c.Devices[0].Nodes[0].HostNode = "/no/such/node" }, cdi.ErrDeviceNode, "/no/such/node"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := claimConfig(t, "u1")
			cfg.Kind = k
			tt.change(&cfg)
			_, err := cdi.BuildClaim(cfg)
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("BuildClaim = %v, want an error wrapping %v containing %q", err, tt.is, tt.want)
			}
		})
	}
	// The same node path in two devices is fine: a container using both
	// requests gets it once.
	cfg := claimConfig(t, "u1")
	cfg.Kind = k
	cfg.Devices[1].Nodes[0].Path = "/dev/nvidia0"
	if _, err := cdi.BuildClaim(cfg); err != nil {
		t.Errorf("a node path in two devices: %v", err)
	}
}
