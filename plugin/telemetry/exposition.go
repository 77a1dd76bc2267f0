package telemetry

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
)

// ContentType is the Content-Type of a scrape: the Prometheus text format
// 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// family is one DCGM field the exporter can serve, as dcgm-exporter
// 4.5.3-4.8.2 prints it with its default counters (etc/default-counters.csv:
// name, type, help).
type family struct {
	name       string
	id         int    // DCGM field id: families print in id order
	defType    string // the default counters' Prometheus type (a collector may say another)
	defHelp    string // the default counters' help
	double     bool   // a DCGM_FT_DOUBLE field: printed with %f
	xid        bool   // DCGM_FI_DEV_XID_ERRORS: err_code, err_msg; kept while lost
	perProcess bool   // per-pod values with PerPod (GPU_UTIL, FB_USED)
	// supported says whether DCGM has a value for the field on the
	// hardware; nil: always. A field without one is left out, as
	// dcgm-exporter leaves blank values out.
	supported func(*hardware) bool
	device    func(*Reading) float64
	holder    func(*HolderReading) float64
	// noMIG: NVML has no value of the field for a MIG-enabled GPU
	// (utilization, as nvidia-smi's GPU-Util N/A shows), so dcgm-exporter
	// leaves it out there.
	noMIG bool
	// mig is the field's value for a MIG device: its own (memory, the
	// profiling ratios); nil: its GPU's (clocks, temperatures, power).
	mig func(*Reading, *MIGReading) float64
}

func profiling(hw *hardware) bool { return hw.profiling }
func rowRemap(hw *hardware) bool  { return hw.rowRemap }
func hbm(hw *hardware) bool       { return hw.board.HBM }

