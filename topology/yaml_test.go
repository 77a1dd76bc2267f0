package topology

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const header = "apiVersion: virtual-gpu.unicore.mcyou.cc/v1\nkind: Topology\n"

// readmeYAML returns the YAML examples of README.md that describe a whole
// file (those with apiVersion).
func readmeYAML(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		if strings.Contains(m[1], "apiVersion") && !strings.Contains(m[1], "[…]") {
			out = append(out, m[1])
		}
	}
	return out
}

func TestParseYAML_READMEExamples(t *testing.T) {
	examples := readmeYAML(t)
	if len(examples) != 2 {
		t.Fatalf("found %d complete YAML examples in README.md, want 2", len(examples))
	}
	// Every feature, as the README comments say.
	m, err := ParseYAML("every-feature.yaml", strings.NewReader(examples[0]))
	if err != nil {
		t.Fatal(err)
	}
	checkMachine(t, m)
	if m.Name() != "every-feature" || m.Len() != 9 {
		t.Fatalf("got %s with %d GPUs", m.Name(), m.Len())
	}
	want := []string{
		"X NV2 NV2 PHB PHB PHB PHB SYS SYS",
		"NV2 X BOARD PHB PHB PHB PHB SYS SYS",
		"NV2 BOARD X PHB PHB PHB PHB SYS SYS",
		"PHB PHB PHB X NV12 NV12 NV12 SYS SYS",
		"PHB PHB PHB NV12 X NV12 NV12 SYS SYS",
		"PHB PHB PHB NV12 NV12 X NV12 SYS SYS",
		"PHB PHB PHB NV12 NV12 NV12 X SYS SYS",
		"SYS SYS SYS SYS SYS SYS SYS X NV4",
		"SYS SYS SYS SYS SYS SYS SYS NV4 X",
	}
	if got := matrix(m); !slices.Equal(got, want) {
		t.Errorf("matrix:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range []struct {
		a, b int
		want PCIe
	}{{3, 4, PIX}, {3, 5, PXB}, {0, 1, PHB}, {7, 8, NODE}} {
		if got := m.Link(c.a, c.b).PCIe; got != c.want {
			t.Errorf("PCIe(%d,%d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if !slices.Equal(m.NUMANodes(), []int{0, 1, 2, 3}) {
		t.Errorf("NUMANodes() = %v", m.NUMANodes())
	}
	if m.NUMA(0) != 0 || m.NUMA(8) != 1 || m.CPUAffinity(8) != "16-31,48-63" {
		t.Errorf("NUMA/CPU of GPUs 0 and 8: %d %d %q", m.NUMA(0), m.NUMA(8), m.CPUAffinity(8))
	}
	wantGPU := GPUModel{Product: "NVIDIA A100 80GB PCIe", MemoryMiB: 81920, Compute: ComputeCapability{8, 0}, Family: "ampere", PowerLimitW: 300, IdlePowerW: 45}
	if got := m.GPUModel(); got != wantGPU {
		t.Errorf("GPUModel() = %+v, want %+v", got, wantGPU)
	}

	// The large machine.
	m, err = ParseYAML("sixteen-hgx.yaml", strings.NewReader(examples[1]))
	if err != nil {
		t.Fatal(err)
	}
	checkMachine(t, m)
	if m.Len() != 128 || len(m.NUMANodes()) != 32 {
		t.Fatalf("got %d GPUs and %d NUMA nodes", m.Len(), len(m.NUMANodes()))
	}
	for _, c := range []struct {
		a, b int
		want string
	}{{0, 7, "NV18"}, {120, 127, "NV18"}, {7, 8, "SYS"}, {0, 1, "NV18"}, {8, 9, "NV18"}} {
		if got := m.Link(c.a, c.b).String(); got != c.want {
			t.Errorf("Link(%d,%d) = %s, want %s", c.a, c.b, got, c.want)
		}
	}
	if m.Link(0, 1).PCIe != NODE || m.NUMA(4) != 1 || m.NUMA(127) != 31 {
		t.Errorf("PCIe(0,1) = %v, NUMA(4) = %d, NUMA(127) = %d", m.Link(0, 1).PCIe, m.NUMA(4), m.NUMA(127))
	}
}

func TestParseYAML_NameDefaultsToFileBase(t *testing.T) {
	m, err := ParseYAML("/etc/vgpu/lab-node.yaml", strings.NewReader(header+"numaNodes:\n  - hostBridges: [{gpus: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "lab-node" || !m.FixedSize() {
		t.Errorf("Name() = %q", m.Name())
	}
}

func TestParseYAML_Errors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		line int
		msg  string // substring of the error
	}{
		{"empty", "", 0, "empty file"},
		{"not a mapping", "- 1\n- 2\n", 1, "expected a YAML mapping"},
		{"syntax", header + "numaNodes: [\n", 3, ""},
		{"missing apiVersion", "kind: Topology\nnumaNodes: []\n", 1, `apiVersion "": expected "virtual-gpu.unicore.mcyou.cc/v1"`},
		{"wrong apiVersion", "apiVersion: v2\nkind: Topology\n", 1, `apiVersion "v2"`},
		{"wrong kind", "apiVersion: virtual-gpu.unicore.mcyou.cc/v1\nkind: Machine\n", 2, `kind "Machine": expected "Topology"`},
		{"unknown top field", header + "gpus: 8\n", 3, `unknown field "gpus"`},
		{"unknown nested field", header + "numaNodes:\n  - hostBridges:\n      - gpus: 2\n        nvlink: 4\n", 6, `unknown field "nvlink"`},
		{"wrong type", header + "numaNodes:\n  - count: two\n", 4, `expected an integer, found str "two"`},
		{"duplicate key", header + "kind: Topology\n", 3, "already defined"},
		{"no numa nodes", header, 1, "expected numaNodes"},
		{"no gpus", header + "numaNodes:\n  - id: 0\n", 4, "no GPUs"},
		{"count zero", header + "numaNodes:\n  - count: 0\n", 4, "count 0 out of range"},
		{"negative gpus", header + "numaNodes:\n  - hostBridges:\n      - gpus: -1\n", 5, "gpus -1"},
		{"too many gpus", header + "numaNodes:\n  - count: 2\n    hostBridges:\n      - gpus: 1000\n", 6, "at most 1024 GPUs"},
		{"too many elements", header + "numaNodes:\n  - count: 1000\n    hostBridges:\n      - count: 1000\n", 6, "too many"},
		{"duplicate numa id", header + "numaNodes:\n  - id: 1\n    hostBridges: [{gpus: 1}]\n  - id: 0\n    count: 2\n", 6, "NUMA node 1 already declared at line 4"},
		{"negative numa id", header + "numaNodes:\n  - id: -1\n", 4, "NUMA node id -1"},
		{"cpus with count", header + "numaNodes:\n  - count: 2\n    cpus: 0-7\n", 5, "cpus given for 2 NUMA nodes"},
		{"bad cpus", header + "numaNodes:\n  - cpus: 0-x\n", 4, "expected a CPU list"},
		{"deep switches", header + "numaNodes:\n  - hostBridges:\n      - switches:\n" + deepSwitches(10), 14, "nested deeper than 8"},
		{"links out of range", header + "numaNodes:\n  - hostBridges: [{gpus: 2}]\nnvlinks:\n  - domain: 0-1\n    links: 19\n", 7, "links 19: expected 1..18"},
		{"links missing", header + "numaNodes:\n  - hostBridges: [{gpus: 2}]\nnvlinks:\n  - domain: 0-1\n", 6, "links 0"},
		{"domain and pairs", header + "numaNodes:\n  - hostBridges: [{gpus: 2}]\nnvlinks:\n  - domain: 0-1\n    pairs: [[0, 1]]\n    links: 1\n", 6, "exactly one of domain"},
		{"neither", header + "numaNodes:\n  - hostBridges: [{gpus: 2}]\nnvlinks:\n  - links: 1\n", 6, "exactly one of domain"},
		{"bad domain", header + "numaNodes:\n  - hostBridges: [{gpus: 2}]\nnvlinks:\n  - domain: 1-0\n    links: 1\n", 6, `domain "1-0"`},
		{"domain of one", header + "numaNodes:\n  - hostBridges: [{gpus: 2}]\nnvlinks:\n  - domain: \"1\"\n    links: 1\n", 6, "at least 2 GPUs"},
		{"domain out of range", header + "numaNodes:\n  - hostBridges: [{gpus: 2}]\nnvlinks:\n  - domain: 0-2\n    links: 1\n", 6, "domain GPU 2 (repetition 1) out of range"},
		{"repeat out of range", header + "numaNodes:\n  - hostBridges: [{gpus: 4}]\nnvlinks:\n  - domain: 0-1\n    links: 1\n    repeat: 3\n    stride: 2\n", 6, "domain GPU 5 (repetition 3) out of range"},
		{"repeat without stride", header + "numaNodes:\n  - hostBridges: [{gpus: 4}]\nnvlinks:\n  - domain: 0-1\n    links: 1\n    repeat: 2\n", 6, "stride 0"},
		{"pair of three", header + "numaNodes:\n  - hostBridges: [{gpus: 3}]\nnvlinks:\n  - pairs: [[0, 1, 2]]\n    links: 1\n", 6, "expected two GPU indices"},
		{"pair to self", header + "numaNodes:\n  - hostBridges: [{gpus: 3}]\nnvlinks:\n  - pairs: [[1, 1]]\n    links: 1\n", 6, "linked to itself"},
		{"pair out of range", header + "numaNodes:\n  - hostBridges: [{gpus: 3}]\nnvlinks:\n  - pairs: [[0, 3]]\n    links: 1\n", 6, "pair [0, 3] (repetition 1) out of range"},
		{"empty pairs", header + "numaNodes:\n  - hostBridges: [{gpus: 3}]\nnvlinks:\n  - pairs: []\n    links: 1\n", 6, "expected a list of GPU pairs"},
		{"pair twice", header + "numaNodes:\n  - hostBridges: [{gpus: 3}]\nnvlinks:\n  - domain: 0-2\n    links: 2\n  - pairs: [[2, 1]]\n    links: 1\n", 8, "GPUs 2 and 1 are already linked by the nvlinks entry at line 6"},
		{"second document", header + "numaNodes:\n  - hostBridges: [{gpus: 1}]\n---\nkind: Topology\n", 5, "single YAML document"},
		{"gpu empty", header + "gpu:\nnumaNodes:\n  - hostBridges: [{gpus: 1}]\n", 3, "gpu is empty: expected a mapping"},
		{"gpu not a mapping", header + "gpu: A100\nnumaNodes:\n  - hostBridges: [{gpus: 1}]\n", 3, `expected a mapping, found str "A100"`},
		{"gpu unknown field", gpuYAML("  memoryGiB: 80\n"), 9, `unknown field "memoryGiB"`},
		{"gpu lacks fields", header + "gpu:\n  product: NVIDIA H100 80GB HBM3\n  memoryMiB: 81559\nnumaNodes:\n  - hostBridges: [{gpus: 1}]\n", 4,
			"gpu lacks computeCapability, powerLimitW, idlePowerW: expected product, memoryMiB, computeCapability, powerLimitW and idlePowerW"},
		{"gpu memory as text", strings.Replace(gpuYAML(""), "memoryMiB: 81559", "memoryMiB: 80GB", 1), 5, `expected an integer, found str "80GB"`},
		{"gpu memory zero", strings.Replace(gpuYAML(""), "memoryMiB: 81559", "memoryMiB: 0", 1), 5, "memoryMiB 0: expected 1..2097152"},
		{"gpu compute capability", strings.Replace(gpuYAML(""), `"9.0"`, "sm_90", 1), 6, `computeCapability "sm_90": expected MAJOR.MINOR like "8.0"`},
		{"gpu compute capability minor", strings.Replace(gpuYAML(""), `"9.0"`, `"9.10"`, 1), 6, `computeCapability "9.10"`},
		{"gpu unknown family", strings.Replace(gpuYAML(""), `"9.0"`, `"4.0"`, 1), 4, "computeCapability 4.0 has no known family"},
		{"gpu bad family", gpuYAML("  family: Hopper\n"), 9, `family "Hopper": expected an architecture like ampere`},
		{"gpu product with comma", strings.Replace(gpuYAML(""), "NVIDIA H100 80GB HBM3", `"H100, 80GB"`, 1), 4, `product "H100, 80GB": expected the name nvidia-smi prints`},
		{"gpu product too long", strings.Replace(gpuYAML(""), "NVIDIA H100 80GB HBM3", strings.Repeat("x", 97), 1), 4, "1..96 printable ASCII"},
		{"gpu idle above limit", strings.Replace(gpuYAML(""), "idlePowerW: 85", "idlePowerW: 700", 1), 8, "idlePowerW 700: expected 1..699 (below powerLimitW)"},
		{"gpu power limit", strings.Replace(gpuYAML(""), "powerLimitW: 700", "powerLimitW: -1", 1), 7, "powerLimitW -1: expected 1..5000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pe := parseError(t, ParseYAML, "bad.yaml", tt.in)
			if pe.Line != tt.line || !strings.Contains(pe.Msg, tt.msg) {
				t.Errorf("error %q: want line %d and %q", pe, tt.line, tt.msg)
			}
		})
	}
}

// gpuYAML is a valid file with a gpu mapping (lines 3-8) and extra lines
// appended to it (from line 9).
func gpuYAML(extra string) string {
	return header + "gpu:\n  product: NVIDIA H100 80GB HBM3\n  memoryMiB: 81559\n  computeCapability: \"9.0\"\n" +
		"  powerLimitW: 700\n  idlePowerW: 85\n" + extra + "numaNodes:\n  - hostBridges: [{gpus: 1}]\n"
}

func TestParseYAML_GPU(t *testing.T) {
	h100 := GPUModel{Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Compute: ComputeCapability{9, 0}, Family: "hopper", PowerLimitW: 700, IdlePowerW: 85}
	tests := []struct {
		name string
		in   string
		want GPUModel
	}{
		{"none: the default", header + "numaNodes:\n  - hostBridges: [{gpus: 1}]\n", DefaultGPUModel()},
		{"family from the compute capability", gpuYAML(""), h100},
		{"family given", gpuYAML("  family: hopper-next\n"), func() GPUModel { g := h100; g.Family = "hopper-next"; return g }()},
		{"unquoted compute capability", strings.Replace(gpuYAML(""), `"9.0"`, "9.0", 1), h100},
		{"blackwell", strings.Replace(gpuYAML(""), `"9.0"`, `"10.0"`, 1),
			func() GPUModel { g := h100; g.Compute, g.Family = ComputeCapability{10, 0}, "blackwell"; return g }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseYAML("gpu.yaml", strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := m.GPUModel(); got != tt.want {
				t.Errorf("GPUModel() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func deepSwitches(depth int) string {
	var b strings.Builder
	indent := "          "
	for d := range depth {
		b.WriteString(indent + "- switches:\n")
		indent += "    "
		_ = d
	}
	b.WriteString(indent + "- gpus: 1\n")
	return b.String()
}

func TestParseYAML_ErrorMessageFormat(t *testing.T) {
	_, err := ParseYAML("nodes/a.yaml", strings.NewReader(header+"numaNodes:\n  - hostBridges: [{gpus: 2}]\nnvlinks:\n  - domain: 0-1\n    links: 20\n"))
	want := "nodes/a.yaml:7: links 20: expected 1..18 NVLinks per pair"
	if err == nil || err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}
