package nvidiasmi_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// testPod is the host name of every run in the tests: the pod's name.
const testPod = "trainer-0"

// testProc is the /proc of every run in the tests: the container's main
// process is python3.
var testProc = fstest.MapFS{
	"1/cmdline": {Data: []byte("/usr/bin/python3\x00train.py\x00--epochs=3\x00")},
	"1/comm":    {Data: []byte("python3\n")},
}

// testTime is the clock of every run in the tests.
var testTime = time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)

// fixture is a container that got some GPUs of a machine: its environment
// as the plugin sets it and a status directory with their files.
type fixture struct {
	m    *topology.Machine
	dir  string
	env  map[string]string
	gpus []*status.GPU // status of each position
}

// newFixture gives a container the GPUs indices of machine m, as the plugin
// does: sorted by index, VIRTUAL_GPU_IDS, VIRTUAL_GPU_UUIDS, the topology
// variables (Machine.ContainerEnv) and VIRTUAL_GPU_STATUS_DIR, with a status
// file per GPU written by a status.Writer. mutate, if not nil, changes each
// status before it is written.
func newFixture(t testing.TB, m *topology.Machine, indices []int, mutate func(pos int, g *status.GPU)) *fixture {
	t.Helper()
	return makeFixture(t, m, indices, mutate, true)
}

// newQuickFixture is newFixture with the status files written without the
// Writer's fsyncs, for tests that build hundreds of containers.
func newQuickFixture(t testing.TB, m *topology.Machine, indices []int) *fixture {
	t.Helper()
	return makeFixture(t, m, indices, nil, false)
}

func makeFixture(t testing.TB, m *topology.Machine, indices []int, mutate func(pos int, g *status.GPU), useWriter bool) *fixture {
	t.Helper()
	indices = slices.Sorted(slices.Values(indices))
	dir := filepath.Join(t.TempDir(), "virtual-gpu")
	f := &fixture{m: m, dir: dir, env: m.ContainerEnv(indices)}
	var ids, uuids []string
	for pos, i := range indices {
		g, err := status.NewGPU(m, i, "node-a", testTime)
		if err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(pos, g)
		}
		f.gpus = append(f.gpus, g)
		ids = append(ids, g.ID)
		uuids = append(uuids, g.UUID)
	}
	if useWriter {
		w, err := status.NewWriter(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(f.gpus); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, g := range f.gpus {
			data, err := status.Marshal(g)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, status.FileName(g.UUID)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.env[nvidiasmi.EnvIDs] = strings.Join(ids, ",")
	f.env[status.EnvUUIDs] = strings.Join(uuids, ",")
	f.env[status.EnvStatusDir] = dir
	return f
}

// mustPreset returns a built-in machine.
func mustPreset(t testing.TB, name string) *topology.Machine {
	t.Helper()
	m, err := topology.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// run runs nvidia-smi with args in the fixture's environment.
func (f *fixture) run(t testing.TB, args ...string) (string, int) {
	t.Helper()
	return runEnv(t, f.env, args...)
}

func runEnv(t testing.TB, env map[string]string, args ...string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := &nvidiasmi.Command{
		Env:      func(k string) string { return env[k] },
		Stdout:   &stdout,
		Stderr:   &stderr,
		Now:      func() time.Time { return testTime },
		Hostname: func() (string, error) { return testPod, nil },
		Proc:     testProc,
	}
	code := c.Run(args)
	if stderr.Len() > 0 {
		t.Errorf("nvidia-smi %s wrote to stderr: %q", strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), code
}

// golden compares got with testdata/<name>.golden, rewriting it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update to accept):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}
