package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestGeneric_Layout(t *testing.T) {
	tests := []struct {
		n      int
		numa   []int
		matrix []string
	}{
		{n: 1, numa: []int{0}, matrix: []string{"X"}},
		{n: 2, numa: []int{0, 0}, matrix: []string{"X PIX", "PIX X"}},
		{n: 3, numa: []int{0, 0, 0}, matrix: []string{"X PIX PHB", "PIX X PHB", "PHB PHB X"}},
		{n: 4, numa: []int{0, 0, 1, 1}, matrix: []string{
			"X PIX SYS SYS",
			"PIX X SYS SYS",
			"SYS SYS X PIX",
			"SYS SYS PIX X",
		}},
		{n: 5, numa: []int{0, 0, 0, 1, 1}, matrix: []string{
			"X PIX PHB SYS SYS",
			"PIX X PHB SYS SYS",
			"PHB PHB X SYS SYS",
			"SYS SYS SYS X PIX",
			"SYS SYS SYS PIX X",
		}},
		{n: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(itoa(tt.n), func(t *testing.T) {
			m, err := Generic(tt.n)
			if err != nil {
				t.Fatal(err)
			}
			checkMachine(t, m)
			if m.Name() != "generic-"+itoa(tt.n) || m.FixedSize() {
				t.Errorf("Name() = %q, FixedSize() = %v", m.Name(), m.FixedSize())
			}
			var numa []int
			for i := range m.Len() {
				numa = append(numa, m.NUMA(i))
			}
			if !slices.Equal(numa, tt.numa) {
				t.Errorf("NUMA = %v, want %v", numa, tt.numa)
			}
			if tt.matrix != nil && !slices.Equal(matrix(m), tt.matrix) {
				t.Errorf("matrix:\n%s\nwant:\n%s", strings.Join(matrix(m), "\n"), strings.Join(tt.matrix, "\n"))
			}
		})
	}
}

func TestGeneric_InvalidCount(t *testing.T) {
	for _, n := range []int{0, -1, MaxGPUs + 1} {
		if _, err := Generic(n); !errors.Is(err, ErrInvalidDeviceCount) {
			t.Errorf("Generic(%d) error = %v, want ErrInvalidDeviceCount", n, err)
		}
	}
	if m, err := Generic(MaxGPUs); err != nil || m.Len() != MaxGPUs {
		t.Errorf("Generic(MaxGPUs) = %v, %v", m, err)
	}
}

func TestPresetNames_Sorted(t *testing.T) {
	names := PresetNames()
	want := []string{"dgx-a100", "dgx1-pascal", "dgx1-volta", "dgx2", "hgx-h100", "pcie-8gpu", "workstation-4gpu"}
	if !slices.Equal(names, want) {
		t.Errorf("PresetNames() = %v, want %v", names, want)
	}
	for _, n := range names {
		src, ok := PresetSource(n)
		if !ok || !strings.HasPrefix(string(src), "#") || !strings.Contains(string(src), "Source:") {
			t.Errorf("preset %s is not documented with its source", n)
		}
	}
}

func TestPreset_Machines(t *testing.T) {
	tests := []struct {
		name   string
		gpus   int
		numa   []int
		nodes  []int
		links  map[[2]int]string // spot checks
		nvDeg  int               // NVLinks per GPU (sum over its pairs), -1 to skip
		matrix []string
	}{
		{name: "dgx1-pascal", gpus: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, nodes: []int{0, 1}, nvDeg: 4,
			matrix: []string{
				"X NV1 NV1 NV1 NV1 SYS SYS SYS",
				"NV1 X NV1 NV1 SYS NV1 SYS SYS",
				"NV1 NV1 X NV1 SYS SYS NV1 SYS",
				"NV1 NV1 NV1 X SYS SYS SYS NV1",
				"NV1 SYS SYS SYS X NV1 NV1 NV1",
				"SYS NV1 SYS SYS NV1 X NV1 NV1",
				"SYS SYS NV1 SYS NV1 NV1 X NV1",
				"SYS SYS SYS NV1 NV1 NV1 NV1 X",
			}},
		{name: "dgx1-volta", gpus: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, nodes: []int{0, 1}, nvDeg: 6,
			matrix: []string{
				"X NV1 NV1 NV2 NV2 SYS SYS SYS",
				"NV1 X NV2 NV1 SYS NV2 SYS SYS",
				"NV1 NV2 X NV2 SYS SYS NV1 SYS",
				"NV2 NV1 NV2 X SYS SYS SYS NV1",
				"NV2 SYS SYS SYS X NV1 NV1 NV2",
				"SYS NV2 SYS SYS NV1 X NV2 NV1",
				"SYS SYS NV1 SYS NV1 NV2 X NV2",
				"SYS SYS SYS NV1 NV2 NV1 NV2 X",
			}},
		{name: "dgx-a100", gpus: 8, numa: []int{3, 3, 1, 1, 7, 7, 5, 5}, nodes: []int{0, 1, 2, 3, 4, 5, 6, 7}, nvDeg: 84,
			links: map[[2]int]string{{0, 1}: "NV12", {0, 7}: "NV12"}},
		{name: "hgx-h100", gpus: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, nodes: []int{0, 1}, nvDeg: 126,
			links: map[[2]int]string{{0, 1}: "NV18", {3, 4}: "NV18"}},
		{name: "dgx2", gpus: 16, numa: []int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, nodes: []int{0, 1}, nvDeg: 90,
			links: map[[2]int]string{{0, 15}: "NV6"}},
		{name: "pcie-8gpu", gpus: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, nodes: []int{0, 1}, nvDeg: 0,
			matrix: []string{
				"X PIX NODE NODE SYS SYS SYS SYS",
				"PIX X NODE NODE SYS SYS SYS SYS",
				"NODE NODE X PIX SYS SYS SYS SYS",
				"NODE NODE PIX X SYS SYS SYS SYS",
				"SYS SYS SYS SYS X PIX NODE NODE",
				"SYS SYS SYS SYS PIX X NODE NODE",
				"SYS SYS SYS SYS NODE NODE X PIX",
				"SYS SYS SYS SYS NODE NODE PIX X",
			}},
		{name: "workstation-4gpu", gpus: 4, numa: []int{0, 0, 0, 0}, nodes: []int{0}, nvDeg: 4,
			matrix: []string{"X NV4 PHB PHB", "NV4 X PHB PHB", "PHB PHB X NV4", "PHB PHB NV4 X"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := MustPreset(t, tt.name)
			checkMachine(t, m)
			if m.Name() != tt.name || m.Len() != tt.gpus || !m.FixedSize() {
				t.Fatalf("Name %q Len %d FixedSize %v", m.Name(), m.Len(), m.FixedSize())
			}
			var numa []int
			for i := range m.Len() {
				numa = append(numa, m.NUMA(i))
				deg := 0
				for j := range m.Len() {
					deg += m.Link(i, j).NVLinks
				}
				if tt.nvDeg >= 0 && deg != tt.nvDeg {
					t.Errorf("GPU %d has %d NVLinks, want %d", i, deg, tt.nvDeg)
				}
				if m.CPUAffinity(i) == "" {
					t.Errorf("GPU %d has no CPU affinity", i)
				}
			}
			if !slices.Equal(numa, tt.numa) {
				t.Errorf("NUMA = %v, want %v", numa, tt.numa)
			}
			if !slices.Equal(m.NUMANodes(), tt.nodes) {
				t.Errorf("NUMANodes() = %v, want %v", m.NUMANodes(), tt.nodes)
			}
			for p, want := range tt.links {
				if got := m.Link(p[0], p[1]).String(); got != want {
					t.Errorf("Link(%d,%d) = %s, want %s", p[0], p[1], got, want)
				}
			}
			if tt.matrix != nil && !slices.Equal(matrix(m), tt.matrix) {
				t.Errorf("matrix:\n%s\nwant:\n%s", strings.Join(matrix(m), "\n"), strings.Join(tt.matrix, "\n"))
			}
		})
	}
}

func TestPreset_PCIeUnderNVLink(t *testing.T) {
	// The PCIe tree stays visible under the NVLinks, for tie-breaking.
	tests := []struct {
		preset string
		a, b   int
		want   PCIe
	}{
		{"dgx1-volta", 0, 1, PIX},
		{"dgx1-volta", 0, 2, PHB},
		{"dgx1-volta", 0, 4, SYS},
		{"dgx-a100", 0, 1, PXB},
		{"dgx-a100", 1, 2, SYS},
		{"hgx-h100", 0, 1, NODE},
		{"dgx2", 0, 1, PIX},
		{"dgx2", 0, 2, PXB},
		{"dgx2", 0, 4, NODE},
		{"dgx2", 0, 8, SYS},
	}
	for _, tt := range tests {
		m := MustPreset(t, tt.preset)
		if got := m.Link(tt.a, tt.b).PCIe; got != tt.want {
			t.Errorf("%s Link(%d,%d).PCIe = %v, want %v", tt.preset, tt.a, tt.b, got, tt.want)
		}
	}
}

func TestMachine_Index(t *testing.T) {
	m := MustPreset(t, "dgx2")
	tests := []struct {
		id   string
		want int
		ok   bool
	}{
		{"fake-0", 0, true},
		{"fake-15", 15, true},
		{"fake-16", 0, false},
		{"fake-01", 0, false},
		{"fake--1", 0, false},
		{"fake-+1", 0, false},
		{"fake-", 0, false},
		{"gpu-1", 0, false},
		{"fake-1 ", 0, false},
		{"fake-99999999999999999999999", 0, false},
	}
	for _, tt := range tests {
		got, ok := m.Index(tt.id)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Index(%q) = %d, %v; want %d, %v", tt.id, got, ok, tt.want, tt.ok)
		}
	}
}

