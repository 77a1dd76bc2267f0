package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// The document type of a status file.
const (
	// APIVersion is the apiVersion of the status files this package writes
	// and reads.
	APIVersion = "virtual-gpu.unicore.mcyou.cc/v1"
	// Kind is the kind of a status file.
	Kind = "GPUStatus"
)

// Container environment and paths.
const (
	// DefaultDir is where the plugin mounts the status directory in
	// containers, read-only, and where nvidia-smi looks when EnvStatusDir is
	// not set.
	DefaultDir = "/run/virtual-gpu"
	// EnvStatusDir overrides DefaultDir for readers in a container.
	EnvStatusDir = "VIRTUAL_GPU_STATUS_DIR"
	// EnvUUIDs lists the UUIDs of the container's GPUs, joined by commas, in
	// the order of VIRTUAL_GPU_IDS: the names of their status files.
	EnvUUIDs = "VIRTUAL_GPU_UUIDS"
)

// MaxFileBytes is the largest status file a reader accepts: a real one is
// under 2 KiB.
const MaxFileBytes = 64 << 10

// GPU is the status of one GPU: one status file. The zero value is not a
// valid status; build one with NewGPU. A GPU is a plain value with no
// internal locking: copy it, or do not change it while another goroutine
// reads it.
type GPU struct {
	// APIVersion is always APIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is always Kind.
	Kind string `json:"kind"`

	// ID is the device id the plugin advertises, "fake-<index>".
	ID string `json:"id"`
	// UUID is the GPU's UUID (topology.DeriveUUID): the file is <UUID>.json.
	UUID string `json:"uuid"`
	// Index is the GPU's index on the node (not in a container, where GPUs
	// are numbered 0 … k-1 in the order of VIRTUAL_GPU_IDS).
	Index int `json:"index"`
	// MinorNumber is the N of the GPU's /dev/nvidiaN on the node.
	MinorNumber int `json:"minorNumber"`
	// Serial is the board serial number, 13 digits; empty if none.
	Serial string `json:"serial,omitempty"`
	// Product is the product name nvidia-smi prints, such as "NVIDIA H100
	// 80GB HBM3": printable ASCII without commas.
	Product string `json:"product"`
	// Family is the architecture, as in the nvidia.com/gpu.family label:
	// "pascal", "volta", "ampere", "ada-lovelace", "hopper", …
	Family string `json:"family,omitempty"`
	// ComputeCapability is the CUDA compute capability, "9.0".
	ComputeCapability string `json:"computeCapability"`
	// MemoryTotalMiB is the framebuffer size in MiB (memory.total).
	MemoryTotalMiB int `json:"memoryTotalMiB"`
	// MemoryReservedMiB is the memory the driver reserves (memory.reserved);
	// memory.free is total - reserved - used.
	MemoryReservedMiB int `json:"memoryReservedMiB"`
	// PCIBusID is the PCI bus id as nvidia-smi prints it, "00000000:07:00.0".
	PCIBusID string `json:"pciBusId"`
	// NUMANode is the GPU's NUMA node, -1 if unknown.
	NUMANode int `json:"numaNode"`
	// CPUAffinity is the CPU list of the GPU's NUMA node as `nvidia-smi topo
	// -m` prints it, "0-55,112-167"; empty if unknown.
	CPUAffinity string `json:"cpuAffinity,omitempty"`
	// PowerLimitW is the power limit in watts (power.limit).
	PowerLimitW int `json:"powerLimitW"`
	// MaxClocks are the GPU's maximum clocks; zero means unknown.
	MaxClocks Clocks `json:"maxClocks"`
	// DriverVersion is the driver version, topology.DriverVersion when written by
	// this package.
	DriverVersion string `json:"driverVersion"`
	// CUDAVersion is the CUDA version of the driver, topology.CUDAVersion when
	// written by this package.
	CUDAVersion string `json:"cudaVersion"`

	// MIGEnabled reports whether the GPU has MIG mode on (the layout in
	// force turns it on); nvidia-smi then shows MIG mode Enabled, and
	// MIGDevices its GPU instances. Absent (false) in files of writers
	// before MIG.
	MIGEnabled bool `json:"migEnabled,omitempty"`
	// MIGDevices are the GPU's MIG devices (GPU instances, each with its
	// one full compute instance) in the order nvidia-smi -L lists them
	// (its MIG device index): by GPU instance id. Only with MIGEnabled.
	MIGDevices []MIGDevice `json:"migDevices,omitempty"`

	// Health is the GPU's health as the plugin reports it to the kubelet.
	Health Health `json:"health"`
	// Telemetry are the live values; until a load model fills them, the
	// idle values NewGPU sets.
	Telemetry Telemetry `json:"telemetry"`
}

