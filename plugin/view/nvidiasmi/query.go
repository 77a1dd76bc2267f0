package nvidiasmi

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// node is one line of `nvidia-smi -q` and one element of `-q -x`: a label
// and a value (or children), and the XML tag and value. A node with an
// empty tag is only in the text; one with an empty label only in the XML.
type node struct {
	label, tag string
	text, xml  string
	children   []node
	// procs marks the Processes node: its processes are written in the
	// real tool's shapes (writeProcsText, writeProcsXML).
	procs   []process
	isProcs bool
}

// kv is a node whose value is the same in the text and the XML.
func kv(label, tag, value string) node { return node{label: label, tag: tag, text: value, xml: value} }

// kvx is a node whose XML value differs from its text value.
func kvx(label, tag, text, xmlValue string) node {
	return node{label: label, tag: tag, text: text, xml: xmlValue}
}

// sec is a node with children.
func sec(label, tag string, children ...node) node {
	return node{label: label, tag: tag, children: children}
}

const notAvailable = "N/A"

// unit appends a unit to a known value: "81559 MiB", N/A stays N/A.
func unit(v, u string) string {
	if v == notAvailable {
		return v
	}
	return v + " " + u
}

// fieldText returns a --query-gpu field's value as -q prints it: N/A rather
// than [N/A], with its unit.
func fieldText(q *queryContext, g *gpu, name string) string {
	f := fieldsByName[name]
	v, ok := f.value(q, g)
	switch {
	case !ok:
		return notAvailable
	case f.unit == "":
		return v
	}
	return v + " " + f.unit
}

