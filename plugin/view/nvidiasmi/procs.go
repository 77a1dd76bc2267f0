package nvidiasmi

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

// process is one compute process on a GPU, as nvidia-smi lists it.
type process struct {
	pid     int
	name    string
	usedMiB int
	// mig is the MIG device the process runs on, nil without MIG: its GPU
	// and compute instance ids are the process's GI and CI.
	mig *status.MIGDevice
}

// instanceIDs are the process's GPU and compute instance ids, N/A
// without MIG.
func (p process) instanceIDs() (gi, ci string) {
	if p.mig == nil {
		return notAvailable, notAvailable
	}
	return itoa(p.mig.GPUInstanceID), itoa(p.mig.ComputeInstanceID)
}

// notFound is the process name nvidia-smi prints when it cannot read it.
const notFound = "[Not Found]"

// maxCmdlineBytes bounds what is read of /proc/1/cmdline and comm.
const maxCmdlineBytes = 64 << 10

// mainProcessName returns the name of the container's main process, PID 1
// of its PID namespace, as nvidia-smi prints it: argv[0] of procFS's
// 1/cmdline, else 1/comm, else "[Not Found]". procFS is /proc.
func mainProcessName(procFS fs.FS) string {
	if procFS == nil {
		return notFound
	}
	if data, err := readSmall(procFS, "1/cmdline"); err == nil {
		arg0, _, _ := bytes.Cut(data, []byte{0})
		if s := printableName(string(arg0)); s != "" {
			return s
		}
	}
	if data, err := readSmall(procFS, "1/comm"); err == nil {
		if s := printableName(strings.TrimSpace(string(data))); s != "" {
			return s
		}
	}
	return notFound
}

// readSmall reads at most maxCmdlineBytes of a file.
func readSmall(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCmdlineBytes))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return data, nil
}

// printableName drops what a name must not carry into a table or a CSV
// line: control characters and commas (nvidia-smi never quotes), and
// characters beyond ASCII, each replaced by '?'.
func printableName(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == ',' {
			return '?'
		}
		return r
	}, s)
}

// readProcs fills each GPU's processes: those of the container itself. The
// live values list who holds each GPU (status.Holder); the container's
// holders are those whose pod is the host name (Kubernetes sets a pod's
// host name to its name), or, if none is and the GPU has one holder only,
// that one. Each such holder using the GPU (memory or utilization above
// 0) is one process: the container's main process, PID 1, with the
// holder's memory. name is called once, only if a process is found.
func readProcs(gpus []*gpu, hostname string, name func() string) {
	procName := ""
	for _, g := range gpus {
		g.procs = nil
		if g.st == nil {
			continue
		}
		holders := g.st.Telemetry.Holders
		var mine []int
		for i, h := range holders {
			if hostname != "" && h.Pod == hostname {
				mine = append(mine, i)
			}
		}
		if len(mine) == 0 && len(holders) == 1 {
			mine = []int{0}
		}
		for _, i := range mine {
			h := holders[i]
			if h.MemoryUsedMiB <= 0 && h.UtilizationGPUPercent <= 0 {
				continue
			}
			if procName == "" {
				procName = name()
			}
			p := process{pid: 1, name: procName, usedMiB: max(h.MemoryUsedMiB, 0)}
			if len(g.migs) > 0 {
				// It runs on the container's (first) MIG device of the GPU;
				// the telemetry counts its memory in its MIG devices.
				p.mig = &g.migs[0]
			}
			g.procs = append(g.procs, p)
		}
	}
}

// An appField is one property of --query-compute-apps or
// --query-accounted-apps.
type appField struct {
	name    string
	aliases []string
	unit    string
	help    string
	value   func(q *queryContext, g *gpu, p process) string
}

// header is the CSV header of the property (csvHeader).
func (f *appField) header() string { return csvHeader(f.name, f.unit) }

// format renders the property's value for process p of g: the unit after a
// space unless nounits or the value is [N/A]; [N/A] for a property without
// a value function (those of accounting, which is off).
func (f *appField) format(q *queryContext, g *gpu, p process, nounits bool) string {
	if f.value == nil {
		return "[N/A]"
	}
	v := f.value(q, g, p)
	if f.unit == "" || nounits || v == "[N/A]" {
		return v
	}
	return v + " " + f.unit
}

// gpuValue is a value of the process's GPU: [N/A] without a status file.
func gpuValue(v func(g *gpu) string) func(*queryContext, *gpu, process) string {
	return func(_ *queryContext, g *gpu, _ process) string {
		if g.st == nil {
			return "[N/A]"
		}
		return v(g)
	}
}

// The GPU fields common to both lists, as driver 580 documents them.
func appGPUFields() []appField {
	return []appField{
		{name: "timestamp", help: `The timestamp of when the query was made in format "YYYY/MM/DD HH:MM:SS.msec".`,
			value: func(q *queryContext, _ *gpu, _ process) string { return q.now.Format("2006/01/02 15:04:05.000") }},
		{name: "gpu_name", help: "The official product name of the GPU. This is an alphanumeric string. For all products.",
			value: gpuValue(func(g *gpu) string { return g.st.Product })},
		{name: "gpu_bus_id", help: `PCI bus id as "domain:bus:device.function", in hex.`,
			value: gpuValue(func(g *gpu) string { return g.st.PCIBusID })},
		{name: "gpu_serial", help: "This number matches the serial number physically printed on each board. It is a globally unique immutable alphanumeric value.",
			value: gpuValue(func(g *gpu) string {
				if g.st.Serial == "" {
					return "[N/A]"
				}
				return g.st.Serial
			})},
		{name: "gpu_uuid", help: "This value is the globally unique immutable alphanumeric identifier of the GPU. It does not correspond to any physical label on the board.",
			value: func(_ *queryContext, g *gpu, _ process) string {
				if g.uuid == "" {
					return "[N/A]"
				}
				return g.uuid
			}},
	}
}