// MIGDevice is one MIG device of a GPU: a GPU instance with its full
// compute instance, as nvidia-smi -L and nvidia-smi mig -lgi show it.
type MIGDevice struct {
	// ID is the device id the plugin advertises (topology.MIGID):
	// "fake-0-mig-3g40gb-4".
	ID string `json:"id"`
	// UUID is its UUID, "MIG-…" (topology.DeriveMIGUUID).
	UUID string `json:"uuid"`
	// Profile is the GPU instance profile's name, "3g.40gb".
	Profile string `json:"profile"`
	// ProfileID is the GPU instance profile id (nvidia-smi mig -lgip):
	// 9 for 3g.40gb on an H100.
	ProfileID int `json:"profileId"`
	// GPUInstanceID is the GPU instance id (nvidia-smi mig -lgi, the
	// dcgm-exporter label GPU_I_ID); ComputeInstanceID its compute
	// instance's, 0 for the one full compute instance.
	GPUInstanceID     int `json:"gpuInstanceId"`
	ComputeInstanceID int `json:"computeInstanceId"`
	// PlacementStart and PlacementSize are the memory slices it
	// occupies (nvidia-smi mig -lgi prints them "start:size").
	PlacementStart int `json:"placementStart"`
	PlacementSize  int `json:"placementSize"`
	// MemoryMiB is the instance's memory.
	MemoryMiB int `json:"memoryMiB"`
	// Multiprocessors is its SM count; CopyEngines, Decoders, Encoders,
	// JPEGs and OFAs its engines.
	Multiprocessors int `json:"multiprocessors"`
	CopyEngines     int `json:"copyEngines"`
	Decoders        int `json:"decoders"`
	Encoders        int `json:"encoders"`
	JPEGs           int `json:"jpegs"`
	OFAs            int `json:"ofas"`
}

// Clocks are clock frequencies in MHz; zero means unknown.
type Clocks struct {
	GraphicsMHz int `json:"graphicsMHz"`
	SMMHz       int `json:"smMHz"`
	MemoryMHz   int `json:"memoryMHz"`
	VideoMHz    int `json:"videoMHz"`
}

// Health is the health of a GPU. The zero value is unhealthy without a
// reason, since the zero time.
type Health struct {
	// Healthy reports whether the plugin advertises the GPU as healthy.
	Healthy bool `json:"healthy"`
	// Reason says why the GPU is unhealthy; empty when healthy.
	Reason string `json:"reason,omitempty"`
	// Since is when the GPU entered this state.
	Since time.Time `json:"since"`
}

