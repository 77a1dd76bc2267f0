package mig

import (
	"errors"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// The model keys products by the name topology's GPU model uses and
// repeats the PCI subsystem id topology's board facts hold (the package
// may not import topology: cmd's import rules place it alone). These tests
// keep the two from drifting apart.

// TestProducts_AgreeWithTopology: every product both know has the PCI
// subsystem id topology's board facts give it.
func TestProducts_AgreeWithTopology(t *testing.T) {
	for _, name := range Products() {
		p, err := LookupProduct(name)
		if err != nil {
			t.Fatal(err)
		}
		want := topology.GPUModel{Product: name}.Facts().SubDeviceID
		if want != "" && p.PCISubsystemID != want {
			t.Errorf("%s: products.yaml pciSubsystemID %q, topology's board facts %q", name, p.PCISubsystemID, want)
		}
	}
}

// TestPresets_MIGProducts: the preset machines' GPUs of a MIG architecture
// (GA100 A100, Hopper) are in the model under topology's product name; the
// others are refused with ErrNoMIG.
func TestPresets_MIGProducts(t *testing.T) {
	for _, preset := range topology.PresetNames() {
		m, err := topology.Preset(preset)
		if err != nil {
			t.Fatal(err)
		}
		g := m.GPUModel()
		wantMIG := g.Family == "hopper" || g.Family == "ampere" && g.Compute == topology.ComputeCapability{Major: 8, Minor: 0}
		_, err = LookupProduct(g.Product)
		switch {
		case wantMIG && err != nil:
			t.Errorf("preset %s: %s (%s %s): %v", preset, g.Product, g.Family, g.Compute, err)
		case !wantMIG && !errors.Is(err, ErrNoMIG):
			t.Errorf("preset %s: %s (%s %s): LookupProduct = %v, want ErrNoMIG", preset, g.Product, g.Family, g.Compute, err)
		}
	}
}
