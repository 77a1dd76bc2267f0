package telemetry

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// GPU identifies one physical GPU of the exporter. It is fixed for the
// exporter's life.
type GPU struct {
	// Index is the GPU's index: the gpu label, and N of the device label
	// "nvidiaN". Indices are unique, not necessarily dense.
	Index int
	// UUID is the UUID label, "GPU-…" as nvidia-smi prints it.
	UUID string
	// PCIBusID is the pci_bus_id label, "00000000:07:00.0"
	// (topology.Machine.PCIBusID).
	PCIBusID string
	// DeviceIDs are the device ids the plugin advertises for this GPU: its
	// own id ("fake-0"), or its replica ids ("fake-0::0", "fake-0::1", …)
	// when it is shared. Holdings and device health name these ids. At
	// least one; unique across GPUs.
	DeviceIDs []string
	// NVLinks is the number of the GPU's NVLinks (NVLinks of the machine's
	// pairs, see NVLinksOf): 0 for a GPU without NVLink, whose
	// DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL stays 0.
	NVLinks int
	// MIG are the GPU's MIG devices when it has MIG on (the layout in
	// force): dcgm-exporter then reports each as its own series, labelled
	// GPU_I_PROFILE and GPU_I_ID, and none for the GPU. Their ids are
	// among DeviceIDs. Empty: MIG off.
	MIG []MIGInstance
}

// Clock reads the time the load model is evaluated at; it must be safe for
// concurrent use.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

var _ Clock = systemClock{}

func (systemClock) Now() time.Time { return time.Now() }

// Config configures an Exporter. GPUs and GPUModel are required; every other
// field is optional.
type Config struct {
	// GPUs are the GPUs reported, in any order (series follow Index).
	GPUs []GPU
	// GPUModel is the machine's GPU model (topology.Machine.GPUModel):
	// Product is the modelName label; MemoryMiB, PowerLimitW and IdlePowerW
	// bound the values; Family chooses clocks and temperatures.
	GPUModel topology.GPUModel
	// Hostname is the Hostname label (dcgm-exporter: NODE_NAME, else the
	// host name); "" leaves the label out, as dcgm-exporter --no-hostname.
	Hostname string
	// DriverVersion is the DCGM_FI_DRIVER_VERSION label, such as
	// "550.54.15"; "" leaves the label out.
	DriverVersion string
	// Devices gives each GPU's health at read time: a GPU is unhealthy when
	// any of its DeviceIDs is, and its XID comes from the first such
	// device's reason (topology.ParseXID). Nil: every GPU is healthy.
	Devices Devices
	// Holders says who holds which device ids at read time. Nil: every GPU
	// is free.
	Holders HolderSource
	// Model is the load model of held GPUs; "" means ModelSteady.
	Model Model
	// Seed makes the loads reproducible: the same seed, clock, holders and
	// health give the same values. 0 is a seed like any other.
	Seed uint64
	// Clock is read at every scrape and Readings call; nil means the system
	// clock.
	Clock Clock
	// PerPod reports a GPU held by several containers once per container,
	// as dcgm-exporter --kubernetes-virtual-gpus does; off, such a GPU has
	// one series per field, labelled with its last holder.
	PerPod bool
	// ReservedMiB is the memory the driver reserves beyond GPUModel's
	// MemoryMiB (DCGM_FI_DEV_FB_RESERVED): FB_USED + FB_FREE + FB_RESERVED
	// is the GPU's whole memory. 0 or more.
	ReservedMiB int
	// Collectors are the fields served, with their types and help
	// (ParseCollectors, as dcgm-exporter's -f file); nil is
	// DefaultCollectors, dcgm-exporter's default counters.
	Collectors []Collector
	// Counters keeps the counters (energy, NVLink traffic) across
	// exporters: give each exporter of the process the same one, so that
	// a rebuilt exporter goes on counting. Nil: the exporter's own.
	Counters *Counters
	// Logger gets one warning per failed scrape; the zero Logger discards.
	Logger zerolog.Logger
}

