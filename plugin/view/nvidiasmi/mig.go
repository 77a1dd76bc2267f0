package nvidiasmi

import (
	"bytes"
	"fmt"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

// MIG devices as nvidia-smi shows them, in the shapes of a real H100 80GB
// HBM3 with MIG on (driver 590.48.01): -L, -q's MIG Device sections, the
// summary's MIG devices table; `nvidia-smi mig -lgi` in the shape of
// driver R5xx recordings.

// bar1PerSliceX4 is the BAR1 memory of four memory slices of a MIG device
// (a real H100: 24739 MiB for 3g.40gb, 12369 for 2g.20gb, 6184 for
// 1g.10gb): a device of n slices has n × 24739 / 4 MiB.
const bar1PerSliceX4 = 24739

// migBAR1MiB is the BAR1 memory of MIG device d.
func migBAR1MiB(d status.MIGDevice) int { return d.PlacementSize * bar1PerSliceX4 / 4 }

// migUsedMiB is the memory used of MIG device d of g: its processes'
// (those of the container, readProcs), the only ones known per MIG device.
func migUsedMiB(g *gpu, d status.MIGDevice) int {
	used := 0
	for _, p := range g.procs {
		if p.mig != nil && p.mig.ID == d.ID {
			used += p.usedMiB
		}
	}
	return min(used, d.MemoryMiB)
}

// migNodes are -q's MIG Device sections of the MIG devices the container
// sees, after MIG Mode: index, GPU and compute instance ids, the engines,
// ECC, the instance's memory (used: its processes', migUsedMiB) and BAR1;
// in -q -x the <mig_device> elements of <mig_devices> with the elements
// published outputs show (ids, device attributes, FB memory; ECC and BAR1
// are text only).
func migNodes(g *gpu) []node {
	var out []node
	for k, d := range g.migs {
		mib := func(v int) string { return itoa(v) + " MiB" }
		bar1 := migBAR1MiB(d)
		used := migUsedMiB(g, d)
		out = append(out, sec("MIG Device", "mig_device",
			kv("Index", "index", itoa(k)),
			kv("GPU Instance ID", "gpu_instance_id", itoa(d.GPUInstanceID)),
			kv("Compute Instance ID", "compute_instance_id", itoa(d.ComputeInstanceID)),
			sec("Device Attributes", "device_attributes", sec("Shared", "shared",
				kv("Multiprocessor count", "multiprocessor_count", itoa(d.Multiprocessors)),
				kv("Copy Engine count", "copy_engine_count", itoa(d.CopyEngines)),
				kv("Encoder count", "encoder_count", itoa(d.Encoders)),
				kv("Decoder count", "decoder_count", itoa(d.Decoders)),
				kv("OFA count", "ofa_count", itoa(d.OFAs)),
				kv("JPG count", "jpg_count", itoa(d.JPEGs)))),
			sec("ECC Errors", "", sec("Volatile", "", kv("SRAM Uncorrectable", "", "0"))),
			sec("Shared FB Memory Usage", "fb_memory_usage",
				kv("Total", "total", mib(d.MemoryMiB)), kv("Reserved", "reserved", mib(0)), kv("Used", "used", mib(used)), kv("Free", "free", mib(d.MemoryMiB-used))),
			sec("Shared BAR1 Memory", "", kv("Total", "", mib(bar1)), kv("Used", "", mib(0)), kv("Free", "", mib(bar1)))))
	}
	return out
}

// The MIG devices table of the summary (driver R580 layout).
const (
	summaryMIGTop = "\n" + summaryRule +
		"| MIG devices:                                                                            |\n" +
		summaryMIGRule +
		"| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |\n" +
		"|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |\n" +
		"|                  |                                  |        ECC|                       |\n" +
		"|==================+==================================+===========+=======================|\n"
	summaryMIGRule = "+------------------+----------------------------------+-----------+-----------------------+\n"
)

// writeSummaryMIG writes the summary's MIG devices table of the MIG
// devices of gpus the container sees; nothing if it sees none. Each
// device has two lines: GPU, GPU instance, compute instance and MIG
// device index, memory used (migUsedMiB) and total, SMs and volatile uncorrected ECC
// errors, the engines (CE, ENC, DEC, OFA, JPG); then BAR1 used and total.
func writeSummaryMIG(out *bytes.Buffer, gpus []*gpu) {
	n := 0
	for _, g := range gpus {
		n += len(g.migs)
	}
	if n == 0 {
		return
	}
	out.WriteString(summaryMIGTop)
	first := true
	for _, g := range gpus {
		for k, d := range g.migs {
			if !first {
				out.WriteString(summaryMIGRule)
			}
			first = false
			fmt.Fprintf(out, "|%3d %4d %3d %3d  |%19s / %8s    |%3d%7d |%3d %3d %4d %4d %4d |\n", g.pos, d.GPUInstanceID, d.ComputeInstanceID, k,
				itoa(migUsedMiB(g, d))+"MiB", itoa(d.MemoryMiB)+"MiB", d.Multiprocessors, 0, d.CopyEngines, d.Encoders, d.Decoders, d.OFAs, d.JPEGs)
			fmt.Fprintf(out, "|                  |%19s / %8s    |           |                       |\n", "0MiB", itoa(migBAR1MiB(d))+"MiB")
		}
	}
	out.WriteString(summaryMIGRule)
}

// The GPU instances table of `nvidia-smi mig -lgi`.
const (
	lgiRule   = "+-------------------------------------------------------+\n"
	lgiHeader = lgiRule +
		"| GPU instances:                                        |\n" +
		"| GPU   Name             Profile  Instance   Placement  |\n" +
		"|                          ID       ID       Start:Size |\n" +
		"|=======================================================|\n"
	// msgNoMIG is what nvidia-smi mig -lgi prints without a MIG-enabled
	// GPU.
	msgNoMIG = "No MIG-enabled devices found."
)

// writeLGI writes `nvidia-smi mig -lgi`: a line per GPU instance the
// container sees (GPU, profile name and id, GPU instance id, placement
// start:size), GPU by GPU in GPU instance id order; without a MIG-enabled
// GPU, msgNoMIG and ExitNotFound.
func writeLGI(out *bytes.Buffer, gpus []*gpu) int {
	on := false
	for _, g := range gpus {
		on = on || g.migOn
	}
	if !on {
		out.WriteString(msgNoMIG + "\n")
		return ExitNotFound
	}
	out.WriteString(lgiHeader)
	for _, g := range gpus {
		for _, d := range g.migs {
			fmt.Fprintf(out, "|%4d  %-18s%4d%9d%13s     |\n", g.pos, "MIG "+d.Profile, d.ProfileID, d.GPUInstanceID, fmt.Sprintf("%d:%d", d.PlacementStart, d.PlacementSize))
			out.WriteString(lgiRule)
		}
	}
	return ExitOK
}
