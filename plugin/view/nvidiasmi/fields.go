package nvidiasmi

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// A field is one property of --query-gpu: its name (what the CSV header
// prints), its aliases, its unit (printed in the header as "name [unit]" and
// after each value unless nounits), a description for --help-query-gpu, and
// its value.
type field struct {
	name    string
	aliases []string
	unit    string
	help    string
	value   valueFunc
}

// valueFunc returns a field's value for g without its unit; false means
// nvidia-smi prints [N/A].
type valueFunc func(q *queryContext, g *gpu) (string, bool)

// queryContext is what values need besides the GPU.
type queryContext struct {
	now   time.Time
	count int // GPUs the container sees
}

// na is the value of properties the virtual driver does not simulate.
func na(*queryContext, *gpu) (string, bool) { return "", false }

// known wraps a value of the status file: N/A without one.
func known(f func(g *gpu) string) valueFunc {
	return func(_ *queryContext, g *gpu) (string, bool) {
		if g.st == nil {
			return "", false
		}
		return f(g), true
	}
}

// knownIf is known, N/A also where ok is false.
func knownIf(f func(g *gpu) (string, bool)) valueFunc {
	return func(_ *queryContext, g *gpu) (string, bool) {
		if g.st == nil {
			return "", false
		}
		return f(g)
	}
}

// fixed is a value the same for every GPU with a status file.
func fixed(v string) valueFunc { return known(func(*gpu) string { return v }) }

func itoa(i int) string { return strconv.Itoa(i) }

const notSimulated = "Not simulated by the virtual GPU driver: always [N/A]."

// fields lists every property `nvidia-smi --help-query-gpu` of driver 580
// documents, in its order, with the aliases it documents (see
// testdata/README.md for the source). The values follow what a real driver
// prints for a data-center GPU; properties the virtual driver does not
// simulate are [N/A].
var fields = buildFields()