func pidValue(_ *queryContext, _ *gpu, p process) string { return itoa(p.pid) }

// computeAppFields are the properties of --query-compute-apps of driver 580,
// in its order.
var computeAppFields = append(appGPUFields(),
	appField{name: "pid", help: "Process ID of the compute application", value: pidValue},
	appField{name: "process_name", aliases: []string{"name"}, help: "Process Name",
		value: func(_ *queryContext, _ *gpu, p process) string { return p.name }},
	appField{name: "used_gpu_memory", aliases: []string{"used_memory"}, unit: "MiB",
		help:  "Amount memory used on the device by the context. Not available on Windows when running in WDDM mode because Windows KMD manages all the memory not NVIDIA driver.",
		value: func(_ *queryContext, _ *gpu, p process) string { return itoa(p.usedMiB) }},
)

// accountedAppFields are the properties of --query-accounted-apps of driver
// 580. Accounting mode is Disabled, as on real GPUs by default: no process
// is ever listed, so their values are never printed.
var accountedAppFields = append(appGPUFields(),
	appField{name: "vgpu_instance", help: "vGPU instance"},
	appField{name: "pid", help: "Process ID of the compute application", value: pidValue},
	appField{name: "gpu_utilization", aliases: []string{"gpu_util"}, unit: "%", help: "GPU Utilization"},
	appField{name: "mem_utilization", aliases: []string{"mem_util"}, unit: "%", help: "Percentage of GPU memory utilized on the device by the context."},
	appField{name: "max_memory_usage", unit: "MiB", help: "Maximum amount memory used on the device by the context."},
	appField{name: "time", unit: "ms", help: "Amount of time in ms during which the compute context was active."},
)

// parseAppFields parses a --query-compute-apps or --query-accounted-apps
// list as parseFields does a --query-gpu list: names or aliases separated
// by commas, spaces around them ignored; it returns the first name that is
// none of them.
func parseAppFields(list string, fields []appField) ([]*appField, string, bool) {
	return parseList(list, func(name string) (*appField, bool) {
		for i := range fields {
			if f := &fields[i]; f.name == name || slices.Contains(f.aliases, name) {
				return f, true
			}
		}
		return nil, false
	})
}

// writeApps writes --query-compute-apps (accounted false) or
// --query-accounted-apps: the header unless noheader, then one line per
// process of the GPUs (none for accounted apps: accounting is off). A lost
// GPU's line is the lost-GPU message, as with --query-gpu.
func writeApps(out *bytes.Buffer, q *queryContext, gpus []*gpu, fs []*appField, noheader, nounits, accounted bool) int {
	return writeCSVQuery(out, gpus, fs, noheader, func(g *gpu) {
		if accounted {
			return
		}
		for _, p := range g.procs {
			writeValues(out, len(fs), func(i int) string { return fs[i].format(q, g, p, nounits) })
		}
	})
}

// writeHelpApps writes --help-query-compute-apps or
// --help-query-accounted-apps, in the layout of driver 580.
func writeHelpApps(out *bytes.Buffer, accounted bool) {
	fields := computeAppFields
	if accounted {
		fields = accountedAppFields
		out.WriteString("List of valid properties to query for the switch \"--query-accounted-apps\":\n\n" +
			"Section about Accounted Graphics/Compute Processes properties\n" +
			"List of accounted processes having had a graphics/compute context on the device.\n\n" +
			"Format options and one or more properties to be queried need to be provided as comma separated values for this switch.\n" +
			"For example:\nnvidia-smi --query-accounted-apps=gpu_name,pid,time,gpu_util,mem_util,max_memory_usage --format=csv\n\n" +
			"List of properties that can be queried are:\n\n")
	} else {
		out.WriteString("List of valid properties to query for the switch \"--query-compute-apps\":\n\n" +
			"Section about Active Compute Processes properties\n" +
			"List of processes having compute context on the device.\n\n")
	}
	for _, f := range fields {
		names := append([]string{f.name}, f.aliases...)
		for i := range names {
			names[i] = `"` + names[i] + `"`
		}
		fmt.Fprintf(out, "%s\n%s\n\n", strings.Join(names, " or "), f.help)
	}
	out.WriteString("\n")
}

// summaryProcess is one line of the summary's process table (driver R580:
// GPU, GI and CI ids (N/A without MIG), PID, type C, the name cut to 38
// columns, the memory). A longer name keeps its end: "..." and its last 34
// characters, as the real tool shows long paths.
func summaryProcess(pos int, p process) string {
	name := p.name
	if len(name) > 37 {
		name = "..." + name[len(name)-34:]
	}
	if p.mig != nil {
		// A real H100 with MIG on: the ids under GI and CI, right-aligned one column left of N/A.
		return fmt.Sprintf("|%5d%5d%5d   %14d      C   %-38s%8s |\n", pos, p.mig.GPUInstanceID, p.mig.ComputeInstanceID, p.pid, name, itoa(p.usedMiB)+"MiB")
	}
	return fmt.Sprintf("|%5d   N/A  N/A  %14d      C   %-38s%8s |\n", pos, p.pid, name, itoa(p.usedMiB)+"MiB")
}
