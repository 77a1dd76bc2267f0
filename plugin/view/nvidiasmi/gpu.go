package nvidiasmi

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// gpu is one GPU of the container, at position pos (its index inside the
// container).
type gpu struct {
	pos  int
	id   string      // device id from VIRTUAL_GPU_IDS (a replica id's GPU part)
	uuid string      // from VIRTUAL_GPU_UUIDS or the status file; "" if unknown
	numa int         // NUMA node, -1 if unknown
	st   *status.GPU // nil: no readable status file, identity unknown
	// model is the GPU's model rebuilt from its status file (product,
	// family, compute capability): the board facts and thresholds of
	// topology; zero without a status file.
	model topology.GPUModel
	// What follows from the model, computed once (each field of
	// --query-gpu asks): its board, facts, thresholds, ECC and row
	// remapping.
	board      topology.Board
	boardFacts topology.BoardFacts
	thresholds topology.TempThresholds
	ecc, remap bool
	// fault is what an unhealthy GPU's health reason says of its failure
	// (topology.ParseFault); the zero Fault (lost) for a healthy one.
	fault topology.Fault
	// procs are the container's processes on the GPU (see readProcs).
	procs []process
	// migOn reports MIG mode on (the status file's migEnabled); migs are
	// the GPU's MIG devices the container sees, in the status file's order
	// (GPU instance ids ascending): their positions are their MIG device
	// indices in the container.
	migOn bool
	migs  []status.MIGDevice
}

// setMIG records the GPU's MIG mode and the MIG devices of st the
// container sees: all of them when it holds the GPU whole, else those of
// ids (the MIG devices of the GPU it holds).
func (g *gpu) setMIG(st *status.GPU, whole bool, ids []string) {
	g.migOn = st.MIGEnabled
	for _, d := range st.MIGDevices {
		if whole || slices.Contains(ids, d.ID) {
			g.migs = append(g.migs, d)
		}
	}
}

// migMode is mig.mode.current (and pending): Enabled or Disabled for a
// GPU that supports MIG; false for one that does not.
func (g *gpu) migMode() (string, bool) {
	switch {
	case g.migOn:
		return "Enabled", true
	case g.migCapable():
		return "Disabled", true
	}
	return "", false
}

// setStatus records the GPU's status file and what follows from it.
func (g *gpu) setStatus(st *status.GPU) {
	g.st = st
	cc, _ := topology.ParseComputeCapability(st.ComputeCapability)
	g.model = topology.GPUModel{Product: st.Product, Family: st.Family, Compute: cc, PowerLimitW: st.PowerLimitW}
	g.board, g.boardFacts, g.thresholds = g.model.Board(), g.model.Facts(), g.model.Thresholds()
	g.ecc, g.remap = g.model.ECC(), g.model.RowRemapping()
	if !st.Health.Healthy {
		g.fault = topology.ParseFault(st.Health.Reason)
	}
}

// lost reports whether the GPU's status says it is unhealthy with a fault
// that leaves it unreachable (a GPU off the bus, or a reason naming no ECC
// or thermal fault): nvidia-smi then shows it as a GPU whose device handle
// cannot be obtained. A GPU with an ECC or thermal fault still answers.
func (g *gpu) lost() bool { return g.st != nil && !g.st.Health.Healthy && !g.fault.Answers() }

// lostMessage is what nvidia-smi prints for a GPU it cannot get a handle of
// (a GPU that fell off the bus), with the bus id as NVML prints it there:
// a 4-digit domain.
func (g *gpu) lostMessage() string {
	return "Unable to determine the device handle for GPU" + shortBusID(g.st.PCIBusID) + ": Unknown Error"
}

// shortBusID turns "00000000:07:00.0" into "0000:07:00.0".
func shortBusID(id string) string {
	if len(id) == 16 && strings.HasPrefix(id, "0000") {
		return id[4:]
	}
	return id
}

// busParts returns the domain, bus, device and function of the GPU's bus id.
func (g *gpu) busParts() (domain, bus, device, function uint64, ok bool) {
	if g.st == nil {
		return 0, 0, 0, 0, false
	}
	return parseBusID(g.st.PCIBusID)
}

