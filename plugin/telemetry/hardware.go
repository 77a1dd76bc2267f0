package telemetry

import (
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// hardware is what the exporter knows of its GPUs' boards, fixed for its
// life: every GPU of a machine is the same model.
type hardware struct {
	gm          topology.GPUModel
	prof        topology.Thermal
	board       topology.Board
	thermalC    int // the temperature of a thermal fault (topology.GPUModel.ThermalFaultTempC)
	reservedMiB int
	// profiling is whether DCGM serves the profiling (DCP) fields,
	// DCGM_FI_PROF_*, on the product: data-center GPUs of Volta and later.
	// Where it does not (GeForce and workstation boards, Pascal and older)
	// dcgm-exporter finds no supported metric group at start and serves
	// none of them.
	profiling bool
	// rowRemap is whether the GPUs remap rows (Ampere data-center and
	// later): elsewhere DCGM has no value for the remapped-rows fields and
	// dcgm-exporter leaves them out.
	rowRemap bool
	// pcieBps is one direction of the GPU's PCIe link, bytes/s.
	pcieBps float64
	// nvlinkBps is one direction of one NVLink, bytes/s.
	nvlinkBps float64
}

func newHardware(gm topology.GPUModel, reservedMiB int) hardware {
	b := gm.Board()
	return hardware{
		gm:          gm,
		prof:        gm.Thermal(),
		board:       b,
		thermalC:    gm.ThermalFaultTempC(),
		reservedMiB: reservedMiB,
		profiling:   gm.Compute.Major >= 7 && !b.Fan && !consumer(gm.Product),
		rowRemap:    gm.RowRemapping(),
		pcieBps:     pcieBytesPerSecond(gm),
		nvlinkBps:   nvlinkBytesPerSecond(gm.Family),
	}
}

// consumer reports whether a product is a GeForce or TITAN card.
func consumer(product string) bool {
	return strings.Contains(product, "GeForce") || strings.Contains(product, "TITAN")
}

// pcieBytesPerSecond is the bandwidth of one direction of a x16 link of
// the generation the family's parts use: Gen3 (15.75 GB/s) up to Volta
// and Turing, Gen4 (31.5 GB/s) for Ampere and Ada, Gen5 (63 GB/s) for
// Hopper and Blackwell.
func pcieBytesPerSecond(gm topology.GPUModel) float64 {
	switch gm.Family {
	case "hopper", "blackwell":
		return 63e9
	case "ampere", "ada-lovelace":
		return 31.5e9
	}
	return 15.75e9
}

// nvlinkBytesPerSecond is one direction of one NVLink of the family's
// generation: 20 GB/s (NVLink 1, Pascal), 25 GB/s (NVLink 2-4: Volta,
// Ampere, Hopper), 50 GB/s (NVLink 5, Blackwell).
func nvlinkBytesPerSecond(family string) float64 {
	switch family {
	case "pascal":
		return 20e9
	case "blackwell":
		return 50e9
	}
	return 25e9
}

// maxLinksByFamily is the NVLink count of one GPU of each family (P100 4,
// V100 6, A100 12, H100 and B200 18).
var maxLinksByFamily = map[string]int{"pascal": 4, "volta": 6, "ampere": 12, "hopper": 18, "blackwell": 18}

// NVLinksOf returns how many NVLinks GPU i of m has: the sum of its pairs'
// NVLinks, at most the family's count per GPU (18 when unknown). A pair
// behind NVSwitches shows all of a GPU's links (NV12 on a DGX A100, NV18
// on an HGX H100), so the sum over its peers counts each link several
// times; the cap counts it once.
func NVLinksOf(m *topology.Machine, i int) int {
	n := 0
	for j := range m.Len() {
		if j != i {
			n += m.Link(i, j).NVLinks
		}
	}
	limit, ok := maxLinksByFamily[m.GPUModel().Family]
	if !ok {
		limit = topology.MaxNVLinks
	}
	return min(n, limit)
}