func TestMachine_OutOfRange(t *testing.T) {
	m := MustPreset(t, "hgx-h100")
	if m.NUMA(-1) != -1 || m.NUMA(8) != -1 || m.Class(8) != -1 || m.CPUAffinity(9) != "" {
		t.Error("out-of-range accessors must return the documented defaults")
	}
	if (m.Link(0, 0) != Link{}) || (m.Link(-1, 2) != Link{}) || (m.Link(2, 8) != Link{}) {
		t.Error("Link out of range or on the diagonal must be the zero Link")
	}
}

func TestMachine_Class(t *testing.T) {
	tests := []struct {
		preset string
		want   []int
	}{
		// NVSwitch + symmetric PCIe: the GPUs of a switch pair are twins.
		{"dgx2", []int{0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14}},
		// NUMA node + one GPU per root port: all four GPUs of a socket are twins.
		{"hgx-h100", []int{0, 0, 0, 0, 4, 4, 4, 4}},
		// The hybrid cube mesh has no twins.
		{"dgx1-volta", []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"workstation-4gpu", []int{0, 0, 2, 2}},
	}
	for _, tt := range tests {
		m := MustPreset(t, tt.preset)
		var got []int
		for i := range m.Len() {
			got = append(got, m.Class(i))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s classes = %v, want %v", tt.preset, got, tt.want)
		}
	}
}