// cc returns the compute capability as major*10+minor (90 for 9.0), 0 if
// unknown.
func (g *gpu) cc() int {
	if g.st == nil {
		return 0
	}
	major, minor, _ := strings.Cut(g.st.ComputeCapability, ".")
	a, err1 := strconv.Atoi(major)
	b, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return 0
	}
	return a*10 + b
}

// migCapable reports whether the GPU supports MIG (GA100, GH100, GB100:
// compute capability 8.0, 9.0, 10.0), so nvidia-smi shows its MIG mode as
// Disabled rather than N/A.
func (g *gpu) migCapable() bool {
	switch g.cc() {
	case 80, 90, 100:
		return true
	}
	return false
}

// eccEnabled reports whether ECC is on: data-center boards ship with it on;
// workstation and consumer boards (those with a fan) with it off
// (topology.GPUModel.ECC).
func (g *gpu) eccEnabled() bool { return g.st != nil && g.ecc }

// eccSupported reports whether the board has an ECC mode at all: GeForce
// boards show N/A, workstation boards Disabled.
func (g *gpu) eccSupported() bool { return g.st != nil && g.brand() != "GeForce" }

// rowRemapping reports whether the GPU replaces bad memory rows (Ampere and
// later data-center parts) rather than retiring pages (Pascal, Volta)
// (topology.GPUModel.RowRemapping).
func (g *gpu) rowRemapping() bool { return g.remap }

// facts are the static facts of the GPU's board (topology.BoardFacts).
func (g *gpu) facts() topology.BoardFacts { return g.boardFacts }

// gspCapable reports whether the GPU runs its firmware on a GSP (Turing and
// later): gsp.mode Enabled, a GSP firmware version, protected memory
// counts.
func (g *gpu) gspCapable() bool { return g.cc() >= 75 }

// tlimitKnown reports whether the GPU reports its T.Limit temperatures: the
// data-center boards (no fan), as real H100, H200 and L40S do and a GeForce
// board does not.
func (g *gpu) tlimitKnown() bool { return g.st != nil && !g.board.Fan }

// tlimit is temperature.gpu.tlimit: how far the GPU is below its maximum
// operating temperature, in °C (a real H200 at 28 C shows 59, at 52 C 35).
func (g *gpu) tlimit() int {
	return g.thresholds.MaxOperatingC - g.st.Telemetry.TemperatureC
}

// clockEvents is the active clock event reasons: the telemetry's mask, with
// the idle reason when nothing runs, as a real idle GPU shows.
func (g *gpu) clockEvents() uint64 {
	m := g.st.Telemetry.ClockEventReasons
	if g.idle() {
		m |= topology.ClockEventGPUIdle
	}
	return m
}

// videoClock is clocks.video: the telemetry's, or where it has none the
// board's video clock for the SM clock (topology.Board.VideoClockMHz).
func (g *gpu) videoClock() (int, bool) {
	if v := g.st.Telemetry.VideoClockMHz; v > 0 {
		return v, true
	}
	// The status file's maximum clocks are the GPU's: status.Clocks has
	// topology.Clocks's fields, so it converts.
	b := topology.Board{MaxClocks: topology.Clocks(g.st.MaxClocks)}
	v := b.VideoClockMHz(g.st.Telemetry.SMClockMHz)
	return v, v > 0
}

// pdi is the GPU's PDI (its per-device identifier, "0x737bb8d09327f7d9" on
// a real H200): the last 16 hex digits of its UUID, so that it is unique
// and stable as a real one; N/A without a UUID in NVIDIA's format
// (status.ValidUUID: 32 hex digits).
func (g *gpu) pdi() string {
	if g.st == nil || !status.ValidUUID(g.uuid) {
		return "N/A"
	}
	hex := strings.ReplaceAll(strings.TrimPrefix(g.uuid, "GPU-"), "-", "")
	return "0x" + hex[len(hex)-16:]
}

// moduleID is platform.module_id: the GPU's position on its SXM baseboard
// (1-8, from its index on the node), 1 for a PCIe card.
func (g *gpu) moduleID() int {
	if g.facts().SXM {
		return g.st.Index%8 + 1
	}
	return 1
}

