package topology

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// MustPreset returns the preset called name or fails the test.
func MustPreset(t testing.TB, name string) *Machine {
	t.Helper()
	m, err := Preset(name)
	if err != nil {
		t.Fatalf("Preset(%q): %v", name, err)
	}
	return m
}

// MustParseFile parses testdata/<file> or fails the test.
func MustParseFile(t testing.TB, file string) *Machine {
	t.Helper()
	path := filepath.Join("testdata", file)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := Parse(path, f)
	if err != nil {
		t.Fatalf("Parse(%s): %v", path, err)
	}
	return m
}

// MustWriteFile writes content to a file in a fresh temporary directory and
// returns its path.
func MustWriteFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// matrix renders the GPU×GPU link labels of m as rows of space-separated
// cells, "X" on the diagonal, for compact comparisons.
func matrix(m *Machine) []string {
	rows := make([]string, m.Len())
	for i := range rows {
		cells := make([]string, m.Len())
		for j := range cells {
			if i == j {
				cells[j] = "X"
			} else {
				cells[j] = m.Link(i, j).String()
			}
		}
		rows[i] = strings.Join(cells, " ")
	}
	return rows
}

// checkMachine verifies the invariants every Machine must satisfy.
func checkMachine(t testing.TB, m *Machine) {
	t.Helper()
	n := m.Len()
	if n < 1 || n > MaxGPUs {
		t.Fatalf("Len() = %d", n)
	}
	for i := range n {
		if id := m.ID(i); id != "fake-"+itoa(i) {
			t.Fatalf("ID(%d) = %q", i, id)
		}
		if j, ok := m.Index(m.ID(i)); !ok || j != i {
			t.Fatalf("Index(ID(%d)) = %d, %v", i, j, ok)
		}
		if m.NUMA(i) < -1 {
			t.Fatalf("NUMA(%d) = %d", i, m.NUMA(i))
		}
		if c := m.Class(i); c < 0 || c > i || m.Class(c) != c {
			t.Fatalf("Class(%d) = %d", i, c)
		}
		for j := range n {
			a, b := m.Link(i, j), m.Link(j, i)
			if a != b || a.NVLinks < 0 || a.NVLinks > MaxNVLinks || a.PCIe > BOARD {
				t.Fatalf("Link(%d,%d) = %v, Link(%d,%d) = %v", i, j, a, j, i, b)
			}
		}
	}
	if field, msg := m.GPUModel().check(); field != "" {
		t.Fatalf("GPUModel() = %+v: %s", m.GPUModel(), msg)
	}
	checkIdentity(t, m)
}

func itoa(i int) string { return strconv.Itoa(i) }

// checkParseError verifies that err is a *ParseError for file, unwrapping to
// ErrInvalidTopology, with a non-empty message.
// parseError runs parse on in as the file named file and returns its
// error, which must be a *ParseError (checkParseError).
func parseError(t testing.TB, parse func(string, io.Reader) (*Machine, error), file, in string) *ParseError {
	t.Helper()
	_, err := parse(file, strings.NewReader(in))
	if err == nil {
		t.Fatal("no error")
	}
	return checkParseError(t, err, file)
}

func checkParseError(t testing.TB, err error, file string) *ParseError {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *ParseError", err, err)
	}
	if !errors.Is(err, ErrInvalidTopology) {
		t.Fatalf("error %v does not unwrap to ErrInvalidTopology", err)
	}
	if pe.File != file || pe.Msg == "" || !strings.HasPrefix(err.Error(), file) {
		t.Fatalf("error %q: want it to start with %q and say what was expected", err, file)
	}
	return pe
}
