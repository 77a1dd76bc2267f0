package topology

import "strings"

// The GPU facts every part of the plugin shares, in one place: what a
// board of a product reports (max clocks, idle clock, a memory sensor, a
// fan), how its values move with load (the telemetry's clocks and
// temperatures per architecture family, the memory temperature and the fan
// curve), and what the fake driver reserves and reports. The status files
// (view/status), nvidia-smi, the telemetry and, next, the DRA attributes
// read them from here. The values are typical of real boards (nvidia-smi
// -q and dcgm-exporter output of each part), plausible rather than exact
// for every product of a family.

// The fake driver the plugin's GPUs report, in one place: nvidia-smi prints
// these versions in its header, in -q and for --query-gpu=driver_version, and
// the plugin writes them into every status file; the telemetry labels its
// series with the driver version. R580 is the last driver
// branch that supports every architecture of the built-in machines (Pascal
// and Volta, dropped after R580, up to Hopper and Blackwell); 580.173.02
// reports CUDA 13.0, as a real 580.173.02 driver does (nvidia-smi --version
// in utkuozdemir/nvidia_gpu_exporter, internal/captures/
// linux-x86_64__nvidia-h200__580.173.02.txt).
const (
	// DriverVersion is the NVIDIA driver version the fake driver reports.
	DriverVersion = "580.173.02"
	// NVMLVersion is the NVML library version of that driver.
	NVMLVersion = "580.173"
	// CUDAVersion is the highest CUDA version the fake driver supports.
	CUDAVersion = "13.0"
)

// Idle values a GPU reports until a load model moves them.
const (
	// IdleTemperatureC is the GPU temperature of an idle GPU.
	IdleTemperatureC = 33
	// IdleMemoryTemperatureC is the memory temperature of an idle HBM
	// board.
	IdleMemoryTemperatureC = 36
	// IdleFanSpeedPercent is the fan speed of an idle board with a fan.
	IdleFanSpeedPercent = 30
)

// ReservedMiB is the memory the fake driver reserves on a GPU of totalMiB:
// 0.6 %, rounded down (memory.reserved). memory.used + memory.free is
// totalMiB − ReservedMiB(totalMiB).
func ReservedMiB(totalMiB int) int { return totalMiB * 6 / 1000 }

// MemoryTemperatureC is the memory temperature of a busy HBM board whose
// GPU is at gpuC: 3 °C above it.
func MemoryTemperatureC(gpuC int) int { return gpuC + 3 }

// FanSpeedPercent is the fan speed of a board with a fan at the given GPU
// utilization: 30 % plus 0.4 % per point.
func FanSpeedPercent(utilizationPercent int) int {
	return IdleFanSpeedPercent + utilizationPercent*2/5
}

// Clocks are a board's maximum clocks in MHz, as nvidia-smi -q shows them
// under "Max Clocks".
type Clocks struct {
	GraphicsMHz, SMMHz, MemoryMHz, VideoMHz int
}

// Board is what a board of a GPU model reports beyond the model: its
// maximum clocks, its SM clock at idle (in P0, the memory at its maximum),
// whether it has a memory temperature sensor (HBM), and whether it has a
// fan (workstation and consumer cards; data-center boards are cooled by
// the chassis and show no fan speed). The zero value is a board nothing is
// known of: no clocks, no sensor, no fan.
type Board struct {
	MaxClocks      Clocks
	IdleSMClockMHz int
	HBM            bool
	Fan            bool
}

// boardsByCC are typical boards per compute capability (max clocks from
// nvidia-smi -q "Max Clocks"; the idle SM clock in P0).
var boardsByCC = map[string]Board{
	"6.0":  {MaxClocks: Clocks{1480, 1480, 715, 1480}, IdleSMClockMHz: 405, HBM: true},  // P100 SXM2
	"7.0":  {MaxClocks: Clocks{1530, 1530, 877, 1372}, IdleSMClockMHz: 135, HBM: true},  // V100 SXM2/SXM3
	"7.5":  {MaxClocks: Clocks{1590, 1590, 5001, 1470}, IdleSMClockMHz: 300},            // T4
	"8.0":  {MaxClocks: Clocks{1410, 1410, 1215, 1290}, IdleSMClockMHz: 210, HBM: true}, // A100 SXM4
	"8.6":  {MaxClocks: Clocks{2100, 2100, 8001, 1950}, IdleSMClockMHz: 210},            // RTX A6000, A40
	"8.9":  {MaxClocks: Clocks{2520, 2520, 9001, 1965}, IdleSMClockMHz: 210},            // L40S
	"9.0":  {MaxClocks: Clocks{1980, 1980, 2619, 1545}, IdleSMClockMHz: 345, HBM: true}, // H100 SXM5
	"10.0": {MaxClocks: Clocks{1965, 1965, 3996, 1965}, IdleSMClockMHz: 120, HBM: true}, // B200
}

