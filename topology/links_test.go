package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
)

// allIndices returns 0 … n-1.
func allIndices(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// randomSubset returns a sorted random subset of 0 … n-1 with at least one
// element.
func randomSubset(rng *rand.Rand, n int) []int {
	keep := 0.1 + 0.9*rng.Float64()
	var idx []int
	for i := range n {
		if rng.Float64() < keep {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		idx = []int{rng.IntN(n)}
	}
	return idx
}

// checkLinksRoundTrip checks that ParseLinks decodes the EnvLinks value
// ContainerEnv gives for idx to the labels of m.Link for every pair.
func checkLinksRoundTrip(t *testing.T, m *Machine, idx []int) {
	t.Helper()
	value := m.ContainerEnv(idx)[EnvLinks]
	l, err := ParseLinks(value, len(idx))
	if err != nil {
		t.Fatalf("%s, %d devices: ParseLinks(%q): %v", m.Name(), len(idx), value, err)
	}
	if l.Len() != len(idx) {
		t.Fatalf("Len() = %d, want %d", l.Len(), len(idx))
	}
	for p := range idx {
		for q := range idx {
			want := "X"
			if p != q {
				want = m.Link(idx[p], idx[q]).String()
			}
			if got := l.Label(p, q); got != want {
				t.Fatalf("%s devices %v: value %q: positions %d,%d (GPUs %d,%d) decode to %s, want %s",
					m.Name(), idx, value, p, q, idx[p], idx[q], got, want)
			}
		}
	}
}

// testdataMachines parses every file of testdata.
func testdataMachines(t *testing.T) []*Machine {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var ms []*Machine
	for _, f := range files {
		ms = append(ms, MustParseFile(t, filepath.Base(f)))
	}
	if len(ms) < 20 {
		t.Fatalf("only %d testdata machines", len(ms))
	}
	return ms
}

// randomMachine builds a machine of n GPUs whose pairs get random labels
// out of a few, so that no level is a clique: it exercises the greedy cover.
func randomMachine(t *testing.T, rng *rand.Rand, n int) *Machine {
	t.Helper()
	var choices []Link
	for range 1 + rng.IntN(4) {
		if rng.IntN(2) == 0 {
			choices = append(choices, Link{NVLinks: 1 + rng.IntN(MaxNVLinks)})
		} else {
			choices = append(choices, Link{PCIe: PCIe(rng.IntN(int(BOARD) + 1))})
		}
	}
	m, err := New(fmt.Sprintf("random-%d", n), make([]int, n), func(i, j int) Link { return choices[rng.IntN(len(choices))] })
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParseLinks_RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var machines []*Machine
	for _, name := range PresetNames() {
		machines = append(machines, MustPreset(t, name))
	}
	machines = append(machines, testdataMachines(t)...)
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 64, 100, 127, 128, 333, 512, 1000, MaxGPUs} {
		m, err := Generic(n)
		if err != nil {
			t.Fatal(err)
		}
		machines = append(machines, m)
	}
	for _, n := range []int{2, 3, 5, 8, 13, 40} {
		for range 5 {
			machines = append(machines, randomMachine(t, rng, n))
		}
	}
	for _, m := range machines {
		t.Run(m.Name(), func(t *testing.T) {
			checkLinksRoundTrip(t, m, allIndices(m.Len()))
			subsets := 40
			if m.Len() > 128 {
				subsets = 2
			}
			for range subsets {
				checkLinksRoundTrip(t, m, randomSubset(rng, m.Len()))
			}
		})
	}
}

func TestMachine_ContainerEnv_LinksExamples(t *testing.T) {
	tests := []struct {
		machine string
		indices []int // nil: all
		want    string
	}{
		{"dgx-a100", nil, "NV12"},
		{"hgx-h100", nil, "NV18"},
		{"dgx2", nil, "NV6"},
		{"pcie-8gpu", nil, "SYS;NODE=0-3,4-7;PIX=0-1,2-3,4-5,6-7"},
		{"workstation-4gpu", nil, "PHB;NV4=0-1,2-3"},
		{"dgx1-pascal", nil, "SYS;NV1=0-3,0+4,1+5,2+6,3+7,4-7"},
		{"dgx1-volta", nil, "SYS;NV1=0-3,2+6,3+7,4-7;NV2=0+3,0+4,1-2,1+5,2-3,4+7,5-6,6-7"},
		{"dgx1-volta", []int{0, 1, 4}, "SYS;NV1=0-1;NV2=0+2"},
		{"pcie-8gpu", []int{1, 2, 6}, "SYS;NODE=0-1"},
		{"pcie-8gpu", []int{5}, ""},
		{"generic-9", nil, "SYS;PHB=0-4,5-8;PIX=0-1,2-3,5-6,7-8"},
		{"every-feature", nil, "SYS;PHB=0-6;BOARD=0-2;NV2=0-1,0+2;NV4=7-8;NV12=3-6"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.machine, tt.indices), func(t *testing.T) {
			var m *Machine
			switch {
			case tt.machine == "generic-9":
				m, _ = Generic(9)
			case tt.machine == "every-feature":
				m = MustParseFile(t, "every-feature.yaml")
			default:
				m = MustPreset(t, tt.machine)
			}
			idx := tt.indices
			if idx == nil {
				idx = allIndices(m.Len())
			}
			if got := m.ContainerEnv(idx)[EnvLinks]; got != tt.want {
				t.Errorf("%s = %q, want %q", EnvLinks, got, tt.want)
			}
		})
	}
}

