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
//     before it (a shell prompt, other output, prose that starts with GPU0)
//     are skipped: the header is the first one followed by its GPU0 row, so
//     of several matrices the first is read; labels run together
//     (GPU0GPU1mlx5_0) are separated;
//   - one row per GPU, GPU0 first: a cell per GPU ("X" on the diagonal, NV<n>
//     with n in 1..MaxNVLinks, or PIX, PXB, PHB, NODE, SYS, and the old
//     aliases PSB and SOC), then the NIC cells (ignored, any number; cells
//     run together by nvidia-smi, as PXBNODE, are separated), then one
//     value per affinity column (with tabs a value may be empty, meaning
//     unknown; without tabs a missing first value is an empty CPU Affinity);
//   - rows of NICs and other devices (NIC0, mlx5_0, …), blank lines, the
//     "Legend:" and "NIC Legend:" blocks, and any line after the last GPU
//     row, which are read past.
//
// Lines wrapped by a narrow terminal are joined (see joinWrapped).
//
// A GPU's NUMA node is its "NUMA Affinity" (the first node if it lists
// several), -1 for N/A or empty. Without that column, GPUs with the same "CPU
// Affinity" share a node and nodes are numbered 0, 1, … in the order of
// their lowest CPU; N/A gives -1. "GPU NUMA ID" (the NUMA node of the GPU's
// own memory on Grace systems) is checked but not used. The matrix must be
// symmetric. For an NVLinked pair the PCIe relation is not printed; it is
// taken as NODE if both GPUs have the same known NUMA node, else SYS. The
// text does not name the GPU model: the GPUs are DefaultGPUModel.
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
	lines, err := smiLines(name, data)
	if err != nil {
		return nil, err
	}
	hdr, _, err := findSMIHeader(lines)
	switch {
	case hdr.at < 0:
		return nil, parseErr(name, 0, "no header row: expected nvidia-smi topo -m output starting with a row GPU0 GPU1 … CPU Affinity")
	case err != nil:
		return nil, parseErr(name, hdr.at+1, err.Error())
	}
	headerAt, next := hdr.at, hdr.next
	gpuCols, devCols, affCols, devs := hdr.gpus, hdr.devCols, hdr.affCols, hdr.devs
	var rows []smiRow
	endLine := len(lines) // where the GPU rows ended (1-based)
rowLoop:
	for i := next; i < len(lines); i++ {
		lineNo := i + 1
		f := strings.Fields(lines[i])
		switch {
		case len(f) == 0:
			if len(rows) > 0 {
				endLine = lineNo
				break rowLoop
			}
			continue
		case isSMILegend(f):
			endLine = lineNo
			break rowLoop
		case devs[f[0]]:
			continue // a NIC row
		}
		idx, ok := gpuLabel(f[0])
		if !ok {
			if len(rows) == gpuCols && len(rows) > 0 {
				endLine = lineNo // all rows read: a shell prompt, other output
				break rowLoop
			}
			return nil, parseErr(name, lineNo, fmt.Sprintf("row %q: expected GPU%d or a device named in the header", f[0], len(rows)))
		}
		if idx != len(rows) {
			return nil, parseErr(name, lineNo, fmt.Sprintf("row %s: expected GPU%d", f[0], len(rows)))
		}
		if idx >= gpuCols {
			return nil, parseErr(name, lineNo, fmt.Sprintf("row %s: the header has only %d GPU columns", f[0], gpuCols))
		}
		line := lines[i]
		cells, aff, n := splitSMIRow(line, gpuCols, len(devCols), affCols)
		// A row wrapped by a narrow terminal goes on in the next lines.
		for first := i; aff == nil && i+1 < len(lines) && i+1-first < maxWrapLines && smiContinuation(lines[i+1], devs); {
			i++
			line = joinWrapped(line, lines[i])
			cells, aff, n = splitSMIRow(line, gpuCols, len(devCols), affCols)
		}
		if aff == nil {
			return nil, parseErr(name, lineNo, fmt.Sprintf("row %s has %d values: expected %d GPU cells and %d affinity values (%s)",
				f[0], n, gpuCols, len(affCols), strings.Join(affCols, ", ")))
		}
		rows = append(rows, smiRow{line: lineNo, cells: cells, aff: aff})
	}
	if len(rows) != gpuCols {
		return nil, parseErr(name, endLine, fmt.Sprintf("found %d GPU rows: expected %d (GPU0..GPU%d), as in the header at line %d",
			len(rows), gpuCols, gpuCols-1, headerAt+1))
	}
	return smiMachine(name, rows, affCols)
}