// families are the fields the exporter serves, in DCGM field id order, the
// order dcgm-exporter prints them in: every field of dcgm-exporter's
// default counters.
var families = []family{
	{name: "DCGM_FI_DEV_SM_CLOCK", id: 100, defType: "gauge", defHelp: "SM clock frequency (in MHz).",
		device: func(r *Reading) float64 { return float64(r.SMClockMHz) }},
	{name: "DCGM_FI_DEV_MEM_CLOCK", id: 101, defType: "gauge", defHelp: "Memory clock frequency (in MHz).",
		device: func(r *Reading) float64 { return float64(r.MemoryClockMHz) }},
	{name: "DCGM_FI_DEV_MEMORY_TEMP", id: 140, defType: "gauge", defHelp: "Memory temperature (in C).",
		supported: hbm, device: func(r *Reading) float64 { return float64(r.MemoryTemperatureC) }},
	{name: "DCGM_FI_DEV_GPU_TEMP", id: 150, defType: "gauge", defHelp: "GPU temperature (in C).",
		device: func(r *Reading) float64 { return float64(r.TemperatureC) }},
	{name: "DCGM_FI_DEV_POWER_USAGE", id: 155, defType: "gauge", defHelp: "Power draw (in W).", double: true,
		device: func(r *Reading) float64 { return r.PowerDrawW }},
	{name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", id: 156, defType: "counter", defHelp: "Total energy consumption since boot (in mJ).",
		device: func(r *Reading) float64 { return float64(r.TotalEnergyMJ) }},
	{name: "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", id: 202, defType: "counter", defHelp: "Total number of PCIe retries.",
		device: func(*Reading) float64 { return 0 }},
	{name: "DCGM_FI_DEV_GPU_UTIL", id: 203, defType: "gauge", defHelp: "GPU utilization (in %).", perProcess: true, noMIG: true,
		device: func(r *Reading) float64 { return float64(r.UtilizationPercent) },
		holder: func(h *HolderReading) float64 { return float64(h.UtilizationPercent) }},
	{name: "DCGM_FI_DEV_MEM_COPY_UTIL", id: 204, defType: "gauge", defHelp: "Memory utilization (in %).", noMIG: true,
		device: func(r *Reading) float64 { return float64(r.MemoryUtilizationPercent) }},
	{name: "DCGM_FI_DEV_ENC_UTIL", id: 206, defType: "gauge", defHelp: "Encoder utilization (in %).",
		device: func(r *Reading) float64 { return float64(r.EncoderUtilizationPercent) }},
	{name: "DCGM_FI_DEV_DEC_UTIL", id: 207, defType: "gauge", defHelp: "Decoder utilization (in %).",
		device: func(r *Reading) float64 { return float64(r.DecoderUtilizationPercent) }},
	{name: "DCGM_FI_DEV_XID_ERRORS", id: 230, defType: "gauge", defHelp: "Value of the last XID error encountered.", xid: true,
		device: func(r *Reading) float64 { return float64(r.XID) }},
	{name: "DCGM_FI_DEV_FB_FREE", id: 251, defType: "gauge", defHelp: "Framebuffer memory free (in MiB).",
		device: func(r *Reading) float64 { return float64(r.MemoryFreeMiB) },
		mig:    func(_ *Reading, m *MIGReading) float64 { return float64(m.MemoryFreeMiB) }},
	{name: "DCGM_FI_DEV_FB_USED", id: 252, defType: "gauge", defHelp: "Framebuffer memory used (in MiB).", perProcess: true,
		device: func(r *Reading) float64 { return float64(r.MemoryUsedMiB) },
		holder: func(h *HolderReading) float64 { return float64(h.MemoryUsedMiB) },
		mig:    func(_ *Reading, m *MIGReading) float64 { return float64(m.MemoryUsedMiB) }},
	{name: "DCGM_FI_DEV_FB_RESERVED", id: 253, defType: "gauge", defHelp: "Framebuffer memory reserved (in MiB).",
		device: func(r *Reading) float64 { return float64(r.MemoryReservedMiB) },
		mig:    func(*Reading, *MIGReading) float64 { return 0 }},
	{name: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", id: 393, defType: "counter", defHelp: "Number of remapped rows for uncorrectable errors",
		supported: rowRemap, device: func(r *Reading) float64 { return float64(r.MemoryErrors.RemappedUncorrectable) }},
	{name: "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", id: 394, defType: "counter", defHelp: "Number of remapped rows for correctable errors",
		supported: rowRemap, device: func(r *Reading) float64 { return float64(r.MemoryErrors.RemappedCorrectable) }},
	{name: "DCGM_FI_DEV_ROW_REMAP_FAILURE", id: 395, defType: "gauge", defHelp: "Whether remapping of rows has failed",
		supported: rowRemap, device: func(r *Reading) float64 { return b2f(r.MemoryErrors.RemapFailure) }},
	{name: "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", id: 449, defType: "counter", defHelp: "Total number of NVLink bandwidth counters for all lanes.",
		device: func(r *Reading) float64 { return float64(r.NVLinkKiB) }},
	{name: "DCGM_FI_DEV_VGPU_LICENSE_STATUS", id: 526, defType: "gauge", defHelp: "vGPU License status",
		device: func(*Reading) float64 { return 0 }},
	{name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", id: 1001, defType: "gauge", defHelp: "Ratio of time the graphics engine is active.", double: true,
		supported: profiling, device: func(r *Reading) float64 { return r.GREngineActive },
		mig: func(_ *Reading, m *MIGReading) float64 { return m.GREngineActive }},
	{name: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", id: 1004, defType: "gauge", defHelp: "Ratio of cycles the tensor (HMMA) pipe is active.", double: true,
		supported: profiling, device: func(r *Reading) float64 { return r.TensorActive },
		mig: func(_ *Reading, m *MIGReading) float64 { return m.TensorActive }},
	{name: "DCGM_FI_PROF_DRAM_ACTIVE", id: 1005, defType: "gauge",
		defHelp: "Ratio of cycles the device memory interface is active sending or receiving data.", double: true,
		supported: profiling, device: func(r *Reading) float64 { return r.DRAMActive },
		mig: func(_ *Reading, m *MIGReading) float64 { return m.DRAMActive }},
	{name: "DCGM_FI_PROF_PCIE_TX_BYTES", id: 1009, defType: "gauge",
		defHelp:   "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
		supported: profiling, device: func(r *Reading) float64 { return float64(r.PCIeTxBytes) }},
	{name: "DCGM_FI_PROF_PCIE_RX_BYTES", id: 1010, defType: "gauge",
		defHelp:   "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
		supported: profiling, device: func(r *Reading) float64 { return float64(r.PCIeRxBytes) }},
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// servedFamily is a family as the collectors serve it: with their type and
// help.
type servedFamily struct {
	*family
	typ, help string
}

// Handler serves the exposition on GET /metrics, computed at request time.
// When the holders cannot be read the scrape fails with 503 and one warning
// is logged: reporting held GPUs as idle would be wrong.
func (e *Exporter) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", e.serveMetrics)
	return mux
}

var bufPool = sync.Pool{New: func() any { return new([]byte) }}