func buildFields() []field {
	var fs []field
	add := func(name string, aliases []string, unit, help string, v valueFunc) {
		fs = append(fs, field{name: name, aliases: aliases, unit: unit, help: help, value: v})
	}
	nas := func(help string, names ...string) {
		for _, n := range names {
			add(n, nil, "", help, na)
		}
	}
	add("timestamp", nil, "", `The time of the query, "YYYY/MM/DD HH:MM:SS.msec".`, func(q *queryContext, _ *gpu) (string, bool) {
		return q.now.Format("2006/01/02 15:04:05.000"), true
	})
	add("driver_version", nil, "", "The version of the (virtual) NVIDIA driver.", func(*queryContext, *gpu) (string, bool) {
		return topology.DriverVersion, true
	})
	nas(notSimulated, "vgpu_driver_capability.heterogenous_multivGPU")
	add("count", nil, "", "The number of GPUs the container sees.", func(q *queryContext, _ *gpu) (string, bool) {
		return itoa(q.count), true
	})
	add("name", []string{"gpu_name"}, "", "The product name of the GPU.", known(func(g *gpu) string { return g.st.Product }))
	add("serial", []string{"gpu_serial"}, "", "The board serial number.", knownIf(func(g *gpu) (string, bool) { return g.st.Serial, g.st.Serial != "" }))
	add("uuid", []string{"gpu_uuid"}, "", "The GPU's UUID, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.", func(_ *queryContext, g *gpu) (string, bool) {
		return g.uuid, g.uuid != ""
	})
	add("pci.bus_id", []string{"gpu_bus_id"}, "", `The PCI bus id, "domain:bus:device.function" in hex.`, known(func(g *gpu) string { return g.st.PCIBusID }))
	busPart := func(i int, format string) valueFunc {
		return knownIf(func(g *gpu) (string, bool) {
			d, b, dev, _, ok := g.busParts()
			return fmt.Sprintf(format, []uint64{d, b, dev}[i]), ok
		})
	}
	add("pci.domain", nil, "", "The PCI domain number, in hex.", busPart(0, "0x%04X"))
	add("pci.bus", nil, "", "The PCI bus number, in hex.", busPart(1, "0x%02X"))
	add("pci.device", nil, "", "The PCI device number, in hex.", busPart(2, "0x%02X"))
	add("pci.baseClass", nil, "", "The PCI base class code, in hex (3: display controller).", fixed("0x3"))
	add("pci.subClass", nil, "", "The PCI sub class code, in hex (2: 3D controller).", fixed("0x2"))
	add("pci.device_id", nil, "", "The PCI device and vendor id, in hex.", knownIf(func(g *gpu) (string, bool) { return g.deviceID() }))
	add("pci.sub_device_id", nil, "", "The PCI subsystem id and subsystem vendor id, in hex.", knownIf(func(g *gpu) (string, bool) {
		v := g.facts().SubDeviceID
		return v, v != ""
	}))
	nas(notSimulated,
		"vgpu_device_capability.fractional_multiVgpu", "vgpu_device_capability.heterogeneous_timeSlice_profile",
		"vgpu_device_capability.heterogeneous_timeSlice_sizes", "vgpu_device_capability.homogeneous_placements",
		"vgpu_device_capability.mig_timeSlicing", "vgpu_device_capability.mig_timeSlicing_mode")
	gen := knownIf(func(g *gpu) (string, bool) { v, ok := g.pcieGen(); return itoa(v), ok })
	add("pcie.link.gen.current", nil, "", "The current PCIe link generation (deprecated: pcie.link.gen.gpucurrent).", gen)
	add("pcie.link.gen.gpucurrent", nil, "", "The current PCIe link generation.", gen)
	add("pcie.link.gen.max", nil, "", "The highest PCIe link generation of the GPU and the system.", gen)
	add("pcie.link.gen.gpumax", nil, "", "The highest PCIe link generation of the GPU.", gen)
	nas(notSimulated, "pcie.link.gen.hostmax")
	add("pcie.link.width.current", nil, "", "The current PCIe link width.", fixed("16"))
	add("pcie.link.width.max", nil, "", "The widest PCIe link of the GPU and the system.", fixed("16"))
	add("index", nil, "", "The GPU's index in the container: its position in VIRTUAL_GPU_IDS, from 0.", func(_ *queryContext, g *gpu) (string, bool) {
		return itoa(g.pos), true
	})
	add("display_mode", nil, "", "Deprecated.", fixed("[Requested functionality has been deprecated]"))
	add("display_attached", nil, "", "Whether a display is connected: No.", fixed("No"))
	add("display_active", nil, "", "Whether a display is initialized on the GPU: Disabled.", fixed("Disabled"))
	add("persistence_mode", nil, "", "Whether persistence mode is on: Enabled.", fixed("Enabled"))
	add("addressing_mode", nil, "", "The addressing mode (HMM, ATS or None): None.", fixed("None"))
	add("accounting.mode", nil, "", "Whether accounting is on: Disabled.", fixed("Disabled"))
	add("accounting.buffer_size", nil, "", "The size of the accounting buffer, in processes.", fixed("4000"))
	nas("The driver model, Windows only: always [N/A] on Linux.", "driver_model.current", "driver_model.pending")
	fact := func(f func(b topology.BoardFacts) string) valueFunc {
		return knownIf(func(g *gpu) (string, bool) { v := f(g.facts()); return v, v != "" })
	}
	add("vbios_version", nil, "", "The VBIOS version of the board.", fact(func(b topology.BoardFacts) string { return b.VBIOS }))
	add("inforom.img", []string{"inforom.image"}, "", "The version of the InfoROM image.", fact(func(b topology.BoardFacts) string { return b.InforomImage }))
	add("inforom.oem", nil, "", "The version of the InfoROM OEM object.", fact(func(b topology.BoardFacts) string { return b.InforomOEM }))
	add("inforom.ecc", nil, "", "The version of the InfoROM ECC object; [N/A] without ECC.", fact(func(b topology.BoardFacts) string { return b.InforomECC }))
	add("inforom.pwr", []string{"inforom.power"}, "", "The version of the InfoROM power object: [N/A], as on real data-center boards.", na)
	add("inforom.checksum_validation", nil, "", "The result of the InfoROM checksum validation: valid.", fact(func(b topology.BoardFacts) string {
		if b.InforomImage == "" {
			return ""
		}
		return "valid"
	}))
	add("gpu_recovery_action", nil, "", "The recommended recovery action: None.", fixed("None"))
	add("gom.current", []string{"gpu_operation_mode.current"}, "", notSimulated, na)
	add("gom.pending", []string{"gpu_operation_mode.pending"}, "", notSimulated, na)
	add("fan.speed", nil, "%", "The fan speed in percent; [N/A] for boards cooled by the chassis.", knownIf(func(g *gpu) (string, bool) {
		if f := g.st.Telemetry.FanSpeedPercent; f != nil {
			return itoa(*f), true
		}
		return "", false
	}))
	add("pstate", nil, "", "The performance state, P0 (maximum) to P12 (minimum).", fixed("P0"))
	add("clocks_event_reasons.supported", []string{"clocks_throttle_reasons.supported"}, "", "The bitmask of supported clocks event reasons: every one.", fixed(fmt.Sprintf("0x%016X", topology.ClockEventsSupported)))
	add("clocks_event_reasons.active", []string{"clocks_throttle_reasons.active"}, "", "The bitmask of active clocks event reasons (0x1 idle, 0x4 power cap, 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, …).", known(func(g *gpu) string {
		return fmt.Sprintf("0x%016X", g.clockEvents())
	}))
	for _, r := range clockEventFields {
		aliases := []string{"clocks_throttle_reasons." + r.name}
		add("clocks_event_reasons."+r.name, aliases, "", r.help, known(func(g *gpu) string { return activeWord(g.clockEvents()&r.bit != 0) }))
	}
	for _, r := range []string{"sw_power_cap", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"} {
		add("clocks_event_reasons_counters."+r, nil, "us", "The time this reason lowered the clocks, in microseconds: 0.", fixed("0"))
	}
	add("memory.total", nil, "MiB", "The GPU memory, in MiB.", known(func(g *gpu) string { return itoa(g.st.MemoryTotalMiB) }))
	add("memory.reserved", nil, "MiB", "The memory the driver reserves, in MiB.", known(func(g *gpu) string { return itoa(g.st.MemoryReservedMiB) }))
	add("memory.used", nil, "MiB", "The memory allocated by processes, in MiB.", known(func(g *gpu) string { return itoa(g.st.Telemetry.MemoryUsedMiB) }))
	add("memory.free", nil, "MiB", "The free memory, in MiB: total - reserved - used.", known(func(g *gpu) string { return itoa(g.memoryFree()) }))
	add("compute_mode", nil, "", "The compute mode: Default (several contexts per GPU).", fixed("Default"))
	add("compute_cap", nil, "", "The CUDA compute capability, MAJOR.MINOR.", known(func(g *gpu) string { return g.st.ComputeCapability }))
	// Under MIG NVML reports no utilization: a real H100 with MIG on shows
	// [N/A] for every utilization.* property.
	util := func(v func(t status.Telemetry) int) valueFunc {
		return knownIf(func(g *gpu) (string, bool) { return itoa(v(g.st.Telemetry)), !g.migOn })
	}
	add("utilization.gpu", nil, "%", "The percent of time a kernel ran on the GPU over the last sample period; [N/A] with MIG on.", util(func(t status.Telemetry) int { return t.UtilizationGPUPercent }))
	add("utilization.memory", nil, "%", "The percent of time the GPU memory was read or written over the last sample period.", util(func(t status.Telemetry) int { return t.UtilizationMemoryPercent }))
	add("utilization.encoder", nil, "%", "The utilization of the video encoder, in percent.", util(func(t status.Telemetry) int { return t.UtilizationEncoderPercent }))
	add("utilization.decoder", nil, "%", "The utilization of the video decoder, in percent.", util(func(t status.Telemetry) int { return t.UtilizationDecoderPercent }))
	for _, e := range []string{"jpeg", "ofa"} {
		add("utilization."+e, nil, "%", "The utilization of the "+e+" engine: 0.", util(func(status.Telemetry) int { return 0 }))
	}
	add("encoder.stats.sessionCount", nil, "", "The number of encoder sessions: 0.", fixed("0"))
	add("encoder.stats.averageFps", nil, "", "The average frame rate of encoder sessions: 0.", fixed("0"))
	add("encoder.stats.averageLatency", nil, "", "The average latency of encoder sessions: 0.", fixed("0"))
	nas(notSimulated, "dramEncryption.mode.current", "dramEncryption.mode.pending")
	eccMode := knownIf(func(g *gpu) (string, bool) {
		if g.eccEnabled() {
			return "Enabled", true
		}
		return "Disabled", g.eccSupported()
	})
	add("ecc.mode.current", nil, "", "Whether ECC is on.", eccMode)
	add("ecc.mode.pending", nil, "", "Whether ECC will be on after the next reboot.", eccMode)
	eccZero := knownIf(func(g *gpu) (string, bool) { return "0", g.eccEnabled() })
	for _, kind := range []string{"corrected", "uncorrected"} {
		for _, scope := range []string{"volatile", "aggregate"} {
			count := eccCount(kind, scope)
			dram := knownIf(func(g *gpu) (string, bool) { return itoa(count(g.st.Telemetry.MemoryErrors)), g.eccEnabled() })
			for _, loc := range []string{"device_memory", "dram", "register_file", "l1_cache", "l2_cache", "texture_memory", "cbu", "sram", "total"} {
				v, help := dram, "ECC errors ("+kind+", "+scope+") in "+strings.ReplaceAll(loc, "_", " ")+"."
				switch loc {
				case "register_file", "l1_cache", "l2_cache", "texture_memory", "cbu":
					v, help = na, "Not reported by Hopper-class GPUs: [N/A]."
				case "sram":
					v, help = eccZero, "ECC errors ("+kind+", "+scope+") in SRAM: 0."
				}
				add("ecc.errors."+kind+"."+scope+"."+loc, nil, "", help, v)
			}
		}
	}
	for _, n := range []string{"volatile.sram.parity", "volatile.sram.secded", "aggregate.sram.parity", "aggregate.sram.secded"} {
		add("ecc.errors.uncorrected."+n, nil, "", "Unique uncorrected SRAM errors: 0.", eccZero)
	}
	add("ecc.errors.uncorrected.aggregate.sram.thresholdExceeded", nil, "", "Whether the SRAM error threshold was exceeded: No.",
		knownIf(func(g *gpu) (string, bool) { return "No", g.eccEnabled() }))
	for _, n := range []string{"l2", "sm", "mcu", "pcie", "other"} {
		add("ecc.errors.uncorrected.aggregate.sram."+n, nil, "", "Uncorrected SRAM errors by source: 0.", eccZero)
	}
	retired := func(v func(e topology.MemoryErrors) string) valueFunc {
		return knownIf(func(g *gpu) (string, bool) {
			return v(g.st.Telemetry.MemoryErrors), !g.rowRemapping() && g.eccEnabled()
		})
	}
	add("retired_pages.single_bit_ecc.count", []string{"retired_pages.sbe"}, "", "Pages retired after single-bit errors (before Ampere).", retired(func(e topology.MemoryErrors) string { return itoa(e.RetiredSBE) }))
	add("retired_pages.double_bit.count", []string{"retired_pages.dbe"}, "", "Pages retired after double-bit errors (before Ampere).", retired(func(e topology.MemoryErrors) string { return itoa(e.RetiredDBE) }))
	add("retired_pages.pending", nil, "", "Whether a page waits for retirement at the next reset: Yes or No.", retired(func(e topology.MemoryErrors) string { return yesNo(e.RetiredPending) }))
	remap := func(v func(e topology.MemoryErrors) string) valueFunc {
		return knownIf(func(g *gpu) (string, bool) { return v(g.st.Telemetry.MemoryErrors), g.rowRemapping() && g.eccEnabled() })
	}
	zeroRows := func(topology.MemoryErrors) string { return "0" }
	add("remapped_rows.correctable", []string{"remapped_rows.sbe"}, "", "Rows remapped after correctable errors (Ampere and later).", remap(func(e topology.MemoryErrors) string { return itoa(e.RemappedCorrectable) }))
	add("remapped_rows.correctable_inactive", nil, "", "Inactive rows remapped after correctable errors: 0.", remap(zeroRows))
	add("remapped_rows.uncorrectable", []string{"remapped_rows.dbe"}, "", "Rows remapped after uncorrectable errors.", remap(func(e topology.MemoryErrors) string { return itoa(e.RemappedUncorrectable) }))
	add("remapped_rows.uncorrectable_inactive", nil, "", "Inactive rows remapped after uncorrectable errors: 0.", remap(zeroRows))
	add("remapped_rows.pending", nil, "", "Whether a row remapping waits for a GPU reset: Yes or No.", remap(func(e topology.MemoryErrors) string { return yesNo(e.RemapPending) }))
	add("remapped_rows.failure", nil, "", "Whether a row remapping failed: Yes or No.", remap(func(e topology.MemoryErrors) string { return yesNo(e.RemapFailure) }))
	for i, n := range histogramNames {
		add("remapped_rows.histogram."+n, nil, "", "The memory banks with "+histogramHelp[i]+" spare rows left.", knownIf(func(g *gpu) (string, bool) {
			h, ok := g.remapHistogram()
			return itoa(h[i]), ok
		}))
	}
	add("temperature.gpu", nil, "", "The GPU temperature, in degrees C.", known(func(g *gpu) string { return itoa(g.st.Telemetry.TemperatureC) }))
	add("temperature.gpu.tlimit", nil, "", "How far the GPU is below its maximum operating temperature, in degrees C.", knownIf(func(g *gpu) (string, bool) {
		return itoa(g.tlimit()), g.tlimitKnown()
	}))
	add("temperature.memory", nil, "", "The HBM temperature, in degrees C; [N/A] for other memory.", knownIf(func(g *gpu) (string, bool) {
		if t := g.st.Telemetry.MemoryTemperatureC; t != nil {
			return itoa(*t), true
		}
		return "", false
	}))
	add("power.management", nil, "", "Whether power management is on: Enabled.", fixed("Enabled"))
	draw := known(func(g *gpu) string { return watts(g.st.Telemetry.PowerDrawW) })
	limit := known(func(g *gpu) string { return watts(float64(g.st.PowerLimitW)) })
	add("power.draw", nil, "W", "The board's power draw, in watts (average over 1 s).", draw)
	add("power.draw.average", []string{"gpu.power.draw.average"}, "W", "The board's average power draw, in watts.", draw)
	add("power.draw.instant", []string{"gpu.power.draw.instant"}, "W", "The board's instant power draw, in watts.", draw)
	add("power.limit", []string{"gpu.power.requested_limit"}, "W", "The power limit, in watts.", limit)
	add("enforced.power.limit", []string{"gpu.power.current_limit"}, "W", "The power limit in force, in watts.", limit)
	add("power.default_limit", []string{"gpu.power.default_limit"}, "W", "The default power limit, in watts.", limit)
	add("power.min_limit", []string{"gpu.power.min_limit"}, "W", "The lowest power limit that can be set, in watts.", knownIf(func(g *gpu) (string, bool) {
		w := g.facts().MinPowerLimitW
		return watts(float64(w)), w > 0
	}))
	add("power.max_limit", []string{"gpu.power.max_limit"}, "W", "The highest power limit that can be set, in watts.", limit)
	add("module.power.draw.average", nil, "W", notSimulated, na)
	add("module.power.draw.instant", nil, "W", notSimulated, na)
	add("module.power.limit", []string{"module.power.requested_limit"}, "W", notSimulated, na)
	add("module.enforced.power.limit", []string{"module.power.current_limit"}, "W", notSimulated, na)
	add("module.power.default_limit", nil, "W", notSimulated, na)
	add("module.power.min_limit", nil, "W", notSimulated, na)
	add("module.power.max_limit", nil, "W", notSimulated, na)
	add("power_smoothing.delayed_power_smoothing_supported", nil, "", notSimulated, na)
	for _, p := range []struct{ name, unit string }{
		{"primary_power_floor", "W"}, {"secondary_power_floor", "W"}, {"min_primary_floor_activation_offset", "W"},
		{"min_primary_floor_activation_point", "W"}, {"window_multiplier", "ms"}, {"curr_profile.secondary_power_floor", "W"},
		{"curr_profile.primary_floor_act_window_multiplier", ""}, {"curr_profile.primary_floor_tar_window_multiplier", ""},
		{"curr_profile.primary_floor_act_offset", "W"}, {"admin_override.secondary_power_floor", "W"},
		{"admin_override.primary_floor_act_window_multiplier", ""}, {"admin_override.primary_floor_tar_window_multiplier", ""},
		{"admin_override.primary_floor_act_offset", "W"},
	} {
		add("power_smoothing."+p.name, nil, p.unit, notSimulated, na)
	}
	sm := known(func(g *gpu) string { return itoa(g.st.Telemetry.SMClockMHz) })
	maxClock := func(f func(c status.Clocks) int) valueFunc {
		return knownIf(func(g *gpu) (string, bool) { v := f(g.st.MaxClocks); return itoa(v), v > 0 })
	}
	maxGr := maxClock(func(c status.Clocks) int { return c.GraphicsMHz })
	maxMem := maxClock(func(c status.Clocks) int { return c.MemoryMHz })
	add("clocks.current.graphics", []string{"clocks.gr"}, "MHz", "The graphics (shader) clock, in MHz.", sm)
	add("clocks.current.sm", []string{"clocks.sm"}, "MHz", "The SM clock, in MHz.", sm)
	add("clocks.current.memory", []string{"clocks.mem"}, "MHz", "The memory clock, in MHz.", known(func(g *gpu) string { return itoa(g.st.Telemetry.MemoryClockMHz) }))
	add("clocks.current.video", []string{"clocks.video"}, "MHz", "The video encoder/decoder clock, in MHz.", knownIf(func(g *gpu) (string, bool) {
		v, ok := g.videoClock()
		return itoa(v), ok
	}))
	add("clocks.applications.graphics", []string{"clocks.applications.gr"}, "MHz", "The applications graphics clock, in MHz: the maximum.", maxGr)
	add("clocks.applications.memory", []string{"clocks.applications.mem"}, "MHz", "The applications memory clock, in MHz: the maximum.", maxMem)
	add("clocks.default_applications.graphics", []string{"clocks.default_applications.gr"}, "MHz", "The default applications graphics clock, in MHz.", maxGr)
	add("clocks.default_applications.memory", []string{"clocks.default_applications.mem"}, "MHz", "The default applications memory clock, in MHz.", maxMem)
	add("clocks.max.graphics", []string{"clocks.max.gr"}, "MHz", "The highest graphics clock, in MHz.", maxGr)
	add("clocks.max.sm", []string{"clocks.max.sm"}, "MHz", "The highest SM clock, in MHz.", maxClock(func(c status.Clocks) int { return c.SMMHz }))
	add("clocks.max.memory", []string{"clocks.max.mem"}, "MHz", "The highest memory clock, in MHz.", maxMem)
	mig := knownIf(func(g *gpu) (string, bool) { return g.migMode() })
	add("mig.mode.current", nil, "", "Whether MIG is on: Enabled under a MIG layout, else Disabled; [N/A] for GPUs without MIG.", mig)
	add("mig.mode.pending", nil, "", "Whether MIG will be on after a reset.", mig)
	gsp := knownIf(func(g *gpu) (string, bool) { return "Enabled", g.gspCapable() })
	add("gsp.mode.current", nil, "", "Whether the GPU's firmware runs on its GSP: Enabled from Turing on.", gsp)
	add("gsp.mode.default", nil, "", "Whether GSP firmware is on by default.", gsp)
	add("c2c.mode", nil, "", "The chip-to-chip link mode: Disabled on Hopper (no Grace CPU attached), [N/A] before.", knownIf(func(g *gpu) (string, bool) {
		return "Disabled", g.cc() >= 90
	}))
	for _, n := range []string{"total", "used", "free"} {
		add("protected_memory."+n, nil, "MiB", "Confidential computing protected memory, in MiB: 0 (confidential computing off).", knownIf(func(g *gpu) (string, bool) {
			return "0", g.gspCapable()
		}))
	}
	nas("The NVLink fabric of NVSwitch systems: not simulated, [N/A].", "fabric.state", "fabric.status", "fabric.cliqueId", "fabric.clusterUuid", "fabric.health.summary",
		"fabric.health.bandwidth", "fabric.health.route_recovery_in_progress", "fabric.health.route_unhealthy",
		"fabric.health.access_timeout_recovery", "fabric.health.incorrect_configuration", "fabric.health.partition_assigned")
	add("platform.chassis_serial_number", nil, "", "The chassis serial number: empty, as real boards outside a GB200 rack report.", fixed(""))
	add("platform.slot_number", nil, "", "The slot number in the chassis: 0.", fixed("0"))
	add("platform.tray_index", nil, "", "The tray index in the chassis: 0.", fixed("0"))
	add("platform.host_id", nil, "", "The host id: 1.", fixed("1"))
	add("platform.peer_type", nil, "", "How the GPU reaches its peers: Direct Connected.", fixed("Direct Connected"))
	add("platform.module_id", nil, "", "The GPU's module on its baseboard: 1-8 on an SXM baseboard, 1 for a PCIe card.", known(func(g *gpu) string { return itoa(g.moduleID()) }))
	add("platform.gpu_fabric_guid", nil, "", "The GPU's fabric GUID: 0x0000000000000000 outside an NVLink fabric.", fixed("0x0000000000000000"))
	nas("The host name of a GB200 rack's tray: [N/A].", "hostname")
	return fs
}

