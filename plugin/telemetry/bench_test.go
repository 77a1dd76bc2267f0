package telemetry_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// benchExporter is a 128-GPU generic machine: GPUs 0-63 held one container
// each, 64-95 shared by two replica holders each, 96-127 free; two GPUs
// unhealthy with an XID.
func benchExporter(b *testing.B, n int, perPod bool) *telemetry.Exporter {
	return benchExporterWith(b, n, perPod, nil)
}

// nineFields are the collectors the exporter served before it served
// dcgm-exporter's whole default set: the baseline of the scrape's cost.
var nineFields = []telemetry.Collector{
	{Field: "DCGM_FI_DEV_SM_CLOCK", Type: "gauge", Help: "SM clock frequency (in MHz)."},
	{Field: "DCGM_FI_DEV_GPU_TEMP", Type: "gauge", Help: "GPU temperature (in C)."},
	{Field: "DCGM_FI_DEV_POWER_USAGE", Type: "gauge", Help: "Power draw (in W)."},
	{Field: "DCGM_FI_DEV_GPU_UTIL", Type: "gauge", Help: "GPU utilization (in %)."},
	{Field: "DCGM_FI_DEV_MEM_COPY_UTIL", Type: "gauge", Help: "Memory utilization (in %)."},
	{Field: "DCGM_FI_DEV_XID_ERRORS", Type: "gauge", Help: "Value of the last XID error encountered."},
	{Field: "DCGM_FI_DEV_FB_FREE", Type: "gauge", Help: "Framebuffer memory free (in MiB)."},
	{Field: "DCGM_FI_DEV_FB_USED", Type: "gauge", Help: "Framebuffer memory used (in MiB)."},
	{Field: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", Type: "gauge", Help: "Ratio of time the graphics engine is active."},
	{Field: "DCGM_FI_DRIVER_VERSION", Type: "label", Help: "Driver Version"},
}

func benchExporterWith(b *testing.B, n int, perPod bool, collectors []telemetry.Collector) *telemetry.Exporter {
	b.Helper()
	m := mustGeneric(b, n)
	replicas := map[int]int{}
	for i := n / 2; i < 3*n/4; i++ {
		replicas[i] = 2
	}
	gpus := machineGPUs(m, replicas)
	var list []telemetry.Holding
	for i := range n / 2 {
		list = append(list, hold("ml", "train-"+strconv.Itoa(i/8), "trainer", m.ID(i)))
	}
	for i := n / 2; i < 3*n/4; i++ {
		list = append(list, hold("serve", fmt.Sprintf("infer-%d-a", i), "server", gpus[i].DeviceIDs[0]),
			hold("serve", fmt.Sprintf("infer-%d-b", i), "server", gpus[i].DeviceIDs[1]))
	}
	hs := &holdings{}
	hs.Set(list...)
	devs := newDevices(gpus)
	devs.SetHealth(3, false, "XID 79")
	devs.SetHealth(n-1, false, "XID 48")
	return mustNew(b, telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel(), Hostname: "node-1", DriverVersion: "550.54.15",
		Devices: devs, Holders: hs, Seed: 7, Clock: storetest.NewClock(b, epoch), PerPod: perPod, Collectors: collectors})
}

// BenchmarkScrape is a whole /metrics scrape at 128 GPUs, without and with
// PerPod, and for comparison in the same run the samples of the first
// through a client_golang registry and promhttp (const metrics built at
// scrape time), which the exporter does not use.
func BenchmarkScrape(b *testing.B) {
	scrape := func(b *testing.B, h http.Handler) {
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if rec.Code != 200 {
				b.Fatal(rec.Code)
			}
		}
	}
	e := benchExporter(b, 128, false)
	b.Run("gpus=128", func(b *testing.B) { scrape(b, e.Handler()) })
	b.Run("gpus=128/nine-fields", func(b *testing.B) { scrape(b, benchExporterWith(b, 128, false, nineFields).Handler()) })
	b.Run("gpus=128/perPod", func(b *testing.B) { scrape(b, benchExporter(b, 128, true).Handler()) })
	b.Run("gpus=8", func(b *testing.B) { scrape(b, benchExporter(b, 8, false).Handler()) })
	reg := prometheus.NewRegistry()
	reg.MustRegister(&clientGolang{e: e})
	b.Run("gpus=128/client_golang", func(b *testing.B) { scrape(b, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})) })
}

