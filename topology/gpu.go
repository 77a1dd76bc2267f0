package topology

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ComputeCapability is a CUDA compute capability, such as 8.0 for the A100.
// The zero value is 0.0, which no GPU has.
type ComputeCapability struct {
	Major, Minor int
}

// String returns "<major>.<minor>", as nvidia-smi --query-gpu=compute_cap
// prints it: "8.0", "9.0".
func (c ComputeCapability) String() string {
	return strconv.Itoa(c.Major) + "." + strconv.Itoa(c.Minor)
}

var computeCapabilityRE = regexp.MustCompile(`^([1-9][0-9]?)\.([0-9])$`)

// parseComputeCapability parses "8.0", "12.0": a major version 1..99 and a
// minor 0..9.
func parseComputeCapability(s string) (ComputeCapability, bool) {
	m := computeCapabilityRE.FindStringSubmatch(s)
	if m == nil {
		return ComputeCapability{}, false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return ComputeCapability{major, minor}, true
}

// FamilyOf returns the architecture family of a compute capability as
// NVIDIA's GPU feature discovery names it in the nvidia.com/gpu.family node
// label (k8s-device-plugin internal/lm/resource.go, getArchFamily):
// "pascal" for 6.x, "volta" for 7.0-7.4, "turing" for 7.5+, "ampere" for
// 8.0-8.8, "ada-lovelace" for 8.9, "hopper" for 9.x, "blackwell" for 10.x
// and 12.x, and "kepler", "maxwell" for 3.x, 5.x. It returns "" for any
// other major version.
func FamilyOf(c ComputeCapability) string {
	switch c.Major {
	case 3:
		return "kepler"
	case 5:
		return "maxwell"
	case 6:
		return "pascal"
	case 7:
		if c.Minor < 5 {
			return "volta"
		}
		return "turing"
	case 8:
		if c.Minor < 9 {
			return "ampere"
		}
		return "ada-lovelace"
	case 9:
		return "hopper"
	case 10, 12:
		return "blackwell"
	}
	return ""
}

// GPUModel describes the GPUs of a machine; every GPU of a machine is the
// same model. It is a plain value: the zero value describes no GPU, and
// Machine.GPUModel never returns it.
type GPUModel struct {
	// Product is the name nvidia-smi prints (--query-gpu=name), such as
	// "NVIDIA A100-SXM4-40GB".
	Product string
	// MemoryMiB is the total memory in MiB as nvidia-smi prints it
	// (--query-gpu=memory.total), slightly below the marketing size on
	// some models: 40960 for an A100 40GB, 81559 for an H100 80GB HBM3.
	MemoryMiB int
	// Compute is the CUDA compute capability.
	Compute ComputeCapability
	// Family is the architecture, as in the nvidia.com/gpu.family node
	// label: "pascal", "volta", "ampere", "ada-lovelace", "hopper", …
	// (FamilyOf gives it for a compute capability).
	Family string
	// PowerLimitW is the default power limit in watts (--query-gpu=
	// power.limit), the board's TDP.
	PowerLimitW int
	// IdlePowerW is the power the GPU draws when idle, in watts: a typical
	// value seen on real machines, for telemetry to start from.
	IdlePowerW int
}

// DefaultGPUModel returns the model of machines that do not say theirs: the
// generic layout, `nvidia-smi topo -m` imports (whose text does not name
// the GPUs) and machines built with New. It is an NVIDIA L40S, a common
// PCIe data-center card: 46068 MiB (as nvidia-smi prints it), compute
// capability 8.9 (ada-lovelace), 350 W power limit, about 35 W idle.
func DefaultGPUModel() GPUModel {
	return GPUModel{
		Product:     "NVIDIA L40S",
		MemoryMiB:   46068,
		Compute:     ComputeCapability{8, 9},
		Family:      "ada-lovelace",
		PowerLimitW: 350,
		IdlePowerW:  35,
	}
}

// Bounds of a GPU model's fields.
const (
	maxProductLen = 96       // NVML's device name buffer (NVML_DEVICE_NAME_V2_BUFFER_SIZE)
	maxMemoryMiB  = 2 << 20  // 2 TiB
	maxPowerW     = 5000     // W
	maxFamilyLen  = 32       // bytes
	familyChars   = "a-z, -" // for messages
)

var familyRE = regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`)

// check returns what is wrong with g, naming the YAML field, or "" if it is
// valid.
func (g GPUModel) check() (field, msg string) {
	switch {
	case g.Product == "" || len(g.Product) > maxProductLen || strings.TrimSpace(g.Product) != g.Product ||
		strings.ContainsFunc(g.Product, func(r rune) bool { return r < 0x20 || r > 0x7e || r == ',' }):
		return "product", fmt.Sprintf("product %q: expected the name nvidia-smi prints, like \"NVIDIA A100-SXM4-40GB\": "+
			"1..%d printable ASCII characters, no comma, no leading or trailing space", g.Product, maxProductLen)
	case g.MemoryMiB < 1 || g.MemoryMiB > maxMemoryMiB:
		return "memoryMiB", fmt.Sprintf("memoryMiB %d: expected 1..%d", g.MemoryMiB, maxMemoryMiB)
	case g.Compute.Major < 1 || g.Compute.Major > 99 || g.Compute.Minor < 0 || g.Compute.Minor > 9:
		return "computeCapability", fmt.Sprintf("computeCapability %s: expected MAJOR.MINOR like 8.0", g.Compute)
	case len(g.Family) > maxFamilyLen || !familyRE.MatchString(g.Family):
		return "family", fmt.Sprintf("family %q: expected an architecture like ampere or ada-lovelace (%s, at most %d)",
			g.Family, familyChars, maxFamilyLen)
	case g.PowerLimitW < 1 || g.PowerLimitW > maxPowerW:
		return "powerLimitW", fmt.Sprintf("powerLimitW %d: expected 1..%d", g.PowerLimitW, maxPowerW)
	case g.IdlePowerW < 1 || g.IdlePowerW >= g.PowerLimitW:
		return "idlePowerW", fmt.Sprintf("idlePowerW %d: expected 1..%d (below powerLimitW)", g.IdlePowerW, g.PowerLimitW-1)
	}
	return "", ""
}

// pciBusIDs numbers the GPUs' PCI buses in index order, which is the order
// of bus ids on a real machine (nvidia-smi and CUDA with
// CUDA_DEVICE_ORDER=PCI_BUS_ID enumerate GPUs by bus id), with gaps that
// follow the PCIe tree: from the previous GPU, +1 on the same switch or
// board (PIX, BOARD), +4 below a common switch (PXB), then the next 0x10
// boundary + 1 on the same host bridge (PHB), the next 0x20 boundary + 1 in
// the same NUMA node (NODE) and the next 0x40 boundary + 1 across nodes
// (SYS). GPU 0 is on bus 0x01. A bus beyond 0xFF continues at 0x01 of the
// next PCI domain. Each value is domain<<8 | bus.
func pciBusIDs(n int, pcie func(i, j int) PCIe) []uint32 {
	ids := make([]uint32, n)
	domain, bus := uint32(0), uint32(1)
	for i := range n {
		if i > 0 {
			switch pcie(i-1, i) {
			case BOARD, PIX:
				bus++
			case PXB:
				bus += 4
			case PHB:
				bus = bus/0x10*0x10 + 0x11
			case NODE:
				bus = bus/0x20*0x20 + 0x21
			default:
				bus = bus/0x40*0x40 + 0x41
			}
			if bus > 0xff {
				domain, bus = domain+1, 1
			}
		}
		ids[i] = domain<<8 | bus
	}
	return ids
}

// formatBusID formats domain<<8 | bus as nvidia-smi prints a bus id:
// "00000000:07:00.0" (domain, bus, device 00, function 0; upper-case hex).
func formatBusID(v uint32) string {
	return fmt.Sprintf("%08X:%02X:00.0", v>>8, v&0xff)
}