// clockEventFields are the clock event reasons --query-gpu reports one by
// one, with their NVML bits (topology.ClockEvent*), in the order of driver
// 580's --help-query-gpu.
var clockEventFields = []struct {
	name, help string
	bit        uint64
}{
	{"gpu_idle", "Active when nothing runs on the GPU.", topology.ClockEventGPUIdle},
	{"applications_clocks_setting", "Active when the applications clocks hold the clocks down.", topology.ClockEventApplicationsClocksSetting},
	{"sw_power_cap", "Active when the power draw reached the power limit.", topology.ClockEventSWPowerCap},
	{"hw_slowdown", "Active when the hardware slows the clocks (temperature or power brake).", topology.ClockEventHWSlowdown},
	{"hw_thermal_slowdown", "Active when the GPU is too hot: hardware slowdown.", topology.ClockEventHWThermalSlowdown},
	{"hw_power_brake_slowdown", "Active when an external power brake slows the GPU.", topology.ClockEventHWPowerBrakeSlowdown},
	{"sw_thermal_slowdown", "Active when the GPU or its memory reached the slowdown temperature.", topology.ClockEventSWThermalSlowdown},
	{"sync_boost", "Active when the clocks follow another GPU's in a sync boost group.", topology.ClockEventSyncBoost},
}