// Telemetry are the live values of a GPU, as of Updated. Pointer fields are
// null when the GPU has no such sensor (no fan on a passively cooled board,
// no memory temperature on GDDR boards) or nothing happened (no XID).
type Telemetry struct {
	// Updated is when the values were taken.
	Updated time.Time `json:"updated"`
	// UtilizationGPUPercent is utilization.gpu, 0..100.
	UtilizationGPUPercent int `json:"utilizationGpuPercent"`
	// UtilizationMemoryPercent is utilization.memory, 0..100.
	UtilizationMemoryPercent int `json:"utilizationMemoryPercent"`
	// MemoryUsedMiB is memory.used, 0..MemoryTotalMiB-MemoryReservedMiB.
	MemoryUsedMiB int `json:"memoryUsedMiB"`
	// TemperatureC is temperature.gpu in °C.
	TemperatureC int `json:"temperatureC"`
	// MemoryTemperatureC is temperature.memory in °C (HBM boards); null if
	// the board has no memory sensor.
	MemoryTemperatureC *int `json:"memoryTemperatureC"`
	// PowerDrawW is power.draw in watts.
	PowerDrawW float64 `json:"powerDrawW"`
	// SMClockMHz is clocks.sm (and clocks.gr) in MHz.
	SMClockMHz int `json:"smClockMHz"`
	// MemoryClockMHz is clocks.mem in MHz.
	MemoryClockMHz int `json:"memoryClockMHz"`
	// FanSpeedPercent is fan.speed in %; null for a board without a fan.
	FanSpeedPercent *int `json:"fanSpeedPercent"`
	// LastXID is the XID of the last error the GPU reported; null if none.
	LastXID *int `json:"lastXid"`
	// VideoClockMHz is clocks.video (clocks.current.video) in MHz.
	VideoClockMHz int `json:"videoClockMHz"`
	// UtilizationEncoderPercent and UtilizationDecoderPercent are
	// utilization.encoder and utilization.decoder, 0..100.
	UtilizationEncoderPercent int `json:"utilizationEncoderPercent"`
	UtilizationDecoderPercent int `json:"utilizationDecoderPercent"`
	// PCIeTxKBps and PCIeRxKBps are the PCIe throughput nvidia-smi -q shows
	// ("Tx Throughput", "Rx Throughput", in KB/s): the telemetry's
	// DCGM_FI_PROF_PCIE_TX_BYTES and RX_BYTES / 1000.
	PCIeTxKBps int64 `json:"pcieTxKBps"`
	PCIeRxKBps int64 `json:"pcieRxKBps"`
	// TotalEnergyMJ is the energy the GPU used, in mJ, since the plugin
	// began counting (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION).
	TotalEnergyMJ int64 `json:"totalEnergyMJ"`
	// ClockEventReasons are the active clock event reasons, NVML's bit mask
	// (topology.ClockEvent*): clocks_event_reasons.active.
	ClockEventReasons uint64 `json:"clockEventReasons"`
	// MemoryErrors are the ECC counts, remapped rows and retired pages.
	MemoryErrors topology.MemoryErrors `json:"memoryErrors"`
	// Holders are the containers holding the GPU with their own use of it
	// (the telemetry's holders), in holding order: the processes nvidia-smi
	// lists. Empty when the GPU is free or the telemetry is off.
	Holders []Holder `json:"holders,omitempty"`
}

// Holder is one container holding a GPU, and its share of the GPU.
type Holder struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// UtilizationGPUPercent and MemoryUsedMiB are the holder's own share of
	// the GPU's utilization.gpu and memory.used.
	UtilizationGPUPercent int `json:"utilizationGpuPercent"`
	MemoryUsedMiB         int `json:"memoryUsedMiB"`
}

