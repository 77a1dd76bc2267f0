package telemetry_test

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// epoch is the fixed time of the tests: 2025-06-01 12:00:00 UTC.
var epoch = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// holdings is a HolderSource whose holdings and error the test sets.
type holdings struct {
	mu   sync.Mutex
	list []telemetry.Holding
	err  error
}

func (h *holdings) Holdings() ([]telemetry.Holding, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.list, h.err
}

func (h *holdings) Set(list ...telemetry.Holding) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = list
}

func (h *holdings) Fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
}

// devices is a Devices whose health the test sets.
type devices struct {
	mu   sync.Mutex
	list []gpuset.Device
}

func newDevices(gpus []telemetry.GPU) *devices {
	d := &devices{}
	for _, g := range gpus {
		for _, id := range g.DeviceIDs {
			d.list = append(d.list, gpuset.Device{ID: id, Index: len(d.list), NUMA: -1, Healthy: true})
		}
	}
	return d
}

func (d *devices) Devices() []gpuset.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]gpuset.Device(nil), d.list...)
}

// SetHealth sets the health of every device id of GPU gpu ("fake-<gpu>"
// and its replicas).
func (d *devices) SetHealth(gpu int, healthy bool, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, dev := range d.list {
		g, _, err := topology.ParseReplicaID(dev.ID)
		if err != nil {
			if _, err := fmt.Sscanf(dev.ID, topology.IDPrefix+"%d", &g); err != nil {
				continue
			}
		}
		if g == gpu {
			d.list[i].Healthy, d.list[i].Reason = healthy, reason
		}
	}
}

var (
	_ telemetry.HolderSource = (*holdings)(nil)
	_ telemetry.Devices      = (*devices)(nil)
	_ telemetry.Clock        = (*storetest.Clock)(nil)
)

// uuid returns a fixed, made-up UUID for GPU i.
func uuid(i int) string { return fmt.Sprintf("GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7%04x", i) }

// machineGPUs returns the GPUs of machine m, GPU i advertised as
// "fake-<i>", or as replicas "fake-<i>::0" … when replicas[i] > 0.
func machineGPUs(m *topology.Machine, replicas map[int]int) []telemetry.GPU {
	gpus := make([]telemetry.GPU, m.Len())
	for i := range gpus {
		gpus[i] = telemetry.GPU{Index: i, UUID: uuid(i), PCIBusID: m.PCIBusID(i), DeviceIDs: []string{m.ID(i)}, NVLinks: telemetry.NVLinksOf(m, i)}
		if n := replicas[i]; n > 0 {
			gpus[i].DeviceIDs = nil
			for j := range n {
				gpus[i].DeviceIDs = append(gpus[i].DeviceIDs, topology.ReplicaID(i, j))
			}
		}
	}
	return gpus
}

func mustMachine(t testing.TB, name string) *topology.Machine {
	t.Helper()
	m, err := topology.Preset(name)
	if err != nil {
		t.Fatalf("preset %s: %v", name, err)
	}
	return m
}

func mustGeneric(t testing.TB, n int) *topology.Machine {
	t.Helper()
	m, err := topology.Generic(n)
	if err != nil {
		t.Fatalf("generic %d: %v", n, err)
	}
	return m
}

func mustNew(t testing.TB, cfg telemetry.Config) *telemetry.Exporter {
	t.Helper()
	e, err := telemetry.New(cfg)
	if err != nil {
		t.Fatalf("new exporter: %v", err)
	}
	return e
}

func mustReadings(t testing.TB, e *telemetry.Exporter) []telemetry.Reading {
	t.Helper()
	rs, err := e.Readings()
	if err != nil {
		t.Fatalf("readings: %v", err)
	}
	return rs
}

func exposition(t testing.TB, e *telemetry.Exporter) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := e.WriteTo(&b); err != nil {
		t.Fatalf("write exposition: %v", err)
	}
	return b.String()
}

func hold(ns, pod, container string, ids ...string) telemetry.Holding {
	return telemetry.Holding{Holder: telemetry.Holder{Namespace: ns, Pod: pod, Container: container}, DeviceIDs: ids}
}

func ptr[T any](v T) *T { return &v }

func itoa(i int) string { return strconv.Itoa(i) }