// activeWord is "Active" or "Not Active".
func activeWord(b bool) string {
	if b {
		return "Active"
	}
	return "Not Active"
}

// yesNo is "Yes" or "No".
func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

// eccCount returns the ECC count of a kind (corrected, uncorrected) and
// scope (volatile, aggregate).
func eccCount(kind, scope string) func(e topology.MemoryErrors) int {
	switch kind + "." + scope {
	case "corrected.volatile":
		return func(e topology.MemoryErrors) int { return e.VolatileCorrected }
	case "corrected.aggregate":
		return func(e topology.MemoryErrors) int { return e.AggregateCorrected }
	case "uncorrected.volatile":
		return func(e topology.MemoryErrors) int { return e.VolatileUncorrected }
	}
	return func(e topology.MemoryErrors) int { return e.AggregateUncorrected }
}

// histogramNames are the buckets of the bank remap availability histogram,
// histogramHelp how many spare rows their banks have left.
var (
	histogramNames = []string{"max", "high", "partial", "low", "none"}
	histogramHelp  = []string{"all their", "most of their", "some of their", "few", "no"}
)

// fieldsByName finds a field by name or alias.
var fieldsByName = func() map[string]*field {
	m := make(map[string]*field, 2*len(fields))
	for i := range fields {
		f := &fields[i]
		m[f.name] = f
		for _, a := range f.aliases {
			if _, dup := m[a]; !dup {
				m[a] = f
			}
		}
	}
	return m
}()