var (
	migUUIDRE = regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	profileRE = regexp.MustCompile(`^[1-9][0-9]?g\.[0-9]+gb(\+[a-z0-9.+]+)?$`)
	uuidRE    = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	busIDRE   = regexp.MustCompile(`^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$`)
	ccRE      = regexp.MustCompile(`^[1-9][0-9]?\.[0-9]$`)
	cpuListRE = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)
	serialRE  = regexp.MustCompile(`^[0-9]{1,30}$`)
	familyRE  = regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`)
)

// ValidUUID reports whether s is a GPU UUID in NVIDIA's format, as
// topology.DeriveUUID writes it: GPU- and 32 lower-case hex digits grouped 8-4-4-4-12.
func ValidUUID(s string) bool { return uuidRE.MatchString(s) }

// ValidMIGUUID reports whether s is a MIG device UUID in the form
// topology.DeriveMIGUUID writes it: MIG- and 32 lower-case hex digits
// grouped 8-4-4-4-12.
func ValidMIGUUID(s string) bool { return migUUIDRE.MatchString(s) }

// printable reports whether s is printable ASCII without a comma (a comma
// would split the value in nvidia-smi's CSV, which never quotes).
func printable(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e || r == ',' })
}

// Validate checks that g is a status this package can write and read: the
// document type, a valid UUID and bus id, and every value in its range. The
// error wraps ErrUnsupportedVersion or ErrInvalidStatus and names the field.
func (g *GPU) Validate() error {
	if g.APIVersion != APIVersion || g.Kind != Kind {
		return fmt.Errorf("apiVersion %q kind %q: want %s %s: %w", g.APIVersion, g.Kind, APIVersion, Kind, ErrUnsupportedVersion)
	}
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%s %v: want %s: %w", field, v, want, ErrInvalidStatus)
	}
	switch {
	case g.ID == "" || len(g.ID) > 64 || !printable(g.ID):
		return bad("id", fmt.Sprintf("%q", g.ID), "a device id like fake-0")
	case !ValidUUID(g.UUID):
		return bad("uuid", fmt.Sprintf("%q", g.UUID), "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lower-case hex)")
	case g.Index < 0 || g.Index > 1<<20:
		return bad("index", g.Index, "0 or more")
	case g.MinorNumber < 0 || g.MinorNumber > 1<<20:
		return bad("minorNumber", g.MinorNumber, "0 or more")
	case g.Serial != "" && !serialRE.MatchString(g.Serial):
		return bad("serial", fmt.Sprintf("%q", g.Serial), "digits")
	case g.Product == "" || len(g.Product) > 96 || !printable(g.Product) || strings.TrimSpace(g.Product) != g.Product:
		return bad("product", fmt.Sprintf("%q", g.Product), "1..96 printable ASCII characters, no comma")
	case g.Family != "" && (len(g.Family) > 32 || !familyRE.MatchString(g.Family)):
		return bad("family", fmt.Sprintf("%q", g.Family), "an architecture like hopper or ada-lovelace")
	case !ccRE.MatchString(g.ComputeCapability):
		return bad("computeCapability", fmt.Sprintf("%q", g.ComputeCapability), "MAJOR.MINOR like 9.0")
	case g.MemoryTotalMiB < 1 || g.MemoryTotalMiB > 1<<24:
		return bad("memoryTotalMiB", g.MemoryTotalMiB, "1 or more")
	case g.MemoryReservedMiB < 0 || g.MemoryReservedMiB >= g.MemoryTotalMiB:
		return bad("memoryReservedMiB", g.MemoryReservedMiB, fmt.Sprintf("0..%d", g.MemoryTotalMiB-1))
	case !busIDRE.MatchString(g.PCIBusID):
		return bad("pciBusId", fmt.Sprintf("%q", g.PCIBusID), "DDDDDDDD:BB:DD.F in upper-case hex, like 00000000:07:00.0")
	case g.NUMANode < -1 || g.NUMANode > 1<<20:
		return bad("numaNode", g.NUMANode, "-1 (unknown) or a node number")
	case g.CPUAffinity != "" && (len(g.CPUAffinity) > 4096 || !cpuListRE.MatchString(g.CPUAffinity)):
		return bad("cpuAffinity", fmt.Sprintf("%q", g.CPUAffinity), "a CPU list like 0-55,112-167")
	case g.PowerLimitW < 1 || g.PowerLimitW > 100000:
		return bad("powerLimitW", g.PowerLimitW, "1 or more")
	case !validClocks(g.MaxClocks):
		return bad("maxClocks", g.MaxClocks, "0..100000 MHz each")
	case g.DriverVersion == "" || len(g.DriverVersion) > 32 || !printable(g.DriverVersion) || strings.Contains(g.DriverVersion, " "):
		return bad("driverVersion", fmt.Sprintf("%q", g.DriverVersion), "a version like "+topology.DriverVersion)
	case g.CUDAVersion == "" || len(g.CUDAVersion) > 32 || !printable(g.CUDAVersion) || strings.Contains(g.CUDAVersion, " "):
		return bad("cudaVersion", fmt.Sprintf("%q", g.CUDAVersion), "a version like "+topology.CUDAVersion)
	case len(g.Health.Reason) > 1024 || strings.ContainsFunc(g.Health.Reason, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return bad("health.reason", fmt.Sprintf("%q", g.Health.Reason), "at most 1024 bytes on one line")
	case g.Health.Healthy && g.Health.Reason != "":
		return bad("health.reason", fmt.Sprintf("%q", g.Health.Reason), "empty for a healthy GPU")
	}
	if err := g.validateMIG(); err != nil {
		return err
	}
	return g.Telemetry.validate("telemetry.", g.MemoryTotalMiB-g.MemoryReservedMiB)
}

// maxMIGDevices bounds a GPU's MIG devices: no product has more memory
// slices.
const maxMIGDevices = 16

// validateMIG checks the MIG devices: only with MIG on, each with a MIG
// UUID, a profile name, ids and placements in range, no two overlapping
// or with the same UUID, in ascending GPU instance id order, memory
// within the GPU's.
func (g *GPU) validateMIG() error {
	if len(g.MIGDevices) == 0 {
		return nil
	}
	if !g.MIGEnabled {
		return fmt.Errorf("migDevices: %d MIG devices with migEnabled false: want MIG devices only with MIG on: %w", len(g.MIGDevices), ErrInvalidStatus)
	}
	if len(g.MIGDevices) > maxMIGDevices {
		return fmt.Errorf("migDevices: %d: want at most %d: %w", len(g.MIGDevices), maxMIGDevices, ErrInvalidStatus)
	}
	uuids := map[string]bool{}
	for i, d := range g.MIGDevices {
		bad := func(field string, v any, want string) error {
			return fmt.Errorf("migDevices[%d].%s %v: want %s: %w", i, field, v, want, ErrInvalidStatus)
		}
		switch {
		case d.ID == "" || len(d.ID) > 64 || !printable(d.ID):
			return bad("id", fmt.Sprintf("%q", d.ID), "a MIG device id like fake-0-mig-3g40gb-4")
		case !ValidMIGUUID(d.UUID) || uuids[d.UUID]:
			return bad("uuid", fmt.Sprintf("%q", d.UUID), "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lower-case hex), one per device")
		case len(d.Profile) > 32 || !profileRE.MatchString(d.Profile):
			return bad("profile", fmt.Sprintf("%q", d.Profile), "a profile name like 3g.40gb")
		case d.ProfileID < 0 || d.ProfileID > 1024:
			return bad("profileId", d.ProfileID, "0..1024")
		case d.GPUInstanceID < 0 || d.GPUInstanceID > 1024:
			return bad("gpuInstanceId", d.GPUInstanceID, "0..1024")
		case d.ComputeInstanceID < 0 || d.ComputeInstanceID > 1024:
			return bad("computeInstanceId", d.ComputeInstanceID, "0..1024")
		case d.PlacementStart < 0 || d.PlacementStart >= maxMIGDevices:
			return bad("placementStart", d.PlacementStart, fmt.Sprintf("0..%d", maxMIGDevices-1))
		case d.PlacementSize < 1 || d.PlacementStart+d.PlacementSize > maxMIGDevices:
			return bad("placementSize", d.PlacementSize, fmt.Sprintf("1..%d", maxMIGDevices-d.PlacementStart))
		case i > 0 && d.GPUInstanceID <= g.MIGDevices[i-1].GPUInstanceID:
			return bad("gpuInstanceId", d.GPUInstanceID, fmt.Sprintf("above the previous device's %d (in GPU instance id order)", g.MIGDevices[i-1].GPUInstanceID))
		case overlaps(g.MIGDevices[:i], d):
			return bad("placementStart", d.PlacementStart, "slices no other device of the GPU occupies")
		case d.MemoryMiB < 1 || d.MemoryMiB > g.MemoryTotalMiB:
			return bad("memoryMiB", d.MemoryMiB, fmt.Sprintf("1..%d (the GPU's)", g.MemoryTotalMiB))
		case !smallCounts(d.Multiprocessors, d.CopyEngines, d.Decoders, d.Encoders, d.JPEGs, d.OFAs):
			return bad("engines", fmt.Sprintf("%+v", d), "counts of 0..65536")
		}
		uuids[d.UUID] = true
	}
	return nil
}

// overlaps reports whether d shares a memory slice with one of ds.
func overlaps(ds []MIGDevice, d MIGDevice) bool {
	return slices.ContainsFunc(ds, func(o MIGDevice) bool { return o.placement().Overlaps(d.placement()) })
}

// placement is the memory slices d occupies.
func (d MIGDevice) placement() mig.Placement {
	return mig.Placement{Start: d.PlacementStart, Size: d.PlacementSize}
}

// smallCounts reports whether every v is 0..65536: an engine or SM count.
func smallCounts(vs ...int) bool {
	for _, v := range vs {
		if v < 0 || v > 1<<16 {
			return false
		}
	}
	return true
}

// validate checks telemetry values, with memory used at most maxUsedMiB;
// errors name the field with prefix.
func (t *Telemetry) validate(prefix string, maxUsedMiB int) error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%s%s %v: want %s: %w", prefix, field, v, want, ErrInvalidStatus)
	}
	switch {
	case t.UtilizationGPUPercent < 0 || t.UtilizationGPUPercent > 100:
		return bad("utilizationGpuPercent", t.UtilizationGPUPercent, "0..100")
	case t.UtilizationMemoryPercent < 0 || t.UtilizationMemoryPercent > 100:
		return bad("utilizationMemoryPercent", t.UtilizationMemoryPercent, "0..100")
	case t.MemoryUsedMiB < 0 || t.MemoryUsedMiB > maxUsedMiB:
		return bad("memoryUsedMiB", t.MemoryUsedMiB, fmt.Sprintf("0..%d (total - reserved)", maxUsedMiB))
	case t.TemperatureC < -50 || t.TemperatureC > 200:
		return bad("temperatureC", t.TemperatureC, "-50..200")
	case t.MemoryTemperatureC != nil && (*t.MemoryTemperatureC < -50 || *t.MemoryTemperatureC > 200):
		return bad("memoryTemperatureC", *t.MemoryTemperatureC, "null or -50..200")
	case !(t.PowerDrawW >= 0 && t.PowerDrawW <= 100000): // also refuses NaN
		return bad("powerDrawW", t.PowerDrawW, "0..100000")
	case t.SMClockMHz < 0 || t.SMClockMHz > 100000:
		return bad("smClockMHz", t.SMClockMHz, "0..100000")
	case t.MemoryClockMHz < 0 || t.MemoryClockMHz > 100000:
		return bad("memoryClockMHz", t.MemoryClockMHz, "0..100000")
	case t.FanSpeedPercent != nil && (*t.FanSpeedPercent < 0 || *t.FanSpeedPercent > 200):
		return bad("fanSpeedPercent", *t.FanSpeedPercent, "null or 0..200")
	case t.LastXID != nil && (*t.LastXID < 0 || *t.LastXID > 1<<20):
		return bad("lastXid", *t.LastXID, "null or an XID number")
	case t.VideoClockMHz < 0 || t.VideoClockMHz > 100000:
		return bad("videoClockMHz", t.VideoClockMHz, "0..100000")
	case t.UtilizationEncoderPercent < 0 || t.UtilizationEncoderPercent > 100:
		return bad("utilizationEncoderPercent", t.UtilizationEncoderPercent, "0..100")
	case t.UtilizationDecoderPercent < 0 || t.UtilizationDecoderPercent > 100:
		return bad("utilizationDecoderPercent", t.UtilizationDecoderPercent, "0..100")
	case t.PCIeTxKBps < 0 || t.PCIeTxKBps > maxPCIeKBps:
		return bad("pcieTxKBps", t.PCIeTxKBps, fmt.Sprintf("0..%d", maxPCIeKBps))
	case t.PCIeRxKBps < 0 || t.PCIeRxKBps > maxPCIeKBps:
		return bad("pcieRxKBps", t.PCIeRxKBps, fmt.Sprintf("0..%d", maxPCIeKBps))
	case t.TotalEnergyMJ < 0:
		return bad("totalEnergyMJ", t.TotalEnergyMJ, "0 or more")
	case t.ClockEventReasons&^topology.ClockEventsSupported != 0:
		return bad("clockEventReasons", fmt.Sprintf("%#x", t.ClockEventReasons), fmt.Sprintf("bits of %#x", topology.ClockEventsSupported))
	case !validMemoryErrors(t.MemoryErrors):
		return bad("memoryErrors", fmt.Sprintf("%+v", t.MemoryErrors), "counts of 0 or more")
	case len(t.Holders) > maxHolders:
		return bad("holders", len(t.Holders), fmt.Sprintf("at most %d", maxHolders))
	}
	for i, h := range t.Holders {
		field := fmt.Sprintf("holders[%d]", i)
		switch {
		case len(h.Namespace) > 253 || len(h.Pod) > 253 || len(h.Container) > 253 ||
			!printable(h.Namespace) || !printable(h.Pod) || !printable(h.Container):
			return bad(field, fmt.Sprintf("%q/%q/%q", h.Namespace, h.Pod, h.Container), "namespace, pod and container names")
		case h.UtilizationGPUPercent < 0 || h.UtilizationGPUPercent > 100:
			return bad(field+".utilizationGpuPercent", h.UtilizationGPUPercent, "0..100")
		case h.MemoryUsedMiB < 0 || h.MemoryUsedMiB > maxUsedMiB:
			return bad(field+".memoryUsedMiB", h.MemoryUsedMiB, fmt.Sprintf("0..%d (total - reserved)", maxUsedMiB))
		}
	}
	return nil
}

// Bounds of the live values.
const (
	maxPCIeKBps = 1 << 30 // 1 TB/s: above any PCIe link
	maxHolders  = 1024    // containers sharing one GPU
)

func validMemoryErrors(e topology.MemoryErrors) bool {
	for _, v := range []int{e.VolatileCorrected, e.VolatileUncorrected, e.AggregateCorrected, e.AggregateUncorrected,
		e.RemappedCorrectable, e.RemappedUncorrectable, e.RetiredSBE, e.RetiredDBE} {
		if v < 0 {
			return false
		}
	}
	return true
}

func validClocks(c Clocks) bool {
	for _, v := range []int{c.GraphicsMHz, c.SMMHz, c.MemoryMHz, c.VideoMHz} {
		if v < 0 || v > 100000 {
			return false
		}
	}
	return true
}

// Marshal validates g and encodes it as a status file: indented JSON ending
// with a newline. Errors wrap ErrInvalidStatus or ErrUnsupportedVersion.
func Marshal(g *GPU) ([]byte, error) {
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("status of %s: %w", g.UUID, err)
	}
	data, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode status of %s: %w: %w", g.UUID, err, ErrInvalidStatus)
	}
	return append(data, '\n'), nil
}

// Unmarshal decodes and validates a status file. Unknown fields are ignored
// (a newer writer of the same apiVersion may add optional ones); missing ones
// keep their zero values and must then pass Validate. Errors wrap
// ErrInvalidStatus or ErrUnsupportedVersion.
func Unmarshal(data []byte) (*GPU, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("status of %d bytes, want at most %d: %w", len(data), MaxFileBytes, ErrInvalidStatus)
	}
	var g GPU
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&g); err != nil {
		return nil, fmt.Errorf("decode status: %w: %w", err, ErrInvalidStatus)
	}
	if dec.More() {
		return nil, fmt.Errorf("decode status: data after the JSON object: %w", ErrInvalidStatus)
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return &g, nil
}