// smiLines splits data into lines with textLines.
func smiLines(name string, data []byte) ([]string, error) {
	lines, err := textLines(data)
	if err != nil {
		return nil, &ParseError{File: name, Line: len(lines) + 1, Msg: "read", Err: err}
	}
	return lines, nil
}

// textLines splits data into lines without terminal escape codes and line
// ends (LF or CRLF). On an error it returns the lines before it.
func textLines(data []byte) ([]string, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), maxFileBytes)
	var lines []string
	for sc.Scan() {
		lines = append(lines, strings.TrimRight(stripANSI(sc.Text()), "\r"))
	}
	return lines, sc.Err()
}

// smiHeaderRow is a header row found by findSMIHeader.
type smiHeaderRow struct {
	at, next int             // index of its first line and of the line after it
	gpus     int             // number of GPU columns
	devCols  []string        // device (NIC) columns, in order
	affCols  []string        // affinity columns, in order
	devs     map[string]bool // the device columns as a set
}

// findSMIHeader finds the header row of the matrix in lines. The candidates
// are the lines smiHeaderStart accepts, each joined with the lines a narrow
// terminal wrapped it into. The header is the first candidate that is a
// valid header and is followed by its GPU0 row (blank lines and device rows
// may come between): then matrix is true. So a line of prose that starts
// with GPU0 ("GPU0 <-> GPU1:") is passed over, and of several matrices the
// first is taken. Without such a candidate the header is the first valid
// one, whose rows the parser will find missing or out of order. If no
// candidate is valid, err says what is wrong with the first one, at line
// index hdr.at; if there is no candidate at all, hdr.at is -1.
func findSMIHeader(lines []string) (hdr smiHeaderRow, matrix bool, err error) {
	first, firstBad := smiHeaderRow{at: -1}, -1
	var firstErr error
	for i := range lines {
		if !smiHeaderStart(strings.Fields(lines[i])) {
			continue
		}
		h, herr := readSMIHeader(lines, i)
		if herr != nil {
			if firstBad < 0 {
				firstBad, firstErr = i, herr
			}
			continue
		}
		if first.at < 0 {
			first = h
		}
		if smiRowsFollow(lines, h) {
			return h, true, nil
		}
	}
	if first.at >= 0 {
		return first, false, nil
	}
	return smiHeaderRow{at: firstBad}, false, firstErr
}

// maxWrapLines bounds the lines a row wrapped by a terminal is joined from:
// a header of 1024 GPU columns wrapped at 40 columns takes about 220.
// Joining costs time in the length of the row so far, so without a bound a
// large file of short lines that start no row would take hours.
const maxWrapLines = 512

// readSMIHeader reads the header row that starts at lines[at]. A header
// wrapped by a narrow terminal goes on until the first row (or a blank line,
// the legend, another header, or maxWrapLines lines in all).
func readSMIHeader(lines []string, at int) (smiHeaderRow, error) {
	header, next := lines[at], at+1
	for ; next < len(lines) && next-at < maxWrapLines; next++ {
		f := strings.Fields(lines[next])
		if len(f) == 0 || f[0] == "GPU0" || smiHeaderStart(f) || isSMILegend(f) || slices.ContainsFunc(f, func(w string) bool { return splitLabels(w) != nil }) {
			break // a row, with link cells
		}
		header = joinWrapped(header, lines[next])
	}
	gpus, devCols, affCols, err := smiHeader(smiHeaderFields(header))
	if err != nil {
		return smiHeaderRow{}, err
	}
	devs := make(map[string]bool, len(devCols))
	for _, d := range devCols {
		devs[d] = true
	}
	return smiHeaderRow{at: at, next: next, gpus: gpus, devCols: devCols, affCols: affCols, devs: devs}, nil
}

// smiRowsFollow tells whether the GPU0 row follows the header h, after
// blank lines and rows of its devices, as the parser reads the rows: a line
// "GPU0" whose first cell is the X of the diagonal (or that a terminal
// wrapped right after the label).
func smiRowsFollow(lines []string, h smiHeaderRow) bool {
	for _, l := range lines[h.next:] {
		f := strings.Fields(l)
		switch {
		case len(f) == 0 || h.devs[f[0]]:
			continue
		case f[0] != "GPU0":
			return false
		case len(f) == 1:
			return true
		}
		cells := splitLabels(f[1])
		return len(cells) > 0 && cells[0] == "X"
	}
	return false
}

// smiHeaderStart tells whether the fields f of a line start the header row:
// GPU0 (maybe run together with the next labels, as in GPU0GPU1…), not
// followed by the X of the first GPU row.
func smiHeaderStart(f []string) bool {
	if len(f) == 0 {
		return false
	}
	first := splitHeaderField(f[0])
	return first[0] == "GPU0" && (len(first) > 1 || len(f) == 1 || f[1] != "X")
}

