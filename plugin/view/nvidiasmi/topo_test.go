package nvidiasmi_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// roundTripMachines are every preset and every machine in topology/testdata.
func roundTripMachines(t *testing.T) map[string]*topology.Machine {
	t.Helper()
	ms := make(map[string]*topology.Machine)
	for _, name := range topology.PresetNames() {
		ms["preset "+name] = mustPreset(t, name)
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "topology", "testdata", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		m, err := topology.Resolve(path, 0, false)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ms["file "+filepath.Base(path)] = m
	}
	if len(ms) < len(topology.PresetNames())+20 {
		t.Fatalf("found %d machines: is topology/testdata missing?", len(ms))
	}
	return ms
}

// TestTopo_RoundTrip runs `nvidia-smi topo -m` in containers that got random
// sets of GPUs of every preset and every machine of topology/testdata, and
// reads the output back with topology.ParseNvidiaSMI: the parsed matrix must
// have the container's GPUs, the machine's labels between them, and their
// NUMA nodes and CPU affinities.
func TestTopo_RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for name, m := range roundTripMachines(t) {
		var sets [][]int
		all := make([]int, m.Len())
		for i := range all {
			all[i] = i
		}
		if m.Len() <= 32 {
			sets = append(sets, all)
		}
		for range 4 {
			k := 1 + rng.IntN(min(m.Len(), 12))
			perm := rng.Perm(m.Len())
			sets = append(sets, perm[:k])
		}
		for _, set := range sets {
			f := newQuickFixture(t, m, set)
			idx := slices.Sorted(slices.Values(set))
			out, code := f.run(t, "topo", "-m")
			if code != 0 {
				t.Fatalf("%s GPUs %v: exit %d: %s", name, idx, code, out)
			}
			parsed, err := topology.ParseNvidiaSMI("container", strings.NewReader(out))
			if err != nil {
				t.Fatalf("%s GPUs %v: the project's parser refuses the output: %v\n%s", name, idx, err, out)
			}
			if parsed.Len() != len(idx) {
				t.Fatalf("%s GPUs %v: parsed %d GPUs", name, idx, parsed.Len())
			}
			for p, i := range idx {
				if parsed.NUMA(p) != m.NUMA(i) || parsed.CPUAffinity(p) != m.CPUAffinity(i) {
					t.Errorf("%s GPUs %v: GPU%d has NUMA %d CPUs %q, want %d %q", name, idx, p, parsed.NUMA(p), parsed.CPUAffinity(p), m.NUMA(i), m.CPUAffinity(i))
				}
				for q, j := range idx {
					if p == q {
						continue
					}
					if got, want := parsed.Link(p, q).String(), m.Link(i, j).String(); got != want {
						t.Errorf("%s GPUs %v: GPU%d-GPU%d is %s, want %s (GPUs %d-%d)", name, idx, p, q, got, want, i, j)
					}
				}
			}
		}
	}
}

// TestWriteMatrix_Labels checks the renderer directly: the labels of a
// VIRTUAL_GPU_LINKS value, N/A for missing affinities, and nothing for no
// positions.
func TestWriteMatrix_Labels(t *testing.T) {
	l, err := topology.ParseLinks("SYS;PIX=0-1;NV4=1+2", 3)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := l.WriteMatrix(&b, []string{"0-7"}, []int{0, -1}); err != nil {
		t.Fatal(err)
	}
	want := "\t\x1b[4mGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n" +
		"GPU0\t X \tPIX\tSYS\t0-7\t0\t\tN/A\n" +
		"GPU1\tPIX\t X \tNV4\tN/A\tN/A\t\tN/A\n" +
		"GPU2\tSYS\tNV4\t X \tN/A\tN/A\t\tN/A\n" +
		"\nLegend:\n"
	if !strings.HasPrefix(b.String(), want) {
		t.Errorf("WriteMatrix:\n%q\nwant prefix\n%q", b.String(), want)
	}
	empty, err := topology.ParseLinks("", 0)
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := empty.WriteMatrix(&b, nil, nil); err != nil || b.Len() != 0 {
		t.Errorf("WriteMatrix of no positions: %q, %v", b.String(), err)
	}
	if err := l.WriteMatrix(failingWriter{}, nil, nil); err == nil {
		t.Error("WriteMatrix to a failing writer: no error")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }
