package topology_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// TestNVLinkDomains: an NVSwitch system is one domain, the DGX-1's hybrid
// cube mesh its two quads, a PCIe machine none; within a domain every pair
// is NVLinked, on every preset.
func TestNVLinkDomains(t *testing.T) {
	for _, tc := range []struct {
		preset string
		want   []int
	}{
		{"dgx-a100", []int{0, 0, 0, 0, 0, 0, 0, 0}},
		{"hgx-h100", []int{0, 0, 0, 0, 0, 0, 0, 0}},
		{"dgx1-volta", []int{0, 0, 0, 0, 1, 1, 1, 1}},
		{"dgx1-pascal", []int{0, 0, 0, 0, 1, 1, 1, 1}},
		{"pcie-8gpu", []int{-1, -1, -1, -1, -1, -1, -1, -1}},
	} {
		m, err := topology.Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.NVLinkDomains(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: domains %v, want %v", tc.preset, got, tc.want)
		}
	}
	for _, name := range topology.PresetNames() {
		m, _ := topology.Preset(name)
		d := m.NVLinkDomains()
		for i := range d {
			for j := range d {
				if i != j && d[i] >= 0 && d[i] == d[j] && m.Link(i, j).NVLinks == 0 {
					t.Errorf("%s: GPUs %d and %d share domain %d without an NVLink", name, i, j, d[i])
				}
			}
		}
	}
	if got := topology.NVLinkDomainName(1); got != "nvlink-1" {
		t.Errorf("NVLinkDomainName(1) = %q", got)
	}
}

// TestPCIeRoots: GPUs on one host bridge share a root, GPUs on others do
// not, on every preset; the name has the form of pcieRoot.
func TestPCIeRoots(t *testing.T) {
	for _, name := range topology.PresetNames() {
		m, err := topology.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		roots := m.PCIeRoots()
		for i := range roots {
			if !strings.HasPrefix(roots[i], "pci0000:") || len(roots[i]) != len("pci0000:00") {
				t.Errorf("%s: GPU %d root %q", name, i, roots[i])
			}
			for j := range roots {
				same := m.Link(i, j).PCIe >= topology.PHB
				if i != j && m.Link(i, j).NVLinks == 0 && same != (roots[i] == roots[j]) {
					t.Errorf("%s: GPUs %d and %d (%s): roots %s, %s", name, i, j, m.Link(i, j).PCIe, roots[i], roots[j])
				}
			}
		}
	}
	m, _ := topology.Preset("dgx-a100")
	bdf := regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$`) // deviceattribute's pattern
	for i := range m.Len() {
		if got := m.KubernetesPCIBusID(i); !bdf.MatchString(got) {
			t.Errorf("KubernetesPCIBusID(%d) = %q, want <domain>:<bus>:<device>.<function> in lower-case hex", i, got)
		}
	}
	if got := m.KubernetesPCIBusID(0); len(got) != len("0000:07:00.0") || !strings.HasSuffix(got, ":00.0") {
		t.Errorf("KubernetesPCIBusID(0) = %q, want 0000:bb:00.0", got)
	}
}
