package telemetry_test

import (
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// BenchmarkServiceScrape is a scrape of the plugin's telemetry listener
// at 128 GPUs, 64 of them held by 32 containers, with the holders read from
// a real state file that also keeps 10,000 released allocations (the
// exporter reads the active ones at every scrape), against the same
// scrape's exposition alone (the holders and health already read), the
// baseline.
func BenchmarkServiceScrape(b *testing.B) {
	r := newServiceRig(b, "generic-128", 1, telemetry.Settings{Model: telemetry.ModelSteady})
	for i := range 10000 {
		a, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: []string{topology.GPUID(64 + i%64)}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.st.UpdateAllocation(a.Seq, func(x *store.Allocation) error {
			x.State, x.Namespace, x.Pod, x.Container, x.ReleasedAt = store.StateReleased, "old", "job-"+strconv.Itoa(i), "c", r.clock.Now()
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 64; i += 2 {
		r.hold(b, "ml", "train-"+strconv.Itoa(i), "trainer", topology.GPUID(i), topology.GPUID(i+1))
	}
	// The holders come from the active records, as the plugin reads them:
	// through the agent's index, not a walk of the history.
	active, err := agent.NewActiveIndex(r.st)
	if err != nil {
		b.Fatal(err)
	}
	r.tel = telemetry.NewService(telemetry.ServiceConfig{Store: r.st, Active: active, Devices: r.devices, Live: r.files, Hostname: "node-a", Clock: r.clock})
	if err := r.tel.Follow(r.set, r.settings); err != nil {
		b.Fatal(err)
	}
	b.Run("listener", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			r.tel.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if rec.Code != 200 {
				b.Fatal(rec.Code)
			}
		}
	})
	exp := r.tel.Exporter()
	rs, err := exp.ReadingsAt(r.clock.Now())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("exposition-only", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = exp.AppendExposition(buf[:0], rs)
		}
	})
}
