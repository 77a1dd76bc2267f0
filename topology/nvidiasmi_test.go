package topology

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestParseNvidiaSMI_Testdata(t *testing.T) {
	tests := []struct {
		file   string
		name   string
		gpus   int
		numa   []int
		links  map[[2]int]Link
		cpu0   string
		preset string // a preset with the same links and NUMA, if any
	}{
		{file: "dgx-a100.txt", name: "dgx-a100", gpus: 8, numa: []int{3, 3, 1, 1, 7, 7, 5, 5},
			links: map[[2]int]Link{{0, 1}: {12, NODE}, {1, 2}: {12, SYS}}, cpu0: "48-63,176-191"},
		{file: "hgx-h100.txt", name: "hgx-h100", gpus: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1},
			links: map[[2]int]Link{{0, 3}: {18, NODE}, {3, 4}: {18, SYS}}, cpu0: "0-55,112-167", preset: "hgx-h100"},
		{file: "hgx-h100-color.txt", name: "hgx-h100-color", gpus: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, // header underlined with ESC[4m … ESC[0m, as nvidia-smi prints it
			links: map[[2]int]Link{{0, 3}: {18, NODE}, {3, 4}: {18, SYS}}, cpu0: "0-55,112-167", preset: "hgx-h100"},
		{file: "dgx1-volta.txt", name: "dgx1-volta", gpus: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1},
			links: map[[2]int]Link{{0, 1}: {1, NODE}, {0, 4}: {2, SYS}, {0, 5}: {0, SYS}}, cpu0: "0-19,40-59", preset: "dgx1-volta"},
		{file: "dgx2.txt", name: "dgx2", gpus: 16, numa: []int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
			links: map[[2]int]Link{{0, 15}: {6, SYS}, {0, 7}: {6, NODE}}, cpu0: "0-23,48-71", preset: "dgx2"},
		{file: "pcie-8gpu-na.txt", name: "pcie-8gpu-na", gpus: 8, numa: []int{-1, -1, -1, -1, -1, -1, -1, -1},
			links: map[[2]int]Link{{0, 1}: {0, PIX}, {0, 2}: {0, NODE}, {3, 4}: {0, SYS}}},
		{file: "pcie-8gpu-spaces.txt", name: "pcie-8gpu-spaces", gpus: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1},
			links: map[[2]int]Link{{6, 7}: {0, PIX}}, cpu0: "0-15,32-47", preset: "pcie-8gpu"},
		{file: "workstation-2gpu.txt", name: "workstation-2gpu", gpus: 2, numa: []int{0, 0},
			links: map[[2]int]Link{{0, 1}: {0, PHB}}, cpu0: "0-63"},
		{file: "workstation-4gpu.txt", name: "workstation-4gpu", gpus: 4, numa: []int{0, 0, 0, 0},
			links: map[[2]int]Link{{0, 1}: {4, NODE}, {1, 2}: {0, PHB}}, cpu0: "0-31,64-95", preset: "workstation-4gpu"},
		{file: "gh200.txt", name: "gh200", gpus: 1, numa: []int{0}, cpu0: "0-71"},
		// Real outputs of other layouts (sources in the report of the change
		// that added them; the cell values are as printed, re-tabbed where a
		// page had expanded the tabs).
		{file: "hgx-h100-slurm-empty-cpu-affinity.txt", name: "hgx-h100-slurm-empty-cpu-affinity", gpus: 8, // CPU Affinity cells empty (outside the job's cpuset)
			numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, links: map[[2]int]Link{{0, 7}: {18, SYS}, {0, 3}: {18, NODE}}, cpu0: ""},
		{file: "hgx-h100-wrapped-80-columns.txt", name: "hgx-h100-wrapped-80-columns", gpus: 8, // the same, copied from an 80-column terminal
			numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, links: map[[2]int]Link{{0, 7}: {18, SYS}, {0, 3}: {18, NODE}}, cpu0: ""},
		{file: "a100x4-nvlink-slurm-empty-cpu-affinity.txt", name: "a100x4-nvlink-slurm-empty-cpu-affinity", gpus: 4,
			numa: []int{0, 0, 1, 1}, links: map[[2]int]Link{{0, 1}: {4, NODE}, {1, 2}: {4, SYS}}, cpu0: "0"},
		{file: "hgx-b200-16nic-cells-run-together.txt", name: "hgx-b200-16nic-cells-run-together", gpus: 8, // PXBNODE, SYSSYS
			numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, links: map[[2]int]Link{{0, 1}: {18, NODE}, {3, 4}: {18, SYS}}, cpu0: "0-55,112-167"},
		{file: "hgx-b200-wrapped-100-columns.txt", name: "hgx-b200-wrapped-100-columns", gpus: 8,
			numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, links: map[[2]int]Link{{0, 1}: {18, NODE}, {3, 4}: {18, SYS}}, cpu0: "0-55,112-167"},
		{file: "hgx-h100-sglang-check-env.txt", name: "hgx-h100-sglang-check-env", gpus: 8, // inside other output, NIC rows with empty affinity cells
			numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, links: map[[2]int]Link{{0, 7}: {18, SYS}}, cpu0: "0-63,128-191"},
		{file: "gb200-nvl4-gpu-numa-id.txt", name: "gb200-nvl4-gpu-numa-id", gpus: 4, // NUMA Affinity 0,3-9,11-17; GPU NUMA ID 2, 10, 18, 26
			numa: []int{0, 0, 1, 1}, links: map[[2]int]Link{{0, 1}: {18, NODE}, {1, 2}: {18, SYS}}, cpu0: "0-71"},
		{file: "p40-8gpu-old-driver-soc.txt", name: "p40-8gpu-old-driver-soc", gpus: 8, numa: []int{0, 0, 0, 0, 0, 0, 0, 0},
			links: map[[2]int]Link{{0, 1}: {0, PIX}, {0, 4}: {0, PXB}}, cpu0: "0-13"},
		{file: "minsky-power8-nv2-spaces.txt", name: "minsky-power8-nv2-spaces", gpus: 4, numa: []int{0, 0, 1, 1},
			links: map[[2]int]Link{{0, 1}: {2, NODE}, {1, 2}: {0, SYS}}, cpu0: "0-0,8-8,16-16,24-24,32-32,40-40,48-48,56-56,64-64,72-72"},
		{file: "k80-4gpu-oldest-legend-crlf.txt", name: "k80-4gpu-oldest-legend-crlf", gpus: 4, numa: []int{0, 0, 0, 0},
			links: map[[2]int]Link{{0, 1}: {0, PIX}, {1, 2}: {0, PHB}}, cpu0: "0-11"},
		{file: "dgx1-pascal-header-run-together.txt", name: "dgx1-pascal-header-run-together", gpus: 8, // GPU0GPU1…GPU7mlx5_0
			numa: []int{0, 0, 0, 0, 0, 0, 0, 0}, links: map[[2]int]Link{{0, 4}: {1, NODE}, {0, 5}: {0, SYS}}, cpu0: "1-1"},
		{file: "polaris-a100-nps4-no-leading-tab.txt", name: "polaris-a100-nps4-no-leading-tab", gpus: 4, numa: []int{3, 2, 1, 0},
			links: map[[2]int]Link{{0, 1}: {4, SYS}}, cpu0: "24-31,56-63"},
		{file: "a100x4-numa-affinity-range.txt", name: "a100x4-numa-affinity-range", gpus: 4, numa: []int{0, 0, 0, 0}, // NUMA Affinity 0-3
			links: map[[2]int]Link{{0, 3}: {4, NODE}}, cpu0: "0,64"},
		{file: "rtx4090x5-threadripper-spaces.txt", name: "rtx4090x5-threadripper-spaces", gpus: 5, numa: []int{1, 0, 0, 0, 0},
			links: map[[2]int]Link{{0, 1}: {0, SYS}, {1, 2}: {0, PHB}, {1, 3}: {0, NODE}}, cpu0: "8-15,24-31"},
		{file: "rtx4090x8-all-sys.txt", name: "rtx4090x8-all-sys", gpus: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1},
			links: map[[2]int]Link{{0, 1}: {0, SYS}}, cpu0: "0-55,112-167"},
		{file: "rtx3090x2-nvlink-prompt-after-rows.txt", name: "rtx3090x2-nvlink-prompt-after-rows", gpus: 2, numa: []int{0, 0},
			links: map[[2]int]Link{{0, 1}: {4, NODE}}, cpu0: "0-23"},
		// Real outputs added with the detection of text holding a matrix
		// (copied verbatim; source of each on its line).
		{file: "h20-full-sglang-check-env.txt", name: "h20-full-sglang-check-env", gpus: 8, // the whole `python3 -m sglang.check_env` of https://github.com/sgl-project/sglang/issues/14092: "Python: 3.12.12 | …" and other keys above the matrix, 36 NICs, cells run together
			numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, links: map[[2]int]Link{{0, 3}: {18, NODE}, {3, 4}: {18, SYS}}, cpu0: "0-55,112-167"},
		{file: "doc-legend-before-matrix-fenced-7gpu-then-m60.txt", name: "doc-legend-before-matrix-fenced-7gpu-then-m60", gpus: 7, // rossumai notes "Towards efficient multi-GPU training in Keras over TensorFlow" (code index id 37815252782): legend above, ``` fences, a second matrix (2x M60) after: the first is read
			numa: []int{0, 0, 0, 0, 0, 0, 0}, links: map[[2]int]Link{{0, 1}: {0, PIX}, {2, 3}: {0, PHB}}, cpu0: "0-19"},
		{file: "power9-v100x4-nv3-numa8-header-spaces-then-tabs.txt", name: "power9-v100x4-nv3-numa8-header-spaces-then-tabs", gpus: 4, // Princeton Traverse, in the notes citing https://github.com/jdh4/della-gpu-A100 (code index id 25105279828): "# traverse" above, header indented with 5 spaces, NV3, NUMA node 8, mlx5 rows ending in tabs
			numa: []int{0, 0, 8, 8}, links: map[[2]int]Link{{0, 1}: {3, NODE}, {1, 2}: {0, SYS}}, cpu0: "0-63"},
		{file: "gpu7-mlx4-tab-plus-4-spaces-trailing-space.txt", name: "gpu7-mlx4-tab-plus-4-spaces-trailing-space", gpus: 7, // TKEStack gpu-manager reading notes (code index id 37354995983): cells "\t    PIX", "# nvidia-smi topo -m" above, a trailing space
			numa: []int{0, 0, 0, 0, 0, 0, 0}, links: map[[2]int]Link{{0, 1}: {0, PIX}, {2, 3}: {0, PHB}}, cpu0: "0-13,28-41"},
		{file: "mixed-rtx8000-v100-5gpu-vllm-collect-env-indented-header.txt", name: "mixed-rtx8000-v100-5gpu-vllm-collect-env-indented-header", gpus: 5, // vLLM collect_env "GPU Topology:" in a vLLM issue body (code index id 69805981186): header indented "  \t"
			numa: []int{0, 0, 0, 0, 0}, links: map[[2]int]Link{{0, 4}: {0, PHB}}, cpu0: "0-15"},
		{file: "h100x4-nv6-interleaved-cpu-affinity-nps4.txt", name: "h100x4-nv6-interleaved-cpu-affinity-nps4", gpus: 4, // https://github.com/NVIDIA/nccl/issues/1617: CPU Affinity 6,14,22,30, NUMA nodes 3,1,7,5, legend cut short
			numa: []int{3, 1, 7, 5}, links: map[[2]int]Link{{0, 1}: {6, SYS}}, cpu0: "6,14,22,30"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			m := MustParseFile(t, tt.file)
			checkMachine(t, m)
			if m.Name() != tt.name || m.Len() != tt.gpus || !m.FixedSize() {
				t.Fatalf("got %s with %d GPUs", m.Name(), m.Len())
			}
			var numa []int
			for i := range m.Len() {
				numa = append(numa, m.NUMA(i))
			}
			if !slices.Equal(numa, tt.numa) {
				t.Errorf("NUMA = %v, want %v", numa, tt.numa)
			}
			for p, want := range tt.links {
				if got := m.Link(p[0], p[1]); got != want {
					t.Errorf("Link(%d,%d) = %+v, want %+v", p[0], p[1], got, want)
				}
			}
			if m.CPUAffinity(0) != tt.cpu0 {
				t.Errorf("CPUAffinity(0) = %q, want %q", m.CPUAffinity(0), tt.cpu0)
			}
			if tt.preset != "" {
				p := MustPreset(t, tt.preset)
				if !slices.Equal(matrix(m), matrix(p)) {
					t.Errorf("matrix differs from preset %s:\n%s\nwant:\n%s", tt.preset,
						strings.Join(matrix(m), "\n"), strings.Join(matrix(p), "\n"))
				}
			}
		})
	}
}

