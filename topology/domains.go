package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// The GPUs' places that a scheduler matches on (DRA's matchAttribute): the
// PCIe root complex a GPU hangs under, and the NVLink domain it belongs to.

// PCIeRoots returns, by GPU index, the PCIe root complex of each GPU, in
// the form of resource.kubernetes.io/pcieRoot ("pci<domain>:<bus>", the
// root's name in /sys/devices): GPUs whose PCIe relation is PHB or closer
// (the same host bridge) share a root, the others do not. A root is named
// after the lowest bus below it, rounded down to its block of 16 (the bus
// ids follow the PCIe tree: see PCIBusID). A machine read from nvidia-smi
// output, where an NVLinked pair shows no PCIe relation, may put such GPUs
// under roots of their own.
func (m *Machine) PCIeRoots() []string {
	n := m.Len()
	root := make([]int, n) // the lowest index of each GPU's group
	for i := range n {
		root[i] = i
		for j := range i {
			if m.Link(i, j).PCIe >= PHB {
				root[i] = root[j]
				break
			}
		}
	}
	out := make([]string, n)
	for i := range n {
		b := m.bus[root[i]]
		out[i] = fmt.Sprintf("pci%04x:%02x", b>>8, b&0xf0)
	}
	return out
}

// NVLinkDomains returns, by GPU index, the NVLink domain of each GPU:
// GPUs of one domain are all NVLinked to each other, directly or through
// an NVSwitch, so that a set of GPUs of one domain can talk over NVLink
// pair by pair. An NVSwitch system or a full mesh (DGX A100, HGX H100,
// DGX-2) is one domain. A partial mesh is split into such cliques, each
// GPU joining the first domain, in index order, it is linked with
// entirely, or starting a new one: a DGX-1's hybrid cube mesh is its two
// quads, 0-3 and 4-7 (each GPU linked to the three others of its quad,
// and to one of the other quad). A GPU without NVLinks belongs to no
// domain: -1. Domains are numbered 0, 1, … in the order of their first
// GPU.
func (m *Machine) NVLinkDomains() []int {
	n := m.Len()
	out := make([]int, n)
	var domains [][]int
	for i := range n {
		out[i] = -1
		linked := false
		for j := range n {
			if j != i && m.Link(i, j).NVLinks > 0 {
				linked = true
				break
			}
		}
		if !linked {
			continue
		}
	next:
		for d, members := range domains {
			for _, j := range members {
				if m.Link(i, j).NVLinks == 0 {
					continue next
				}
			}
			domains[d] = append(members, i)
			out[i] = d
			break
		}
		if out[i] < 0 {
			out[i] = len(domains)
			domains = append(domains, []int{i})
		}
	}
	return out
}

// NVLinkDomainName names NVLink domain d (NVLinkDomains) as an attribute
// value: "nvlink-<d>".
func NVLinkDomainName(d int) string { return "nvlink-" + strconv.Itoa(d) }

// KubernetesPCIBusID returns GPU i's PCI bus id in the form of
// resource.kubernetes.io/pciBusID and sysfs, "0000:c1:00.0" (a 4-digit
// domain, where nvidia-smi prints 8, and lower-case hex digits, as the
// API's pattern wants), or "" for an index out of range.
func (m *Machine) KubernetesPCIBusID(i int) string {
	id := strings.ToLower(m.PCIBusID(i))
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) == 8 {
		return dom[4:] + ":" + rest
	}
	return id
}