// gpuNodes returns the -q sections of one GPU, in the order of driver R580.
func gpuNodes(q *queryContext, g *gpu) []node {
	f := func(name string) string { return fieldText(q, g, name) }
	na := notAvailable
	kvNA := func(label, tag string) node { return kv(label, tag, na) }
	product, brand, arch, minor, boardID := na, na, na, na, na
	pciBus, pciDevice, pciDomain, xmlBus, xmlDevice, xmlDomain := na, na, na, na, na, na
	if s := g.st; s != nil {
		product, brand, arch, minor = s.Product, g.brand(), g.architecture(), itoa(s.MinorNumber)
		if d, b, dev, _, ok := g.busParts(); ok {
			pciBus, pciDevice, pciDomain = fmt.Sprintf("0x%02X", b), fmt.Sprintf("0x%02X", dev), fmt.Sprintf("0x%04X", d)
			xmlBus, xmlDevice, xmlDomain = fmt.Sprintf("%02X", b), fmt.Sprintf("%02X", dev), fmt.Sprintf("%04X", d)
			boardID = fmt.Sprintf("0x%x", b<<8|dev)
		}
	}
	uuid := g.uuid
	if uuid == "" {
		uuid = na
	}
	deviceID := f("pci.device_id")
	xmlDeviceID := strings.TrimPrefix(deviceID, "0x")
	width := f("pcie.link.width.max")
	if width != na {
		width += "x"
	}
	fan := f("fan.speed")
	zero := func() string { // an ECC counter
		if g.st != nil && g.eccEnabled() {
			return "0"
		}
		return na
	}
	threshold, no := na, na
	if zero() == "0" {
		threshold, no = "No", "No"
	}
	ecc := func(extra ...node) []node { return eccNodes(g, "volatile", zero, extra...) }
	eccAggregate := func(extra ...node) []node { return eccNodes(g, "aggregate", zero, extra...) }
	tlimit := func(label, tag string, offset func(t topology.TempThresholds) int) node {
		if !g.tlimitKnown() {
			return kvNA(label, tag)
		}
		return kv(label, tag, itoa(offset(g.thresholds))+" C")
	}
	memTlimit := na
	if g.tlimitKnown() && g.board.HBM {
		memTlimit = "0 C"
	}
	gspVersion := na
	if g.st != nil && g.gspCapable() {
		gspVersion = driverVersion()
	}
	throughput := func(kbps func(t status.Telemetry) int64) string {
		if g.st == nil {
			return na
		}
		return strconv.FormatInt(kbps(g.st.Telemetry), 10) + " KB/s"
	}
	subSystem := f("pci.sub_device_id")
	banks := func(label, tag, field string) node {
		return kv(label, tag, unit(f(field), "bank(s)"))
	}
	displayClock := na
	if g.st != nil {
		displayClock = activeWord(g.clockEvents()&topology.ClockEventDisplayClockSetting != 0)
	}
	bar1Total, bar1Used, bar1Free := na, na, na
	if total := g.facts().BAR1MiB; g.st != nil && total > 0 {
		// The driver maps the memory in use and 1 MiB of its own (a real
		// H200: 1 MiB idle, 32363 MiB with 32362 MiB used).
		used := min(total, g.st.Telemetry.MemoryUsedMiB+1)
		bar1Total, bar1Used, bar1Free = itoa(total)+" MiB", itoa(used)+" MiB", itoa(total-used)+" MiB"
	}
	counter := func(label string) node { return kv(label, "", f("clocks_event_reasons_counters.sw_power_cap")) }
	mem := func(label, tag, v string) node { return kv(label, tag, v) }
	return []node{
		kv("Product Name", "product_name", product),
		kv("Product Brand", "product_brand", brand),
		kv("Product Architecture", "product_architecture", arch),
		kv("Display Mode", "display_mode", strings.Trim(f("display_mode"), "[]")),
		kv("Display Attached", "display_attached", f("display_attached")),
		kv("Display Active", "display_active", f("display_active")),
		kv("Persistence Mode", "persistence_mode", f("persistence_mode")),
		kv("Addressing Mode", "addressing_mode", f("addressing_mode")),
		sec("MIG Mode", "mig_mode", kv("Current", "current_mig", f("mig.mode.current")), kv("Pending", "pending_mig", f("mig.mode.pending"))),
		kv("", "mig_devices", "None"),
		kv("Accounting Mode", "accounting_mode", f("accounting.mode")),
		kv("Accounting Mode Buffer Size", "accounting_mode_buffer_size", f("accounting.buffer_size")),
		sec("Driver Model", "driver_model", kvNA("Current", "current_dm"), kvNA("Pending", "pending_dm")),
		kv("Serial Number", "serial", f("serial")),
		kv("GPU UUID", "uuid", uuid),
		kv("GPU PDI", "", g.pdi()),
		kv("Minor Number", "minor_number", minor),
		kv("VBIOS Version", "vbios_version", f("vbios_version")),
		kv("MultiGPU Board", "multigpu_board", "No"),
		kv("Board ID", "board_id", boardID),
		kvNA("Board Part Number", "board_part_number"),
		kvNA("GPU Part Number", "gpu_part_number"),
		kvNA("FRU Part Number", "gpu_fru_part_number"),
		sec("Platform Info", "platformInfo",
			kvNA("Chassis Serial Number", "chassis_serial_number"), kvNA("Slot Number", "slot_number"),
			kvNA("Tray Index", "tray_index"), kvNA("Host ID", "host_id"), kvNA("Peer Type", "peer_type"),
			kv("Module Id", "module_id", f("platform.module_id")), kvNA("GPU Fabric GUID", "gpu_fabric_guid")),
		sec("Inforom Version", "inforom_version",
			kv("Image Version", "img_version", f("inforom.img")), kv("OEM Object", "oem_object", f("inforom.oem")),
			kv("ECC Object", "ecc_object", f("inforom.ecc")), kv("Power Management Object", "pwr_object", f("inforom.pwr"))),
		sec("Inforom BBX Object Flush", "inforom_bbx_flush", kvNA("Latest Timestamp", "latest_timestamp"), kvNA("Latest Duration", "latest_duration")),
		sec("GPU Operation Mode", "gpu_operation_mode", kvNA("Current", "current_gom"), kvNA("Pending", "pending_gom")),
		kv("GPU C2C Mode", "c2c_mode", f("c2c.mode")),
		sec("GPU Virtualization Mode", "gpu_virtualization_mode",
			kv("Virtualization Mode", "virtualization_mode", "None"), kvNA("Host VGPU Mode", "host_vgpu_mode"),
			kvNA("vGPU Heterogeneous Mode", "vgpu_heterogeneous_mode")),
		kv("GPU Recovery Action", "gpu_recovery_action", f("gpu_recovery_action")),
		kv("GSP Firmware Version", "gsp_firmware_version", gspVersion),
		sec("IBMNPU", "ibmnpu", kvNA("Relaxed Ordering Mode", "relaxed_ordering_mode")),
		sec("PCI", "pci",
			kvx("Bus", "pci_bus", pciBus, xmlBus),
			kvx("Device", "pci_device", pciDevice, xmlDevice),
			kvx("Domain", "pci_domain", pciDomain, xmlDomain),
			kvx("Base Classcode", "pci_base_class", f("pci.baseClass"), strings.TrimPrefix(f("pci.baseClass"), "0x")),
			kvx("Sub Classcode", "pci_sub_class", f("pci.subClass"), strings.TrimPrefix(f("pci.subClass"), "0x")),
			kvx("Device Id", "pci_device_id", deviceID, xmlDeviceID),
			kv("Bus Id", "pci_bus_id", f("pci.bus_id")),
			kvx("Sub System Id", "pci_sub_system_id", subSystem, strings.TrimPrefix(subSystem, "0x")),
			sec("GPU Link Info", "pci_gpu_link_info",
				sec("PCIe Generation", "pcie_gen",
					kv("Max", "max_link_gen", f("pcie.link.gen.max")),
					kv("Current", "current_link_gen", f("pcie.link.gen.current")),
					kv("Device Current", "device_current_link_gen", f("pcie.link.gen.gpucurrent")),
					kv("Device Max", "max_device_link_gen", f("pcie.link.gen.gpumax")),
					kvNA("Host Max", "max_host_link_gen")),
				sec("Link Width", "link_widths", kv("Max", "max_link_width", width), kv("Current", "current_link_width", width))),
			sec("Bridge Chip", "pci_bridge_chip", kvNA("Type", "bridge_chip_type"), kvNA("Firmware", "bridge_chip_fw")),
			kv("Replays Since Reset", "replay_counter", ifKnown(g, "0")),
			kv("Replay Number Rollovers", "replay_rollover_counter", ifKnown(g, "0")),
			kv("Tx Throughput", "tx_util", throughput(func(t status.Telemetry) int64 { return t.PCIeTxKBps })),
			kv("Rx Throughput", "rx_util", throughput(func(t status.Telemetry) int64 { return t.PCIeRxKBps })),
			kvNA("Atomic Caps Outbound", "atomic_caps_outbound"),
			kvNA("Atomic Caps Inbound", "atomic_caps_inbound")),
		kv("Fan Speed", "fan_speed", fan),
		kv("Performance State", "performance_state", f("pstate")),
		sec("Clocks Event Reasons", "clocks_event_reasons",
			kv("Idle", "clocks_event_reason_gpu_idle", f("clocks_event_reasons.gpu_idle")),
			kv("Applications Clocks Setting", "clocks_event_reason_applications_clocks_setting", f("clocks_event_reasons.applications_clocks_setting")),
			kv("SW Power Cap", "clocks_event_reason_sw_power_cap", f("clocks_event_reasons.sw_power_cap")),
			kv("HW Slowdown", "clocks_event_reason_hw_slowdown", f("clocks_event_reasons.hw_slowdown")),
			kv("    HW Thermal Slowdown", "clocks_event_reason_hw_thermal_slowdown", f("clocks_event_reasons.hw_thermal_slowdown")),
			kv("    HW Power Brake Slowdown", "clocks_event_reason_hw_power_brake_slowdown", f("clocks_event_reasons.hw_power_brake_slowdown")),
			kv("Sync Boost", "clocks_event_reason_sync_boost", f("clocks_event_reasons.sync_boost")),
			kv("SW Thermal Slowdown", "clocks_event_reason_sw_thermal_slowdown", f("clocks_event_reasons.sw_thermal_slowdown")),
			kv("Display Clock Setting", "clocks_event_reason_display_clocks_setting", displayClock)),
		sec("Clocks Event Reasons Counters", "",
			counter("SW Power Capping"), counter("Sync Boost"), counter("SW Thermal Slowdown"),
			counter("HW Thermal Slowdown"), counter("HW Power Braking")),
		kv("Sparse Operation Mode", "sparse_operation_mode", ifKnown(g, "Disabled")),
		sec("FB Memory Usage", "fb_memory_usage",
			mem("Total", "total", f("memory.total")), mem("Reserved", "reserved", f("memory.reserved")),
			mem("Used", "used", f("memory.used")), mem("Free", "free", f("memory.free"))),
		sec("BAR1 Memory Usage", "bar1_memory_usage", kv("Total", "total", bar1Total), kv("Used", "used", bar1Used), kv("Free", "free", bar1Free)),
		sec("Conf Compute Protected Memory Usage", "cc_protected_memory_usage",
			kv("Total", "total", f("protected_memory.total")), kv("Used", "used", f("protected_memory.used")), kv("Free", "free", f("protected_memory.free"))),
		kv("Compute Mode", "compute_mode", f("compute_mode")),
		sec("Utilization", "utilization",
			kv("GPU", "gpu_util", f("utilization.gpu")), kv("Memory", "memory_util", f("utilization.memory")),
			kv("Encoder", "encoder_util", f("utilization.encoder")), kv("Decoder", "decoder_util", f("utilization.decoder")),
			kv("JPEG", "jpeg_util", f("utilization.jpeg")), kv("OFA", "ofa_util", f("utilization.ofa"))),
		sec("Encoder Stats", "encoder_stats",
			kv("Active Sessions", "session_count", f("encoder.stats.sessionCount")),
			kv("Average FPS", "average_fps", f("encoder.stats.averageFps")),
			kv("Average Latency", "average_latency", f("encoder.stats.averageLatency"))),
		sec("FBC Stats", "fbc_stats",
			kv("Active Sessions", "session_count", ifKnown(g, "0")), kv("Average FPS", "average_fps", ifKnown(g, "0")),
			kv("Average Latency", "average_latency", ifKnown(g, "0"))),
		sec("DRAM Encryption Mode", "dram_encryption_mode", kvNA("Current", "current_dram_encryption"), kvNA("Pending", "pending_dram_encryption")),
		sec("ECC Mode", "ecc_mode", kv("Current", "current_ecc", f("ecc.mode.current")), kv("Pending", "pending_ecc", f("ecc.mode.pending"))),
		sec("ECC Errors", "ecc_errors",
			sec("Volatile", "volatile", ecc()...),
			sec("Aggregate", "aggregate", eccAggregate(kv("SRAM Threshold Exceeded", "sram_threshold_exceeded", threshold))...),
			sec("Aggregate Uncorrectable SRAM Sources", "aggregate_uncorrectable_sram_sources",
				kv("SRAM L2", "sram_l2", zero()), kv("SRAM SM", "sram_sm", zero()),
				kv("SRAM Microcontroller", "sram_microcontroller", zero()), kv("SRAM PCIE", "sram_pcie", zero()),
				kv("SRAM Other", "sram_other", zero())),
			kv("Channel Repair Pending", "channel_repair_pending", no),
			kv("TPC Repair Pending", "tpc_repair_pending", no),
			kv("Unrepairable Memory", "", no)),
		sec("Retired Pages", "retired_pages",
			kvx("Single Bit ECC", "", f("retired_pages.sbe"), ""),
			kvx("Double Bit ECC", "", f("retired_pages.dbe"), ""),
			sec("", "multiple_single_bit_retirement", kv("", "retired_count", f("retired_pages.sbe")), kvNA("", "retired_pagelist")),
			sec("", "double_bit_retirement", kv("", "retired_count", f("retired_pages.dbe")), kvNA("", "retired_pagelist")),
			kv("Pending Page Blacklist", "pending_blacklist", f("retired_pages.pending")),
			kv("", "pending_retirement", f("retired_pages.pending"))),
		sec("Remapped Rows", "remapped_rows",
			kv("Correctable Error", "remapped_row_corr", f("remapped_rows.correctable")),
			kv("Inactive Correctable Error", "", f("remapped_rows.correctable_inactive")),
			kv("Uncorrectable Error", "remapped_row_unc", f("remapped_rows.uncorrectable")),
			kv("Inactive Uncorrectable Error", "", f("remapped_rows.uncorrectable_inactive")),
			kv("Pending", "remapped_row_pending", f("remapped_rows.pending")),
			kv("Remapping Failure Occurred", "remapped_row_failure", f("remapped_rows.failure")),
			sec("Bank Remap Availability Histogram", "row_remapper_histogram",
				banks("Max", "row_remapper_histogram_max", "remapped_rows.histogram.max"),
				banks("High", "row_remapper_histogram_high", "remapped_rows.histogram.high"),
				banks("Partial", "row_remapper_histogram_partial", "remapped_rows.histogram.partial"),
				banks("Low", "row_remapper_histogram_low", "remapped_rows.histogram.low"),
				banks("None", "row_remapper_histogram_none", "remapped_rows.histogram.none"))),
		sec("Temperature", "temperature",
			kv("GPU Current Temp", "gpu_temp", unit(f("temperature.gpu"), "C")),
			kv("GPU T.Limit Temp", "gpu_temp_tlimit", unit(f("temperature.gpu.tlimit"), "C")),
			tlimit("GPU Shutdown T.Limit Temp", "gpu_temp_max_tlimit_threshold", func(t topology.TempThresholds) int { return t.MaxOperatingC - t.ShutdownC }),
			tlimit("GPU Slowdown T.Limit Temp", "gpu_temp_slow_tlimit_threshold", func(t topology.TempThresholds) int { return t.MaxOperatingC - t.SlowdownC }),
			tlimit("GPU Max Operating T.Limit Temp", "gpu_temp_max_gpu_tlimit_threshold", func(topology.TempThresholds) int { return 0 }),
			kvNA("GPU Target Temperature", "gpu_target_temperature"),
			kv("Memory Current Temp", "memory_temp", unit(f("temperature.memory"), "C")),
			kv("Memory Max Operating T.Limit Temp", "gpu_temp_max_mem_tlimit_threshold", memTlimit)),
		sec("GPU Power Readings", "gpu_power_readings",
			kv("", "power_state", f("pstate")),
			kv("Average Power Draw", "average_power_draw", f("power.draw.average")),
			kv("Instantaneous Power Draw", "instant_power_draw", f("power.draw.instant")),
			kv("Current Power Limit", "current_power_limit", f("enforced.power.limit")),
			kv("Requested Power Limit", "requested_power_limit", f("power.limit")),
			kv("Default Power Limit", "default_power_limit", f("power.default_limit")),
			kv("Min Power Limit", "min_power_limit", f("power.min_limit")),
			kv("Max Power Limit", "max_power_limit", f("power.max_limit"))),
		sec("GPU Memory Power Readings ", "gpu_memory_power_readings",
			kvNA("Average Power Draw", "average_power_draw"), kvNA("Instantaneous Power Draw", "instant_power_draw")),
		sec("Module Power Readings", "module_power_readings",
			kvNA("Average Power Draw", "average_power_draw"), kvNA("Instantaneous Power Draw", "instant_power_draw"),
			kvNA("Current Power Limit", "current_power_limit"), kvNA("Requested Power Limit", "requested_power_limit"),
			kvNA("Default Power Limit", "default_power_limit"), kvNA("Min Power Limit", "min_power_limit"),
			kvNA("Max Power Limit", "max_power_limit")),
		kvNA("Power Smoothing", ""),
		sec("Workload Power Profiles", "", kvNA("Requested Profiles", ""), kvNA("Enforced Profiles", "")),
		sec("Clocks", "clocks",
			kv("Graphics", "graphics_clock", f("clocks.gr")), kv("SM", "sm_clock", f("clocks.sm")),
			kv("Memory", "mem_clock", f("clocks.mem")), kv("Video", "video_clock", f("clocks.video"))),
		sec("Applications Clocks", "applications_clocks",
			kv("Graphics", "graphics_clock", f("clocks.applications.gr")), kv("Memory", "mem_clock", f("clocks.applications.mem"))),
		sec("Default Applications Clocks", "default_applications_clocks",
			kv("Graphics", "graphics_clock", f("clocks.default_applications.gr")), kv("Memory", "mem_clock", f("clocks.default_applications.mem"))),
		sec("Deferred Clocks", "deferred_clocks", kvNA("Memory", "mem_clock")),
		sec("Max Clocks", "max_clocks",
			kv("Graphics", "graphics_clock", f("clocks.max.gr")), kv("SM", "sm_clock", f("clocks.max.sm")),
			kv("Memory", "mem_clock", f("clocks.max.mem")), kv("Video", "video_clock", maxVideo(g))),
		sec("Max Customer Boost Clocks", "max_customer_boost_clocks", kv("Graphics", "graphics_clock", f("clocks.max.gr"))),
		sec("Clock Policy", "clock_policy", kvNA("Auto Boost", "auto_boost"), kvNA("Auto Boost Default", "auto_boost_default")),
		sec("Fabric", "",
			kvNA("State", ""), kvNA("Status", ""), kvNA("CliqueId", ""), kvNA("ClusterUUID", ""),
			sec("Health", "",
				kvNA("Summary", ""), kvNA("Bandwidth", ""), kvNA("Route Recovery in progress", ""),
				kvNA("Route Unhealthy", ""), kvNA("Access Timeout Recovery", ""),
				kvNA("Incorrect Configuration", ""), kvNA("Partition Assigned", ""))),
		{label: "Processes", tag: "processes", isProcs: true, procs: g.procs},
		kvx("", "accounted_processes", "", ""),
		sec("Capabilities", "capabilities", kv("EGM", "egm", ifKnown(g, "disabled"))),
	}
}