// memoryClockByProduct overrides the memory clock of boards whose memory is
// faster than their compute capability's typical one (H200: nvidia-smi -q in
// utkuozdemir/nvidia_gpu_exporter, internal/captures).
var memoryClockByProduct = map[string]int{
	"NVIDIA H200": 3201,
}

// fanProducts mark the actively cooled boards by their product name.
var fanProducts = []string{"RTX", "GeForce", "Quadro", "TITAN"}

// Board returns what a board of g reports: its compute capability's
// typical board, with the product's own memory clock where it differs, and
// a fan for a workstation or consumer product.
func (g GPUModel) Board() Board {
	b := boardsByCC[g.Compute.String()]
	if mem, ok := memoryClockByProduct[g.Product]; ok && b.MaxClocks.MemoryMHz != 0 {
		b.MaxClocks.MemoryMHz = mem
	}
	for _, s := range fanProducts {
		if strings.Contains(g.Product, s) {
			b.Fan = true
		}
	}
	return b
}

// VideoClockMHz is the video clock of a board whose SM clock is smMHz: the
// maximum video clock in the SM clock's proportion to its maximum (an idle
// H100 at 345 MHz SM shows 269 MHz, a busy one at boost its maximum, 1545
// MHz, as a real H200 under load does in nvidia-smi -q).
func (b Board) VideoClockMHz(smMHz int) int {
	if b.MaxClocks.SMMHz <= 0 || smMHz <= 0 {
		return 0
	}
	return min(b.MaxClocks.VideoMHz, (b.MaxClocks.VideoMHz*smMHz+b.MaxClocks.SMMHz/2)/b.MaxClocks.SMMHz)
}

// Thermal is how an architecture family's data-center part moves under
// load, for the telemetry's load model: its SM clock at idle, base and
// boost, and its temperature at idle and at the power limit.
type Thermal struct {
	IdleClockMHz, BaseClockMHz, BoostClockMHz int
	IdleTempC, MaxTempC                       float64
}

// thermalByFamily are typical values of each family's data-center part:
// P100, V100, T4, A100, L40S, H100, B200. (The B200's idle SM clock here is
// the family's, 345 MHz; its board's, the status files', is 120 MHz.)
var thermalByFamily = map[string]Thermal{
	"kepler":       {324, 562, 875, 30, 80},
	"maxwell":      {405, 948, 1114, 30, 80},
	"pascal":       {405, 1328, 1480, 30, 80},
	"volta":        {135, 1290, 1530, 32, 80},
	"turing":       {300, 585, 1590, 30, 80},
	"ampere":       {210, 1095, 1410, 30, 75},
	"ada-lovelace": {210, 1110, 2520, 30, 85},
	"hopper":       {345, 1590, 1980, 30, 80},
	"blackwell":    {345, 1665, 1965, 30, 80},
}

// defaultThermal is for a family the table lacks.
var defaultThermal = Thermal{300, 1000, 1500, 30, 80}

// Thermal returns how g's family moves under load; a family the table
// lacks gets middling values.
func (g GPUModel) Thermal() Thermal {
	if t, ok := thermalByFamily[g.Family]; ok {
		return t
	}
	return defaultThermal
}

// Brand is the Product Brand nvidia-smi prints for a product (and NVIDIA's
// DRA driver publishes as brand): Tesla for the Tesla boards, GeForce,
// NVIDIA RTX for the RTX workstation cards, else NVIDIA.
func Brand(product string) string {
	switch {
	case strings.HasPrefix(product, "Tesla"):
		return "Tesla"
	case strings.Contains(product, "GeForce"):
		return "GeForce"
	case strings.Contains(product, "RTX"):
		return "NVIDIA RTX"
	}
	return "NVIDIA"
}

// Architecture is the Product Architecture nvidia-smi prints for a family
// (and NVIDIA's DRA driver publishes as architecture): "Ampere", "Hopper",
// "Ada Lovelace"; "" for no family.
func Architecture(family string) string {
	switch family {
	case "ada-lovelace":
		return "Ada Lovelace"
	case "":
		return ""
	}
	return strings.ToUpper(family[:1]) + family[1:]
}
