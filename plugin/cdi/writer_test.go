package cdi_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/cdi"
)

func mustWriter(t testing.TB, dir string) *cdi.Writer {
	t.Helper()
	w, err := cdi.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func inode(t testing.TB, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestWriter_WritesASpecTheLibraryLoads(t *testing.T) {
	old := syscall.Umask(0o077) // the plugin may run with a strict umask
	t.Cleanup(func() { syscall.Umask(old) })
	dir := filepath.Join(t.TempDir(), "var", "run", "cdi")
	w := mustWriter(t, dir)
	if w.Dir() != dir || w.Path() != filepath.Join(dir, "unicore.mcyou.cc-gpu.yaml") {
		t.Errorf("Dir %q Path %q", w.Dir(), w.Path())
	}
	if err := w.Write(mustConfig(t, 2)); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]fs.FileMode{dir: cdi.DirMode, w.Path(): cdi.FileMode} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{cdi.SpecFileName}) {
		t.Errorf("spec dir holds %q, want only the spec", names)
	}
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(dir), cdilib.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the library's cache reports errors: %v", errs)
	}
	want := []string{"unicore.mcyou.cc/gpu=fake-0", "unicore.mcyou.cc/gpu=fake-1"}
	if got := cache.ListDevices(); !slices.Equal(got, want) {
		t.Errorf("the library's cache lists %q, want %q", got, want)
	}
	if got := cache.ListVendors(); !slices.Equal(got, []string{cdi.Vendor}) {
		t.Errorf("vendors %q", got)
	}
}

func TestWriter_ExistingDirKeepsItsMode(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	mustWriter(t, dir)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o711 {
		t.Errorf("mode %v, want the directory's own 0711", fi.Mode().Perm())
	}
}

func TestNewWriter_Errors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		is        error
	}{
		{"empty", "", cdi.ErrInvalidConfig},
		{"relative", "var/run/cdi", cdi.ErrInvalidConfig},
		{"a file", file, syscall.ENOTDIR},
		{"below a file", filepath.Join(file, "cdi"), syscall.ENOTDIR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := cdi.NewWriter(tc.dir); !errors.Is(err, tc.is) {
				t.Errorf("NewWriter(%q) error %v, want %v", tc.dir, err, tc.is)
			}
		})
	}
}

func TestWriter_SameContentLeavesTheFileAlone(t *testing.T) {
	w := mustWriter(t, t.TempDir())
	cfg := mustConfig(t, 2)
	if err := w.Write(cfg); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, w.Path())
	if err := w.Write(cfg); err != nil {
		t.Fatal(err)
	}
	if inode(t, w.Path()) != ino {
		t.Error("writing the same spec again replaced the file (a watching runtime reloads it for nothing)")
	}
	cfg.GPUs = cfg.GPUs[:1]
	if err := w.Write(cfg); err != nil {
		t.Fatal(err)
	}
	if inode(t, w.Path()) == ino {
		t.Error("a changed spec was written in place, not through a new file renamed over it")
	}
}

func TestWriter_AtomicReplace(t *testing.T) {
	w := mustWriter(t, t.TempDir())
	cfgA, cfgB := mustConfig(t, 1), mustConfig(t, 8)
	var want [2][]byte
	for i, c := range []cdi.Config{cfgA, cfgB} {
		spec, err := cdi.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		if want[i], err = cdi.Marshal(spec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(cfgA); err != nil {
		t.Fatal(err)
	}
	const writes = 50
	var stop atomic.Bool
	var reads, torn atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				b, err := os.ReadFile(w.Path())
				reads.Add(1)
				if err != nil || (!bytes.Equal(b, want[0]) && !bytes.Equal(b, want[1])) {
					torn.Add(1)
				}
			}
		}()
	}
	for i := range writes {
		if err := w.Write([]cdi.Config{cfgA, cfgB}[i%2]); err != nil {
			t.Error(err)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	if torn.Load() > 0 {
		t.Errorf("%d of %d reads saw a missing or partial spec", torn.Load(), reads.Load())
	}
	if names := dirNames(t, w.Dir()); !slices.Equal(names, []string{cdi.SpecFileName}) {
		t.Errorf("spec dir holds %q after %d writes, want only the spec", names, writes)
	}
}

func TestWriter_FailedWriteKeepsThePreviousSpec(t *testing.T) {
	w := mustWriter(t, t.TempDir())
	cfg := mustConfig(t, 2)
	if err := w.Write(cfg); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, w.Path())
	cfg.GPUs = append(cfg.GPUs, cdi.GPU{ID: "fake-2", Minor: 2, HostNode: filepath.Join(t.TempDir(), "gone")})
	err := w.Write(cfg)
	if !errors.Is(err, cdi.ErrDeviceNode) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Write with a missing host node: %v, want ErrDeviceNode and fs.ErrNotExist", err)
	}
	if !bytes.Equal(readFile(t, w.Path()), before) {
		t.Error("a refused write changed the spec")
	}
	if names := dirNames(t, w.Dir()); !slices.Equal(names, []string{cdi.SpecFileName}) {
		t.Errorf("spec dir holds %q, want only the spec", names)
	}
}

func TestWriter_ConcurrentWriters(t *testing.T) {
	w := mustWriter(t, t.TempDir())
	cfgs := []cdi.Config{mustConfig(t, 1), mustConfig(t, 2), mustConfig(t, 3)}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Write(cfgs[i%3]); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := cdilib.ReadSpec(w.Path(), 0); err != nil {
		t.Errorf("after concurrent writes the library refuses the spec: %v", err)
	}
	if names := dirNames(t, w.Dir()); !slices.Equal(names, []string{cdi.SpecFileName}) {
		t.Errorf("spec dir holds %q, want only the spec", names)
	}
}

func TestWriter_RemoveTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	w := mustWriter(t, dir)
	if err := w.Write(mustConfig(t, 1)); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(dir, ".unicore.mcyou.cc-gpu.tmp-123")
	other := filepath.Join(dir, "nvidia.com-gpu.yaml") // another vendor's spec
	for _, p := range []string{leftover, other} {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.RemoveTemporaryFiles(); err != nil {
		t.Fatal(err)
	}
	want := []string{"nvidia.com-gpu.yaml", cdi.SpecFileName}
	if names := dirNames(t, dir); !slices.Equal(names, want) {
		t.Errorf("spec dir holds %q, want %q", names, want)
	}
}
