package status_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

var update = flag.Bool("update", false, "rewrite testdata/gpu-status.json")

// testTime is the fixed clock of the tests.
var testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// mustGPU returns the idle status of GPU index of a preset on node-a.
func mustGPU(t testing.TB, preset string, index int) *status.GPU {
	t.Helper()
	m, err := topology.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	g, err := status.NewGPU(m, index, "node-a", testTime)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestMarshal_Golden(t *testing.T) {
	g := mustGPU(t, "hgx-h100", 0)
	got, err := status.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "gpu-status.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("status file of hgx-h100 fake-0 differs from %s (go test -update to accept):\n%s", path, got)
	}
}

// TestUnmarshal_RoundTrip checks that the status of every GPU of every
// preset survives encoding and decoding unchanged.
func TestUnmarshal_RoundTrip(t *testing.T) {
	for _, name := range topology.PresetNames() {
		m, err := topology.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range m.Len() {
			g, err := status.NewGPU(m, i, "node-a", testTime)
			if err != nil {
				t.Fatal(err)
			}
			data, err := status.Marshal(g)
			if err != nil {
				t.Fatalf("%s GPU %d: %v", name, i, err)
			}
			back, err := status.Unmarshal(data)
			if err != nil {
				t.Fatalf("%s GPU %d: %v", name, i, err)
			}
			if !reflect.DeepEqual(back, g) {
				t.Errorf("%s GPU %d: decoded %+v, want %+v", name, i, back, g)
			}
		}
	}
}

func TestNewGPU_Identity(t *testing.T) {
	m, err := topology.Preset("dgx1-volta")
	if err != nil {
		t.Fatal(err)
	}
	g, err := status.NewGPU(m, 5, "node-a", testTime)
	if err != nil {
		t.Fatal(err)
	}
	model := m.GPUModel()
	switch {
	case g.ID != "fake-5" || g.Index != 5 || g.MinorNumber != m.MinorNumber(5):
		t.Errorf("id %s index %d minor %d, want fake-5 5 %d", g.ID, g.Index, g.MinorNumber, m.MinorNumber(5))
	case g.UUID != topology.DeriveUUID("node-a", "fake-5"):
		t.Errorf("uuid %s, want DeriveUUID(node-a, fake-5)", g.UUID)
	case g.Product != model.Product || g.MemoryTotalMiB != model.MemoryMiB || g.PowerLimitW != model.PowerLimitW:
		t.Errorf("model %s %d MiB %d W, want %s %d MiB %d W", g.Product, g.MemoryTotalMiB, g.PowerLimitW, model.Product, model.MemoryMiB, model.PowerLimitW)
	case g.ComputeCapability != model.Compute.String() || g.Family != model.Family:
		t.Errorf("compute %s %s, want %s %s", g.ComputeCapability, g.Family, model.Compute, model.Family)
	case g.PCIBusID != m.PCIBusID(5) || g.NUMANode != m.NUMA(5) || g.CPUAffinity != m.CPUAffinity(5):
		t.Errorf("bus %s numa %d cpus %s, want %s %d %s", g.PCIBusID, g.NUMANode, g.CPUAffinity, m.PCIBusID(5), m.NUMA(5), m.CPUAffinity(5))
	case g.DriverVersion != topology.DriverVersion || g.CUDAVersion != topology.CUDAVersion:
		t.Errorf("driver %s cuda %s", g.DriverVersion, g.CUDAVersion)
	case !g.Health.Healthy || !g.Health.Since.Equal(testTime) || !g.Telemetry.Updated.Equal(testTime):
		t.Errorf("health %+v updated %v, want healthy since and updated %v", g.Health, g.Telemetry.Updated, testTime)
	case g.Telemetry.PowerDrawW != float64(model.IdlePowerW) || g.Telemetry.UtilizationGPUPercent != 0 || g.Telemetry.MemoryUsedMiB != 0:
		t.Errorf("telemetry %+v, want idle", g.Telemetry)
	case g.Telemetry.FanSpeedPercent != nil:
		t.Errorf("fan %d on a passively cooled SXM board, want null", *g.Telemetry.FanSpeedPercent)
	case len(g.Serial) != 13:
		t.Errorf("serial %q, want 13 digits", g.Serial)
	}
	if _, err := status.NewGPU(m, m.Len(), "node-a", testTime); !errors.Is(err, status.ErrInvalidStatus) {
		t.Errorf("NewGPU out of range: %v, want ErrInvalidStatus", err)
	}
	ws, err := topology.Preset("workstation-4gpu")
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := status.NewGPU(ws, 0, "n", testTime); g.Telemetry.FanSpeedPercent == nil || g.Telemetry.MemoryTemperatureC != nil {
		t.Errorf("RTX A6000: fan %v memory temperature %v, want a fan and no HBM sensor", g.Telemetry.FanSpeedPercent, g.Telemetry.MemoryTemperatureC)
	}
}

