package topology

import "strings"

// BoardFacts are the static facts a board of a product reports that do not
// move with load: its firmware versions, its PCI subsystem id, its lowest
// power limit, the banks its row remapper has, and whether it sits on an
// SXM baseboard. nvidia-smi prints them (--query-gpu vbios_version,
// inforom.*, pci.sub_device_id, power.min_limit, remapped_rows.histogram.max,
// platform.module_id; -q and -q -x alike). The zero value is a board nothing
// is known of: nvidia-smi prints N/A for each.
type BoardFacts struct {
	// SubDeviceID is pci.sub_device_id, "0x18BE10DE" (subsystem id <<16 |
	// subsystem vendor).
	SubDeviceID string
	// VBIOS is vbios_version, "96.00.A5.00.03".
	VBIOS string
	// InforomImage, InforomOEM and InforomECC are inforom.img, .oem and
	// .ecc; InforomECC is "" on a board without ECC memory.
	InforomImage, InforomOEM, InforomECC string
	// MinPowerLimitW is power.min_limit in watts.
	MinPowerLimitW int
	// RemapBanks is remapped_rows.histogram.max of a healthy board: the
	// banks with all their spare rows; 0 for a board without row remapping.
	RemapBanks int
	// SXM reports a board on an SXM baseboard (HGX, DGX): its
	// platform.module_id is its position there, 1-8.
	SXM bool
	// BAR1MiB is the size of the board's BAR1 aperture in MiB (nvidia-smi
	// -q "BAR1 Memory Usage", Total); 0 if unknown.
	BAR1MiB int
}

// boardFactsByProduct are the facts of the products of the built-in
// machines, keyed like deviceIDs (the product name nvidia-smi prints).
// Sources: H200, H100 80GB HBM3 and L40S from real nvidia-smi recordings
// (utkuozdemir/nvidia_gpu_exporter, internal/captures/linux-x86_64__
// nvidia-h200__590.48.01.txt, …h100-80gb-hbm3__590.48.01.txt,
// …l40s__595.80.txt, MIT license: nvidia-smi -q and --query-gpu). The
// others have no recording here: their values are plausible ones of their
// family (the VBIOS branch of the architecture — 86 Pascal, 88 Volta, 92
// GA100, 94 GA102 — the InfoROM image of its board, the published minimum
// power limit of the part), not a particular board's.
var boardFactsByProduct = map[string]BoardFacts{
	// Recorded.
	"NVIDIA H200":           {SubDeviceID: "0x18BE10DE", VBIOS: "96.00.A5.00.03", InforomImage: "G520.0280.02.02", InforomOEM: "2.1", InforomECC: "7.16", MinPowerLimitW: 200, RemapBanks: 3072, SXM: true, BAR1MiB: 262144},
	"NVIDIA H100 80GB HBM3": {SubDeviceID: "0x16C110DE", VBIOS: "96.00.A5.00.01", InforomImage: "G520.0200.00.05", InforomOEM: "2.1", InforomECC: "7.16", MinPowerLimitW: 200, RemapBanks: 2560, SXM: true, BAR1MiB: 131072},
	"NVIDIA L40S":           {SubDeviceID: "0x185110DE", VBIOS: "95.02.66.00.02", InforomImage: "G133.0242.00.03", InforomOEM: "2.1", InforomECC: "6.16", MinPowerLimitW: 100, RemapBanks: 192, BAR1MiB: 65536},
	// Not recorded: plausible values of the family.
	"NVIDIA A100-SXM4-40GB": {SubDeviceID: "0x134F10DE", VBIOS: "92.00.45.00.03", InforomImage: "G506.0200.00.04", InforomOEM: "2.0", InforomECC: "6.16", MinPowerLimitW: 100, RemapBanks: 640, SXM: true, BAR1MiB: 65536},
	"NVIDIA A100-SXM4-80GB": {SubDeviceID: "0x147F10DE", VBIOS: "92.00.45.00.06", InforomImage: "G506.0210.00.04", InforomOEM: "2.1", InforomECC: "6.16", MinPowerLimitW: 100, RemapBanks: 640, SXM: true, BAR1MiB: 131072},
	"Tesla V100-SXM2-32GB":  {SubDeviceID: "0x124910DE", VBIOS: "88.00.80.00.01", InforomImage: "G503.0203.00.05", InforomOEM: "1.1", InforomECC: "5.0", MinPowerLimitW: 150, SXM: true, BAR1MiB: 32768},
	"Tesla V100-SXM2-16GB":  {SubDeviceID: "0x121210DE", VBIOS: "88.00.43.00.02", InforomImage: "G503.0201.00.03", InforomOEM: "1.1", InforomECC: "5.0", MinPowerLimitW: 150, SXM: true, BAR1MiB: 16384},
	"Tesla V100-SXM3-32GB":  {SubDeviceID: "0x12AB10DE", VBIOS: "88.00.98.00.01", InforomImage: "G503.0204.00.07", InforomOEM: "1.1", InforomECC: "5.0", MinPowerLimitW: 250, SXM: true, BAR1MiB: 32768},
	"Tesla P100-SXM2-16GB":  {SubDeviceID: "0x118310DE", VBIOS: "86.00.41.00.05", InforomImage: "G503.0201.00.03", InforomOEM: "1.1", InforomECC: "4.1", MinPowerLimitW: 125, SXM: true, BAR1MiB: 16384},
	"NVIDIA RTX A6000":      {SubDeviceID: "0x145910DE", VBIOS: "94.02.5C.00.02", InforomImage: "G133.0500.00.05", InforomOEM: "2.0", InforomECC: "6.16", MinPowerLimitW: 100, BAR1MiB: 65536},
}

// Facts returns the static facts of g's board: the product's row of the
// table, or for a product the table lacks only what its family implies
// (an SXM board if the name says so); firmware versions then unknown.
func (g GPUModel) Facts() BoardFacts {
	if f, ok := boardFactsByProduct[g.Product]; ok {
		return f
	}
	return BoardFacts{SXM: strings.Contains(g.Product, "SXM")}
}

// ParseComputeCapability parses a compute capability as nvidia-smi prints
// it, "9.0": a major version 1..99 and a minor 0..9. Readers of a status
// file (nvidia-smi) rebuild the GPUModel of a GPU with it.
func ParseComputeCapability(s string) (ComputeCapability, bool) {
	return parseComputeCapability(s)
}
