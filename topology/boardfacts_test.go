package topology_test

import (
	"regexp"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// TestFacts_Presets: every built-in machine's product has its board facts,
// in nvidia-smi's shapes.
func TestFacts_Presets(t *testing.T) {
	subID := regexp.MustCompile(`^0x[0-9A-F]{8}$`)
	vbios := regexp.MustCompile(`^[0-9A-F]{2}(\.[0-9A-F]{2}){4}$`)
	image := regexp.MustCompile(`^G[0-9]{3}\.[0-9]{4}\.[0-9]{2}\.[0-9]{2}$`)
	for _, name := range topology.PresetNames() {
		m, err := topology.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		g := m.GPUModel()
		f := g.Facts()
		switch {
		case !subID.MatchString(f.SubDeviceID), !vbios.MatchString(f.VBIOS), !image.MatchString(f.InforomImage), f.InforomOEM == "":
			t.Errorf("%s (%s): facts %+v", name, g.Product, f)
		case f.BAR1MiB < 256:
			t.Errorf("%s: BAR1 of %d MiB", name, f.BAR1MiB)
		case f.MinPowerLimitW <= 0 || f.MinPowerLimitW >= g.PowerLimitW:
			t.Errorf("%s: min power limit %d W, power limit %d W", name, f.MinPowerLimitW, g.PowerLimitW)
		case (f.RemapBanks > 0) != (g.RowRemapping() && g.ECC()):
			t.Errorf("%s: %d remap banks, row remapping %v", name, f.RemapBanks, g.RowRemapping())
		}
	}
}

// TestFacts_Unknown: a product without a row has no firmware versions; an
// SXM name is an SXM board.
func TestFacts_Unknown(t *testing.T) {
	if f := (topology.GPUModel{Product: "NVIDIA B200-SXM6-180GB"}).Facts(); f != (topology.BoardFacts{SXM: true}) {
		t.Errorf("unknown SXM product: %+v", f)
	}
	if f := (topology.GPUModel{Product: "NVIDIA A2"}).Facts(); f != (topology.BoardFacts{}) {
		t.Errorf("unknown PCIe product: %+v", f)
	}
	if c, ok := topology.ParseComputeCapability("9.0"); !ok || c != (topology.ComputeCapability{Major: 9}) {
		t.Errorf("ParseComputeCapability(9.0) = %v, %v", c, ok)
	}
	if _, ok := topology.ParseComputeCapability("9"); ok {
		t.Error("ParseComputeCapability(9) accepted")
	}
}
