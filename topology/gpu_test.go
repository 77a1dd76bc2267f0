package topology

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestPreset_GPUModels(t *testing.T) {
	tests := []struct {
		preset string
		want   GPUModel
	}{
		{"dgx1-pascal", GPUModel{"Tesla P100-SXM2-16GB", 16384, ComputeCapability{6, 0}, "pascal", 300, 30}},
		{"dgx1-volta", GPUModel{"Tesla V100-SXM2-32GB", 32768, ComputeCapability{7, 0}, "volta", 300, 56}},
		{"dgx-a100", GPUModel{"NVIDIA A100-SXM4-40GB", 40960, ComputeCapability{8, 0}, "ampere", 400, 60}},
		{"hgx-h100", GPUModel{"NVIDIA H100 80GB HBM3", 81559, ComputeCapability{9, 0}, "hopper", 700, 85}},
		{"dgx2", GPUModel{"Tesla V100-SXM3-32GB", 32768, ComputeCapability{7, 0}, "volta", 350, 50}},
		{"pcie-8gpu", DefaultGPUModel()},
		{"workstation-4gpu", GPUModel{"NVIDIA RTX A6000", 49140, ComputeCapability{8, 6}, "ampere", 300, 20}},
	}
	if len(tests) != len(PresetNames()) {
		t.Fatalf("%d presets tested, %d exist", len(tests), len(PresetNames()))
	}
	for _, tt := range tests {
		t.Run(tt.preset, func(t *testing.T) {
			m := MustPreset(t, tt.preset)
			if got := m.GPUModel(); got != tt.want {
				t.Errorf("GPUModel() = %+v, want %+v", got, tt.want)
			}
			src, _ := PresetSource(tt.preset)
			if !strings.Contains(string(src), "# GPU: ") {
				t.Errorf("preset %s does not document its GPU model with a source", tt.preset)
			}
		})
	}
}

func TestDefaultGPUModel_WhereNoneIsGiven(t *testing.T) {
	generic, err := Generic(4)
	if err != nil {
		t.Fatal(err)
	}
	made, err := New("made", []int{0, 0}, func(i, j int) Link { return Link{PCIe: PIX} })
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Machine{generic, made, MustParseFile(t, "hgx-h100.txt")} {
		if got := m.GPUModel(); got != DefaultGPUModel() {
			t.Errorf("%s: GPUModel() = %+v, want the default", m.Name(), got)
		}
	}
	d := DefaultGPUModel()
	if field, msg := d.check(); field != "" || FamilyOf(d.Compute) != d.Family {
		t.Errorf("the default model is invalid: %s %s", field, msg)
	}
	var nilMachine *Machine
	if nilMachine.GPUModel() != (GPUModel{}) || nilMachine.PCIBusID(0) != "" || nilMachine.MinorNumber(0) != -1 {
		t.Error("a nil machine has GPU identity")
	}
}

func TestFamilyOf(t *testing.T) {
	for cc, want := range map[string]string{
		"3.7": "kepler", "5.2": "maxwell", "6.0": "pascal", "6.1": "pascal", "7.0": "volta", "7.2": "volta", "7.5": "turing",
		"8.0": "ampere", "8.6": "ampere", "8.7": "ampere", "8.9": "ada-lovelace", "9.0": "hopper", "10.0": "blackwell",
		"12.0": "blackwell", "11.0": "", "4.0": "", "1.0": "",
	} {
		c, ok := parseComputeCapability(cc)
		if !ok || c.String() != cc {
			t.Fatalf("parseComputeCapability(%q) = %v, %v", cc, c, ok)
		}
		if got := FamilyOf(c); got != want {
			t.Errorf("FamilyOf(%s) = %q, want %q", cc, got, want)
		}
	}
	for _, bad := range []string{"", "8", "8.", ".0", "08.0", "8.00", "8.10", "100.0", "0.0", "8,0", " 8.0", "v8.0"} {
		if c, ok := parseComputeCapability(bad); ok {
			t.Errorf("parseComputeCapability(%q) = %v, want an error", bad, c)
		}
	}
}

