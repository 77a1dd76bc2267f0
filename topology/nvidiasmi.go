package topology

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Affinity column headers of `nvidia-smi topo -m`; they contain spaces.
const (
	colCPUAffinity  = "CPU Affinity"
	colNUMAAffinity = "NUMA Affinity"
	colGPUNUMAID    = "GPU NUMA ID"
)

// ParseNvidiaSMI reads the text `nvidia-smi topo -m` prints and builds the
// machine it describes, named after name's base name. It reads:
//
//   - the header row "GPU0 GPU1 … [NIC0 … | mlx5_0 …] CPU Affinity
//     [NUMA Affinity] [GPU NUMA ID]", separated by tabs or spaces; lines
//     before it (a shell prompt, a blank line) are skipped;
//   - one row per GPU, GPU0 first: a cell per GPU ("X" on the diagonal, NV<n>
//     with n in 1..MaxNVLinks, or PIX, PXB, PHB, NODE, SYS, and the old
//     aliases PSB and SOC), then the NIC cells (ignored, any number), then
//     one value per affinity column;
//   - rows of NICs and other devices (NIC0, mlx5_0, …), blank lines, the
//     "Legend:" and "NIC Legend:" blocks, which are read past.
//
// A GPU's NUMA node is its "NUMA Affinity" (the first node if it lists
// several), -1 for N/A. Without that column, GPUs with the same "CPU
// Affinity" share a node and nodes are numbered 0, 1, … in the order of
// their lowest CPU; N/A gives -1. "GPU NUMA ID" (the NUMA node of the GPU's
// own memory on Grace systems) is checked but not used. The matrix must be
// symmetric. For an NVLinked pair the PCIe relation is not printed; it is
// taken as NODE if both GPUs have the same known NUMA node, else SYS.
//
// Every error is a *ParseError naming name, the line and what was expected.
func ParseNvidiaSMI(name string, r io.Reader) (*Machine, error) {
	data, err := readAll(name, r)
	if err != nil {
		return nil, err
	}
	return parseNvidiaSMI(name, data)
}

type smiRow struct {
	line  int
	cells []string
	aff   []string
}

func parseNvidiaSMI(name string, data []byte) (*Machine, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), maxFileBytes)
	lineNo := 0
	var (
		gpuCols   int
		devCols   map[string]bool
		affCols   []string
		rows      []smiRow
		headerAt  int
		rowsEnded bool
		endLine   int // where the GPU rows ended
	)
	for sc.Scan() {
		lineNo++
		f := strings.Fields(stripANSI(sc.Text()))
		if headerAt == 0 {
			if len(f) > 0 && f[0] == "GPU0" && (len(f) == 1 || f[1] != "X") {
				headerAt = lineNo
				var err error
				gpuCols, devCols, affCols, err = smiHeader(f)
				if err != nil {
					return nil, parseErr(name, lineNo, err.Error())
				}
			}
			continue
		}
		if rowsEnded {
			continue
		}
		switch {
		case len(f) == 0:
			if len(rows) > 0 {
				rowsEnded, endLine = true, lineNo
			}
			continue
		case f[0] == "Legend:" || f[0] == "NIC" && len(f) > 1 && f[1] == "Legend:":
			rowsEnded, endLine = true, lineNo
			continue
		case devCols[f[0]]:
			continue // a NIC row
		}
		idx, ok := gpuLabel(f[0])
		if !ok {
			return nil, parseErr(name, lineNo, fmt.Sprintf("row %q: expected GPU%d or a device named in the header", f[0], len(rows)))
		}
		if idx != len(rows) {
			return nil, parseErr(name, lineNo, fmt.Sprintf("row %s: expected GPU%d", f[0], len(rows)))
		}
		if idx >= gpuCols {
			return nil, parseErr(name, lineNo, fmt.Sprintf("row %s: the header has only %d GPU columns", f[0], gpuCols))
		}
		if len(f)-1 < gpuCols+len(affCols) {
			return nil, parseErr(name, lineNo, fmt.Sprintf("row %s has %d values: expected %d GPU cells and %d affinity values (%s)",
				f[0], len(f)-1, gpuCols, len(affCols), strings.Join(affCols, ", ")))
		}
		rows = append(rows, smiRow{line: lineNo, cells: f[1 : 1+gpuCols], aff: f[len(f)-len(affCols):]})
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{File: name, Line: lineNo, Msg: "read", Err: err}
	}
	if headerAt == 0 {
		return nil, parseErr(name, 0, "no header row: expected nvidia-smi topo -m output starting with a row GPU0 GPU1 … CPU Affinity")
	}
	if !rowsEnded {
		endLine = lineNo
	}
	if len(rows) != gpuCols {
		return nil, parseErr(name, endLine, fmt.Sprintf("found %d GPU rows: expected %d (GPU0..GPU%d), as in the header at line %d",
			len(rows), gpuCols, gpuCols-1, headerAt))
	}
	return smiMachine(name, rows, affCols)
}