// eccNodes are the ECC counters of one scope (volatile, aggregate) in -q:
// the DRAM counts of the GPU's memory errors, the SRAM ones 0; N/A
// (zero() says) without ECC.
func eccNodes(g *gpu, scope string, zero func() string, extra ...node) []node {
	corrected, uncorrected := zero(), zero()
	if corrected == "0" {
		e := g.st.Telemetry.MemoryErrors
		corrected, uncorrected = itoa(eccCount("corrected", scope)(e)), itoa(eccCount("uncorrected", scope)(e))
	}
	return append([]node{
		kv("SRAM Correctable", "sram_correctable", zero()),
		kv("SRAM Uncorrectable Parity", "sram_uncorrectable_parity", zero()),
		kv("SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded", zero()),
		kv("DRAM Correctable", "dram_correctable", corrected),
		kv("DRAM Uncorrectable", "dram_uncorrectable", uncorrected),
	}, extra...)
}

// processLabelWidth is the column of the colon in the -q Processes section,
// narrower than the rest (driver R580).
const processLabelWidth = 42

// writeProcsText writes the Processes section of -q at depth: "None", or
// per process its ids, type, name and memory.
func writeProcsText(out *bytes.Buffer, depth int, procs []process) {
	indent := strings.Repeat("    ", depth)
	if len(procs) == 0 {
		out.WriteString(padLabel(indent+"Processes") + ": None\n")
		return
	}
	out.WriteString(indent + "Processes\n")
	line := func(d int, label, value string) {
		l := indent + strings.Repeat("    ", d) + label
		if len(l) < processLabelWidth {
			l += strings.Repeat(" ", processLabelWidth-len(l))
		}
		out.WriteString(l + ": " + value + "\n")
	}
	for _, p := range procs {
		gi, ci := p.instanceIDs()
		line(1, "GPU instance ID", gi)
		line(1, "Compute instance ID", ci)
		line(1, "Process ID", itoa(p.pid))
		line(2, "Type", "C")
		line(2, "Name", p.name)
		line(2, "Used GPU Memory", itoa(p.usedMiB)+" MiB")
	}
}

