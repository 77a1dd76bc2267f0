package status_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

func mustWriter(t *testing.T, dir string) *status.Writer {
	t.Helper()
	w, err := status.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func TestWriter_Modes(t *testing.T) {
	old := syscall.Umask(0o077) // the plugin may run with a strict umask
	t.Cleanup(func() { syscall.Umask(old) })
	dir := filepath.Join(t.TempDir(), "run", "virtual-gpu")
	w := mustWriter(t, dir)
	if w.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", w.Dir(), dir)
	}
	g := mustGPU(t, "hgx-h100", 0)
	if err := w.Write(g); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]fs.FileMode{dir: status.DirMode, filepath.Join(dir, status.FileName(g.UUID)): status.FileMode} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
	if got := listDir(t, dir); len(got) != 1 || got[0] != g.UUID+".json" {
		t.Errorf("directory holds %v, want only %s.json", got, g.UUID)
	}
}

func TestNewWriter_Refuses(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"", file} {
		if _, err := status.NewWriter(dir); err == nil {
			t.Errorf("NewWriter(%q) succeeded, want an error", dir)
		}
	}
}

func TestWriter_WriteReplacesAndReads(t *testing.T) {
	dir := t.TempDir()
	w := mustWriter(t, dir)
	g := mustGPU(t, "dgx-a100", 4)
	if err := w.Write(g); err != nil {
		t.Fatal(err)
	}
	g.Telemetry.UtilizationGPUPercent = 87
	g.Health = status.Health{Healthy: false, Reason: "XID 79: GPU has fallen off the bus", Since: testTime}
	if err := w.Write(g); err != nil {
		t.Fatal(err)
	}
	got, err := status.Read(os.DirFS(dir), g.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Telemetry.UtilizationGPUPercent != 87 || got.Health.Healthy || got.Health.Reason != g.Health.Reason {
		t.Errorf("read back %+v %+v, want the second write", got.Telemetry, got.Health)
	}
	// An invalid status leaves the previous file as it was.
	bad := *g
	bad.Telemetry.UtilizationGPUPercent = 150
	if err := w.Write(&bad); !errors.Is(err, status.ErrInvalidStatus) {
		t.Fatalf("Write invalid: %v, want ErrInvalidStatus", err)
	}
	if got, err := status.Read(os.DirFS(dir), g.UUID); err != nil || got.Telemetry.UtilizationGPUPercent != 87 {
		t.Errorf("after a refused write: %+v, %v; want the previous file", got, err)
	}
	if names := listDir(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want one file (no temporary file left)", names)
	}
}

// TestWriter_AtomicReplace has readers read a file while the writer replaces
// it many times: every read must see a whole, valid document.
func TestWriter_AtomicReplace(t *testing.T) {
	testAtomicReplace(t, (*status.Writer).Write)
}

func testAtomicReplace(t *testing.T, write func(*status.Writer, *status.GPU) error) {
	dir := t.TempDir()
	w := mustWriter(t, dir)
	g := mustGPU(t, "hgx-h100", 2)
	if err := w.Write(g); err != nil {
		t.Fatal(err)
	}
	const writes = 40
	var done atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fsys := os.DirFS(dir)
			for !done.Load() {
				got, err := status.Read(fsys, g.UUID)
				if err != nil {
					errs <- err
					return
				}
				if u := got.Telemetry.UtilizationGPUPercent; u < 0 || u > 100 {
					errs <- errors.New("utilization out of range")
					return
				}
				reads.Add(1)
			}
		}()
	}
	for i := range writes {
		next := *g
		next.Telemetry.UtilizationGPUPercent = i % 101
		next.Product = []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3 with a much longer name to change the file size"}[i%2]
		if err := write(w, &next); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a reader saw a partial or missing file: %v", err)
	}
	if reads.Load() == 0 {
		t.Error("no read completed")
	}
}

func TestWriter_SyncPrunes(t *testing.T) {
	dir := t.TempDir()
	w := mustWriter(t, dir)
	a, b, c := mustGPU(t, "pcie-8gpu", 0), mustGPU(t, "pcie-8gpu", 1), mustGPU(t, "pcie-8gpu", 2)
	if err := w.Sync([]*status.GPU{a, b, c}); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "README")
	leftover := filepath.Join(dir, ".tmp-"+a.UUID+"-123")
	for _, p := range []string{foreign, leftover} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync([]*status.GPU{a, c}); err != nil {
		t.Fatal(err)
	}
	want := []string{a.UUID + ".json", c.UUID + ".json", "README"}
	sort.Strings(want)
	if got := listDir(t, dir); !equal(got, want) {
		t.Errorf("after Sync(a, c): %v, want %v", got, want)
	}
	if err := w.Sync([]*status.GPU{a, a}); !errors.Is(err, status.ErrInvalidStatus) {
		t.Errorf("Sync with a duplicate: %v, want ErrInvalidStatus", err)
	}
	bad := *c
	bad.UUID = "GPU-x"
	if err := w.Sync([]*status.GPU{a, &bad}); !errors.Is(err, status.ErrInvalidStatus) {
		t.Errorf("Sync with an invalid GPU: %v, want ErrInvalidStatus", err)
	}
	if got := listDir(t, dir); !equal(got, want) {
		t.Errorf("a refused Sync changed the directory: %v, want %v", got, want)
	}
	if err := w.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, dir); !equal(got, []string{"README"}) {
		t.Errorf("after Sync(nil): %v, want only README", got)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
