package status_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// migGPU is GPU 0 of hgx-h100 with MIG on and two 3g.40gb devices.
func migGPU(t *testing.T) *status.GPU {
	t.Helper()
	m, err := topology.Preset("hgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	g, err := status.NewGPU(m, 0, "node-a", testTime)
	if err != nil {
		t.Fatal(err)
	}
	g.MIGEnabled = true
	for _, at := range []struct{ start, gi int }{{4, 1}, {0, 2}} {
		id := topology.MIGID(0, "3g.40gb", at.start)
		g.MIGDevices = append(g.MIGDevices, status.MIGDevice{ID: id, UUID: topology.DeriveMIGUUID("node-a", id), Profile: "3g.40gb", ProfileID: 9,
			GPUInstanceID: at.gi, PlacementStart: at.start, PlacementSize: 4, MemoryMiB: 40448, Multiprocessors: 60, CopyEngines: 3, Decoders: 3, JPEGs: 3})
	}
	return g
}

// A status file's MIG devices survive encoding; an old reader's file
// (no MIG fields) decodes as MIG off.
func TestMIG_RoundTrip(t *testing.T) {
	g := migGPU(t)
	data, err := status.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	back, err := status.Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, g) {
		t.Errorf("decoded %+v, want %+v", back.MIGDevices, g.MIGDevices)
	}
	g.MIGEnabled, g.MIGDevices = false, nil
	if data, err = status.Marshal(g); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "mig") {
		t.Errorf("a GPU without MIG writes MIG fields:\n%s", data)
	}
}

// Invalid MIG devices are refused, naming the field.
func TestMIG_Validate(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(g *status.GPU)
		field  string
	}{
		"devices with MIG off": {func(g *status.GPU) { g.MIGEnabled = false }, "migEnabled false"},
		"GPU UUID":             {func(g *status.GPU) { g.MIGDevices[0].UUID = g.UUID }, "migDevices[0].uuid"},
		"same UUID":            {func(g *status.GPU) { g.MIGDevices[1].UUID = g.MIGDevices[0].UUID }, "migDevices[1].uuid"},
		"profile":              {func(g *status.GPU) { g.MIGDevices[0].Profile = "MIG 3g.40gb" }, "migDevices[0].profile"},
		"overlap":              {func(g *status.GPU) { g.MIGDevices[1].PlacementStart = 2 }, "migDevices[1].placementStart"},
		"GI order":             {func(g *status.GPU) { g.MIGDevices[1].GPUInstanceID = 1 }, "migDevices[1].gpuInstanceId"},
		"memory":               {func(g *status.GPU) { g.MIGDevices[0].MemoryMiB = g.MemoryTotalMiB + 1 }, "migDevices[0].memoryMiB"},
		"slices":               {func(g *status.GPU) { g.MIGDevices[0].PlacementSize = 0 }, "migDevices[0].placementSize"},
	} {
		t.Run(name, func(t *testing.T) {
			g := migGPU(t)
			tc.change(g)
			err := g.Validate()
			if !errors.Is(err, status.ErrInvalidStatus) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate = %v, want ErrInvalidStatus naming %s", err, tc.field)
			}
		})
	}
}
