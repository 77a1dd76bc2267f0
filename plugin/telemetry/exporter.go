package telemetry

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
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
	gm      topology.GPUModel
	prof    topology.Thermal
	model   Model
	seed    uint64
	clock   Clock
	perPod  bool
	devices Devices
	holders HolderSource
	log     zerolog.Logger

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
	gpus := slices.Clone(cfg.GPUs)
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	e := &Exporter{
		gpus:      gpus,
		byID:      make(map[string]int),
		byIndex:   make(map[int]int, len(gpus)),
		prefix:    make([][]byte, len(gpus)),
		gm:        cfg.GPUModel,
		prof:      cfg.GPUModel.Thermal(),
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
		e.prefix[pos] = appendPrefix(nil, g, cfg.GPUModel.Product, cfg.Hostname, cfg.DriverVersion)
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
	// Holders are the containers holding the GPU, in holding order, with
	// their share: their utilizations and memory sum to the GPU's (up to
	// rounding).
	Holders []HolderReading `json:"holders,omitempty"`
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
// and the overrides in force at t.
func (e *Exporter) ReadingsAt(t time.Time) ([]Reading, error) {
	holders, err := e.holdersByGPU()
	if err != nil {
		return nil, err
	}
	lost, xids := e.health()
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
			PowerLimitW: e.gm.PowerLimitW,
		}
		if len(hs) > 0 {
			r.Holders = make([]HolderReading, len(hs))
			for i, h := range hs {
				r.Holders[i] = HolderReading{Holder: h.Holder, VGPU: h.vgpu}
			}
		}
		if lost[pos] {
			r.Lost, r.XID = true, xids[pos]
			r.MemoryTotalMiB, r.MemoryFreeMiB, r.PowerLimitW = 0, 0, 0
			continue
		}
		loads, mem = loads[:0], mem[:0]
		for i, h := range hs {
			l := e.model.load(e.seed, holderKey(e.seed, h.Holder), g.Index, sec, h.vgpu != "")
			m := -1.0
			if o, ok := overrides[overrideKey{pos, h.Holder}]; ok {
				if o.setUtil {
					l.util = o.util
				}
				if o.setMem {
					m = float64(o.memMiB)
				}
				r.Holders[i].Overridden = true
			}
			loads, mem = append(loads, l), append(mem, m)
		}
		v := sample(e.gm, e.prof, gpuKey(e.seed, 0, g.Index), sec, loads, mem)
		r.UtilizationPercent = int(math.Round(v.util))
		r.MemoryUtilizationPercent = int(math.Round(v.memCopy))
		r.MemoryUsedMiB = int(math.Round(v.memUsed))
		r.MemoryFreeMiB = e.gm.MemoryMiB - r.MemoryUsedMiB
		r.TemperatureC = int(math.Round(v.temp))
		r.PowerDrawW = roundMilli(v.power)
		r.SMClockMHz = int(math.Round(v.smClock))
		r.GREngineActive = math.Round(v.util*100) / 10000
		for i := range r.Holders {
			r.Holders[i].UtilizationPercent = int(math.Round(loads[i].util))
			r.Holders[i].MemoryUsedMiB = int(math.Round(mem[i]))
		}
	}
	return out, nil
}

// gpuHolder is one holder of one GPU.
type gpuHolder struct {
	Holder
	vgpu string
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
				out[pos] = append(out[pos], gpuHolder{Holder: h.Holder, vgpu: vgpu})
			} else if vgpu != "" {
				// A container with two replicas of one GPU: one holder, its
				// last replica (dcgm-exporter would print a sample per
				// replica, vgpu telling them apart).
				out[pos][i].vgpu = vgpu
			}
		}
	}
	return out, nil
}

// health returns, by GPU position, whether the GPU is unhealthy and the XID
// the first of its unhealthy devices' reasons that names one names (0 if
// none does).
func (e *Exporter) health() (lost []bool, xids []int) {
	lost, xids = make([]bool, len(e.gpus)), make([]int, len(e.gpus))
	if e.devices == nil {
		return lost, xids
	}
	for _, d := range e.devices.Devices() {
		pos, ok := e.byID[d.ID]
		if !ok || d.Healthy {
			continue
		}
		if x, ok := topology.ParseXID(d.Reason); ok && xids[pos] == 0 {
			xids[pos] = x
		}
		lost[pos] = true
	}
	return lost, xids
}