// smiHeader splits the header fields into GPU columns, device columns and
// affinity columns.
func smiHeader(f []string) (gpus int, devs map[string]bool, aff []string, err error) {
	devs = make(map[string]bool)
	for i := 0; i < len(f); i++ {
		switch {
		case f[i] == "CPU" && i+1 < len(f) && f[i+1] == "Affinity":
			aff = append(aff, colCPUAffinity)
			i++
		case f[i] == "NUMA" && i+1 < len(f) && f[i+1] == "Affinity":
			aff = append(aff, colNUMAAffinity)
			i++
		case f[i] == "GPU" && i+2 < len(f) && f[i+1] == "NUMA" && f[i+2] == "ID":
			aff = append(aff, colGPUNUMAID)
			i += 2
		case len(aff) > 0:
			return 0, nil, nil, fmt.Errorf("header column %q after the affinity columns: expected CPU Affinity, NUMA Affinity or GPU NUMA ID", f[i])
		default:
			if idx, ok := gpuLabel(f[i]); ok {
				if idx != gpus || len(devs) > 0 {
					return 0, nil, nil, fmt.Errorf("header column %s: expected GPU%d", f[i], gpus)
				}
				gpus++
				if gpus > MaxGPUs {
					return 0, nil, nil, fmt.Errorf("more than %d GPU columns", MaxGPUs)
				}
				continue
			}
			devs[f[i]] = true
		}
	}
	for i, a := range aff {
		if slices.Contains(aff[:i], a) {
			return 0, nil, nil, fmt.Errorf("header column %q twice", a)
		}
	}
	return gpus, devs, aff, nil
}

