package allocator

import (
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Weights of the connectivity score (see the package documentation).
const (
	// NVLinkWeight is the score of one NVLink between a pair. It is larger
	// than any PCIe and NUMA score together, so link count dominates.
	NVLinkWeight = 100
	// SameNUMAWeight is added for a pair on the same known NUMA node.
	SameNUMAWeight = 5
)

// PCIeWeight returns the score of a PCIe relation: BOARD 60, PIX 50, PXB 40,
// PHB 30, NODE 20, SYS 10 (NVIDIA go-gpuallocator's values), and 0 for an
// undefined value.
func PCIeWeight(p topology.PCIe) int {
	switch p {
	case topology.BOARD:
		return 60
	case topology.PIX:
		return 50
	case topology.PXB:
		return 40
	case topology.PHB:
		return 30
	case topology.NODE:
		return 20
	case topology.SYS:
		return 10
	}
	return 0
}

// PairScore returns the connectivity score of GPUs a and b:
//
//	NVLinkWeight × NVLinks + PCIeWeight(PCIe relation) + SameNUMAWeight if both are on the same known NUMA node
//
// NVSwitch pairs count their per-pair link count like direct NVLinks. It
// returns 0 if a == b or either index is out of range.
func PairScore(m *topology.Machine, a, b int) int {
	if m == nil || a == b || a < 0 || b < 0 || a >= m.Len() || b >= m.Len() {
		return 0
	}
	l := m.Link(a, b)
	s := NVLinkWeight*l.NVLinks + PCIeWeight(l.PCIe)
	if na := m.NUMA(a); na >= 0 && na == m.NUMA(b) {
		s += SameNUMAWeight
	}
	return s
}

// Score returns the connectivity score of a set of GPUs: the sum of
// PairScore over its pairs. Duplicates count once and indices out of range
// are ignored; a set of fewer than two GPUs scores 0.
func Score(m *topology.Machine, set []int) int {
	s := slices.Clone(set)
	slices.Sort(s)
	s = slices.Compact(s)
	total := 0
	for i, a := range s {
		for _, b := range s[i+1:] {
			total += PairScore(m, a, b)
		}
	}
	return total
}

// NVLinkConnected reports whether every pair of the set has at least one
// NVLink (a set of fewer than two GPUs is connected). Duplicates and
// indices out of range make it false.
func NVLinkConnected(m *topology.Machine, set []int) bool {
	for i, a := range set {
		if a < 0 || a >= m.Len() {
			return false
		}
		for _, b := range set[i+1:] {
			if a == b || m.Link(a, b).NVLinks == 0 {
				return false
			}
		}
	}
	return true
}