// Exporter computes fake dcgm-exporter telemetry for a set of GPUs at read
// time: there is no goroutine and no state but the overrides. Build it with
// New; it is safe for concurrent use and lives as long as the process.
type Exporter struct {
	gpus    []GPU          // sorted by Index
	byID    map[string]int // device id -> position in gpus
	byIndex map[int]int    // GPU index -> position in gpus
	prefix  [][]byte       // per position: `{gpu="…",…,DCGM_FI_DRIVER_VERSION="…"`
	// migPrefix are, per position, the prefixes of the GPU's MIG devices
	// (GPU.MIG): with GPU_I_PROFILE and GPU_I_ID after modelName.
	migPrefix [][][]byte
	gm        topology.GPUModel
	prof      topology.Thermal
	hw        hardware
	fams      []servedFamily // the collectors, in field id order
	counter   *Counters
	model     Model
	seed      uint64
	clock     Clock
	perPod    bool
	devices   Devices
	holders   HolderSource
	log       zerolog.Logger

	lastSize atomic.Int64 // bytes of the last exposition

	mu        sync.Mutex
	overrides map[overrideKey]override
}

// New checks cfg and returns an Exporter. Errors wrap ErrInvalidConfig (or
// ErrUnknownModel) and name the field.
func New(cfg Config) (*Exporter, error) {
	model, err := ParseModel(string(cfg.Model))
	if err != nil {
		return nil, fmt.Errorf("new telemetry exporter: %w", err)
	}
	if err := checkGPUModel(cfg.GPUModel); err != nil {
		return nil, fmt.Errorf("new telemetry exporter: %w", err)
	}
	for _, f := range []struct{ name, v string }{{"hostname", cfg.Hostname}, {"driver version", cfg.DriverVersion}} {
		if err := checkLabel(f.v); err != nil {
			return nil, fmt.Errorf("new telemetry exporter: %s %q: %w: %w", f.name, f.v, err, ErrInvalidConfig)
		}
	}
	if len(cfg.GPUs) == 0 {
		return nil, fmt.Errorf("new telemetry exporter: no GPUs: %w", ErrInvalidConfig)
	}
	if cfg.ReservedMiB < 0 {
		return nil, fmt.Errorf("new telemetry exporter: reserved memory %d MiB: want 0 or more: %w", cfg.ReservedMiB, ErrInvalidConfig)
	}
	collectors := cfg.Collectors
	if collectors == nil {
		collectors = DefaultCollectors()
	}
	fams, driverLabel, err := serve(collectors)
	if err != nil {
		return nil, fmt.Errorf("new telemetry exporter: %w", err)
	}
	counters := cfg.Counters
	if counters == nil {
		counters = NewCounters()
	}
	gpus := slices.Clone(cfg.GPUs)
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	e := &Exporter{
		gpus:      gpus,
		byID:      make(map[string]int),
		byIndex:   make(map[int]int, len(gpus)),
		prefix:    make([][]byte, len(gpus)),
		migPrefix: make([][][]byte, len(gpus)),
		gm:        cfg.GPUModel,
		prof:      cfg.GPUModel.Thermal(),
		hw:        newHardware(cfg.GPUModel, cfg.ReservedMiB),
		fams:      fams,
		counter:   counters,
		model:     model,
		seed:      cfg.Seed,
		clock:     cfg.Clock,
		perPod:    cfg.PerPod,
		devices:   cfg.Devices,
		holders:   cfg.Holders,
		log:       cfg.Logger,
		overrides: make(map[overrideKey]override),
	}
	if e.clock == nil {
		e.clock = systemClock{}
	}
	for pos, g := range gpus {
		if err := e.addGPU(pos, g); err != nil {
			return nil, fmt.Errorf("new telemetry exporter: %w", err)
		}
		driver := cfg.DriverVersion
		if !driverLabel {
			driver = "" // the collectors leave the label out
		}
		e.prefix[pos] = appendPrefix(nil, g, nil, cfg.GPUModel.Product, cfg.Hostname, driver)
		for k := range g.MIG {
			e.migPrefix[pos] = append(e.migPrefix[pos], appendPrefix(nil, g, &g.MIG[k], cfg.GPUModel.Product, cfg.Hostname, driver))
		}
	}
	return e, nil
}

