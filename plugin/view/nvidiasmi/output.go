package nvidiasmi

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// writeList writes `nvidia-smi -L`: "GPU <index>: <name> (UUID: <uuid>)",
// N/A for what is unknown, and under it a line per MIG device the
// container sees, numbered from 0 as a real one prints them ("  MIG
// 3g.40gb     Device  0: (UUID: MIG-…)", the profile in 11 columns); an
// unhealthy GPU's line is the lost-GPU message.
func writeList(out *bytes.Buffer, gpus []*gpu) int {
	code := ExitOK
	for _, g := range gpus {
		if g.lost() {
			out.WriteString(g.lostMessage() + "\n")
			code = ExitUnknownError
			continue
		}
		name, uuid := "N/A", "N/A"
		if g.st != nil {
			name = g.st.Product
		}
		if g.uuid != "" {
			uuid = g.uuid
		}
		fmt.Fprintf(out, "GPU %d: %s (UUID: %s)\n", g.pos, name, uuid)
		for k, d := range g.migs {
			fmt.Fprintf(out, "  MIG %-11s Device %2d: (UUID: %s)\n", d.Profile, k, d.UUID)
		}
	}
	return code
}

// writeCSV writes --query-gpu: the header unless noheader, then one line per
// GPU with the values separated by ", " (nvidia-smi never quotes: no value
// contains a comma). An unhealthy GPU's line is the lost-GPU message.
func writeCSV(out *bytes.Buffer, q *queryContext, gpus []*gpu, fs []*field, noheader, nounits bool) int {
	return writeCSVQuery(out, gpus, fs, noheader, func(g *gpu) {
		writeValues(out, len(fs), func(i int) string { return fs[i].format(q, g, nounits) })
	})
}

// writeCSVQuery writes a CSV query: the fields' header unless noheader, then
// per GPU its lines (rows), or for a lost GPU the lost-GPU message, which
// makes the exit code ExitUnknownError.
func writeCSVQuery[F interface{ header() string }](out *bytes.Buffer, gpus []*gpu, fs []F, noheader bool, rows func(g *gpu)) int {
	if !noheader {
		writeValues(out, len(fs), func(i int) string { return fs[i].header() })
	}
	code := ExitOK
	for _, g := range gpus {
		if g.lost() {
			out.WriteString(g.lostMessage() + "\n")
			code = ExitUnknownError
			continue
		}
		rows(g)
	}
	return code
}

// writeValues writes one CSV line of n values separated by ", ".
func writeValues(out *bytes.Buffer, n int, value func(i int) string) {
	for i := range n {
		if i > 0 {
			out.WriteString(", ")
		}
		out.WriteString(value(i))
	}
	out.WriteByte('\n')
}

// csvHeader is the CSV header of a property: "memory.total [MiB]".
// nvidia-smi keeps the unit in the header with nounits.
func csvHeader(name, unit string) string {
	if unit == "" {
		return name
	}
	return name + " [" + unit + "]"
}

// The fixed lines of the summary table (driver R580 layout: 91 columns).
const (
	summaryRule    = "+-----------------------------------------------------------------------------------------+\n"
	summaryColumns = "+-----------------------------------------+------------------------+----------------------+\n" +
		"| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n" +
		"| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n" +
		"|                                         |                        |               MIG M. |\n" +
		"|=========================================+========================+======================|\n"
	summaryGPURule  = "+-----------------------------------------+------------------------+----------------------+\n"
	summaryProcsTop = "\n" + summaryRule +
		"| Processes:                                                                              |\n" +
		"|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n" +
		"|        ID   ID                                                               Usage      |\n" +
		"|=========================================================================================|\n"
	summaryNoProcs = "|  No running processes found                                                             |\n"
)

// maxSummaryName is the longest name the summary shows whole; a longer one
// is cut to its first 24 characters and "..." ("NVIDIA GeForce RTX 2080 ...").
const maxSummaryName = 27