// TestParseNvidiaSMI_RoundTrip writes every preset as nvidia-smi text and
// reads it back.
func TestParseNvidiaSMI_RoundTrip(t *testing.T) {
	for _, name := range PresetNames() {
		p := MustPreset(t, name)
		var buf bytes.Buffer
		if err := p.WriteMatrix(&buf); err != nil {
			t.Fatal(err)
		}
		if DetectFormat(buf.Bytes()) != FormatNvidiaSMI {
			t.Fatalf("%s: WriteMatrix output not detected as nvidia-smi", name)
		}
		m, err := Parse(name+".txt", &buf)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, buf.String())
		}
		checkMachine(t, m)
		if !slices.Equal(matrix(m), matrix(p)) {
			t.Errorf("%s: round trip changed the matrix", name)
		}
		for i := range p.Len() {
			if m.NUMA(i) != p.NUMA(i) || m.CPUAffinity(i) != p.CPUAffinity(i) {
				t.Errorf("%s GPU %d: NUMA %d CPUs %q, want %d %q", name, i, m.NUMA(i), m.CPUAffinity(i), p.NUMA(i), p.CPUAffinity(i))
			}
			for j := range p.Len() {
				if p.Link(i, j).NVLinks == 0 && m.Link(i, j) != p.Link(i, j) {
					t.Errorf("%s Link(%d,%d) = %v, want %v", name, i, j, m.Link(i, j), p.Link(i, j))
				}
			}
		}
	}
}

