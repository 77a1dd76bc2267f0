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
		{"header gap", "\tGPU0\tGPU2\tCPU Affinity\n", 1, "header column GPU2: expected GPU1"},
		{"header after affinity", "\tGPU0\tCPU Affinity\tNIC0\n", 1, `header column "NIC0" after the affinity columns`},
		{"header twice", "\tGPU0\tCPU Affinity\tCPU Affinity\n", 1, `header column "CPU Affinity" twice`},
		{"short row, spaces", "GPU0 GPU1 CPU Affinity\nGPU0 X PIX\nGPU1 PIX X 0-7\n", 2, "row GPU0 has 2 values: expected 2 GPU cells and 1 affinity values"},
		{"unknown row after the rows", h2 + "GPU0\t X \tPIX\t0-7\t0\nGPU1\tPIX\t X \t0-7\t0\nGPU2\tPIX\t X \t0-7\t0\n", 4, "row GPU2: the header has only 2 GPU columns"},
		{"more rows than columns", "\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\nGPU1\t X \t0-7\n", 3, "the header has only 1 GPU columns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseNvidiaSMI("node.txt", strings.NewReader(tt.in))
			if err == nil {
				t.Fatal("no error")
			}
			pe := checkParseError(t, err, "node.txt")
			if pe.Line != tt.line || !strings.Contains(pe.Msg, tt.msg) {
				t.Errorf("error %q: want line %d and %q", err, tt.line, tt.msg)
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
	tests := []struct {
		in   string
		want Format
	}{
		{"apiVersion: x\n", FormatYAML},
		{"# comment\n\nkind: Topology\n", FormatYAML},
		{"$ nvidia-smi topo -m\n\tGPU0\tGPU1\n", FormatNvidiaSMI},
		{"root@node:~# nvidia-smi topo -m\n        GPU0    CPU Affinity\n", FormatNvidiaSMI},
		{"name: x\nGPU0 GPU1\n", FormatYAML},
		{"", FormatYAML},
		{"garbage", FormatYAML},
	}
	for _, tt := range tests {
		if got := DetectFormat([]byte(tt.in)); got != tt.want {
			t.Errorf("DetectFormat(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParse_TooLarge(t *testing.T) {
	big := strings.Repeat("#", maxFileBytes+1)
	_, err := Parse("big.yaml", strings.NewReader(big))
	checkParseError(t, err, "big.yaml")
}