// gpuLabel parses "GPU<i>".
func gpuLabel(s string) (int, bool) {
	d, ok := strings.CutPrefix(s, "GPU")
	if !ok || d == "" || len(d) > 1 && d[0] == '0' || len(d) > 5 {
		return 0, false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(d)
	return i, err == nil
}

func smiMachine(name string, rows []smiRow, affCols []string) (*Machine, error) {
	n := len(rows)
	numa := make([]int, n)
	cpus := make([]string, n)
	for i := range numa {
		numa[i] = -1
	}
	haveNUMA := slices.Contains(affCols, colNUMAAffinity)
	for i, r := range rows {
		for k, col := range affCols {
			v := r.aff[k]
			switch col {
			case colCPUAffinity:
				if v != "N/A" {
					if err := checkCPUList(v); err != nil {
						return nil, parseErr(name, r.line, fmt.Sprintf("GPU%d CPU Affinity %q: expected a CPU list like 0-19,40-59 or N/A", i, v))
					}
					cpus[i] = v
				}
			case colNUMAAffinity:
				if v != "N/A" {
					first, _, _ := strings.Cut(strings.SplitN(v, ",", 2)[0], "-")
					node, err := strconv.Atoi(first)
					if err != nil || node < 0 || node > maxElements || checkCPUList(v) != nil {
						return nil, parseErr(name, r.line, fmt.Sprintf("GPU%d NUMA Affinity %q: expected a NUMA node number or N/A", i, v))
					}
					numa[i] = node
				}
			case colGPUNUMAID:
				if v != "N/A" {
					if id, err := strconv.Atoi(v); err != nil || id < 0 {
						return nil, parseErr(name, r.line, fmt.Sprintf("GPU%d GPU NUMA ID %q: expected a NUMA node number or N/A", i, v))
					}
				}
			}
		}
	}
	if !haveNUMA {
		inferNUMA(cpus, numa)
	}
	links := make([]link, n*n)
	for i, r := range rows {
		for j, c := range r.cells {
			if i == j {
				if c != "X" {
					return nil, parseErr(name, r.line, fmt.Sprintf("GPU%d column GPU%d is %q: expected X on the diagonal", i, j, c))
				}
				continue
			}
			l, ok := parseCell(c)
			if !ok {
				return nil, parseErr(name, r.line, fmt.Sprintf("GPU%d column GPU%d is %q: expected NV<1..%d>, PIX, PXB, PHB, NODE or SYS", i, j, c, MaxNVLinks))
			}
			if j < i {
				if o := rows[j].cells[i]; o != c {
					return nil, parseErr(name, r.line, fmt.Sprintf("GPU%d column GPU%d is %s but GPU%d column GPU%d (line %d) is %s: expected a symmetric matrix", i, j, c, j, i, rows[j].line, o))
				}
			}
			if l.nv > 0 {
				l.pcie = SYS
				if numa[i] >= 0 && numa[i] == numa[j] {
					l.pcie = NODE
				}
			}
			links[i*n+j] = l
		}
	}
	m, err := newMachine(baseName(name), true, numa, cpus, nil, links)
	if err != nil {
		return nil, &ParseError{File: name, Msg: "build machine", Err: err}
	}
	return m, nil
}

func parseCell(c string) (link, bool) {
	if d, ok := strings.CutPrefix(c, "NV"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > MaxNVLinks || d[0] == '+' {
			return link{}, false
		}
		return link{nv: uint8(n)}, true
	}
	p, ok := ParsePCIe(c)
	return link{pcie: p}, ok
}

// inferNUMA numbers NUMA nodes from CPU affinity lists: GPUs with the same
// list share a node; nodes are numbered in the order of their lowest CPU.
func inferNUMA(cpus []string, numa []int) {
	type group struct {
		key   string
		first int
	}
	var groups []group
	for _, c := range cpus {
		if c == "" || slices.ContainsFunc(groups, func(g group) bool { return g.key == c }) {
			continue
		}
		lo, _, _ := strings.Cut(strings.SplitN(c, ",", 2)[0], "-")
		first, _ := strconv.Atoi(lo)
		groups = append(groups, group{c, first})
	}
	slices.SortStableFunc(groups, func(a, b group) int { return a.first - b.first })
	for i, c := range cpus {
		numa[i] = slices.IndexFunc(groups, func(g group) bool { return g.key == c && c != "" })
	}
}

// WriteMatrix writes the machine as `nvidia-smi topo -m` would print it
// (tab-separated, with the CPU Affinity, NUMA Affinity and GPU NUMA ID
// columns and the legend, without NICs). ParseNvidiaSMI reads it back to an
// equal machine, except that the PCIe relation of NVLinked pairs is then
// inferred.
func (m *Machine) WriteMatrix(w io.Writer) error {
	var b strings.Builder
	n := m.Len()
	for j := range n {
		fmt.Fprintf(&b, "\tGPU%d", j)
	}
	b.WriteString("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n")
	for i := range n {
		fmt.Fprintf(&b, "GPU%d", i)
		for j := range n {
			if i == j {
				b.WriteString("\t X ")
			} else {
				b.WriteString("\t" + m.Link(i, j).String())
			}
		}
		cpu, node := m.CPUAffinity(i), "N/A"
		if cpu == "" {
			cpu = "N/A"
		}
		if m.NUMA(i) >= 0 {
			node = strconv.Itoa(m.NUMA(i))
		}
		fmt.Fprintf(&b, "\t%s\t%s\t\tN/A\n", cpu, node)
	}
	b.WriteString(smiLegend)
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("write topology matrix of %s: %w", m.Name(), err)
	}
	return nil
}

const smiLegend = `
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// ansiRE matches terminal escape sequences (CSI): nvidia-smi underlines its
// header row with ESC[4m … ESC[0m, also when its output goes to a file.
var ansiRE = regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]")

// stripANSI removes terminal escape sequences from a line.
func stripANSI(line string) string {
	if !strings.Contains(line, "\x1b") {
		return line
	}
	return ansiRE.ReplaceAllString(line, "")
}
