package nvidiasmi

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// helpText is -h: the options this nvidia-smi implements, in the layout of
// the real tool's help.
const helpText = `NVIDIA System Management Interface -- v` + topology.DriverVersion + ` (virtual-gpu-device-plugin)

This nvidia-smi shows the virtual GPUs of this container, as the device plugin
allocated them: their identity and live values come from the status files in
$VIRTUAL_GPU_STATUS_DIR (default ` + status.DefaultDir + `), their topology from
$VIRTUAL_GPU_LINKS. It implements the options below, in the formats of the real
tool; other options are not recognized.

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.

          --version             Print version information and exit.

  LIST OPTIONS:

    -L,   --list-gpus           Display a list of GPUs connected to the system.

  SUMMARY OPTIONS:

    <no arguments>              Show a summary of GPUs connected to the system.

    [plus any of]

    -i,   --id=                 Target specific GPUs: indices, UUIDs, PCI bus ids
                                or serial numbers, separated by commas.

  QUERY OPTIONS:

    -q,   --query               Display GPU info.

    [plus any of]

    -i,   --id=                 Target specific GPUs.
    -x,   --xml-format          Produce XML output.

  SELECTIVE QUERY OPTIONS:

    --query-gpu=                Information about GPU.
                                Call --help-query-gpu for more info.
    --query-compute-apps=       List of currently active compute processes.
                                Call --help-query-compute-apps for more info.
    --query-accounted-apps=     List of accounted compute processes.
                                Call --help-query-accounted-apps for more info.

    [mandatory]

    --format=                   Comma separated list of format options:
                                  csv - comma separated values (MANDATORY)
                                  noheader - skip the first line with column headers
                                  nounits - don't print units for numerical
                                             values

    [plus any of]

    -i,   --id=                 Target specific GPUs.

 TOPOLOGY:
    topo -m                     Display the GPU connection matrix.

 VIRTUAL GPU OPTIONS (this nvidia-smi only):
    --set-load=UTIL[,MEM_MIB]   Set this container's load on its GPUs: the
                                utilization (0-100 %) and the memory used per
                                GPU (MiB) it puts on them, as the plugin's
                                telemetry and nvidia-smi then show them, for
                                an hour or until the container's pod ends.
                                --set-load=clear gives them back to the
                                plugin's load model. Needs the plugin's
                                -telemetry-writable ($VIRTUAL_GPU_LOAD_SOCKET).

    [plus any of]

    -i,   --id=                 Target specific GPUs.
`

// topoHelpText is `nvidia-smi topo` and `topo -h`.
const topoHelpText = `topo -- Display topological information about the system.

Usage: nvidia-smi topo [options]

Options include:
    [-m | --matrix]: Display the GPU connection matrix of the system.
    [-h | --help]: Display help information.
`

// writeVersion writes --version as driver R580 prints it.
func writeVersion(out *bytes.Buffer) {
	fmt.Fprintf(out, "NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\nCUDA Version        : %s\n",
		topology.DriverVersion, topology.NVMLVersion, topology.DriverVersion, topology.CUDAVersion)
}

// writeHelpQueryGPU writes --help-query-gpu: every field, its aliases and
// what this nvidia-smi reports for it, in the layout of the real tool.
func writeHelpQueryGPU(out *bytes.Buffer) {
	out.WriteString("List of valid properties to query for the switch \"--query-gpu\":\n\n")
	for _, f := range fields {
		names := append([]string{f.name}, f.aliases...)
		for i := range names {
			names[i] = `"` + names[i] + `"`
		}
		fmt.Fprintf(out, "%s\n%s\n\n", strings.Join(names, " or "), f.help)
	}
}