func TestNew_Invalid(t *testing.T) {
	if _, err := New("x", nil, func(i, j int) Link { return Link{} }); !errors.Is(err, ErrInvalidDeviceCount) {
		t.Errorf("New with no GPUs: %v", err)
	}
	if _, err := New("x", []int{0, 0}, func(i, j int) Link { return Link{NVLinks: 19} }); !errors.Is(err, ErrInvalidTopology) {
		t.Errorf("New with NV19: %v", err)
	}
	if _, err := New("x", []int{0, -2}, func(i, j int) Link { return Link{} }); !errors.Is(err, ErrInvalidTopology) {
		t.Errorf("New with NUMA -2: %v", err)
	}
	if _, err := New("x", []int{0, 0}, func(i, j int) Link { return Link{PCIe: BOARD + 1} }); !errors.Is(err, ErrInvalidTopology) {
		t.Errorf("New with a bad relation: %v", err)
	}
}

func TestPCIe_String(t *testing.T) {
	for p := SYS; p <= BOARD; p++ {
		back, ok := ParsePCIe(p.String())
		if !ok || back != p {
			t.Errorf("ParsePCIe(%q) = %v, %v", p.String(), back, ok)
		}
	}
	if s := PCIe(9).String(); s != "PCIe(9)" {
		t.Errorf("PCIe(9).String() = %q", s)
	}
	for in, want := range map[string]PCIe{"SOC": SYS, "PSB": PIX} {
		if got, ok := ParsePCIe(in); !ok || got != want {
			t.Errorf("ParsePCIe(%q) = %v, %v", in, got, ok)
		}
	}
	if _, ok := ParsePCIe("pix"); ok {
		t.Error("ParsePCIe must be case-sensitive")
	}
}