// writeProcsXML writes the <processes> element of -q -x: a <process_info>
// per process.
func writeProcsXML(out *bytes.Buffer, depth int, procs []process) {
	indent := strings.Repeat("\t", depth)
	out.WriteString(indent + "<processes>\n")
	leaf := func(tag, value string) {
		out.WriteString(indent + "\t\t<" + tag + ">")
		xml.EscapeText(out, []byte(value))
		out.WriteString("</" + tag + ">\n")
	}
	for _, p := range procs {
		out.WriteString(indent + "\t<process_info>\n")
		gi, ci := p.instanceIDs()
		leaf("gpu_instance_id", gi)
		leaf("compute_instance_id", ci)
		leaf("pid", itoa(p.pid))
		leaf("type", "C")
		leaf("process_name", p.name)
		leaf("used_memory", itoa(p.usedMiB)+" MiB")
		out.WriteString(indent + "\t</process_info>\n")
	}
	out.WriteString(indent + "</processes>\n")
}

// ifKnown is v for a GPU with a status file, N/A otherwise.
func ifKnown(g *gpu, v string) string {
	if g.st == nil {
		return notAvailable
	}
	return v
}

// maxVideo is the maximum video clock, which no --query-gpu field reports.
func maxVideo(g *gpu) string {
	if g.st == nil || g.st.MaxClocks.VideoMHz == 0 {
		return notAvailable
	}
	return itoa(g.st.MaxClocks.VideoMHz) + " MHz"
}