func TestMachine_PCIBusID(t *testing.T) {
	generic4, _ := Generic(4)
	generic8, _ := Generic(8)
	tests := []struct {
		machine *Machine
		want    string // the buses of GPU 0, 1, …
	}{
		// One switch per GPU, each on its own root port: NODE, then SYS.
		{MustPreset(t, "hgx-h100"), "01 21 41 61 81 A1 C1 E1"},
		// Pairs below two levels of switches (PXB), one NUMA node per pair.
		{MustPreset(t, "dgx-a100"), "01 05 41 45 81 85 C1 C5"},
		// Two switches of two GPUs per socket's host bridge.
		{MustPreset(t, "dgx1-volta"), "01 02 11 12 41 42 51 52"},
		// Two host bridges of 2 leaf switches of 2 per socket.
		{MustPreset(t, "dgx2"), "01 02 06 07 21 22 26 27 41 42 46 47 61 62 66 67"},
		{MustPreset(t, "workstation-4gpu"), "01 11 21 31"},
		{generic4, "01 02 41 42"},
		{generic8, "01 02 11 12 41 42 51 52"},
	}
	for _, tt := range tests {
		t.Run(tt.machine.Name(), func(t *testing.T) {
			var buses []string
			for i := range tt.machine.Len() {
				id := tt.machine.PCIBusID(i)
				if !strings.HasPrefix(id, "00000000:") || !strings.HasSuffix(id, ":00.0") {
					t.Fatalf("PCIBusID(%d) = %q", i, id)
				}
				buses = append(buses, id[9:11])
			}
			if got := strings.Join(buses, " "); got != tt.want {
				t.Errorf("buses %s, want %s", got, tt.want)
			}
		})
	}
}

var busIDRE = regexp.MustCompile(`^([0-9A-F]{8}):([0-9A-F]{2}):00\.0$`)

// checkIdentity verifies the GPU identity invariants of m: bus ids well
// formed, unique and ascending with the index, consecutive buses for GPUs
// under one switch, minor numbers equal to indices.
func checkIdentity(t testing.TB, m *Machine) {
	t.Helper()
	prev := int64(-1)
	for i := range m.Len() {
		id := m.PCIBusID(i)
		mm := busIDRE.FindStringSubmatch(id)
		if mm == nil {
			t.Fatalf("%s: PCIBusID(%d) = %q, want DDDDDDDD:BB:00.0 in upper-case hex", m.Name(), i, id)
		}
		domain, _ := strconv.ParseInt(mm[1], 16, 64)
		bus, _ := strconv.ParseInt(mm[2], 16, 64)
		v := domain<<8 | bus
		if bus == 0 || v <= prev {
			t.Fatalf("%s: GPU %d on %s: want a bus above 0 and above the previous GPU's", m.Name(), i, id)
		}
		if l := m.Link(i-1, i); i > 0 && (l.PCIe == PIX || l.PCIe == BOARD) && v != prev+1 && bus != 1 {
			t.Fatalf("%s: GPUs %d and %d are %v but on %s and %s", m.Name(), i-1, i, l.PCIe, m.PCIBusID(i-1), id)
		}
		prev = v
		if m.MinorNumber(i) != i {
			t.Fatalf("%s: MinorNumber(%d) = %d", m.Name(), i, m.MinorNumber(i))
		}
	}
	if m.PCIBusID(-1) != "" || m.PCIBusID(m.Len()) != "" || m.MinorNumber(m.Len()) != -1 {
		t.Errorf("%s: identity of a GPU out of range", m.Name())
	}
}

func TestMachine_Identity_Invariants(t *testing.T) {
	var machines []*Machine
	for _, name := range PresetNames() {
		machines = append(machines, MustPreset(t, name))
	}
	machines = append(machines, testdataMachines(t)...)
	for _, n := range []int{1, 2, 3, 7, 64, 255, 1000, MaxGPUs} {
		m, err := Generic(n)
		if err != nil {
			t.Fatal(err)
		}
		machines = append(machines, m)
	}
	for _, m := range machines {
		t.Run(m.Name(), func(t *testing.T) { checkIdentity(t, m) })
	}
	// The largest generic layout spills into further PCI domains.
	big, _ := Generic(MaxGPUs)
	if last := big.PCIBusID(MaxGPUs - 1); strings.HasPrefix(last, "00000000:") {
		t.Errorf("GPU %d of generic-%d on %s: want a later domain", MaxGPUs-1, MaxGPUs, last)
	}
}

func ExampleMachine_GPUModel() {
	m, err := Preset("dgx-a100")
	if err != nil {
		fmt.Println(err)
		return
	}
	g := m.GPUModel()
	fmt.Println(g.Product, g.MemoryMiB, "MiB", g.Compute, g.Family, g.PowerLimitW, "W")
	fmt.Println(m.PCIBusID(0), m.PCIBusID(2), m.MinorNumber(2))
	// Output:
	// NVIDIA A100-SXM4-40GB 40960 MiB 8.0 ampere 400 W
	// 00000000:01:00.0 00000000:41:00.0 2
}
