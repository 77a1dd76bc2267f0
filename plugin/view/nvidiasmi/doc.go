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
// The processes it lists (see Processes below) also read the host name
// (Command.Hostname, os.Hostname) and the container's /proc (Command.Proc).
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
//     lines per GPU: name, persistence, bus id, display, volatile
//     uncorrected ECC errors; fan, temperature, performance state, power
//     draw and cap, memory use, utilization, compute mode; MIG mode) and the
//     Processes table (GPU, GI and CI ids N/A, PID, type C, name, memory),
//     or "No running processes found"; between them, with MIG devices, the
//     MIG devices table (GPU, GI, CI and MIG device ids, memory, BAR1, SMs,
//     engines), a MIG-enabled GPU showing ECC On, GPU-Util N/A and MIG M.
//     Enabled.
//   - -L, --list-gpus: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)", and
//     under it "  MIG 3g.40gb     Device  0: (UUID: MIG-…)" per MIG device
//     the container sees.
//   - mig -lgi [-i ID]: the GPU instances table of the MIG devices the
//     container sees; "No MIG-enabled devices found." (exit code 6)
//     without a MIG-enabled GPU.
//
// MIG: a GPU whose status file has MIG on shows MIG mode Enabled
// (summary, -q, mig.mode.current and pending). A container holding MIG
// devices (VIRTUAL_GPU_IDS of MIG device ids, fake-0-mig-3g40gb-4) sees
// their GPU with those MIG devices only, numbered from 0 in GPU instance
// id order, as a real container does; one holding the GPU whole sees all
// its MIG devices. -q lists them in MIG Device sections after MIG Mode.
// The container's process runs on its first MIG device of the GPU (its GI
// and CI ids in the Processes tables), with the memory the telemetry
// counts it in its MIG devices; a MIG device's memory used is its
// processes' (others' are unknown in the container). -q -x has them as
// <mig_device> elements of <mig_devices>.
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
//     lists them all. The static facts of a board (VBIOS, InfoROM, PCI
//     subsystem id, minimum power limit, remap banks) are
//     topology.BoardFacts; the live ones (video clock, encoder and decoder
//     utilization, clock event reasons, memory errors) the status files'
//     and live file's; remapped_rows.* are N/A on boards that retire pages
//     (before Ampere) and retired_pages.* on those that remap rows, ECC
//     counts N/A without ECC; temperature.gpu.tlimit is the margin to the
//     maximum operating temperature (topology.GPUModel.Thresholds), as on
//     real boards; clocks_event_reasons.active is the telemetry's mask
//     (topology.ClockEvent*), with gpu_idle while the utilization is 0.
//     Still [N/A] where a real data-center GPU has a value: fabric.* (no
//     NVLink fabric manager is simulated).
//   - --query-compute-apps=FIELDS --format=…: the container's processes
//     (timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, pid,
//     process_name or name, used_gpu_memory or used_memory, in MiB);
//     --help-query-compute-apps lists them.
//   - --query-accounted-apps=FIELDS --format=…: accounting mode is
//     Disabled, as on real GPUs by default, so the header only;
//     --help-query-accounted-apps lists the fields.
//   - -q and -q -x: the GPU report as text and as XML (nvidia_smi_log, the
//     element names of nvsmi_device_v12.dtd), with the same values as
//     --query-gpu, T.Limit thresholds, the bank remap histogram and the
//     Processes section (<process_info> elements in XML). Still N/A where a
//     real GPU has a value: board and GPU part numbers, GPU memory power,
//     PCIe atomic caps (the host's), the fabric. BAR1 Memory Usage is the
//     board's aperture (topology.BoardFacts) with the memory in use and 1
//     MiB mapped; GPU PDI is derived from the UUID.
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
// # Processes
//
// nvidia-smi runs inside the container, and a container sees only its own
// processes. The live file (telemetry.json) lists who holds each GPU
// (status.Holder, with its own utilization and memory); the container's
// holders are those whose pod is the host name, which Kubernetes sets to
// the pod's name, or, when none is and the GPU has a single holder, that
// one. Each of them using the GPU (memory or utilization above 0) is one
// process: the container's main process, PID 1 of its PID namespace,
// named by argv[0] of /proc/1/cmdline (else /proc/1/comm, else
// "[Not Found]"), with the holder's memory. An idle holder, or none, is no
// process: "No running processes found", "Processes : None", a CSV header
// alone.
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
// A GPU the status file says unhealthy is shown as a real GPU with its
// fault (topology.ParseFault of the health reason). An ECC fault (XID 48,
// 63, 64, 92, 94, 95 or the word ECC) or a thermal one (the word thermal)
// still answers NVML: it is shown as any GPU, with the values the plugin
// writes for it — ECC counts, remapped rows or retired pages and their
// pending flags, the summary's Volatile Uncorr. ECC, the thermal clock
// event reasons, its temperature — and the exit code is 0. Any other
// fault is a GPU lost as one that fell off the bus (XID 79) and whose
// handle NVML cannot obtain: in its place, the line "Unable to determine the device handle for GPU0000:07:00.0:
// Unknown Error" (bus id with a 4-digit domain). The summary prints these
// lines before the table of the remaining GPUs (none: the lines alone); -L,
// --query-gpu and -q print the line where the GPU would be; -q -x prints them
// before the document, which leaves the GPU out. The exit code is then 255
// (ExitUnknownError). The other GPUs keep their indices. topo -m, which shows
// the static topology, is unchanged.
package nvidiasmi