// Every variable of an Allocate of all 1024 GPUs of the default generic
// layout stays far below the 64 KiB budget (Linux allows 128 KiB per string;
// gRPC 4 MiB per message).
func TestMachine_ContainerEnv_SizeAt1024(t *testing.T) {
	m, err := Generic(MaxGPUs)
	if err != nil {
		t.Fatal(err)
	}
	env := m.ContainerEnv(allIndices(MaxGPUs))
	total := 0
	for k, v := range env {
		t.Logf("%s: %d bytes", k, len(v))
		if len(v) >= 64<<10 {
			t.Errorf("%s is %d bytes, want < 64 KiB", k, len(v))
		}
		total += len(k) + len(v)
	}
	if len(env[EnvLinks]) > 5<<10 {
		t.Errorf("%s is %d bytes, want at most 5 KiB for the generic layout", EnvLinks, len(env[EnvLinks]))
	}
	// The preset-like machine with sixteen NVSwitch domains of 8.
	big := MustParseFile(t, "sixteen-hgx.yaml")
	if v := big.ContainerEnv(allIndices(big.Len()))[EnvLinks]; len(v) > 200 {
		t.Errorf("sixteen-hgx: %s is %d bytes, want a group per domain: %s", EnvLinks, len(v), v)
	}
}

func TestParseLinks_OverrideInOrder(t *testing.T) {
	// Hand-written, not as the plugin writes it: labels out of order and
	// overlapping groups. The last entry naming a pair wins.
	l, err := ParseLinks("PIX;SYS=0-4;NV2=1+3,0-1;PHB=1-2+4", 5)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"X NV2 SYS SYS SYS",
		"NV2 X PHB NV2 PHB",
		"SYS PHB X SYS PHB",
		"SYS NV2 SYS X SYS",
		"SYS PHB PHB SYS X",
	}
	for p := range 5 {
		var row []string
		for q := range 5 {
			row = append(row, l.Label(p, q))
		}
		if got := strings.Join(row, " "); got != want[p] {
			t.Errorf("row %d = %s, want %s", p, got, want[p])
		}
	}
	if l.Label(0, 5) != "" || l.Label(-1, 0) != "" {
		t.Error("Label out of range is not empty")
	}
	var nilLabels *LinkLabels
	if nilLabels.Len() != 0 || nilLabels.Label(0, 1) != "" {
		t.Error("nil LinkLabels is not empty")
	}
}

func TestParseLinks_Valid(t *testing.T) {
	tests := []struct {
		name  string
		value string
		n     int
	}{
		{"no devices", "", 0},
		{"one device", "", 1},
		{"one device with a default", "SYS", 1},
		{"two devices", "NV18", 2},
		{"single-position ranges", "SYS;PIX=0+1", 2},
		{"a range of one joined to another", "SYS;PIX=0-0+1", 2},
		{"every label", "SYS;NODE=0-1;PHB=0-1;PXB=0-1;PIX=0-1;BOARD=0-1;NV1=0-1;NV18=0-1", 2},
		{"the largest machine", "SYS;PHB=0-1023", MaxGPUs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := ParseLinks(tt.value, tt.n)
			if err != nil {
				t.Fatalf("ParseLinks(%q, %d): %v", tt.value, tt.n, err)
			}
			if l.Len() != tt.n {
				t.Errorf("Len() = %d, want %d", l.Len(), tt.n)
			}
		})
	}
}

