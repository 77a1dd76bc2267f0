// Package nvidiasmi is the fake nvidia-smi of virtual-gpu-device-plugin, as a
// library: Main(args, env, stdout, stderr) runs it and returns its exit code.
// The plugin binary is a multi-call binary: run under the name nvidia-smi (the
// plugin mounts it read-only at /usr/bin/nvidia-smi in containers that get
// virtual GPUs) it is this command. Workloads and their tooling run
// `nvidia-smi -L` or `--query-gpu` rather than read VIRTUAL_GPU_IDS; this
// command answers them, showing exactly the container's GPUs in the real
// tool's formats (column layout, units, CSV) so that scripts parsing them work.
//
// # Environment
//
// It reads only the environment and the status directory (and --set-load
// talks to the plugin's load socket):
//
//   - VIRTUAL_GPU_IDS (required): the container's device ids, joined by
//     commas (fake-3,fake-5, or replica ids fake-3::0; the replicas of one GPU
//     are one GPU). Without any: "No devices were found", exit code 6.
//   - VIRTUAL_GPU_UUIDS: their UUIDs, in the same order (one per entry, or
//     one per GPU): the names of their status files. Without them (or with a
//     list of another length) the GPUs' identity is unknown.
//   - VIRTUAL_GPU_STATUS_DIR: the status directory, default /run/virtual-gpu
//     (see plugin/status): <uuid>.json per GPU, with its identity, health and
//     live values, and while the plugin's telemetry is on telemetry.json,
//     every GPU's live values of the last second, which replace the status
//     files' (an unusable one is ignored). A GPU whose file is missing or
//     invalid, or describes another device id, is still listed, with N/A
//     values.
//   - VIRTUAL_GPU_NUMA_NODES: the NUMA node of each GPU (else the status
//     files' nodes); VIRTUAL_GPU_LINKS: the link of every pair (needed by
//     topo -m); VIRTUAL_GPU_TOPOLOGY: the machine's name. See topology.EnvLinks.
//   - VIRTUAL_GPU_LOAD_SOCKET: the allocation's load socket (loadsock), set
//     when the plugin runs with -telemetry-writable; --set-load needs it.
//
// GPU indices are positions 0 … k-1 in the order of VIRTUAL_GPU_IDS, as the
// real tool numbers the GPUs of a container; minor numbers, bus ids and
// serials are the host's.
//
// # Commands
//
// The formats are those of driver R580 (topology.DriverVersion, CUDA 13.0);
// testdata/README.md cites the real outputs they follow.
//
//   - nvidia-smi: the summary table (date, driver and CUDA versions, three
//     lines per GPU: name, persistence, bus id, display, ECC; fan,
//     temperature, performance state, power draw and cap, memory use,
//     utilization, compute mode; MIG mode) and "No running processes found".
//   - -L, --list-gpus: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)".
//   - -i, --id=ID[,ID…]: restricts any command but topo to GPUs named by
//     index, UUID (any case), PCI bus id ([domain:]bus:device[.function], hex)
//     or board serial, shown in index order; an id naming no GPU: "No devices
//     were found", exit code 6.
//   - --query-gpu=FIELDS --format=csv[,noheader][,nounits]: every property of
//     `--help-query-gpu` of driver 580 and its aliases; the header prints the
//     canonical names with units ("memory.total [MiB]", also with nounits),
//     values are separated by ", " and never quoted (no value contains a
//     comma), properties not simulated are [N/A]. An unknown field: `Field
//     "x" is not a valid field to query.` and exit code 2. --help-query-gpu
//     lists them all.
//   - -q and -q -x: the GPU report as text and as XML (nvidia_smi_log, the
//     element names of nvsmi_device_v12.dtd).
//   - topo -m: the matrix of the container's GPUs (labels from
//     VIRTUAL_GPU_LINKS, CPU and NUMA affinity), the legend; the project's
//     parser, topology.ParseNvidiaSMI, reads it back.
//   - --set-load=UTIL[,MEM_MIB] (this nvidia-smi only): the container's own
//     utilization (0-100 %) and memory used (MiB per GPU) on its GPUs (or
//     those -i picks), sent over VIRTUAL_GPU_LOAD_SOCKET; the plugin's
//     telemetry and the status files then show them. --set-load=clear
//     returns the GPUs to the plugin's load model. A value that is not a
//     number or out of range: exit code 2, nothing sent; no socket: exit
//     code 3 (ExitNotSupported); the plugin's refusal is printed, with exit
//     code 2 for a bad value and 255 otherwise.
//   - -h, --version, topo -h.
//
// Unknown options and arguments: "ERROR: Option X is not recognized. Please
// run 'nvidia-smi -h' for help.", exit code 2; options that make no command
// together (-L with -q, --format without --query-gpu, -x without -q): "Invalid
// combination of input arguments. …", exit code 2. Like the real tool, every
// message goes to standard output. Not implemented: -l/-lms (loop), -f
// (file), -d (display filter), -u, --dtd and the other subcommands (dmon,
// pmon, nvlink, mig, …), which are "not recognized".
//
// # Unhealthy GPUs
//
// A GPU the status file says unhealthy is shown as the real tool shows a GPU
// that fell off the bus (XID 79) and whose handle NVML cannot obtain: in its
// place, the line "Unable to determine the device handle for GPU0000:07:00.0:
// Unknown Error" (bus id with a 4-digit domain). The summary prints these
// lines before the table of the remaining GPUs (none: the lines alone); -L,
// --query-gpu and -q print the line where the GPU would be; -q -x prints them
// before the document, which leaves the GPU out. The exit code is then 255
// (ExitUnknownError). The other GPUs keep their indices. topo -m, which shows
// the static topology, is unchanged.
package nvidiasmi