func (e *Exporter) addGPU(pos int, g GPU) error {
	gpu := fmt.Sprintf("GPU %d", g.Index)
	switch {
	case g.Index < 0:
		return fmt.Errorf("%s: negative index: %w", gpu, ErrInvalidConfig)
	case pos > 0 && e.gpus[pos-1].Index == g.Index:
		return fmt.Errorf("%s listed twice: %w", gpu, ErrInvalidConfig)
	case g.UUID == "" || checkLabel(g.UUID) != nil:
		return fmt.Errorf("%s: UUID %q: want a printable UUID like GPU-…: %w", gpu, g.UUID, ErrInvalidConfig)
	case g.PCIBusID == "" || checkLabel(g.PCIBusID) != nil:
		return fmt.Errorf("%s: PCI bus id %q: want one like 00000000:07:00.0: %w", gpu, g.PCIBusID, ErrInvalidConfig)
	case len(g.DeviceIDs) == 0:
		return fmt.Errorf("%s: no device ids: %w", gpu, ErrInvalidConfig)
	case g.NVLinks < 0 || g.NVLinks > 1<<10:
		return fmt.Errorf("%s: %d NVLinks: want 0..%d: %w", gpu, g.NVLinks, 1<<10, ErrInvalidConfig)
	}
	for _, id := range g.DeviceIDs {
		if id == "" {
			return fmt.Errorf("%s: empty device id: %w", gpu, ErrInvalidConfig)
		}
		if other, dup := e.byID[id]; dup {
			return fmt.Errorf("%s: device id %q already belongs to GPU %d: %w", gpu, id, e.gpus[other].Index, ErrInvalidConfig)
		}
		e.byID[id] = pos
	}
	if err := checkMIG(gpu, g, e.gm.MemoryMiB); err != nil {
		return err
	}
	e.byIndex[g.Index] = pos
	return nil
}

// checkGPUModel checks what the exporter needs of a GPU model.
func checkGPUModel(g topology.GPUModel) error {
	switch {
	case g.Product == "" || checkLabel(g.Product) != nil:
		return fmt.Errorf("GPU model product %q: want a printable name like \"NVIDIA L40S\": %w", g.Product, ErrInvalidConfig)
	case g.MemoryMiB < 1:
		return fmt.Errorf("GPU model memory %d MiB: want at least 1: %w", g.MemoryMiB, ErrInvalidConfig)
	case g.IdlePowerW < 1 || g.PowerLimitW <= g.IdlePowerW:
		return fmt.Errorf("GPU model power: idle %d W, limit %d W: want 1 <= idle < limit: %w",
			g.IdlePowerW, g.PowerLimitW, ErrInvalidConfig)
	}
	return nil
}

// checkLabel refuses what a label value should never hold: invalid UTF-8
// and control characters.
func checkLabel(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("not UTF-8")
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("control character")
	}
	return nil
}