func TestParseNvidiaSMI_Errors(t *testing.T) {
	const h2 = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
	tests := []struct {
		name string
		in   string
		line int
		msg  string
	}{
		{"no header", "hello\nworld\n", 0, "no header row"},
		{"rows missing", h2 + "GPU0\t X \tPIX\t0-7\t0\n\nLegend:\n", 3, "found 1 GPU rows: expected 2"},
		{"row out of order", h2 + "GPU1\tPIX\t X \t0-7\t0\n", 2, "row GPU1: expected GPU0"},
		{"unknown row", h2 + "GPU0\t X \tPIX\t0-7\t0\nCPU0\tPIX\t X \t0-7\t0\n", 3, `row "CPU0": expected GPU1`},
		{"short row", h2 + "GPU0\t X \tPIX\t0-7\nGPU1\tPIX\t X \t0-7\t0\n", 2, "row GPU0 has 3 values: expected 2 GPU cells and 2 affinity values"},
		{"bad cell", h2 + "GPU0\t X \tPCI\t0-7\t0\nGPU1\tPCI\t X \t0-7\t0\n", 2, `GPU0 column GPU1 is "PCI": expected NV<1..18>`},
		{"NV0", h2 + "GPU0\t X \tNV0\t0-7\t0\nGPU1\tNV0\t X \t0-7\t0\n", 2, `"NV0"`},
		{"NV19", h2 + "GPU0\t X \tNV19\t0-7\t0\nGPU1\tNV19\t X \t0-7\t0\n", 2, `"NV19"`},
		{"diagonal", h2 + "GPU0\tPIX\tPIX\t0-7\t0\nGPU1\tPIX\t X \t0-7\t0\n", 2, "expected X on the diagonal"},
		{"asymmetric", h2 + "GPU0\t X \tPIX\t0-7\t0\nGPU1\tPXB\t X \t0-7\t0\n", 3, "GPU1 column GPU0 is PXB but GPU0 column GPU1 (line 2) is PIX: expected a symmetric matrix"},
		{"bad numa", h2 + "GPU0\t X \tPIX\t0-7\tzero\nGPU1\tPIX\t X \t0-7\t0\n", 2, `GPU0 NUMA Affinity "zero"`},
		{"bad cpus", h2 + "GPU0\t X \tPIX\t0-x\t0\nGPU1\tPIX\t X \t0-7\t0\n", 2, `GPU0 CPU Affinity "0-x"`},
		{"bad gpu numa id", "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-7\t0\tnone\n", 2, `GPU NUMA ID "none"`},
		{"header gap", "\tGPU0\tGPU2\tCPU Affinity\n", 1, `header column "GPU2": expected "GPU1"`},
		{"GPU column after a device", "\tGPU0\tNIC0\tGPU1\tCPU Affinity\n", 1, `header column "GPU1" after the device column "NIC0": expected the GPU columns first`},
		{"only prose starting with GPU0", "GPU0 <-> GPU1:\n  * Atomic Supported: no\n", 1, `header column "GPU1" after the device column "<->"`},
		{"prose, then a header without rows", "GPU0 <-> GPU1:\n" + h2 + "\n", 3, "found 0 GPU rows: expected 2"},
		{"header after affinity", "\tGPU0\tCPU Affinity\tNIC0\n", 1, `header column "NIC0" after the affinity columns`},
		{"header twice", "\tGPU0\tCPU Affinity\tCPU Affinity\n", 1, `header column "CPU Affinity" twice`},
		{"short row, spaces", "GPU0 GPU1 CPU Affinity\nGPU0 X PIX\nGPU1 PIX X 0-7\n", 2, "row GPU0 has 2 values: expected 2 GPU cells and 1 affinity values"},
		{"unknown row after the rows", h2 + "GPU0\t X \tPIX\t0-7\t0\nGPU1\tPIX\t X \t0-7\t0\nGPU2\tPIX\t X \t0-7\t0\n", 4, "row GPU2: the header has only 2 GPU columns"},
		{"more rows than columns", "\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\nGPU1\t X \t0-7\n", 3, "the header has only 1 GPU columns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pe := parseError(t, ParseNvidiaSMI, "node.txt", tt.in)
			if pe.Line != tt.line || !strings.Contains(pe.Msg, tt.msg) {
				t.Errorf("error %q: want line %d and %q", pe, tt.line, tt.msg)
			}
		})
	}
}