func TestResolve(t *testing.T) {
	yamlFile := MustWriteFile(t, "my-node.yaml", `apiVersion: virtual-gpu.unicore.mcyou.cc/v1
kind: Topology
numaNodes:
  - hostBridges:
      - gpus: 3
`)
	smiFile := MustWriteFile(t, "node.txt", "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t0-7\t0\nGPU1\tNV4\t X \t0-7\t0\n")
	badFile := MustWriteFile(t, "bad.yaml", "apiVersion: v0\n")
	tests := []struct {
		name       string
		spec       string
		devices    int
		devicesSet bool
		wantName   string
		wantLen    int
		wantErr    error
	}{
		{name: "default generic", spec: "", devices: 4, wantName: "generic-4", wantLen: 4},
		{name: "generic explicit", spec: "", devices: 6, devicesSet: true, wantName: "generic-6", wantLen: 6},
		{name: "generic zero", spec: "", devices: 0, devicesSet: true, wantErr: ErrInvalidDeviceCount},
		{name: "preset, devices unset", spec: "dgx2", devices: 4, wantName: "dgx2", wantLen: 16},
		{name: "preset, devices equal", spec: "dgx2", devices: 16, devicesSet: true, wantName: "dgx2", wantLen: 16},
		{name: "preset, devices differ", spec: "dgx2", devices: 4, devicesSet: true, wantErr: ErrDevicesMismatch},
		{name: "yaml file", spec: yamlFile, devices: 4, wantName: "my-node", wantLen: 3},
		{name: "yaml file, devices differ", spec: yamlFile, devices: 4, devicesSet: true, wantErr: ErrDevicesMismatch},
		{name: "nvidia-smi file", spec: smiFile, devices: 2, devicesSet: true, wantName: "node", wantLen: 2},
		{name: "bad file", spec: badFile, devices: 4, wantErr: ErrInvalidTopology},
		{name: "unknown", spec: "dgx-b300", devices: 4, wantErr: ErrUnknownTopology},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Resolve(tt.spec, tt.devices, tt.devicesSet)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Resolve error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Name() != tt.wantName || m.Len() != tt.wantLen {
				t.Errorf("got %s with %d GPUs, want %s with %d", m.Name(), m.Len(), tt.wantName, tt.wantLen)
			}
		})
	}
}

func TestResolve_MismatchMessage(t *testing.T) {
	_, err := Resolve("hgx-h100", 4, true)
	if err == nil || !strings.Contains(err.Error(), "-devices=4") || !strings.Contains(err.Error(), "8 GPUs") {
		t.Errorf("error %q should name both counts", err)
	}
}