// header is the CSV header of a field: "memory.total [MiB]". nvidia-smi
// keeps the unit in the header with nounits.
func (f *field) header() string { return csvHeader(f.name, f.unit) }

// format renders the field's value for g: "[N/A]" when unknown, the unit
// after a space unless nounits.
func (f *field) format(q *queryContext, g *gpu, nounits bool) string {
	v, ok := f.value(q, g)
	switch {
	case !ok:
		return "[N/A]"
	case f.unit == "" || nounits:
		return v
	}
	return v + " " + f.unit
}

// maxFieldListBytes bounds a --query-gpu list: every documented name and
// alias once takes under 16 KiB.
const maxFieldListBytes = 64 << 10

// parseFields parses a --query-gpu list: names or aliases separated by
// commas, spaces around them ignored. It returns the fields in order
// (repeats allowed, as nvidia-smi prints them twice) or the first name that
// is not a field, which nvidia-smi reports as `Field "NAME" is not a valid
// field to query.` — an empty name too ("a,,b", a trailing comma).
func parseFields(list string) ([]*field, string, bool) {
	return parseList(list, func(name string) (*field, bool) {
		f, ok := fieldsByName[name]
		return f, ok
	})
}

// parseList parses a query list of any of the three queries: names
// separated by commas, spaces around them ignored, each looked up. It
// returns the fields in order or the first name lookup does not know; a
// list over maxFieldListBytes is refused naming its first 64 bytes (less
// if a character straddles the cut) and "…".
func parseList[F any](list string, lookup func(name string) (F, bool)) ([]F, string, bool) {
	if len(list) > maxFieldListBytes {
		cut := 64
		for cut > 0 && !utf8.RuneStart(list[cut]) {
			cut--
		}
		return nil, list[:cut] + "…", false
	}
	var out []F
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		f, ok := lookup(name)
		if !ok {
			return nil, name, false
		}
		out = append(out, f)
	}
	return out, "", true
}
