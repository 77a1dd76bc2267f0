package telemetry

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// ContentType is the Content-Type of a scrape: the Prometheus text format
// 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// family is one series name of the exposition, as dcgm-exporter 4.5.3-4.8.2
// prints it with its default counters (etc/default-counters.csv: name, type,
// help).
type family struct {
	name, help string
	double     bool // a DCGM_FT_DOUBLE field: printed with %f
	xid        bool // DCGM_FI_DEV_XID_ERRORS: err_code, err_msg; kept while lost
	perProcess bool // per-pod values with PerPod (GPU_UTIL, FB_USED)
	device     func(*Reading) float64
	holder     func(*HolderReading) float64
}

// families are the reported fields in DCGM field id order, the order
// dcgm-exporter prints them in: SM_CLOCK 100, GPU_TEMP 150, POWER_USAGE
// 155, GPU_UTIL 203, MEM_COPY_UTIL 204, XID_ERRORS 230, FB_FREE 251,
// FB_USED 252, PROF_GR_ENGINE_ACTIVE 1001. All are gauges.
var families = []family{
	{name: "DCGM_FI_DEV_SM_CLOCK", help: "SM clock frequency (in MHz).",
		device: func(r *Reading) float64 { return float64(r.SMClockMHz) }},
	{name: "DCGM_FI_DEV_GPU_TEMP", help: "GPU temperature (in C).",
		device: func(r *Reading) float64 { return float64(r.TemperatureC) }},
	{name: "DCGM_FI_DEV_POWER_USAGE", help: "Power draw (in W).", double: true,
		device: func(r *Reading) float64 { return r.PowerDrawW }},
	{name: "DCGM_FI_DEV_GPU_UTIL", help: "GPU utilization (in %).", perProcess: true,
		device: func(r *Reading) float64 { return float64(r.UtilizationPercent) },
		holder: func(h *HolderReading) float64 { return float64(h.UtilizationPercent) }},
	{name: "DCGM_FI_DEV_MEM_COPY_UTIL", help: "Memory utilization (in %).",
		device: func(r *Reading) float64 { return float64(r.MemoryUtilizationPercent) }},
	{name: "DCGM_FI_DEV_XID_ERRORS", help: "Value of the last XID error encountered.", xid: true,
		device: func(r *Reading) float64 { return float64(r.XID) }},
	{name: "DCGM_FI_DEV_FB_FREE", help: "Framebuffer memory free (in MiB).",
		device: func(r *Reading) float64 { return float64(r.MemoryFreeMiB) }},
	{name: "DCGM_FI_DEV_FB_USED", help: "Framebuffer memory used (in MiB).", perProcess: true,
		device: func(r *Reading) float64 { return float64(r.MemoryUsedMiB) },
		holder: func(h *HolderReading) float64 { return float64(h.MemoryUsedMiB) }},
	{name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", help: "Ratio of time the graphics engine is active.", double: true,
		device: func(r *Reading) float64 { return r.GREngineActive }},
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
	n, err := w.Write(e.AppendExposition(nil, rs))
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
func (e *Exporter) AppendExposition(b []byte, rs []Reading) []byte {
	for fi := range families {
		f := &families[fi]
		header := false
		for i := range rs {
			r := &rs[i]
			pos, ok := e.byIndex[r.Index]
			if !ok || r.Lost && !f.xid {
				continue // another exporter's GPU, or a lost GPU's field
			}
			if !header {
				b = append(b, "# HELP "...)
				b = append(b, f.name...)
				b = append(b, ' ')
				b = append(b, f.help...)
				b = append(b, "\n# TYPE "...)
				b = append(b, f.name...)
				b = append(b, " gauge\n"...)
				header = true
			}
			v := f.device(r)
			switch n := len(r.Holders); {
			case n == 0:
				b = e.appendSample(b, f, pos, r, nil, v)
			case !e.perPod:
				b = e.appendSample(b, f, pos, r, &r.Holders[n-1], v)
			case f.perProcess:
				b = e.appendSample(b, f, pos, r, nil, v)
				for i := range r.Holders {
					b = e.appendSample(b, f, pos, r, &r.Holders[i], f.holder(&r.Holders[i]))
				}
			default:
				for i := range r.Holders {
					b = e.appendSample(b, f, pos, r, &r.Holders[i], v)
				}
			}
		}
	}
	return b
}

// appendSample appends one sample line of family f for the GPU at pos, with
// holder h's labels (nil: none).
func (e *Exporter) appendSample(b []byte, f *family, pos int, r *Reading, h *HolderReading, v float64) []byte {
	b = append(b, f.name...)
	b = append(b, e.prefix[pos]...)
	if h != nil {
		b = appendLabel(b, "container", h.Container)
	}
	if f.xid {
		b = append(b, `,err_code="`...)
		b = strconv.AppendInt(b, int64(r.XID), 10)
		b = append(b, '"')
		b = appendLabel(b, "err_msg", XIDText(r.XID))
	}
	if h != nil {
		b = appendLabel(b, "namespace", h.Namespace)
		b = appendLabel(b, "pod", h.Pod)
		if e.perPod && h.VGPU != "" {
			b = appendLabel(b, "vgpu", h.VGPU)
		}
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
// gpu, UUID, pci_bus_id, device, modelName, then Hostname and
// DCGM_FI_DRIVER_VERSION unless empty.
func appendPrefix(b []byte, g GPU, model, hostname, driver string) []byte {
	b = append(b, `{gpu="`...)
	b = strconv.AppendInt(b, int64(g.Index), 10)
	b = append(b, '"')
	b = appendLabel(b, "UUID", g.UUID)
	b = appendLabel(b, "pci_bus_id", g.PCIBusID)
	b = append(b, `,device="nvidia`...)
	b = strconv.AppendInt(b, int64(g.Index), 10)
	b = append(b, '"')
	b = appendLabel(b, "modelName", model)
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