// gpuHeader is the id of a GPU in -q: its bus id, N/A if unknown.
func gpuHeader(g *gpu) string {
	if g.st == nil {
		return notAvailable
	}
	return g.st.PCIBusID
}

// writeQuery writes `nvidia-smi -q`. An unhealthy GPU's block is the
// lost-GPU message.
func writeQuery(out *bytes.Buffer, q *queryContext, gpus []*gpu) int {
	out.WriteString("\n==============NVSMI LOG==============\n\n")
	line := func(depth int, label, value string) {
		out.WriteString(padLabel(strings.Repeat("    ", depth)+label) + ": " + value + "\n")
	}
	line(0, "Timestamp", q.now.Format("Mon Jan _2 15:04:05 2006"))
	line(0, "Driver Version", driverVersion())
	line(0, "CUDA Version", cudaVersion())
	out.WriteString("\n")
	line(0, "Attached GPUs", itoa(q.count))
	var write func(depth int, n node)
	write = func(depth int, n node) {
		switch {
		case n.isProcs:
			writeProcsText(out, depth, n.procs)
		case n.label == "":
		case n.children != nil:
			out.WriteString(strings.Repeat("    ", depth) + n.label + "\n")
			for _, c := range n.children {
				write(depth+1, c)
			}
		default:
			line(depth, n.label, n.text)
		}
	}
	code := ExitOK
	for _, g := range gpus {
		if g.lost() {
			out.WriteString(g.lostMessage() + "\n\n")
			code = ExitUnknownError
			continue
		}
		out.WriteString("GPU " + gpuHeader(g) + "\n")
		for _, n := range gpuNodes(q, g) {
			write(1, n)
			if n.tag == "mig_mode" {
				for _, m := range migNodes(g) {
					write(1, m)
				}
			}
		}
		out.WriteString("\n")
	}
	return code
}