// writeSummary writes the default output of nvidia-smi: the date, the
// header with the driver and CUDA versions, one block of three lines per
// GPU and the container's processes (readProcs). Unhealthy GPUs are not in the table: a
// lost-GPU message is printed for each before it, and the exit code is
// ExitUnknownError; if no GPU is left, only the messages are printed.
func writeSummary(out *bytes.Buffer, now time.Time, gpus []*gpu) int {
	code := ExitOK
	var shown []*gpu
	for _, g := range gpus {
		if g.lost() {
			out.WriteString(g.lostMessage() + "\n")
			code = ExitUnknownError
			continue
		}
		shown = append(shown, g)
	}
	if len(shown) == 0 {
		return code
	}
	out.WriteString(now.Format("Mon Jan _2 15:04:05 2006") + "       \n")
	out.WriteString(summaryRule)
	fmt.Fprintf(out, "| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|\n", driverVersion(), driverVersion(), cudaVersion())
	out.WriteString(summaryColumns)
	for i, g := range shown {
		if i > 0 {
			out.WriteString(summaryGPURule)
		}
		writeSummaryGPU(out, g)
	}
	out.WriteString(summaryGPURule)
	writeSummaryMIG(out, shown)
	out.WriteString(summaryProcsTop)
	n := 0
	for _, g := range shown {
		for _, p := range g.procs {
			out.WriteString(summaryProcess(g.pos, p))
			n++
		}
	}
	if n == 0 {
		out.WriteString(summaryNoProcs)
	}
	out.WriteString(summaryRule)
	return code
}

// writeSummaryGPU writes the three lines of one GPU.
func writeSummaryGPU(out *bytes.Buffer, g *gpu) {
	name, persistence, bus, dispA, ecc := "N/A", "N/A", "N/A", "N/A", "N/A"
	fan, temp, perf, usage, capW := "N/A", "N/A", "N/A", "N/A", "N/A"
	memUsed, memTotal, util, compute, mig := "N/A", "N/A", "N/A", "N/A", "N/A"
	if s := g.st; s != nil {
		name, persistence, bus, dispA = s.Product, "On", s.PCIBusID, "Off"
		if len(name) > maxSummaryName {
			name = name[:maxSummaryName-3] + "..."
		}
		ecc = "Off"
		if !g.eccSupported() {
			ecc = "N/A"
		}
		if g.eccEnabled() {
			ecc = itoa(s.Telemetry.MemoryErrors.VolatileUncorrected)
		}
		t := s.Telemetry
		if t.FanSpeedPercent != nil {
			fan = fmt.Sprintf("%d%%", *t.FanSpeedPercent)
		}
		temp, perf = fmt.Sprintf("%dC", t.TemperatureC), "P0"
		usage, capW = roundW(t.PowerDrawW), fmt.Sprintf("%dW", s.PowerLimitW)
		memUsed, memTotal = fmt.Sprintf("%dMiB", t.MemoryUsedMiB), fmt.Sprintf("%dMiB", s.MemoryTotalMiB)
		util, compute = fmt.Sprintf("%d%%", t.UtilizationGPUPercent), "Default"
		if m, ok := g.migMode(); ok {
			mig = m
		}
		if g.migOn {
			// A real H100 with MIG on: ECC "On" (the errors are the MIG
			// devices'), no GPU utilization.
			ecc, util = "On", "N/A"
		}
	}
	fmt.Fprintf(out, "|%4d  %-31s%-3s |   %-16s %3s |%21s |\n", g.pos, name, persistence, bus, dispA, ecc)
	// The performance state and the power draw share 18 columns (P0..P12).
	fmt.Fprintf(out, "| %3s   %3s    %s%*s / %5s |%11s / %9s |%8s%13s |\n", fan, temp, perf, 18-len(perf), usage, capW, memUsed, memTotal, util, compute)
	fmt.Fprintf(out, "|                                         |                        |%21s |\n", mig)
}

// writeTopology writes `nvidia-smi topo -m` for all the container's GPUs.
func writeTopology(out *bytes.Buffer, m *machine) int {
	if m.links == nil {
		fmt.Fprintf(out, "Unable to determine the topology of the GPUs: %v\n", m.linksErr)
		return ExitUnknownError
	}
	cpus := make([]string, len(m.gpus))
	numa := make([]int, len(m.gpus))
	for i, g := range m.gpus {
		numa[i] = g.numa
		if g.st != nil {
			cpus[i] = g.st.CPUAffinity
		}
	}
	if err := m.links.WriteMatrix(out, cpus, numa); err != nil {
		fmt.Fprintf(out, "%v\n", err)
		return ExitUnknownError
	}
	return ExitOK
}

// driverVersion and cudaVersion are the fake driver's, the same for every
// GPU (topology.DriverVersion, topology.CUDAVersion).
func driverVersion() string { return topology.DriverVersion }
func cudaVersion() string   { return topology.CUDAVersion }

// padLabel pads a -q label, with its indentation, to the column of the
// colon.
func padLabel(s string) string {
	const width = 55
	if len(s) >= width {
		return s
	}
	return s + strings.Repeat(" ", width-len(s))
}