func TestValidate_Refuses(t *testing.T) {
	neg := -1
	big := 300
	cases := []struct {
		name    string
		mutate  func(g *status.GPU)
		wantErr error
		field   string
	}{
		{"other apiVersion", func(g *status.GPU) { g.APIVersion = "virtual-gpu.unicore.mcyou.cc/v2" }, status.ErrUnsupportedVersion, "apiVersion"},
		{"other kind", func(g *status.GPU) { g.Kind = "Topology" }, status.ErrUnsupportedVersion, "kind"},
		{"empty id", func(g *status.GPU) { g.ID = "" }, status.ErrInvalidStatus, "id"},
		{"upper-case uuid", func(g *status.GPU) { g.UUID = strings.ToUpper(g.UUID) }, status.ErrInvalidStatus, "uuid"},
		{"short uuid", func(g *status.GPU) { g.UUID = g.UUID[:20] }, status.ErrInvalidStatus, "uuid"},
		{"negative index", func(g *status.GPU) { g.Index = -1 }, status.ErrInvalidStatus, "index"},
		{"letters in serial", func(g *status.GPU) { g.Serial = "12ab" }, status.ErrInvalidStatus, "serial"},
		{"comma in product", func(g *status.GPU) { g.Product = "NVIDIA H100, 80GB" }, status.ErrInvalidStatus, "product"},
		{"empty product", func(g *status.GPU) { g.Product = "" }, status.ErrInvalidStatus, "product"},
		{"bad compute capability", func(g *status.GPU) { g.ComputeCapability = "9" }, status.ErrInvalidStatus, "computeCapability"},
		{"no memory", func(g *status.GPU) { g.MemoryTotalMiB = 0 }, status.ErrInvalidStatus, "memoryTotalMiB"},
		{"reserved all memory", func(g *status.GPU) { g.MemoryReservedMiB = g.MemoryTotalMiB }, status.ErrInvalidStatus, "memoryReservedMiB"},
		{"lower-case bus id", func(g *status.GPU) { g.PCIBusID = "00000000:0a:00.0" }, status.ErrInvalidStatus, "pciBusId"},
		{"numa below -1", func(g *status.GPU) { g.NUMANode = -2 }, status.ErrInvalidStatus, "numaNode"},
		{"bad cpu list", func(g *status.GPU) { g.CPUAffinity = "0-3,,5" }, status.ErrInvalidStatus, "cpuAffinity"},
		{"no power limit", func(g *status.GPU) { g.PowerLimitW = 0 }, status.ErrInvalidStatus, "powerLimitW"},
		{"negative clock", func(g *status.GPU) { g.MaxClocks.SMMHz = -1 }, status.ErrInvalidStatus, "maxClocks"},
		{"empty driver version", func(g *status.GPU) { g.DriverVersion = "" }, status.ErrInvalidStatus, "driverVersion"},
		{"space in cuda version", func(g *status.GPU) { g.CUDAVersion = "13 .0" }, status.ErrInvalidStatus, "cudaVersion"},
		{"reason when healthy", func(g *status.GPU) { g.Health.Reason = "XID 79" }, status.ErrInvalidStatus, "health.reason"},
		{"newline in reason", func(g *status.GPU) { g.Health = status.Health{Reason: "a\nb"} }, status.ErrInvalidStatus, "health.reason"},
		{"utilization above 100", func(g *status.GPU) { g.Telemetry.UtilizationGPUPercent = 101 }, status.ErrInvalidStatus, "utilizationGpuPercent"},
		{"memory used above free", func(g *status.GPU) { g.Telemetry.MemoryUsedMiB = g.MemoryTotalMiB }, status.ErrInvalidStatus, "memoryUsedMiB"},
		{"hot", func(g *status.GPU) { g.Telemetry.TemperatureC = 201 }, status.ErrInvalidStatus, "temperatureC"},
		{"negative power", func(g *status.GPU) { g.Telemetry.PowerDrawW = -1 }, status.ErrInvalidStatus, "powerDrawW"},
		{"fan above 200", func(g *status.GPU) { g.Telemetry.FanSpeedPercent = &big }, status.ErrInvalidStatus, "fanSpeedPercent"},
		{"negative xid", func(g *status.GPU) { g.Telemetry.LastXID = &neg }, status.ErrInvalidStatus, "lastXid"},
		{"video clock", func(g *status.GPU) { g.Telemetry.VideoClockMHz = -1 }, status.ErrInvalidStatus, "videoClockMHz"},
		{"encoder above 100", func(g *status.GPU) { g.Telemetry.UtilizationEncoderPercent = 101 }, status.ErrInvalidStatus, "utilizationEncoderPercent"},
		{"decoder negative", func(g *status.GPU) { g.Telemetry.UtilizationDecoderPercent = -1 }, status.ErrInvalidStatus, "utilizationDecoderPercent"},
		{"pcie tx", func(g *status.GPU) { g.Telemetry.PCIeTxKBps = -5 }, status.ErrInvalidStatus, "pcieTxKBps"},
		{"pcie rx", func(g *status.GPU) { g.Telemetry.PCIeRxKBps = 1 << 40 }, status.ErrInvalidStatus, "pcieRxKBps"},
		{"energy", func(g *status.GPU) { g.Telemetry.TotalEnergyMJ = -1 }, status.ErrInvalidStatus, "totalEnergyMJ"},
		{"clock event bits", func(g *status.GPU) { g.Telemetry.ClockEventReasons = 0x200 }, status.ErrInvalidStatus, "clockEventReasons"},
		{"memory errors", func(g *status.GPU) { g.Telemetry.MemoryErrors.RetiredDBE = -1 }, status.ErrInvalidStatus, "memoryErrors"},
		{"holder memory", func(g *status.GPU) {
			g.Telemetry.Holders = []status.Holder{{Namespace: "ml", Pod: "p", Container: "c", MemoryUsedMiB: g.MemoryTotalMiB}}
		}, status.ErrInvalidStatus, "holders[0].memoryUsedMiB"},
		{"holder name", func(g *status.GPU) {
			g.Telemetry.Holders = []status.Holder{{Namespace: "ml", Pod: "a,b", Container: "c"}}
		}, status.ErrInvalidStatus, "holders[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := mustGPU(t, "hgx-h100", 1)
			tc.mutate(g)
			err := g.Validate()
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate: %v, want %v naming %s", err, tc.wantErr, tc.field)
			}
			if _, err := status.Marshal(g); !errors.Is(err, tc.wantErr) {
				t.Errorf("Marshal: %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestUnmarshal_IgnoresUnknownFields(t *testing.T) {
	data, err := status.Marshal(mustGPU(t, "dgx-a100", 2))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["addedInALaterVersion"] = map[string]any{"x": 1}
	doc["telemetry"].(map[string]any)["encoderPercent"] = 3
	extended, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	g, err := status.Unmarshal(extended)
	if err != nil {
		t.Fatalf("Unmarshal with unknown fields: %v", err)
	}
	if g.ID != "fake-2" {
		t.Errorf("id %s, want fake-2", g.ID)
	}
}

func TestUnmarshal_Refuses(t *testing.T) {
	good, err := status.Marshal(mustGPU(t, "dgx-a100", 2))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		data    []byte
		wantErr error
	}{
		{"empty", nil, status.ErrInvalidStatus},
		{"not JSON", []byte("nvidia"), status.ErrInvalidStatus},
		{"truncated", good[:len(good)/2], status.ErrInvalidStatus},
		{"two documents", append(append([]byte{}, good...), good...), status.ErrInvalidStatus},
		{"wrong type", []byte(`{"apiVersion":"virtual-gpu.unicore.mcyou.cc/v1","kind":"GPUStatus","index":"3"}`), status.ErrInvalidStatus},
		{"no fields", []byte(`{}`), status.ErrUnsupportedVersion},
		{"too large", append(append([]byte{}, good[:len(good)-2]...), bytes.Repeat([]byte(" "), status.MaxFileBytes)...), status.ErrInvalidStatus},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := status.Unmarshal(tc.data); !errors.Is(err, tc.wantErr) {
				t.Errorf("Unmarshal: %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func FuzzUnmarshal(f *testing.F) {
	good, err := status.Marshal(mustGPU(f, "hgx-h100", 3))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"apiVersion":"virtual-gpu.unicore.mcyou.cc/v1","kind":"GPUStatus"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := status.Unmarshal(data)
		if err != nil {
			if !errors.Is(err, status.ErrInvalidStatus) && !errors.Is(err, status.ErrUnsupportedVersion) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		again, err := status.Marshal(g)
		if err != nil {
			t.Fatalf("a decoded status does not encode: %v", err)
		}
		back, err := status.Unmarshal(again)
		if err != nil || !reflect.DeepEqual(back, g) {
			t.Fatalf("re-decoded %+v, %v; want %+v", back, err, g)
		}
	})
}