// Reading is one GPU's telemetry at one instant: the values of its series,
// and of nvidia-smi's --query-gpu fields named in the comments. JSON tags
// make it a status file format.
type Reading struct {
	// Index and UUID identify the GPU.
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Lost is true while the GPU is unhealthy: like a GPU that fell off the
	// bus, it then reports only its XID; every value below is 0.
	Lost bool `json:"lost"`
	// XID is DCGM_FI_DEV_XID_ERRORS: the XID an unhealthy GPU's reason
	// names, else 0.
	XID int `json:"xid"`
	// UtilizationPercent is DCGM_FI_DEV_GPU_UTIL (utilization.gpu), 0..100.
	UtilizationPercent int `json:"utilization_gpu"`
	// MemoryUtilizationPercent is DCGM_FI_DEV_MEM_COPY_UTIL
	// (utilization.memory), 0..100.
	MemoryUtilizationPercent int `json:"utilization_memory"`
	// MemoryTotalMiB is the GPU's memory (memory.total), MemoryUsedMiB and
	// MemoryFreeMiB are DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE
	// (memory.used, memory.free): used + free = total.
	MemoryTotalMiB int `json:"memory_total_mib"`
	MemoryUsedMiB  int `json:"memory_used_mib"`
	MemoryFreeMiB  int `json:"memory_free_mib"`
	// TemperatureC is DCGM_FI_DEV_GPU_TEMP (temperature.gpu).
	TemperatureC int `json:"temperature_gpu"`
	// PowerDrawW is DCGM_FI_DEV_POWER_USAGE (power.draw), in watts with 3
	// decimals, at most PowerLimitW (power.limit).
	PowerDrawW  float64 `json:"power_draw_w"`
	PowerLimitW int     `json:"power_limit_w"`
	// SMClockMHz is DCGM_FI_DEV_SM_CLOCK (clocks.sm).
	SMClockMHz int `json:"clocks_sm_mhz"`
	// GREngineActive is DCGM_FI_PROF_GR_ENGINE_ACTIVE, the ratio 0..1 of
	// time the graphics engine is busy: utilization / 100.
	GREngineActive float64 `json:"gr_engine_active"`
	// MemoryClockMHz is DCGM_FI_DEV_MEM_CLOCK (clocks.mem): the board's
	// maximum memory clock, as a GPU in P0 keeps it.
	MemoryClockMHz int `json:"clocks_mem_mhz"`
	// VideoClockMHz is clocks.video: the board's video clock at the SM
	// clock (topology.Board.VideoClockMHz).
	VideoClockMHz int `json:"clocks_video_mhz"`
	// MemoryTemperatureC is DCGM_FI_DEV_MEMORY_TEMP (temperature.memory):
	// 3 °C above the GPU on a board with HBM, 0 on one without a memory
	// sensor, as DCGM reports it there.
	MemoryTemperatureC int `json:"temperature_memory"`
	// TotalEnergyMJ is DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION: the integral
	// of the power, in mJ, since the Counters first saw the GPU.
	TotalEnergyMJ int64 `json:"total_energy_mj"`
	// EncoderUtilizationPercent and DecoderUtilizationPercent are
	// DCGM_FI_DEV_ENC_UTIL and DEC_UTIL: 0, compute workloads do not use
	// the video engines.
	EncoderUtilizationPercent int `json:"utilization_encoder"`
	DecoderUtilizationPercent int `json:"utilization_decoder"`
	// MemoryReservedMiB is DCGM_FI_DEV_FB_RESERVED (memory.reserved).
	MemoryReservedMiB int `json:"memory_reserved_mib"`
	// NVLinkKiB is DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL: the NVLink traffic
	// of all the GPU's links, both ways, in KiB, counted as TotalEnergyMJ
	// is; 0 for a GPU without NVLink.
	NVLinkKiB int64 `json:"nvlink_bandwidth_total_kib"`
	// TensorActive is DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and DRAMActive
	// DCGM_FI_PROF_DRAM_ACTIVE (memory copy utilization / 100), ratios
	// 0..1.
	TensorActive float64 `json:"pipe_tensor_active"`
	DRAMActive   float64 `json:"dram_active"`
	// PCIeTxBytes and PCIeRxBytes are DCGM_FI_PROF_PCIE_TX_BYTES and
	// RX_BYTES, in bytes/s.
	PCIeTxBytes int64 `json:"pcie_tx_bytes"`
	PCIeRxBytes int64 `json:"pcie_rx_bytes"`
	// ClockEventReasons are the active clock event reasons, NVML's mask
	// (topology.ClockEvent*): GPU idle when idle, SW power cap when the
	// clock falls towards base, the thermal slowdowns under a thermal
	// fault.
	ClockEventReasons uint64 `json:"clocks_event_reasons"`
	// Fault is the fault of an unhealthy GPU that still answers:
	// topology.FaultECC or FaultThermal ("ecc", "thermal"); "" otherwise.
	Fault string `json:"fault,omitempty"`
	// MemoryErrors are the ECC counts and repairs of an ECC fault
	// (topology.GPUModel.MemoryErrors): DCGM_FI_DEV_*_REMAPPED_ROWS and
	// ROW_REMAP_FAILURE on boards that remap rows.
	MemoryErrors topology.MemoryErrors `json:"memory_errors"`
	// Holders are the containers holding the GPU, in holding order, with
	// their share: their utilizations and memory sum to the GPU's (up to
	// rounding).
	Holders []HolderReading `json:"holders,omitempty"`
	// MIG are the readings of the GPU's MIG devices (GPU.MIG), in its
	// order; empty with MIG off.
	MIG []MIGReading `json:"mig,omitempty"`
}

// HolderReading is one holder's share of a GPU.
type HolderReading struct {
	Holder
	// VGPU is the replica number of the GPU the holder got ("3" for
	// "fake-0::3"), "" for the whole GPU: the vgpu label of per-pod series.
	VGPU string `json:"vgpu,omitempty"`
	// UtilizationPercent and MemoryUsedMiB are the holder's own share:
	// its per-pod DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED.
	UtilizationPercent int `json:"utilization_gpu"`
	MemoryUsedMiB      int `json:"memory_used_mib"`
	// Overridden is true while the holder's own values (SetOverride) drive
	// the GPU.
	Overridden bool `json:"overridden,omitempty"`
}

