package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// setOf builds the agent's set of cfg for node identity "node-a", and its
// devices as a fresh state file would store them.
func setOf(t testing.TB, cfg *options.Config) (*agent.Set, []store.Device) {
	t.Helper()
	set, err := agent.NewSet(cfg.Config, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	specs := set.GPUs.Specs()
	stored := make([]store.Device, len(specs))
	for i, sp := range specs {
		stored[i] = store.Device{ID: sp.ID, Index: sp.Index, NUMA: sp.NUMA, Healthy: true, UUID: sp.UUID, GPU: sp.GPU, Replica: sp.Replica}
	}
	return set, stored
}

// runSMI runs an installed nvidia-smi with a container's environment: the
// answer's variables, and the status directory where the container sees it
// mounted (here its host path).
func runSMI(t *testing.T, smi string, env map[string]string, statusDir string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(smi, args...)
	cmd.Env = []string{status.EnvStatusDir + "=" + statusDir}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return string(out), 0
}

// TestBinary_ContainerView runs the plugin with every option of the envvar
// strategy on, allocates two GPUs of dgx1-volta and uses the answer as a
// container would: the mounted nvidia-smi (the installed copy of the
// binary) lists exactly those GPUs with the UUIDs dump shows, topo -m shows
// their NVLink, the CSV query works, device nodes are there; after health
// set … unhealthy it shows the GPU as lost.
func TestBinary_ContainerView(t *testing.T) {
	n := newNode(t)
	_, reg := n.start(t, "-topology=dgx1-volta", "-numa-report=never", "-node-name=node-a", "-device-nodes", "-visible-devices-env")
	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-4", "fake-0"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ans := resp.ContainerResponses[0]
	dump := n.dump(t)
	uuidOf := map[string]string{}
	for _, d := range dump.Devices {
		uuidOf[d.ID] = d.UUID
	}
	wantUUIDs := uuidOf["fake-0"] + "," + uuidOf["fake-4"]
	if ans.Envs["VIRTUAL_GPU_UUIDS"] != wantUUIDs || ans.Envs["NVIDIA_VISIBLE_DEVICES"] != wantUUIDs || ans.Envs["VIRTUAL_GPU_IDS"] != "fake-0,fake-4" {
		t.Errorf("envs %v, want the UUIDs dump shows: %s", ans.Envs, wantUUIDs)
	}
	if _, ok := ans.Envs["CUDA_VISIBLE_DEVICES"]; ok {
		t.Error("CUDA_VISIBLE_DEVICES is set; NVIDIA's plugin sets none")
	}
	stateDir := filepath.Dir(n.state)
	mounts := map[string]*pluginapi.Mount{}
	for _, m := range ans.Mounts {
		mounts[m.ContainerPath] = m
	}
	smi, statusDir := mounts["/usr/bin/nvidia-smi"], mounts["/run/virtual-gpu"]
	if smi == nil || !smi.ReadOnly || smi.HostPath != filepath.Join(stateDir, "bin", "nvidia-smi") ||
		statusDir == nil || !statusDir.ReadOnly || statusDir.HostPath != filepath.Join(stateDir, "status") || len(mounts) != 2 {
		t.Fatalf("mounts %v", ans.Mounts)
	}
	var devs []string
	for _, d := range ans.Devices {
		devs = append(devs, d.ContainerPath+"<-"+d.HostPath+":"+d.Permissions)
	}
	if want := []string{"/dev/nvidia0<-/dev/null:rw", "/dev/nvidia4<-/dev/null:rw", "/dev/nvidiactl<-/dev/null:rw", "/dev/nvidia-uvm<-/dev/null:rw"}; !slices.Equal(devs, want) {
		t.Errorf("device nodes %v, want %v", devs, want)
	}
	installed, err := os.ReadFile(smi.HostPath)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(installed, self) {
		t.Errorf("installed nvidia-smi (%d bytes) is not the plugin binary (%d bytes)", len(installed), len(self))
	}

	out, code := runSMI(t, smi.HostPath, ans.Envs, statusDir.HostPath, "-L")
	want := "GPU 0: Tesla V100-SXM2-32GB (UUID: " + uuidOf["fake-0"] + ")\nGPU 1: Tesla V100-SXM2-32GB (UUID: " + uuidOf["fake-4"] + ")\n"
	if out != want || code != 0 {
		t.Errorf("nvidia-smi -L: exit %d\n%s\nwant\n%s", code, out, want)
	}
	out, code = runSMI(t, smi.HostPath, ans.Envs, statusDir.HostPath, "topo", "-m")
	m, err := topology.ParseNvidiaSMI("topo", strings.NewReader(out))
	if err != nil || code != 0 {
		t.Fatalf("topo -m: exit %d, %v\n%s", code, err, out)
	}
	volta, _ := topology.Preset("dgx1-volta")
	if m.Len() != 2 || m.Link(0, 1).String() != volta.Link(0, 4).String() {
		t.Errorf("topo -m: %d GPUs, link %v; want 2 and fake-0–fake-4's %v\n%s", m.Len(), m.Link(0, 1), volta.Link(0, 4), out)
	}
	out, _ = runSMI(t, smi.HostPath, ans.Envs, statusDir.HostPath, "--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "1, "+uuidOf["fake-4"]+", 00000000:") {
		t.Errorf("--query-gpu:\n%s", out)
	}

	if out, errOut, code := cli(t, "health", "set", "fake-4", "unhealthy", "--reason", "XID 79", "-state="+n.state); code != 0 {
		t.Fatalf("health set: exit %d: %s %s", code, out, errOut)
	}
	plugintest.WaitFor(t, 5*time.Second, "nvidia-smi to show fake-4 lost", func() bool {
		out, code = runSMI(t, smi.HostPath, ans.Envs, statusDir.HostPath, "-L")
		return code == 255
	})
	if !strings.HasPrefix(out, "GPU 0: Tesla V100-SXM2-32GB (UUID: "+uuidOf["fake-0"]+")\nUnable to determine the device handle for GPU0000:") {
		t.Errorf("after health set unhealthy, nvidia-smi -L:\n%s", out)
	}
}

// TestBinary_Allocate1024_EveryOption: with every option on (UUIDs,
// NVIDIA_VISIBLE_DEVICES, nvidia-smi, device nodes, both strategies) the
// answer for 1,024 GPUs keeps each variable under 64 KiB and the whole
// under 256 KiB. The cdi-cri strategy needs minor numbers a real driver
// has (at most 255 GPUs), so the answer is built here from the device set
// the binary would build, by the Server, without a spec.
func TestBinary_Allocate1024_EveryOption(t *testing.T) {
	o, err := options.Parse([]string{"-devices=1024", "-state=" + filepath.Join(t.TempDir(), "s.db"), "-numa-report=never",
		"-device-nodes", "-visible-devices-env"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := o.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.View.DeviceListStrategies = []view.DeviceListStrategy{view.DeviceListEnvVar, view.DeviceListCDICRI}
	cfg.View.CDIKind = cdi.DefaultKind // as Validate sets it with cdi-cri
	set, stored := setOf(t, cfg)
	cat, err := plugin.CatalogOf(set, stored)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := plugin.NewServer(plugin.ServerConfig{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ids := make([]string, 0, 1024)
	for _, d := range cat.Devices {
		ids = append(ids, d.ID)
	}
	resp, err := srv.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	ans := resp.ContainerResponses[0]
	for _, k := range slices.Sorted(maps.Keys(ans.Envs)) {
		v := ans.Envs[k]
		t.Logf("%s: %d bytes", k, len(v))
		if len(v) >= 64<<10 {
			t.Errorf("%s is %d bytes, want < 64 KiB", k, len(v))
		}
	}
	if len(ans.Envs) != 6 || len(ans.Mounts) != 2 || len(ans.Devices) != 1026 || len(ans.CdiDevices) != 1024 {
		t.Errorf("%d variables, %d mounts, %d device nodes, %d CDI devices; want 6, 2, 1026, 1024", len(ans.Envs), len(ans.Mounts), len(ans.Devices), len(ans.CdiDevices))
	}
	size := proto.Size(resp)
	t.Logf("Allocate answer for 1024 GPUs with every option: %d bytes (mounts+devices %d, CDI names %d)", size,
		proto.Size(&pluginapi.ContainerAllocateResponse{Mounts: ans.Mounts, Devices: ans.Devices}), proto.Size(&pluginapi.ContainerAllocateResponse{CdiDevices: ans.CdiDevices}))
	if size >= 256<<10 {
		t.Errorf("Allocate answer is %d bytes, want < 256 KiB", size)
	}
}

// readStatus reads the status file of uuid in dir.
func readStatus(t *testing.T, dir, uuid string) *status.GPU {
	t.Helper()
	g, err := status.Read(os.DirFS(dir), uuid)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestServe_ContainerView_LiveChange: with cdi-cri, the spec and the status
// files follow a live change of the machine, and keep a GPU an active
// allocation holds though the new machine lacks it; a health change reaches
// the status file.
func TestServe_ContainerView_LiveChange(t *testing.T) {
	n := newLiveNode(t)
	cdiDir := filepath.Join(n.dir, "cdi")
	api := newFakeAPI(map[string]string{kube.ConfigLabel: "big"})
	reg := n.start(t, api, "-device-list-strategy=cdi-cri", "-cdi-spec-dir="+cdiDir)
	plugintest.NextList(t, reg, 10*time.Second)
	statusDir := filepath.Join(filepath.Dir(n.state), "status")
	specIDs := func() []string {
		t.Helper()
		spec, err := cdilib.ReadSpec(filepath.Join(cdiDir, cdi.DefaultKind.SpecFileName()), 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range spec.Devices {
			out = append(out, d.Name)
		}
		return out
	}
	if got := specIDs(); !slices.Equal(got, fakeIDs(8)) {
		t.Errorf("CDI spec of dgx-a100: %v", got)
	}
	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-6"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ans := resp.ContainerResponses[0]
	if !slices.Equal(cdiNames(ans), []string{"unicore.mcyou.cc/gpu=fake-6"}) || len(ans.Mounts) != 0 || len(ans.Devices) != 0 {
		t.Errorf("answer %v: want the CDI name only, besides the variables", ans)
	}
	held := ans.Envs["VIRTUAL_GPU_UUIDS"]
	if g := readStatus(t, statusDir, held); g.ID != "fake-6" || g.Product != "NVIDIA A100-SXM4-40GB" {
		t.Errorf("status of fake-6: %+v", g)
	}

	api.setLabel(kube.ConfigLabel, "small")
	if got := ids(plugintest.NextList(t, reg, 10*time.Second)); !slices.Equal(got, fakeIDs(4)) {
		t.Fatalf("after the change: %v", got)
	}
	plugintest.WaitFor(t, 10*time.Second, "the CDI spec of the new machine plus the held GPU", func() bool {
		return slices.Equal(specIDs(), []string{"fake-0", "fake-1", "fake-2", "fake-3", "fake-6"})
	})
	var files []string
	plugintest.WaitFor(t, 10*time.Second, "the status files of the new machine plus the held GPU", func() bool {
		files, _ = filepath.Glob(filepath.Join(statusDir, "*.json"))
		return len(files) == 5
	})
	if g := readStatus(t, statusDir, held); g.ID != "fake-6" || g.Product != "NVIDIA A100-SXM4-40GB" {
		t.Errorf("the held GPU's status changed: %+v", g)
	}
	s := n.snapshot(t)
	uuid1 := ""
	for _, d := range s.Devices {
		if d.ID == "fake-1" {
			uuid1 = d.UUID
		}
	}
	if g := readStatus(t, statusDir, uuid1); g.Product != "NVIDIA RTX A6000" || !g.Health.Healthy {
		t.Errorf("status of fake-1 on workstation-4gpu: %+v", g)
	}
	if _, err := n.admin.SetHealth(context.Background(), "fake-1", false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	g := readStatus(t, statusDir, uuid1)
	if g.Health.Healthy || g.Health.Reason != "XID 79" {
		t.Errorf("status of fake-1 after health set unhealthy: %+v", g.Health)
	}
	b, _ := json.Marshal(g.Health)
	t.Logf("fake-1 health in its status file: %s", b)
}

// TestServe_CDI_ResourceNameChange: the CDI kind follows the resource name.
// A live change of the name writes the new kind's spec and answers with its
// names; the old kind's spec stays as it was, for the answers given under
// the old name (the kubelet replays them), and back to the old name its
// spec is written again.
func TestServe_CDI_ResourceNameChange(t *testing.T) {
	n := newLiveNode(t)
	cdiDir := filepath.Join(n.dir, "cdi")
	api := newFakeAPI(nil)
	reg := n.start(t, api, "-device-list-strategy=cdi-cri", "-cdi-spec-dir="+cdiDir)
	plugintest.NextList(t, reg, 10*time.Second)
	oldPath, newPath := filepath.Join(cdiDir, "unicore.mcyou.cc-gpu.yaml"), filepath.Join(cdiDir, "example.com-vgpu.yaml")
	specOf := func(path string) *cdilib.Spec {
		t.Helper()
		spec, err := cdilib.ReadSpec(path, 0)
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	allocate := func(reg *plugintest.Registration, id string) []string {
		t.Helper()
		resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{id}}}})
		if err != nil {
			t.Fatal(err)
		}
		return cdiNames(resp.ContainerResponses[0])
	}
	if got := allocate(reg, "fake-1"); !slices.Equal(got, []string{"unicore.mcyou.cc/gpu=fake-1"}) {
		t.Errorf("under the default name: %v", got)
	}
	if k := specOf(oldPath).Kind; k != "unicore.mcyou.cc/gpu" {
		t.Errorf("kind %q", k)
	}
	before, err := os.ReadFile(oldPath)
	if err != nil {
		t.Fatal(err)
	}

	api.setLabel(kube.ConfigLabel, "renamed")
	again := n.kubelet.WaitRegistration(30 * time.Second)
	if again.Request.ResourceName != renamedRes {
		t.Fatalf("registered again as %q", again.Request.ResourceName)
	}
	plugintest.NextList(t, again, 10*time.Second)
	spec := specOf(newPath)
	if spec.Kind != renamedRes || spec.GetDevice("fake-1") == nil {
		t.Errorf("the new name's spec: kind %q, devices %v", spec.Kind, spec.Devices)
	}
	if got := allocate(again, "fake-2"); !slices.Equal(got, []string{renamedRes + "=fake-2"}) {
		t.Errorf("under the new name: %v", got)
	}
	if after, err := os.ReadFile(oldPath); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the old name's spec changed or went (%v): the answers given under it name it", err)
	}

	api.setLabel(kube.ConfigLabel, "")
	back := n.kubelet.WaitRegistration(30 * time.Second)
	plugintest.NextList(t, back, 10*time.Second)
	if got := allocate(back, "fake-3"); !slices.Equal(got, []string{"unicore.mcyou.cc/gpu=fake-3"}) {
		t.Errorf("back under the default name: %v", got)
	}
	if specOf(oldPath).GetDevice("fake-3") == nil || specOf(newPath).GetDevice("fake-2") == nil {
		t.Error("a spec lacks a device an answer names")
	}
}

// TestBinary_CDI_AnotherInstancesSpec: a spec of the same kind in the same
// directory written by another instance (another state file), or unmarked
// and not ours, is never replaced: the plugin exits 1 naming the file (and
// its owner). A spec of an earlier version of this instance (no owner mark,
// our status directory mounted) is replaced.
func TestBinary_CDI_AnotherInstancesSpec(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owner string // "" unmarked, as an earlier version wrote it
		ours  bool
	}{
		{"another instance's", "/srv/other/state.db", false},
		{"an unmarked spec of someone else", "", false},
		{"an unmarked spec of ours", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			cdiDir := filepath.Join(n.dir, "cdi")
			path := filepath.Join(cdiDir, cdi.DefaultKind.SpecFileName())
			statusDir := filepath.Join(t.TempDir(), "status")
			if tc.ours {
				statusDir = filepath.Join(filepath.Dir(n.state), "status")
			}
			cfg := cdi.Config{GPUs: []cdi.GPU{{ID: "fake-0"}}, Mounts: []cdi.Mount{{HostPath: statusDir, ContainerPath: status.DefaultDir}}}
			if tc.owner != "" {
				w, err := cdi.NewWriter(cdiDir, cdi.DefaultKind, cdi.Owner{ID: tc.owner})
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Write(cfg); err != nil {
					t.Fatal(err)
				}
			} else {
				spec, err := cdi.Build(cfg)
				if err != nil {
					t.Fatal(err)
				}
				b, err := cdi.Marshal(spec)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(cdiDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			flags := []string{"-device-list-strategy=cdi-cri", "-cdi-spec-dir=" + cdiDir}
			if tc.ours {
				_, reg := n.start(t, flags...)
				plugintest.NextList(t, reg, 10*time.Second)
				spec, err := cdilib.ReadSpec(path, 0)
				if err != nil || spec.GetDevice("fake-3") == nil {
					t.Fatalf("our earlier spec was not replaced: %v", err)
				}
				return
			}
			p := startBinary(t, append([]string{"-device-plugin-path=" + n.dir, "-state=" + n.state, "-pod-resources-socket=" + n.podResources()}, flags...)...)
			line := p.logs.waitLine(t, "virtual-gpu-device-plugin: ")
			if code := p.waitExit(t); code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			want := []string{path, "another plugin with the same -resource-name"}
			if tc.owner != "" {
				want = append(want, tc.owner)
			}
			for _, w := range want {
				if !strings.Contains(line, w) {
					t.Errorf("exit line %q does not name %q", line, w)
				}
			}
			if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
				t.Errorf("the other instance's spec changed (%v)", err)
			}
			select {
			case r := <-n.kubelet.Registrations():
				t.Errorf("a registration arrived: %v", r.Request)
			default:
			}
		})
	}
}

// TestBinary_DeviceNodeSource: a block device as -device-node-source
// (here a node of the host disk's numbers) is a usage error, acknowledged or
// not; another character device, acknowledged, starts with a warning naming
// it, and the containers get it read-write (no mknod).
func TestBinary_DeviceNodeSource(t *testing.T) {
	dir := t.TempDir()
	disk, kmsg := filepath.Join(dir, "vda"), filepath.Join(dir, "kmsg")
	for _, n := range []struct {
		path               string
		mode, major, minor uint32
	}{{disk, syscall.S_IFBLK, 254, 0}, {kmsg, syscall.S_IFCHR, 1, 11}} {
		if err := syscall.Mknod(n.path, n.mode|0o600, int(unix.Mkdev(n.major, n.minor))); err != nil {
			t.Skipf("mknod %s: %v (needs root)", n.path, err)
		}
	}
	n := newNode(t)
	// refused runs the plugin, which must exit at once, and returns its
	// exit code and its one line.
	refused := func(extra ...string) (int, string) {
		t.Helper()
		p := startBinary(t, append([]string{"-device-plugin-path=" + n.dir, "-state=" + n.state, "-pod-resources-socket=" + n.podResources()}, extra...)...)
		line := p.logs.waitLine(t, "virtual-gpu-device-plugin: ")
		return p.waitExit(t), line
	}
	for _, extra := range [][]string{nil, {"-allow-unsafe-device-node-source"}} {
		code, line := refused(append([]string{"-device-nodes", "-device-node-source=" + disk}, extra...)...)
		if code != 2 || !strings.Contains(line, disk) || !strings.Contains(line, "is block device 254:0") {
			t.Errorf("%v: exit %d, %q; want exit 2 naming the block device", extra, code, line)
		}
	}
	if code, line := refused("-device-list-strategy=cdi-cri", "-device-node-source="+kmsg); code != 2 || !strings.Contains(line, "-allow-unsafe-device-node-source") {
		t.Errorf("unacknowledged character device: exit %d, %q; want exit 2 naming the flag", code, line)
	}

	p, reg := n.start(t, "-device-nodes", "-device-node-source="+kmsg, "-allow-unsafe-device-node-source")
	line := p.logs.waitLine(t, `"level":"warn"`)
	if !strings.Contains(line, kmsg) || !strings.Contains(line, "character device 1:11") {
		t.Errorf("warning %q, want it naming %s", line, kmsg)
	}
	plugintest.NextList(t, reg, 10*time.Second)
	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-0"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range resp.ContainerResponses[0].Devices {
		if d.HostPath != kmsg || d.Permissions != "rw" {
			t.Errorf("device node %+v, want %s read-write", d, kmsg)
		}
	}
}

func cdiNames(r *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range r.CdiDevices {
		out = append(out, d.Name)
	}
	return out
}
