package nvidiasmi

import (
	"fmt"
	"math"
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
}

// lost reports whether the GPU's status says it is unhealthy: nvidia-smi
// then shows it as a GPU whose device handle cannot be obtained.
func (g *gpu) lost() bool { return g.st != nil && !g.st.Health.Healthy }

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
// workstation and consumer boards (those with a fan) with it off.
func (g *gpu) eccEnabled() bool {
	return g.st != nil && g.st.Telemetry.FanSpeedPercent == nil
}

// rowRemapping reports whether the GPU replaces bad memory rows (Ampere and
// later) rather than retiring pages (Pascal, Volta).
func (g *gpu) rowRemapping() bool { return g.cc() >= 80 }

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