// Readings returns every GPU's reading at the clock's now, in index order.
// An error means the holders could not be read (it wraps the source's).
func (e *Exporter) Readings() ([]Reading, error) {
	return e.ReadingsAt(e.clock.Now())
}

// ReadingsAt returns every GPU's reading at t, in index order: a pure
// function of the seed, the model, the second of t, the holders, the health
// and the overrides in force at t, but for the counters (energy, NVLink
// traffic), which first add each second since the last reading (see
// Counters).
func (e *Exporter) ReadingsAt(t time.Time) ([]Reading, error) {
	holders, err := e.holdersByGPU()
	if err != nil {
		return nil, err
	}
	faults := e.health()
	sec := t.Unix()
	e.mu.Lock()
	overrides := e.activeOverrides(t)
	e.mu.Unlock()

	out := make([]Reading, len(e.gpus))
	var loads []holderLoad
	var mem []float64
	for pos, g := range e.gpus {
		hs := holders[pos]
		r := &out[pos]
		*r = Reading{
			Index: g.Index, UUID: g.UUID, MemoryTotalMiB: e.gm.MemoryMiB, MemoryFreeMiB: e.gm.MemoryMiB,
			PowerLimitW: e.gm.PowerLimitW, MemoryReservedMiB: e.hw.reservedMiB,
		}
		if len(hs) > 0 {
			r.Holders = make([]HolderReading, len(hs))
			for i, h := range hs {
				r.Holders[i] = HolderReading{Holder: h.Holder, VGPU: h.vgpu}
			}
		}
		r.MIG = e.migIdentities(pos)
		f := faults[pos]
		r.XID = f.xid
		if f.lost {
			r.Lost = true
			r.MemoryTotalMiB, r.MemoryFreeMiB, r.PowerLimitW, r.MemoryReservedMiB = 0, 0, 0, 0
			continue
		}
		if f.kind != topology.FaultLost {
			r.Fault = f.kind.String()
			r.MemoryErrors = e.gm.MemoryErrors(topology.Fault{Kind: f.kind, XID: f.xid})
		}
		thermal := f.kind == topology.FaultThermal
		loads, mem = e.loadsAt(loads[:0], mem[:0], pos, hs, overrides, sec, r.Holders)
		gk := gpuKey(e.seed, 0, g.Index)
		v := sample(&e.hw, gk, sec, loads, mem, thermal)
		r.UtilizationPercent = int(math.Round(v.util))
		r.MemoryUtilizationPercent = int(math.Round(v.memCopy))
		r.MemoryUsedMiB = int(math.Round(v.memUsed))
		r.MemoryFreeMiB = e.gm.MemoryMiB - r.MemoryUsedMiB
		r.TemperatureC = int(math.Round(v.temp))
		r.PowerDrawW = roundMilli(v.power)
		r.SMClockMHz = int(math.Round(v.smClock))
		r.GREngineActive = math.Round(v.util*100) / 10000
		r.MemoryClockMHz = e.hw.board.MaxClocks.MemoryMHz
		r.VideoClockMHz = e.hw.board.VideoClockMHz(r.SMClockMHz)
		if e.hw.board.HBM {
			r.MemoryTemperatureC = topology.MemoryTemperatureC(r.TemperatureC)
		}
		r.TensorActive = math.Round(v.tensor*1e6) / 1e6
		r.DRAMActive = math.Round(v.memCopy*1e4) / 1e6
		r.PCIeTxBytes, r.PCIeRxBytes = int64(math.Round(v.pcieTx)), int64(math.Round(v.pcieRx))
		r.ClockEventReasons = v.reasons
		for i := range r.Holders {
			r.Holders[i].UtilizationPercent = int(math.Round(loads[i].util))
			r.Holders[i].MemoryUsedMiB = int(math.Round(mem[i]))
		}
		e.migShares(r, pos, hs, loads, mem)
		nvlinkBps := float64(g.NVLinks) * e.hw.nvlinkBps
		r.TotalEnergyMJ, r.NVLinkKiB = e.counter.advance(g.UUID, sec, v.power, v.memCopy, nvlinkBps,
			func(s int64) (powerW, memCopy float64) {
				var ls []holderLoad
				var ms []float64
				ls, ms = e.loadsAt(ls, ms, pos, hs, overrides, s, nil)
				w := sample(&e.hw, gk, s, ls, ms, thermal)
				return w.power, w.memCopy
			})
	}
	return out, nil
}