func (e *Exporter) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	rs, err := e.Readings()
	if err != nil {
		e.log.Warn().Err(err).Msg("telemetry scrape failed")
		http.Error(w, "telemetry unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	bp := bufPool.Get().(*[]byte)
	b := e.AppendExposition((*bp)[:0], rs)
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b) // the client went away: nothing to do
	*bp = b
	bufPool.Put(bp)
}

// WriteTo writes the exposition at the clock's now to w. It implements
// io.WriterTo.
func (e *Exporter) WriteTo(w io.Writer) (int64, error) {
	rs, err := e.Readings()
	if err != nil {
		return 0, err
	}
	bp := bufPool.Get().(*[]byte)
	b := e.AppendExposition((*bp)[:0], rs)
	n, err := w.Write(b)
	*bp = b
	bufPool.Put(bp)
	if err != nil {
		return int64(n), fmt.Errorf("write telemetry: %w", err)
	}
	return int64(n), nil
}

var _ io.WriterTo = (*Exporter)(nil)

// AppendExposition appends the exposition of rs (from Readings or
// ReadingsAt of this exporter; a reading of a GPU it does not have is
// skipped) to b, as dcgm-exporter 4.5.3-4.8.2 prints
// it: per field, "# HELP" and "# TYPE" lines, then one sample per GPU in
// index order, labelled gpu, UUID, pci_bus_id, device, modelName, Hostname,
// DCGM_FI_DRIVER_VERSION, then in name order container, err_code, err_msg
// (XID only), namespace, pod, vgpu. A field no GPU reports is left out with
// its HELP and TYPE. A lost GPU reports its XID only.
//
// Holders: a free GPU's samples carry no pod labels. Without PerPod a held
// GPU's carry its last holder's namespace, pod and container. With PerPod a
// held GPU has one sample per holder (with vgpu for a replica), its device
// value; GPU_UTIL and FB_USED instead keep the device-level sample without
// pod labels and add one per holder with the holder's own value.
//
// A MIG-enabled GPU (GPU.MIG) has its samples per MIG device instead,
// labelled GPU_I_PROFILE and GPU_I_ID and with the MIG device's holders
// (see MIGInstance), without GPU_UTIL and MEM_COPY_UTIL.
func (e *Exporter) AppendExposition(b []byte, rs []Reading) []byte {
	// Grow once to the last exposition's size: a pooled buffer the GC took
	// would otherwise double its way up, copying each time.
	b = slices.Grow(b, int(e.lastSize.Load()))
	start := len(b)
	defer func() { e.lastSize.Store(int64(len(b) - start)) }()
	segs := e.holderSegments(rs)
	positions := make([]int, len(rs)) // by reading: the GPU's position, -1 if another exporter's
	for i := range rs {
		if pos, ok := e.byIndex[rs[i].Index]; ok {
			positions[i] = pos
		} else {
			positions[i] = -1
		}
	}
	for fi := range e.fams {
		f := &e.fams[fi]
		if f.supported != nil && !f.supported(&e.hw) {
			continue
		}
		header := false
		for i := range rs {
			r := &rs[i]
			pos := positions[i]
			if pos < 0 || r.Lost && !f.xid || len(r.MIG) > 0 && f.noMIG {
				continue // another exporter's GPU, a lost GPU's field, or one NVML lacks under MIG
			}
			if !header {
				b = append(b, "# HELP "...)
				b = append(b, f.name...)
				b = append(b, ' ')
				b = append(b, f.help...)
				b = append(b, "\n# TYPE "...)
				b = append(b, f.name...)
				b = append(b, ' ')
				b = append(b, f.typ...)
				b = append(b, '\n')
				header = true
			}
			hs := segs[i]
			if len(r.MIG) > 0 {
				b = e.appendMIGSamples(b, f, pos, r, hs)
				continue
			}
			v := f.device(r)
			switch n := len(r.Holders); {
			case n == 0:
				b = e.appendSample(b, f.family, pos, r, nil, v)
			case !e.perPod:
				b = e.appendSample(b, f.family, pos, r, &hs[n-1], v)
			case f.perProcess:
				b = e.appendSample(b, f.family, pos, r, nil, v)
				for k := range r.Holders {
					b = e.appendSample(b, f.family, pos, r, &hs[k], f.holder(&r.Holders[k]))
				}
			default:
				for k := range r.Holders {
					b = e.appendSample(b, f.family, pos, r, &hs[k], v)
				}
			}
		}
	}
	return b
}