func TestParseLinks_Errors(t *testing.T) {
	tests := []struct {
		name  string
		value string
		n     int
		want  string // part of the message
	}{
		{"empty for two devices", "", 2, "expected a default label"},
		{"unknown default", "XYZ;PIX=0-1", 2, `entry 1 "XYZ": expected a default label`},
		{"default with groups", "SYS=0-1", 2, `entry 1 "SYS=0-1"`},
		{"alias label", "SOC", 2, "expected a default label"},
		{"lower case", "sys", 2, "expected a default label"},
		{"NV0", "SYS;NV0=0-1", 2, `label "NV0"`},
		{"NV19", "SYS;NV19=0-1", 2, `label "NV19"`},
		{"NV leading zero", "SYS;NV01=0-1", 2, `label "NV01"`},
		{"bare label later", "SYS;PIX", 2, `entry 2 "PIX": expected LABEL=GROUP`},
		{"empty entry", "SYS;;PIX=0-1", 2, "entry 2"},
		{"trailing semicolon", "SYS;PIX=0-1;", 2, "entry 3"},
		{"empty group", "SYS;PIX=", 2, `group "": "" is not a position`},
		{"empty group in list", "SYS;PIX=0-1,,2-3", 4, `group ""`},
		{"one position", "SYS;PIX=3", 4, `group "3": expected at least two positions`},
		{"position out of range", "SYS;PIX=0-4", 4, "position 4 out of range: there are 4 positions (0..3)"},
		{"reversed range", "SYS;PIX=3-1", 4, `range "3-1": expected the lower position first`},
		{"overlapping ranges", "SYS;PIX=0-2+2-3", 4, "expected ascending positions, each once"},
		{"descending ranges", "SYS;PIX=2-3+0", 4, "expected ascending positions"},
		{"sign", "SYS;PIX=+1+2", 4, "is not a position"},
		{"leading zero", "SYS;PIX=01+2", 4, `"01" is not a position`},
		{"spaces", "SYS; PIX=0-1", 4, `label " PIX"`},
		{"open range", "SYS;PIX=0-", 4, `"0-" is not a position`},
		{"huge number", "SYS;PIX=0+99999999999", 4, "is not a position"},
		{"negative n", "SYS", -1, "want 0..1024"},
		{"n too large", "SYS", MaxGPUs + 1, "want 0..1024"},
		{"too long", "SYS;PIX=" + strings.Repeat("0-1,", MaxLinksBytes/4), 2, "bytes, want at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := ParseLinks(tt.value, tt.n)
			if !errors.Is(err, ErrInvalidLinks) {
				t.Fatalf("ParseLinks(%.40q, %d) = %v, %v; want an error wrapping ErrInvalidLinks", tt.value, tt.n, l, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if len(err.Error()) > 300 {
				t.Errorf("error of %d bytes: %.100q…", len(err.Error()), err)
			}
		})
	}
}

func FuzzParseLinks(f *testing.F) {
	f.Add("SYS;NV1=0-1;NV2=0+2", uint16(3))
	f.Add("SYS;NODE=0-3,4-7;PIX=0-1,2-3,4-5,6-7", uint16(8))
	f.Add("PIX;SYS=0-4;NV2=1+3,0-1;PHB=1-2+4", uint16(5))
	f.Add("SYS;NV1=0-3,2+6,3+7,4-7;NV2=0+3,0+4,1-2,1+5,2-3,4+7,5-6,6-7", uint16(8))
	f.Add("", uint16(1))
	f.Add("NV18", uint16(64))
	f.Fuzz(func(t *testing.T, value string, n16 uint16) {
		n := int(n16 % 80)
		l, err := ParseLinks(value, n)
		if err != nil {
			if !errors.Is(err, ErrInvalidLinks) || l != nil {
				t.Fatalf("ParseLinks(%q, %d) = %v, %v", value, n, l, err)
			}
			return
		}
		// The plugin's encoding of the decoded labels decodes to the same.
		again := encodeLinks(n, func(p, q int) rank { return l.rank[p*n+q] })
		back, err := ParseLinks(again, n)
		if err != nil {
			t.Fatalf("re-encoded %q as %q: %v", value, again, err)
		}
		for p := range n {
			for q := range n {
				if back.Label(p, q) != l.Label(p, q) {
					t.Fatalf("%q re-encoded as %q: pair %d,%d is %s, was %s", value, again, p, q, back.Label(p, q), l.Label(p, q))
				}
			}
		}
	})
}

// BenchmarkContainerEnv measures the encoding of an Allocate of every GPU of
// the generic layout.
func BenchmarkContainerEnv(b *testing.B) {
	for _, n := range []int{8, 128, MaxGPUs} {
		b.Run(itoa(n), func(b *testing.B) {
			m, err := Generic(n)
			if err != nil {
				b.Fatal(err)
			}
			idx := allIndices(n)
			for b.Loop() {
				m.ContainerEnv(idx)
			}
		})
	}
}

func BenchmarkParseLinks(b *testing.B) {
	m, err := Generic(MaxGPUs)
	if err != nil {
		b.Fatal(err)
	}
	value := m.ContainerEnv(allIndices(MaxGPUs))[EnvLinks]
	for b.Loop() {
		if _, err := ParseLinks(value, MaxGPUs); err != nil {
			b.Fatal(err)
		}
	}
}