// remapHistogram is the bank remap availability histogram: max, high,
// partial, low, none. Each remapped row takes a spare row of one bank,
// moving it from max to high. false for a board without one.
func (g *gpu) remapHistogram() ([5]int, bool) {
	banks := g.facts().RemapBanks
	if banks == 0 || !g.rowRemapping() || !g.eccEnabled() {
		return [5]int{}, false
	}
	e := g.st.Telemetry.MemoryErrors
	used := min(banks, e.RemappedCorrectable+e.RemappedUncorrectable)
	return [5]int{banks - used, used, 0, 0, 0}, true
}

// pcieGen is the PCIe generation of the GPU's link: 3 up to Turing, 4 for
// Ampere and Ada, 5 from Hopper on.
func (g *gpu) pcieGen() (int, bool) {
	switch cc := g.cc(); {
	case cc == 0:
		return 0, false
	case cc < 80:
		return 3, true
	case cc < 90:
		return 4, true
	default:
		return 5, true
	}
}

// brand is nvidia-smi's Product Brand (topology.Brand).
func (g *gpu) brand() string { return topology.Brand(g.st.Product) }

// architecture is nvidia-smi's Product Architecture (topology.Architecture),
// N/A for none.
func (g *gpu) architecture() string {
	if a := topology.Architecture(g.st.Family); a != "" {
		return a
	}
	return "N/A"
}

// deviceIDs are the PCI device ids (device<<16 | vendor 10DE) of the
// products of the built-in machines, as nvidia-smi prints pci.device_id.
var deviceIDs = map[string]string{
	"NVIDIA H100 80GB HBM3": "0x233010DE",
	"NVIDIA H200":           "0x233510DE",
	"NVIDIA A100-SXM4-40GB": "0x20B010DE",
	"NVIDIA A100-SXM4-80GB": "0x20B210DE",
	"Tesla V100-SXM2-32GB":  "0x1DB510DE",
	"Tesla V100-SXM2-16GB":  "0x1DB110DE",
	"Tesla V100-SXM3-32GB":  "0x1DB810DE",
	"Tesla P100-SXM2-16GB":  "0x15F910DE",
	"NVIDIA L40S":           "0x26B910DE",
	"NVIDIA RTX A6000":      "0x223010DE",
}

func (g *gpu) deviceID() (string, bool) {
	if g.st == nil {
		return "", false
	}
	v, ok := deviceIDs[g.st.Product]
	return v, ok
}

// idle reports whether nothing runs on the GPU: the "Idle" clocks event
// reason is then active.
func (g *gpu) idle() bool { return g.st.Telemetry.UtilizationGPUPercent == 0 }

// memoryFree is total - reserved - used, as nvidia-smi computes it.
func (g *gpu) memoryFree() int {
	return g.st.MemoryTotalMiB - g.st.MemoryReservedMiB - g.st.Telemetry.MemoryUsedMiB
}

// watts formats a power value as nvidia-smi does in CSV and -q: two
// decimals.
func watts(w float64) string { return strconv.FormatFloat(w, 'f', 2, 64) }

// parseBusID parses a PCI bus id in the forms NVML accepts: [domain:]bus:
// device[.function], in hex of any case; the domain has at most 8 digits,
// the bus and device at most 2, the function 1 (0-7); without a function it
// is 0.
func parseBusID(s string) (domain, bus, device, function uint64, ok bool) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, 0, 0, false
	}
	if len(parts) == 3 {
		if domain, ok = hexNumber(parts[0], 8); !ok {
			return 0, 0, 0, 0, false
		}
		parts = parts[1:]
	}
	dev, fn, hasFn := strings.Cut(parts[1], ".")
	if bus, ok = hexNumber(parts[0], 2); !ok {
		return 0, 0, 0, 0, false
	}
	if device, ok = hexNumber(dev, 2); !ok {
		return 0, 0, 0, 0, false
	}
	if hasFn {
		if function, ok = hexNumber(fn, 1); !ok || function > 7 {
			return 0, 0, 0, 0, false
		}
	}
	return domain, bus, device, function, true
}

// hexNumber parses 1..max hex digits.
func hexNumber(s string, max int) (uint64, bool) {
	if s == "" || len(s) > max {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil
}

// roundW rounds watts to an integer for the summary table.
func roundW(w float64) string { return fmt.Sprintf("%dW", int(math.Round(w))) }
