package topology

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Terminal escapes nvidia-smi puts around the header row of `topo -m`
// (underline on, all attributes off); it writes them also when its output is
// not a terminal, and ParseNvidiaSMI removes them.
const (
	underlineOn  = "\x1b[4m"
	underlineOff = "\x1b[0m"
)

// WriteMatrix writes the labels as `nvidia-smi topo -m` prints the matrix of
// the GPUs it sees, which in a container are the container's GPUs, numbered
// GPU0 … GPU<n-1> in position order: the header row (underlined with terminal
// escapes, as nvidia-smi does), one tab-separated row per GPU with " X " on
// the diagonal and the label of every other position, then the CPU Affinity,
// NUMA Affinity and GPU NUMA ID columns, and the legend. cpus[p] is the CPU
// list of position p and numa[p] its NUMA node; an empty list, a negative
// node or a missing entry (the slices may be shorter, or nil) prints N/A.
// GPU NUMA ID is always N/A (no GPU memory NUMA node, as on PCIe and SXM
// boards). ParseNvidiaSMI reads the text back to the same labels (BOARD,
// our label for two GPUs of one board, included) and NUMA nodes. A nil or
// empty l writes nothing.
func (l *LinkLabels) WriteMatrix(w io.Writer, cpus []string, numa []int) error {
	n := l.Len()
	if n == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\t" + underlineOn)
	for q := range n {
		fmt.Fprintf(&b, "GPU%d\t", q)
	}
	b.WriteString("CPU Affinity\tNUMA Affinity\tGPU NUMA ID" + underlineOff + "\n")
	for p := range n {
		fmt.Fprintf(&b, "GPU%d", p)
		for q := range n {
			if p == q {
				b.WriteString("\t X ")
			} else {
				b.WriteString("\t" + l.Label(p, q))
			}
		}
		cpu, node := "N/A", "N/A"
		if p < len(cpus) && cpus[p] != "" {
			cpu = cpus[p]
		}
		if p < len(numa) && numa[p] >= 0 {
			node = strconv.Itoa(numa[p])
		}
		fmt.Fprintf(&b, "\t%s\t%s\t\tN/A\n", cpu, node)
	}
	b.WriteString(smiLegend)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write topology matrix: %w", err)
	}
	return nil
}
