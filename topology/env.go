package topology

import (
	"slices"
	"strconv"
	"strings"
)

// Environment variables ContainerEnv sets, besides VIRTUAL_GPU_IDS (which the
// plugin sets: the allocated ids joined by commas, sorted by index).
const (
	// EnvTopology names the machine: a preset name, a file's name, or
	// "generic-<n>". Example: VIRTUAL_GPU_TOPOLOGY=dgx1-volta.
	EnvTopology = "VIRTUAL_GPU_TOPOLOGY"

	// EnvNUMANodes lists the NUMA node of each allocated device, in the
	// order of VIRTUAL_GPU_IDS (ascending index), joined by commas; -1 for
	// an unknown node (as Linux's numa_node file says). Example:
	// VIRTUAL_GPU_NUMA_NODES=0,0,1,1.
	EnvNUMANodes = "VIRTUAL_GPU_NUMA_NODES"

	// EnvLinks lists the link of every pair of allocated devices, as
	// "<i>:<j>=<link>" joined by commas, where i < j are the device indices
	// (the numbers in fake-<i>), pairs in ascending order of (i, j), and
	// link is what `nvidia-smi topo -m` prints for the pair: NV<n> for n
	// NVLinks, else the PCIe relation (PIX, PXB, PHB, NODE, SYS, or BOARD).
	// Indices rather than ids keep the value short: 16 devices (120 pairs)
	// take about 1 KiB. Empty for a single device. Example for fake-0,
	// fake-1, fake-4: VIRTUAL_GPU_LINKS=0:1=NV1,0:4=NV2,1:4=SYS.
	EnvLinks = "VIRTUAL_GPU_LINKS"
)

// ContainerEnv returns the extra environment variables that tell a
// container what a real driver would let it discover about the devices
// allocated to it: EnvTopology, EnvNUMANodes and EnvLinks (see their docs).
// indices are GPU indices; they are sorted, duplicates and indices out of
// range are dropped. The result is deterministic and always has the three
// keys; it does not include VIRTUAL_GPU_IDS.
func (m *Machine) ContainerEnv(indices []int) map[string]string {
	idx := make([]int, 0, len(indices))
	for _, i := range indices {
		if i >= 0 && i < m.Len() {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)

	var numa, links strings.Builder
	for k, i := range idx {
		if k > 0 {
			numa.WriteByte(',')
		}
		numa.WriteString(strconv.Itoa(m.NUMA(i)))
		for _, j := range idx[k+1:] {
			if links.Len() > 0 {
				links.WriteByte(',')
			}
			links.WriteString(strconv.Itoa(i))
			links.WriteByte(':')
			links.WriteString(strconv.Itoa(j))
			links.WriteByte('=')
			links.WriteString(m.Link(i, j).String())
		}
	}
	return map[string]string{
		EnvTopology:  m.Name(),
		EnvNUMANodes: numa.String(),
		EnvLinks:     links.String(),
	}
}