// loadsAt appends the loads the holders hs of the GPU at pos put on it at
// second sec, after their overrides, to loads, and their memory (−1: the
// model's) to mem; it marks the overridden holders in marks (nil: none).
func (e *Exporter) loadsAt(loads []holderLoad, mem []float64, pos int, hs []gpuHolder, overrides map[overrideKey]override,
	sec int64, marks []HolderReading) ([]holderLoad, []float64) {
	index := e.gpus[pos].Index
	for i, h := range hs {
		l := e.model.load(e.seed, holderKey(e.seed, h.Holder), index, sec, h.vgpu != "")
		m := -1.0
		if o, ok := overrides[overrideKey{pos, h.Holder}]; ok {
			if o.setUtil {
				l.util = o.util
			}
			if o.setMem {
				m = float64(o.memMiB)
			}
			if marks != nil {
				marks[i].Overridden = true
			}
		}
		if share, migMiB := e.migOf(pos, h); share > 0 {
			// A holder of MIG devices loads them, not the GPU: its share
			// of the GPU's compute and of its memory (migShares turns the
			// GPU-level shares back into the MIG devices' own).
			l.util *= share
			l.memFrac *= float64(migMiB) / float64(e.gm.MemoryMiB)
			if m >= 0 {
				m = min(m, float64(migMiB))
			}
		}
		loads, mem = append(loads, l), append(mem, m)
	}
	return loads, mem
}

// gpuHolder is one holder of one GPU.
type gpuHolder struct {
	Holder
	vgpu string
	ids  []string // the device ids it holds of the GPU
}

// holdersByGPU returns the holders of each GPU position, in holding order,
// each container once per GPU.
func (e *Exporter) holdersByGPU() ([][]gpuHolder, error) {
	out := make([][]gpuHolder, len(e.gpus))
	if e.holders == nil {
		return out, nil
	}
	hs, err := e.holders.Holdings()
	if err != nil {
		return nil, fmt.Errorf("telemetry: read holders: %w", err)
	}
	for _, h := range hs {
		for _, id := range h.DeviceIDs {
			pos, ok := e.byID[id]
			if !ok {
				continue
			}
			_, vgpu, _ := strings.Cut(id, topology.ReplicaSeparator) // dcgm-exporter's reading of "<gpu>::<n>"
			i := slices.IndexFunc(out[pos], func(g gpuHolder) bool { return g.Holder == h.Holder })
			if i < 0 {
				out[pos] = append(out[pos], gpuHolder{Holder: h.Holder, vgpu: vgpu, ids: []string{id}})
				continue
			}
			out[pos][i].ids = append(out[pos][i].ids, id)
			if vgpu != "" {
				// A container with two replicas of one GPU: one holder, its
				// last replica (dcgm-exporter would print a sample per
				// replica, vgpu telling them apart).
				out[pos][i].vgpu = vgpu
			}
		}
	}
	return out, nil
}

// gpuFault is a GPU's health at read time: unhealthy and lost, or
// unhealthy and still answering with a fault, and the XID its reasons name.
type gpuFault struct {
	lost bool
	kind topology.FaultKind // of a GPU that answers: FaultECC, FaultThermal; FaultLost when healthy
	xid  int
}

// health returns, by GPU position, its fault: a GPU is lost when one of its
// unhealthy devices' reasons names a lost GPU (topology.ParseFault), else
// it answers with the first unhealthy device's fault; its XID is the first
// XID its unhealthy devices' reasons name (0 if none does).
func (e *Exporter) health() []gpuFault {
	out := make([]gpuFault, len(e.gpus))
	if e.devices == nil {
		return out
	}
	for _, d := range e.devices.Devices() {
		pos, ok := e.byID[d.ID]
		if !ok || d.Healthy {
			continue
		}
		f := topology.ParseFault(d.Reason)
		g := &out[pos]
		if g.xid == 0 {
			g.xid = f.XID
		}
		switch {
		case !f.Answers():
			g.lost, g.kind = true, topology.FaultLost
		case !g.lost && g.kind == topology.FaultLost: // the first answering fault counts
			g.kind = f.Kind
		}
	}
	return out
}
