package view

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// heldHoldings holds GPUs 0-63 by 32 containers, two each.
type heldHoldings struct{}

func (heldHoldings) Holdings() ([]telemetry.Holding, error) {
	var out []telemetry.Holding
	for i := 0; i < 64; i += 2 {
		h := telemetry.Holder{Namespace: "ml", Pod: "train-" + strconv.Itoa(i), Container: "trainer"}
		out = append(out, telemetry.Holding{Holder: h, DeviceIDs: []string{topology.GPUID(i), topology.GPUID(i + 1)}})
	}
	return out, nil
}

// noDevices reports no device unhealthy.
type noDevices struct{}

func (noDevices) Devices() []gpuset.Device { return nil }

// BenchmarkLive is the live values' update of one second at 128 GPUs (half
// of them held): the exporter's readings in one live file (Files.Live:
// WriteLive, not flushed), against the baseline of every GPU's status file
// replaced (Write, flushed) with them. disk-B/op is what reached the disk
// (/proc/self/io write_bytes).
func BenchmarkLive(b *testing.B) {
	m, err := topology.Generic(128)
	if err != nil {
		b.Fatal(err)
	}
	set, err := gpuset.New(gpuset.Config{ResourceName: "unicore.mcyou.cc/gpu", Machine: m, AllocationPolicy: allocator.PolicyBestConnected}, "node-a")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	st := storetest.MustOpenPath(b, filepath.Join(dir, "state.db"), store.Options{})
	if _, err := st.Reconcile(set.Specs()); err != nil {
		b.Fatal(err)
	}
	cfg := Config{DeviceListStrategies: []DeviceListStrategy{DeviceListEnvVar}, StatusDir: filepath.Join(dir, "status"), ToolsDir: filepath.Join(dir, "bin")}
	f, err := NewFiles(cfg, st, "", "node-a", zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	f.Publish(New(cfg, set))
	if f.behind != nil {
		b.Fatal(f.behind)
	}
	stored, err := st.Devices()
	if err != nil {
		b.Fatal(err)
	}
	uuids := gpuset.UUIDs(stored)
	gpus := make([]telemetry.GPU, m.Len())
	for i := range gpus {
		gpus[i] = telemetry.GPU{Index: i, UUID: uuids[i], PCIBusID: m.PCIBusID(i), DeviceIDs: set.DeviceIDsOf(i)}
	}
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	exp, err := telemetry.New(telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel(), Hostname: "node-a", Devices: noDevices{},
		Holders: heldHoldings{}, Model: telemetry.ModelSteady})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("live", func(b *testing.B) {
		b.ReportAllocs()
		w0 := writeBytes(b)
		for b.Loop() {
			now = now.Add(time.Second)
			rs, err := exp.ReadingsAt(now)
			if err != nil {
				b.Fatal(err)
			}
			if err := f.Live(rs, now); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(writeBytes(b)-w0)/float64(b.N), "disk-B/op")
	})
	b.Run("file-per-gpu", func(b *testing.B) {
		b.ReportAllocs()
		w0 := writeBytes(b)
		defer func() { b.ReportMetric(float64(writeBytes(b)-w0)/float64(b.N), "disk-B/op") }()
		for b.Loop() {
			now = now.Add(time.Second)
			rs, err := exp.ReadingsAt(now)
			if err != nil {
				b.Fatal(err)
			}
			f.mu.Lock()
			for _, g := range f.gpus {
				next := *g
				for i := range rs {
					if rs[i].UUID == g.UUID {
						next.Telemetry = liveTelemetry(g, &rs[i], now)
					}
				}
				if err := f.status.Write(&next); err != nil {
					b.Fatal(err)
				}
			}
			f.mu.Unlock()
		}
	})
}

// writeBytes is what this process has caused to be written to disk so far
// (/proc/self/io write_bytes).
func writeBytes(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skip("no /proc/self/io")
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Skip("no write_bytes in /proc/self/io")
	return 0
}