// holderSegment is a holder's labels as printed, computed once a scrape:
// `,container="…"` and `,namespace="…",pod="…"` (and `,vgpu="…"` with
// PerPod), the XID labels going between the two.
type holderSegment struct {
	container, rest []byte
}

// holderSegments returns the label segments of every reading's holders.
func (e *Exporter) holderSegments(rs []Reading) [][]holderSegment {
	out := make([][]holderSegment, len(rs))
	n := 0
	for i := range rs {
		n += len(rs[i].Holders)
	}
	if n == 0 {
		return out
	}
	var buf []byte
	ends := make([][2]int, 0, n) // per holder: the end of its container segment, of its rest
	for i := range rs {
		for _, h := range rs[i].Holders {
			buf = appendLabel(buf, "container", h.Container)
			mid := len(buf)
			buf = appendLabel(buf, "namespace", h.Namespace)
			buf = appendLabel(buf, "pod", h.Pod)
			if e.perPod && h.VGPU != "" {
				buf = appendLabel(buf, "vgpu", h.VGPU)
			}
			ends = append(ends, [2]int{mid, len(buf)})
		}
	}
	all := make([]holderSegment, n)
	start := 0
	for k, end := range ends { // cut once buf no longer moves
		all[k] = holderSegment{container: buf[start:end[0]:end[0]], rest: buf[end[0]:end[1]:end[1]]}
		start = end[1]
	}
	for i := range rs {
		out[i], all = all[:len(rs[i].Holders)], all[len(rs[i].Holders):]
	}
	return out
}

// appendSample appends one sample line of family f for the GPU at pos, with
// holder labels h (nil: none).
func (e *Exporter) appendSample(b []byte, f *family, pos int, r *Reading, h *holderSegment, v float64) []byte {
	return e.appendSampleWith(b, f, e.prefix[pos], r, h, v)
}

// appendSampleWith appends one sample line of family f with the fixed
// labels prefix (a GPU's or a MIG device's) and holder labels h.
func (e *Exporter) appendSampleWith(b []byte, f *family, prefix []byte, r *Reading, h *holderSegment, v float64) []byte {
	b = append(b, f.name...)
	b = append(b, prefix...)
	if h != nil {
		b = append(b, h.container...)
	}
	if f.xid {
		b = append(b, `,err_code="`...)
		b = strconv.AppendInt(b, int64(r.XID), 10)
		b = append(b, '"')
		b = appendLabel(b, "err_msg", XIDText(r.XID))
	}
	if h != nil {
		b = append(b, h.rest...)
	}
	b = append(b, "} "...)
	if f.double {
		b = strconv.AppendFloat(b, v, 'f', 6, 64)
	} else {
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return append(b, '\n')
}

// appendPrefix appends a GPU's fixed labels, from the opening brace:
// gpu, UUID, pci_bus_id, device, modelName, for a MIG device mi (nil: the
// GPU) GPU_I_PROFILE and GPU_I_ID, then Hostname and
// DCGM_FI_DRIVER_VERSION unless empty, in dcgm-exporter's order.
func appendPrefix(b []byte, g GPU, mi *MIGInstance, model, hostname, driver string) []byte {
	b = append(b, `{gpu="`...)
	b = strconv.AppendInt(b, int64(g.Index), 10)
	b = append(b, '"')
	b = appendLabel(b, "UUID", g.UUID)
	b = appendLabel(b, "pci_bus_id", g.PCIBusID)
	b = append(b, `,device="nvidia`...)
	b = strconv.AppendInt(b, int64(g.Index), 10)
	b = append(b, '"')
	b = appendLabel(b, "modelName", model)
	if mi != nil {
		b = appendLabel(b, "GPU_I_PROFILE", mi.Profile)
		b = append(b, `,GPU_I_ID="`...)
		b = strconv.AppendInt(b, int64(mi.GPUInstanceID), 10)
		b = append(b, '"')
	}
	if hostname != "" {
		b = appendLabel(b, "Hostname", hostname)
	}
	if driver != "" {
		b = appendLabel(b, "DCGM_FI_DRIVER_VERSION", driver)
	}
	return b
}

// appendLabel appends `,name="value"`, escaping backslash, double quote and
// newline as the text format requires (dcgm-exporter does not escape; its
// values never need it, nor do ours but for odd pod names).
func appendLabel(b []byte, name, value string) []byte {
	b = append(b, ',')
	b = append(b, name...)
	b = append(b, `="`...)
	for i := 0; i < len(value); i++ {
		switch c := value[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