// xmlDTD is the document type driver R580 declares.
const xmlDTD = "nvsmi_device_v12.dtd"

// writeXML writes `nvidia-smi -q -x`, tab-indented, with the element names of
// the nvsmi device DTD. Unhealthy GPUs have no <gpu> element: their lost-GPU
// messages come before the document, and the exit code is ExitUnknownError.
func writeXML(out *bytes.Buffer, q *queryContext, gpus []*gpu) int {
	code := ExitOK
	for _, g := range gpus {
		if g.lost() {
			out.WriteString(g.lostMessage() + "\n")
			code = ExitUnknownError
		}
	}
	out.WriteString("<?xml version=\"1.0\" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM \"" + xmlDTD + "\">\n<nvidia_smi_log>\n")
	leaf := func(depth int, tag, value string) {
		out.WriteString(strings.Repeat("\t", depth) + "<" + tag + ">")
		xml.EscapeText(out, []byte(value))
		out.WriteString("</" + tag + ">\n")
	}
	leaf(1, "timestamp", q.now.Format("Mon Jan _2 15:04:05 2006"))
	leaf(1, "driver_version", driverVersion())
	leaf(1, "cuda_version", cudaVersion())
	leaf(1, "attached_gpus", itoa(q.count))
	var write func(depth int, n node)
	write = func(depth int, n node) {
		indent := strings.Repeat("\t", depth)
		switch {
		case n.isProcs:
			writeProcsXML(out, depth, n.procs)
		case n.tag == "":
		case n.children != nil:
			out.WriteString(indent + "<" + n.tag + ">\n")
			for _, c := range n.children {
				write(depth+1, c)
			}
			out.WriteString(indent + "</" + n.tag + ">\n")
		case n.xml == "":
			out.WriteString(indent + "<" + n.tag + ">\n" + indent + "</" + n.tag + ">\n")
		default:
			leaf(depth, n.tag, n.xml)
		}
	}
	for _, g := range gpus {
		if g.lost() {
			continue
		}
		out.WriteString("\t<gpu id=\"")
		xml.EscapeText(out, []byte(gpuHeader(g)))
		out.WriteString("\">\n")
		for _, n := range gpuNodes(q, g) {
			if n.tag == "mig_devices" && len(g.migs) > 0 {
				n = sec("", n.tag, migNodes(g)...)
			}
			write(2, n)
		}
		out.WriteString("\t</gpu>\n")
	}
	out.WriteString("</nvidia_smi_log>\n")
	return code
}