func TestParseNvidiaSMI_Lenient(t *testing.T) {
	tests := []struct {
		name string
		in   string
		numa []int
	}{
		{"no leading tab, spaces", "GPU0  GPU1  CPU Affinity  NUMA Affinity\nGPU0  X  NV2  0-7  0\nGPU1  NV2  X  8-15  1\n", []int{0, 1}},
		{"CRLF", "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\r\nGPU0\t X \tSOC\t0-7\t0\r\nGPU1\tSOC\t X \t8-15\t1\r\n", []int{0, 1}},
		{"NUMA list takes the first node", "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\t2-3\n", []int{2}},
		{"NIC cells mangled", "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPIX\tPIXNODE\t0-7\t0\nGPU1\tPIX\t X \tNODE\tPIX\tNODE\t0-7\t0\n", []int{0, 0}},
		{"CPU affinity infers NUMA", "\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tSYS\tSYS\t16-31\nGPU1\tSYS\t X \tSYS\t0-15\nGPU2\tSYS\tSYS\t X \tN/A\n", []int{1, 0, -1}},
		{"no affinity columns", "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n", []int{-1, -1}},
		{"empty CPU Affinity cell", "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV4\tNODE\t\t0\t\tN/A\nGPU1\tNV4\t X \tNODE\t8\t1\t\tN/A\n", []int{0, 1}},
		{"empty CPU Affinity, only column", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t\nGPU1\tPHB\t X \t0-7\n", []int{-1, 0}},
		{"empty NUMA Affinity cell", "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-7\t\t\tN/A\n", []int{-1}},
		{"empty CPU Affinity, spaces", "GPU0  GPU1  NIC0  CPU Affinity  NUMA Affinity  GPU NUMA ID\nGPU0  X  NV4  NODE      0    N/A\nGPU1  NV4  X  NODE  8  1  N/A\n", []int{0, 1}},
		{"cells run together", "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV18PXB\tSYS\t0-7\t0\nGPU1\tNV18\t X \tSYSSYS\t8-15\t1\n", []int{0, 1}},
		{"header run together", "\t    GPU0GPU1mlx5_0\tCPU Affinity\nGPU0\t X \tSOC\tPIX\t0-7\nGPU1\tSOC\t X \tSOC\t8-15\n", []int{0, 1}},
		{"header and rows wrapped", "\tGPU0\tGPU1\tNIC0\tCPU Aff\ninity\tNUMA Affinity\nGPU0\t X \tNV1\n8\tPIX\t0-7\t0\nGPU1\tNV18\t X \tSYS\t8-15\n\t1\n", []int{0, 1}},
		{"prompt after the rows", "$ nvidia-smi topo -m\n\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n$ exit\n", []int{0}},
		{"text after legend", "\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n\nLegend:\n\n  X = Self\nGPU7 is not a row\n", []int{0}},
		{"a YAML-like key above", "Python: 3.12.3\n\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n", []int{0, 0}},
		{"vLLM collect_env above", "Collecting environment information...\nPyTorch version: 2.4.0+cu121\nOS: Ubuntu 22.04.4 LTS (x86_64)\nGPU Topology:\n\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV4\t0-15\t0\t\tN/A\nGPU1\tNV4\t X \t16-31\t1\t\tN/A\n\nLegend:\n\n  X    = Self\n\nvLLM Version: 0.6.0\n", []int{0, 1}},
		{"legend above", "Legend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n\n\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV2\t0-7\nGPU1\tNV2\t X \t8-15\n", []int{0, 1}},
		{"prose starting with GPU0 above", "GPU0 <-> GPU1:\n\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n", []int{0, 0}},
		{"prose that is a valid header above", "GPU0 is hot\n\n\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-7\t0\nGPU1\tSYS\t X \t8-15\t1\n", []int{0, 1}},
		{"two matrices: the first", "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-7\t0\nGPU1\tSYS\t X \t8-15\t1\n\n\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t0\n", []int{0, 1}},
		{"header row wrapped, YAML-like key above", "Key: value\n\tGPU0\tGPU1\tNIC0\tCPU Aff\ninity\tNUMA Affinity\nGPU0\t X \tNV1\n8\tPIX\t0-7\t0\nGPU1\tNV18\t X \tSYS\t8-15\n\t1\n", []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse("node.txt", strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			checkMachine(t, m)
			var numa []int
			for i := range m.Len() {
				numa = append(numa, m.NUMA(i))
			}
			if !slices.Equal(numa, tt.numa) {
				t.Errorf("NUMA = %v, want %v", numa, tt.numa)
			}
		})
	}
}

func TestDetectFormat(t *testing.T) {
	const matrix = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n"
	tests := []struct {
		name string
		in   string
		want Format
		sure bool
	}{
		{"apiVersion", "apiVersion: x\n", FormatYAML, true},
		{"comment, then kind", "# comment\n\nkind: Topology\n", FormatYAML, true},
		{"keys in any order", "# made up\nname: x\nnumaNodes: []\nkind: Topology\n# last\napiVersion: " + APIVersion + "\n", FormatYAML, true},
		{"quoted keys", "\"kind\": Topology\n\"apiVersion\": x\n", FormatYAML, true},
		{"a matrix in a YAML topology's description", header + "description: |\n  cloned from\n" + strings.ReplaceAll("  "+matrix, "\n", "\n  ") + "\nnumaNodes: []\n", FormatYAML, true},
		{"matrix", matrix, FormatNvidiaSMI, true},
		{"prompt, matrix", "$ nvidia-smi topo -m\n" + matrix, FormatNvidiaSMI, true},
		{"a YAML-like key above a matrix", "Python: 3.12.3\n" + matrix, FormatNvidiaSMI, true},
		{"keys of sglang check_env above a matrix", "Python: 3.12.12 | packaged by Anaconda, Inc. | (main, Oct 21 2025, 20:16:04) [GCC 11.2.0]\nCUDA available: True\nGPU 0,1: NVIDIA H20\nNVIDIA Topology: \n" + matrix + "\nulimit soft: 655350\n", FormatNvidiaSMI, true},
		{"vLLM collect_env above a matrix", "OS: Ubuntu 22.04.4 LTS (x86_64)\nGCC version: (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\nGPU Topology:\n" + matrix, FormatNvidiaSMI, true},
		{"legend above a matrix", "```\nLegend:\n\n  X   = Self\n  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)\n```\n\n7gpu:\n```\n" + matrix + "```\n", FormatNvidiaSMI, true},
		{"prose starting with GPU0 above a matrix", "GPU0 <-> GPU1:\n" + matrix, FormatNvidiaSMI, true},
		{"matrix with the header underlined", "key: v\n\t\x1b[4mGPU0\tCPU Affinity\x1b[0m\nGPU0\t X \t0-7\n", FormatNvidiaSMI, true},
		{"header without rows", "$ nvidia-smi topo -m\n\tGPU0\tGPU1\n", FormatNvidiaSMI, false},
		{"header without rows, spaces", "root@node:~# nvidia-smi topo -m\n        GPU0    CPU Affinity\n", FormatNvidiaSMI, false},
		{"a key above a header without rows", "name: x\nGPU0 GPU1\n", FormatYAML, false},
		{"a key above a header whose first row is not GPU0", "Python: 3\n\tGPU0\tGPU1\nGPU1\tPHB\t X \n", FormatYAML, false},
		{"empty", "", FormatYAML, false},
		{"garbage", "garbage", FormatYAML, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DetectFormat([]byte(tt.in)); got != tt.want {
				t.Errorf("DetectFormat(%q) = %v, want %v", tt.in, got, tt.want)
			}
			lines, err := textLines([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if _, sure := detectFormat(lines); sure != tt.sure {
				t.Errorf("detectFormat(%q): sure = %v, want %v", tt.in, sure, tt.sure)
			}
		})
	}
}

// TestParse_NeitherFormat checks that a file that is neither a YAML topology
// nor holds an nvidia-smi matrix is refused with what each format expects
// and what was wrong as the format tried.
func TestParse_NeitherFormat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		as   string // the detail after "read as "
	}{
		{"empty", "", "YAML: empty file"},
		{"garbage", "garbage", "YAML: line 1: expected a YAML mapping"},
		{"environment report without a matrix", "Python: 3.12.3\nCUDA available: True\n", `YAML: line 1: unknown field "Python"`},
		{"YAML-like keys, then a tab", "Python: 3.12.3\n\tGPU0\tGPU1\n", "YAML: line 2: found a tab character"},
		{"header without rows", "$ nvidia-smi topo -m\n\tGPU0\tGPU1\tCPU Affinity\n", "nvidia-smi output: line 2: found 0 GPU rows: expected 2"},
		{"YAML without apiVersion and kind", "numaNodes:\n  - hostBridges: [{gpus: 1}]\n", `YAML: line 1: apiVersion ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pe := parseError(t, Parse, "node.txt", tt.in)
			for _, want := range []string{"neither a YAML topology", "apiVersion: " + APIVersion, "kind: " + Kind,
				"nvidia-smi topo -m output", "GPU0 GPU1 … CPU Affinity", "read as " + tt.as} {
				if !strings.Contains(pe.Msg, want) {
					t.Errorf("error %q: want it to say %q", pe, want)
				}
			}
			if pe.Line != 0 {
				t.Errorf("error %q: line %d, want 0 (the whole file)", pe, pe.Line)
			}
		})
	}
}

// TestParse_SureFormatErrors checks that a file that is sure to be one format
// gets that format's error alone.
func TestParse_SureFormatErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		line int
		msg  string
	}{
		{"YAML topology", header + "numaNodes: [\n", 3, ""},
		{"YAML topology, tab", "apiVersion: v1\n\tGPU0\tGPU1\n", 2, "found a tab character"},
		{"matrix", "Python: 3\n\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPXB\t X \t0-7\n", 4, "expected a symmetric matrix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pe := parseError(t, Parse, "node.txt", tt.in)
			if pe.Line != tt.line || !strings.Contains(pe.Msg, tt.msg) || strings.Contains(pe.Msg, "neither") {
				t.Errorf("error %q: want line %d and %q alone", pe, tt.line, tt.msg)
			}
		})
	}
}

func TestParse_TooLarge(t *testing.T) {
	big := strings.Repeat("#", maxFileBytes+1)
	_, err := Parse("big.yaml", strings.NewReader(big))
	checkParseError(t, err, "big.yaml")
}