// TestMachine_Class_Naive compares Class with the definition on random
// machines in which some GPUs are copies of others.
func TestMachine_Class_Naive(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for iter := range 200 {
		n := 1 + rng.IntN(24)
		proto := make([]int, n)
		numa := make([]int, n)
		for i := range n {
			proto[i] = i
			if i > 0 && rng.IntN(2) == 0 {
				proto[i] = proto[rng.IntN(i)]
			}
			numa[i] = numa[proto[i]]
			if proto[i] == i {
				numa[i] = rng.IntN(2)
			}
		}
		vals := make(map[[2]int]Link)
		m, err := New("r", numa, func(i, j int) Link {
			a, b := proto[i], proto[j]
			if a == b {
				a = -1
			}
			k := [2]int{min(a, b), max(a, b)}
			if _, ok := vals[k]; !ok {
				vals[k] = Link{NVLinks: rng.IntN(3), PCIe: PCIe(rng.IntN(3))}
			}
			return vals[k]
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			want := i
			for r := range i {
				same := m.NUMA(r) == m.NUMA(i)
				for x := range n {
					if x != r && x != i && m.Link(r, x) != m.Link(i, x) {
						same = false
					}
				}
				if same {
					want = m.Class(r)
					break
				}
			}
			if m.Class(i) != want {
				t.Fatalf("iter %d: Class(%d) = %d, want %d", iter, i, m.Class(i), want)
			}
		}
	}
}

func TestMachine_Nil(t *testing.T) {
	var m *Machine
	if m.Len() != 0 || m.Name() != "" || m.FixedSize() || m.NUMA(0) != -1 || m.Class(0) != -1 ||
		m.CPUAffinity(0) != "" || m.NUMANodes() != nil || (m.Link(0, 1) != Link{}) || m.String() == "" {
		t.Error("a nil machine must behave as one without GPUs")
	}
	if _, ok := m.Index("fake-0"); ok {
		t.Error("Index on a nil machine")
	}
	if env := m.ContainerEnv([]int{0}); env[EnvNUMANodes] != "" || env[EnvLinks] != "" {
		t.Errorf("ContainerEnv on a nil machine = %v", env)
	}
}

func TestPreset_Unknown(t *testing.T) {
	if _, err := Preset("dgx-b200"); !errors.Is(err, ErrUnknownTopology) || !strings.Contains(err.Error(), "dgx1-volta") {
		t.Errorf("Preset(unknown) error = %v; want ErrUnknownTopology listing the presets", err)
	}
	if _, ok := PresetSource("nope"); ok {
		t.Error("PresetSource(nope) found something")
	}
}

func TestParse_TestdataYAML(t *testing.T) {
	for file, gpus := range map[string]int{"every-feature.yaml": 9, "sixteen-hgx.yaml": 128} {
		m := MustParseFile(t, file)
		checkMachine(t, m)
		if m.Len() != gpus {
			t.Errorf("%s: %d GPUs, want %d", file, m.Len(), gpus)
		}
	}
}

func TestResolve_RegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "topology.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// As a ConfigMap mounts a key: a symbolic link to a regular file.
	target := MustWriteFile(t, "..data-node.yaml", "apiVersion: virtual-gpu.unicore.mcyou.cc/v1\nkind: Topology\nnumaNodes:\n  - hostBridges:\n      - gpus: 2\n")
	link := filepath.Join(dir, "node.yaml")
	fifoLink := filepath.Join(dir, "fifo-link.yaml")
	for _, l := range [][2]string{{target, link}, {fifo, fifoLink}} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		path string
		want string // "" for success
	}{
		{"symlink to a regular file", link, ""},
		{"named pipe", fifo, fmt.Sprintf("topology %q is a named pipe (FIFO): not a regular file", fifo)},
		{"symlink to a named pipe", fifoLink, fmt.Sprintf("topology %q is a named pipe (FIFO)", fifoLink)},
		{"directory", dir, fmt.Sprintf("topology %q is a directory: not a regular file", dir)},
		{"character device", os.DevNull, "is a character device: not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type result struct {
				m   *Machine
				err error
			}
			done := make(chan result, 1)
			go func() {
				m, err := Resolve(tt.path, 4, false)
				done <- result{m, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				// Release a Resolve blocked in open by opening the pipe's other end.
				if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatalf("Resolve(%s) still blocked after 5s", tt.path)
			}
			if tt.want == "" {
				if r.err != nil || r.m.Len() != 2 {
					t.Fatalf("Resolve(%s) = %v, %v; want 2 GPUs", tt.path, r.m, r.err)
				}
				return
			}
			if !errors.Is(r.err, ErrNotRegularFile) || !strings.Contains(r.err.Error(), tt.want) {
				t.Errorf("Resolve(%s) error = %v; want ErrNotRegularFile saying %q", tt.path, r.err, tt.want)
			}
		})
	}
}