// BenchmarkReadings is the load model alone at 128 GPUs.
func BenchmarkReadings(b *testing.B) {
	e := benchExporter(b, 128, false)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Readings(); err != nil {
			b.Fatal(err)
		}
	}
}

// clientGolang is the baseline: the exporter's readings as const metrics of
// a client_golang collector (an unchecked collector, since label sets vary
// within a family), rebuilt at every scrape as a scrape-time collector
// must.
type clientGolang struct {
	e *telemetry.Exporter
}

func (*clientGolang) Describe(chan<- *prometheus.Desc) {}

func (c *clientGolang) Collect(ch chan<- prometheus.Metric) {
	rs, err := c.e.Readings()
	if err != nil {
		return
	}
	for _, r := range rs {
		base := prometheus.Labels{"gpu": strconv.Itoa(r.Index), "UUID": r.UUID, "pci_bus_id": "00000000:01:00.0",
			"device": "nvidia" + strconv.Itoa(r.Index), "modelName": "NVIDIA L40S", "Hostname": "node-1",
			"DCGM_FI_DRIVER_VERSION": "550.54.15"}
		emit := func(name string, v float64, extra prometheus.Labels) {
			labels := prometheus.Labels{}
			for k, v := range base {
				labels[k] = v
			}
			for k, v := range extra {
				labels[k] = v
			}
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "help", nil, labels), prometheus.GaugeValue, v)
		}
		var pod prometheus.Labels
		if n := len(r.Holders); n > 0 {
			h := r.Holders[n-1]
			pod = prometheus.Labels{"namespace": h.Namespace, "pod": h.Pod, "container": h.Container}
		}
		xid := prometheus.Labels{"err_code": strconv.Itoa(r.XID), "err_msg": telemetry.XIDText(r.XID)}
		for k, v := range pod {
			xid[k] = v
		}
		emit("DCGM_FI_DEV_XID_ERRORS", float64(r.XID), xid)
		if r.Lost {
			continue
		}
		emit("DCGM_FI_DEV_SM_CLOCK", float64(r.SMClockMHz), pod)
		emit("DCGM_FI_DEV_GPU_TEMP", float64(r.TemperatureC), pod)
		emit("DCGM_FI_DEV_POWER_USAGE", r.PowerDrawW, pod)
		emit("DCGM_FI_DEV_GPU_UTIL", float64(r.UtilizationPercent), pod)
		emit("DCGM_FI_DEV_MEM_COPY_UTIL", float64(r.MemoryUtilizationPercent), pod)
		emit("DCGM_FI_DEV_FB_FREE", float64(r.MemoryFreeMiB), pod)
		emit("DCGM_FI_DEV_FB_USED", float64(r.MemoryUsedMiB), pod)
		emit("DCGM_FI_PROF_GR_ENGINE_ACTIVE", r.GREngineActive, pod)
	}
}

// BenchmarkExposition is the exporter's own cost of a scrape at 128 GPUs,
// the readings and the text, without an HTTP recorder's buffer: with
// dcgm-exporter's default counters, and with the nine fields served before
// them.
func BenchmarkExposition(b *testing.B) {
	for _, bc := range []struct {
		name       string
		collectors []telemetry.Collector
	}{{"default-counters", nil}, {"nine-fields", nineFields}} {
		b.Run(bc.name, func(b *testing.B) {
			e := benchExporterWith(b, 128, false, bc.collectors)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.WriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// discardWriter is a ResponseWriter that drops the body: the server's
// cost of a scrape without a recorder's copy of it.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkScrapeDiscard is the handler at 128 GPUs writing to a
// ResponseWriter that drops the body. The same benchmark dropped into an
// earlier tree gives the ratio to its scrape.
func BenchmarkScrapeDiscard(b *testing.B) {
	h := benchExporter(b, 128, false).Handler()
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(&discardWriter{h: http.Header{}}, req)
	}
}