// smiHeaderFields splits the header row into fields, separating GPU labels
// that a copy lost the tabs between (GPU0GPU1GPU2mlx5_0).
func smiHeaderFields(line string) []string {
	var out []string
	for _, f := range strings.Fields(line) {
		out = append(out, splitHeaderField(f)...)
	}
	return out
}

// splitHeaderField splits "GPU0GPU1mlx5_0" into GPU0, GPU1, mlx5_0; any
// other field is returned alone.
func splitHeaderField(f string) []string {
	var out []string
	for strings.HasPrefix(f, "GPU") {
		n := 3
		for n < len(f) && f[n] >= '0' && f[n] <= '9' {
			n++
		}
		if n == 3 || n == len(f) {
			break
		}
		out = append(out, f[:n])
		f = f[n:]
	}
	return append(out, f)
}

// isSMILegend tells whether the fields f start the "Legend:" or "NIC Legend:"
// block that follows the matrix.
func isSMILegend(f []string) bool {
	return len(f) > 0 && (f[0] == "Legend:" || f[0] == "NIC" && len(f) > 1 && f[1] == "Legend:")
}

// smiContinuation tells whether line continues a row that a terminal
// wrapped: it is not blank and does not start a row or the legend.
func smiContinuation(line string, devs map[string]bool) bool {
	f := strings.Fields(line)
	if len(f) == 0 || isSMILegend(f) || devs[f[0]] {
		return false
	}
	_, isRow := gpuLabel(f[0])
	return !isRow
}

// joinWrapped joins a line that a terminal wrapped (and a copy may have
// trimmed the blanks at the break of): with a space if there is a blank at
// the break or the words on both sides are whole (NIC0 | NIC1, SYS | 0-55),
// directly if the break cuts a word (NV1 | 8, Affin | ity, 112- | 167).
func joinWrapped(a, b string) string {
	if a == "" || b == "" || strings.ContainsAny(a[len(a)-1:], " \t") || strings.ContainsAny(b[:1], " \t") {
		return a + " " + b
	}
	wa, wb := a[strings.LastIndexAny(a, " \t")+1:], strings.Fields(b)[0]
	numeric := func(c byte) bool { return c >= '0' && c <= '9' || c == ',' || c == '-' }
	if numeric(wa[len(wa)-1]) && numeric(wb[0]) {
		return a + b // a number cut in two
	}
	if wholeWord(wa) && wholeWord(wb) {
		return a + " " + b
	}
	return a + b
}

