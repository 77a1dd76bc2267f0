// Package topology models the fake GPU machine the plugin advertises: GPUs
// fake-0 … fake-<n-1> of one model, their NUMA nodes, the PCIe relation of
// every pair (BOARD, PIX, PXB, PHB, NODE, SYS, as `nvidia-smi topo -m`
// reports them, derived from a tree of host bridges and switches) and their
// NVLinks (point-to-point counts, or NVSwitch domains where every pair has
// the same count).
//
// A Machine comes from Generic (the -devices=N layout), Preset (built-in
// machines: see PresetNames), Parse (a YAML file or pasted `nvidia-smi topo
// -m` output, detected by content: see DetectFormat) or New (programmatic). Resolve picks one
// from the plugin's -topology and -devices flags. Machines are immutable and
// safe for concurrent use.
//
// The formats, the presets and their sources, the generic layout, and the
// container environment variables are documented with examples in
// topology/README.md. In short:
//
//   - YAML: apiVersion virtual-gpu.unicore.mcyou.cc/v1, kind Topology,
//     an optional gpu model (product, memoryMiB, computeCapability, family,
//     powerLimitW, idlePowerW), numaNodes → hostBridges → switches → gpus
//     (each with an optional count), nvlinks entries with a domain or pairs,
//     links, and optional repeat/stride. Strict: unknown fields are errors.
//   - nvidia-smi: the GPU×GPU matrix and the affinity columns; NIC columns
//     and rows, legends, blank lines and anything before the header (a shell
//     prompt, an environment report) are skipped; of several matrices the
//     first is read.
//
// Every GPU of a machine is one model (Machine.GPUModel: product name,
// memory, compute capability, family, power limit and idle power; a preset
// copies its machine's, others get DefaultGPUModel) and has the identity
// nvidia-smi would show: Machine.PCIBusID (ascending with the index, with
// gaps that follow the PCIe tree) and Machine.MinorNumber (the index).
//
// Errors from parsing are *ParseError values ("file:line: what was
// expected") that unwrap to ErrInvalidTopology.
//
// ContainerEnv gives the variables a container gets besides
// VIRTUAL_GPU_IDS (here for fake-0, fake-1, fake-4 of dgx1-volta):
//
//	VIRTUAL_GPU_TOPOLOGY=dgx1-volta          machine name
//	VIRTUAL_GPU_NUMA_NODES=0,0,1             NUMA node per device, in id order, -1 if unknown
//	VIRTUAL_GPU_LINKS=SYS;NV1=0-1;NV2=0+2    pair labels over positions 0..k-1, compactly (EnvLinks)
//
// ParseLinks decodes VIRTUAL_GPU_LINKS. The value stays small at any size:
// under 5 KiB for all 1024 GPUs of the generic layout.
//
// Machine.ReportNUMA decides the NUMA node each device reports to the
// kubelet under a NUMAReport mode (auto, always, never), reading the host's
// nodes from a sysfs fs.FS (HostNUMANodes), so that in auto mode the plugin
// reports only NUMA ids the kubelet can match.
package topology
