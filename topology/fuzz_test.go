package topology

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// addSeeds adds every testdata file whose name ends with suffix.
func addSeeds(f *testing.F, pattern string) {
	files, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// checkParsed verifies a successful parse: a valid machine that survives a
// round trip through the nvidia-smi format. Machines above 64 GPUs skip the
// round trip to keep each fuzz execution fast.
func checkParsed(t *testing.T, m *Machine) {
	t.Helper()
	checkMachine(t, m)
	if m.Len() > 64 {
		return
	}
	var buf bytes.Buffer
	if err := m.WriteMatrix(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := ParseNvidiaSMI("roundtrip.txt", &buf)
	if err != nil {
		t.Fatalf("round trip: %v\n%s", err, buf.String())
	}
	if back.Len() != m.Len() {
		t.Fatalf("round trip: %d GPUs, want %d", back.Len(), m.Len())
	}
	all := make([]int, m.Len())
	for i := range all {
		all[i] = i
	}
	_ = m.ContainerEnv(all)
}

func FuzzParseYAML(f *testing.F) {
	for _, name := range PresetNames() {
		src, _ := PresetSource(name)
		f.Add(src)
	}
	addSeeds(f, "*.yaml")
	f.Add([]byte(header + "numaNodes:\n  - count: 2\n    hostBridges: [{switches: [{count: 2, gpus: 2, board: true}]}]\nnvlinks:\n  - pairs: [[0, 1]]\n    links: 2\n    repeat: 2\n    stride: 4\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseYAML("fuzz.yaml", bytes.NewReader(data))
		if err != nil {
			checkParseError(t, err, "fuzz.yaml")
			return
		}
		checkParsed(t, m)
	})
}

func FuzzParseNvidiaSMI(f *testing.F) {
	addSeeds(f, "*.txt")
	for _, name := range PresetNames() {
		var buf bytes.Buffer
		if err := MustPreset(f, name).WriteMatrix(&buf); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte("GPU0 GPU1 CPU Affinity\nGPU0 X NV1 0-3\nGPU1 NV1 X 4-7\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseNvidiaSMI("fuzz.txt", bytes.NewReader(data))
		if err != nil {
			checkParseError(t, err, "fuzz.txt")
			if strings.TrimSpace(err.Error()) == "fuzz.txt:" {
				t.Fatalf("error without a message: %q", err)
			}
			return
		}
		checkParsed(t, m)
	})
}

// FuzzParse checks format detection: Parse fails only with a *ParseError,
// and reads whatever ParseNvidiaSMI reads, to the same machine, unless the
// text is a YAML topology (it has a top-level apiVersion or kind key).
func FuzzParse(f *testing.F) {
	addSeeds(f, "*")
	f.Add([]byte("Python: 3.12.3\n\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n"))
	f.Add([]byte("GPU0 <-> GPU1:\n\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-63\nGPU1\tPHB\t X \t0-63\n"))
	f.Add([]byte("name: x\nGPU0 GPU1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse("fuzz.txt", bytes.NewReader(data))
		if err != nil {
			checkParseError(t, err, "fuzz.txt")
		}
		smi, smiErr := ParseNvidiaSMI("fuzz.txt", bytes.NewReader(data))
		if smiErr != nil {
			return
		}
		lines, _ := textLines(data)
		if slices.ContainsFunc(lines, yamlIdentityRE.MatchString) {
			return
		}
		if err != nil {
			t.Fatalf("ParseNvidiaSMI reads it but Parse fails: %v", err)
		}
		if !slices.Equal(matrix(m), matrix(smi)) || !slices.Equal(m.NUMANodes(), smi.NUMANodes()) {
			t.Fatalf("Parse and ParseNvidiaSMI read different machines")
		}
	})
}
