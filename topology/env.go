package topology

import (
	"slices"
	"strconv"
	"strings"
)

// Environment variables ContainerEnv sets, besides VIRTUAL_GPU_IDS (which the
// plugin sets: the allocated ids joined by commas, sorted by index). Each
// device has a position p = 0 … k-1: its place in VIRTUAL_GPU_IDS, which is
// how a container numbers its GPUs (GPU0, GPU1, … in nvidia-smi).
const (
	// EnvTopology names the machine: a preset name, a file's name, or
	// "generic-<n>". Example: VIRTUAL_GPU_TOPOLOGY=dgx1-volta.
	EnvTopology = "VIRTUAL_GPU_TOPOLOGY"

	// EnvNUMANodes lists the NUMA node of each allocated device, in the
	// order of VIRTUAL_GPU_IDS (ascending index), joined by commas; -1 for
	// an unknown node (as Linux's numa_node file says). Example:
	// VIRTUAL_GPU_NUMA_NODES=0,0,1,1. 1024 devices take about 3 KiB.
	EnvNUMANodes = "VIRTUAL_GPU_NUMA_NODES"

	// EnvLinks gives the link of every pair of allocated devices, as
	// `nvidia-smi topo -m` would label it (NV<n> for n NVLinks, else the
	// PCIe relation: PIX, PXB, PHB, NODE, SYS, or BOARD), in a compact form
	// over positions (see above), not device indices:
	//
	//	VALUE = DEFAULT { ";" LABEL "=" GROUP { "," GROUP } }
	//	GROUP = RANGE { "+" RANGE }       RANGE = P | P "-" P
	//
	// Every pair starts with the DEFAULT label; each further entry gives
	// LABEL to every pair of positions within each of its GROUPs (a group is
	// a set of at least two positions); entries apply in order, a later
	// one overriding an earlier one. The plugin writes the lowest label
	// present as DEFAULT and then one entry per higher label present, in
	// the order SYS < NODE < PHB < PXB < PIX < BOARD < NV1 < … < NV18, so a
	// group may contain closer pairs that a later entry relabels; ranges are
	// ascending. Empty for fewer than two devices.
	//
	// Examples: fake-0, fake-1, fake-4 of dgx1-volta (positions 0, 1, 2):
	// "SYS;NV1=0-1;NV2=0+2" (0-1 NV1, 0-2 NV2, 1-2 SYS). All 8 GPUs of
	// pcie-8gpu: "SYS;NODE=0-3,4-7;PIX=0-1,2-3,4-5,6-7". The generic
	// layout's 1024 GPUs: "SYS;PHB=0-511,512-1023;PIX=0-1,2-3,…" (under
	// 5 KiB). A PCIe tree costs one group per switch, host bridge or NUMA
	// node with two or more of the devices, an NVSwitch domain one group;
	// point-to-point NVLinks (hybrid cube mesh, bridges) cost at most one
	// group per pair. ParseLinks decodes the value.
	EnvLinks = "VIRTUAL_GPU_LINKS"

	// EnvLinksOmitted is set, instead of a value of EnvLinks, when the links
	// of an allocation do not fit in MaxEnvLinksBytes: only possible with a
	// custom topology of many irregular point-to-point NVLinks across
	// hundreds of GPUs (presets, generic layouts, PCIe trees and NVSwitch
	// domains stay far below). Its value says how long the links would have
	// been; EnvLinks is then empty, and the fake nvidia-smi says it cannot
	// show the matrix. Example: VIRTUAL_GPU_LINKS_OMITTED=71604 bytes.
	EnvLinksOmitted = "VIRTUAL_GPU_LINKS_OMITTED"
)

// MaxEnvLinksBytes bounds the EnvLinks value ContainerEnv writes: under
// 64 KiB, so that every variable of an Allocate answer stays well below
// Linux's 128 KiB per environment string and the whole answer small.
const MaxEnvLinksBytes = 64<<10 - 1

// ContainerEnv returns the extra environment variables that tell a
// container what a real driver would let it discover about the devices
// allocated to it: EnvTopology, EnvNUMANodes and EnvLinks (see their docs).
// indices are GPU indices; they are sorted, duplicates and indices out of
// range are dropped. The result is deterministic and always has the three
// keys, plus EnvLinksOmitted when the links would be longer than
// MaxEnvLinksBytes (EnvLinks is then empty); it does not include
// VIRTUAL_GPU_IDS. It takes O(k²) time and memory
// for k devices: about 14 ms for 1024 on a 2-core machine
// (BenchmarkContainerEnv).
func (m *Machine) ContainerEnv(indices []int) map[string]string {
	idx := make([]int, 0, len(indices))
	for _, i := range indices {
		if i >= 0 && i < m.Len() {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)

	var numa strings.Builder
	for k, i := range idx {
		if k > 0 {
			numa.WriteByte(',')
		}
		numa.WriteString(strconv.Itoa(m.NUMA(i)))
	}
	env := map[string]string{
		EnvTopology:  m.Name(),
		EnvNUMANodes: numa.String(),
		EnvLinks:     m.linksValue(idx),
	}
	if n := len(env[EnvLinks]); n > MaxEnvLinksBytes {
		env[EnvLinks] = ""
		env[EnvLinksOmitted] = strconv.Itoa(n) + " bytes"
	}
	return env
}