var (
	deviceNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*[0-9]$`)
	cpuListRE    = regexp.MustCompile(`^[0-9][0-9,-]*[0-9]$|^[0-9]$`)
)

// wholeWord tells whether w can be a whole word of nvidia-smi output: a link
// label, a header word, a device name, a number or CPU list, N/A.
func wholeWord(w string) bool {
	switch w {
	case "CPU", "NUMA", "GPU", "ID", "Affinity", "N/A":
		return true
	}
	return splitLabels(w) != nil || deviceNameRE.MatchString(w) || cpuListRE.MatchString(w)
}

// smiTokens splits a row into its label and values. nvidia-smi separates
// cells with tabs and leaves a cell empty when it has no value (a CPU
// Affinity outside the caller's cpuset, the gap before GPU NUMA ID): with
// tabs, empty cells are kept as "". Without tabs (a copy from a terminal or a
// web page) cells are split on spaces and empty ones are lost.
func smiTokens(line string) (toks []string, tabbed bool) {
	if !strings.Contains(line, "\t") {
		return strings.Fields(line), false
	}
	for p := range strings.SplitSeq(line, "\t") {
		f := strings.Fields(p)
		if len(f) == 0 {
			if len(toks) > 0 { // not indentation
				toks = append(toks, "")
			}
			continue
		}
		toks = append(toks, f...)
	}
	return toks, true
}

// splitSMIRow splits a GPU row into its gpus link cells and its affinity
// values, one per column of aff, after devs device (NIC) cells. Link cells
// run together by nvidia-smi (PXBNODE, SYSSYS) are separated. aff is nil if
// the row is too short; n is then the number of values it has.
func splitSMIRow(line string, gpus, devs int, affCols []string) (cells, aff []string, n int) {
	toks, tabbed := smiTokens(line)
	for _, t := range toks[1:] {
		if t != "" {
			n++
		}
	}
	rest := toks[1:]
	cells, rest = takeCells(rest, gpus, false)
	if len(cells) < gpus {
		return nil, nil, n
	}
	_, rest = takeCells(rest, devs, true)
	vals := rest
	k := len(affCols)
	for len(vals) > k && vals[len(vals)-1] == "" {
		vals = vals[:len(vals)-1] // trailing tabs
	}
	if k > 0 && affCols[k-1] == colGPUNUMAID && len(vals) > k && vals[len(vals)-2] == "" {
		// nvidia-smi prints an empty cell before GPU NUMA ID.
		vals = slices.Delete(slices.Clone(vals), len(vals)-2, len(vals)-1)
	}
	if len(vals) > k {
		vals = vals[len(vals)-k:] // extra device cells
	}
	if !tabbed && len(vals) == k-1 && k >= 2 && affCols[0] == colCPUAffinity {
		// Without tabs an empty CPU Affinity leaves no trace: the values
		// present are the columns after it.
		vals = append([]string{""}, vals...)
	}
	if len(vals) < k {
		return nil, nil, n
	}
	return cells, append([]string{}, vals...), n
}

// takeCells takes n link cells from toks, splitting cells that were run
// together. With labelsOnly it stops early at a value that is not a link
// label (the device cells may be fewer than the header says); otherwise it
// takes any value, skipping empty ones.
func takeCells(toks []string, n int, labelsOnly bool) (cells, rest []string) {
	toks = slices.Clone(toks)
	for len(cells) < n && len(toks) > 0 {
		t := toks[0]
		parts := splitLabels(t)
		switch {
		case t == "" && labelsOnly || parts == nil && labelsOnly:
			return cells, toks
		case t == "":
			toks = toks[1:]
			continue
		case parts == nil:
			parts = []string{t}
		}
		if len(cells)+len(parts) > n {
			m := n - len(cells)
			cells = append(cells, parts[:m]...)
			toks[0] = strings.Join(parts[m:], "")
			return cells, toks
		}
		cells = append(cells, parts...)
		toks = toks[1:]
	}
	return cells, toks
}

// smiLinkLabels are the labels of link cells, besides NV<n>.
var smiLinkLabels = []string{"NODE", "PIX", "PXB", "PHB", "SYS", "SOC", "PSB", "X"}

// splitLabels splits s into the link labels it is made of ("PXBNODE" →
// PXB, NODE), or returns nil if it is not made of link labels.
func splitLabels(s string) []string {
	var out []string
	for s != "" {
		if rest, ok := strings.CutPrefix(s, "NV"); ok {
			d := 0
			for d < len(rest) && d < 2 && rest[d] >= '0' && rest[d] <= '9' {
				d++
			}
			if d == 0 {
				return nil
			}
			out = append(out, s[:2+d])
			s = rest[d:]
			continue
		}
		i := slices.IndexFunc(smiLinkLabels, func(l string) bool { return strings.HasPrefix(s, l) })
		if i < 0 {
			return nil
		}
		out = append(out, smiLinkLabels[i])
		s = s[len(smiLinkLabels[i]):]
	}
	return out
}

// smiHeader splits the header fields into GPU columns, device columns and
// affinity columns.
func smiHeader(f []string) (gpus int, devs []string, aff []string, err error) {
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
				if len(devs) > 0 {
					return 0, nil, nil, fmt.Errorf("header column %q after the device column %q: expected the GPU columns first", f[i], devs[len(devs)-1])
				}
				if idx != gpus {
					return 0, nil, nil, fmt.Errorf("header column %q: expected %q", f[i], fmt.Sprintf("GPU%d", gpus))
				}
				gpus++
				if gpus > MaxGPUs {
					return 0, nil, nil, fmt.Errorf("more than %d GPU columns", MaxGPUs)
				}
				continue
			}
			devs = append(devs, f[i])
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
				if v != "N/A" && v != "" {
					if err := checkCPUList(v); err != nil {
						return nil, parseErr(name, r.line, fmt.Sprintf("GPU%d CPU Affinity %q: expected a CPU list like 0-19,40-59 or N/A", i, v))
					}
					cpus[i] = v
				}
			case colNUMAAffinity:
				if v != "N/A" && v != "" {
					first, _, _ := strings.Cut(strings.SplitN(v, ",", 2)[0], "-")
					node, err := strconv.Atoi(first)
					if err != nil || node < 0 || node > maxElements || checkCPUList(v) != nil {
						return nil, parseErr(name, r.line, fmt.Sprintf("GPU%d NUMA Affinity %q: expected a NUMA node number or N/A", i, v))
					}
					numa[i] = node
				}
			case colGPUNUMAID:
				if v != "N/A" && v != "" {
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
	m, err := newMachine(baseName(name), true, numa, cpus, nil, links, DefaultGPUModel())
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
