package cdi_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
)

func mustWriter(t testing.TB, dir string) *cdi.Writer {
	t.Helper()
	w, err := cdi.NewWriter(dir, cdi.DefaultKind, cdi.Owner{ID: testOwner})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// testOwner owns the specs mustWriter's Writers write.
const testOwner = "/var/lib/virtual-gpu/state.db"

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
	if names := dirNames(t, dir); !slices.Equal(names, []string{cdi.DefaultKind.SpecFileName()}) {
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
	if got := cache.ListVendors(); !slices.Equal(got, []string{cdi.DefaultKind.Vendor}) {
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
			if _, err := cdi.NewWriter(tc.dir, cdi.DefaultKind, cdi.Owner{ID: testOwner}); !errors.Is(err, tc.is) {
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
	var want [2][]byte // the file as each config writes it
	for i, c := range []cdi.Config{cfgB, cfgA} {
		if err := w.Write(c); err != nil {
			t.Fatal(err)
		}
		want[1-i] = readFile(t, w.Path())
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
	if names := dirNames(t, w.Dir()); !slices.Equal(names, []string{cdi.DefaultKind.SpecFileName()}) {
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
	if names := dirNames(t, w.Dir()); !slices.Equal(names, []string{cdi.DefaultKind.SpecFileName()}) {
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
	if names := dirNames(t, w.Dir()); !slices.Equal(names, []string{cdi.DefaultKind.SpecFileName()}) {
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
	want := []string{"nvidia.com-gpu.yaml", cdi.DefaultKind.SpecFileName()}
	if names := dirNames(t, dir); !slices.Equal(names, want) {
		t.Errorf("spec dir holds %q, want %q", names, want)
	}
}

func TestNewWriter_KindAndOwner(t *testing.T) {
	dir := t.TempDir()
	if _, err := cdi.NewWriter(dir, cdi.Kind{Vendor: "3dfx.com", Class: "gpu"}, cdi.Owner{ID: testOwner}); !errors.Is(err, cdi.ErrInvalidKind) {
		t.Errorf("invalid kind: %v, want ErrInvalidKind", err)
	}
	if _, err := cdi.NewWriter(dir, cdi.DefaultKind, cdi.Owner{}); !errors.Is(err, cdi.ErrInvalidConfig) {
		t.Errorf("no owner: %v, want ErrInvalidConfig", err)
	}
	w, err := cdi.NewWriter(dir, cdi.Kind{}, cdi.Owner{ID: testOwner})
	if err != nil || w.Kind() != cdi.DefaultKind {
		t.Fatalf("zero kind: %v, %v; want DefaultKind", w.Kind(), err)
	}
	cfg := mustConfig(t, 1)
	cfg.Kind = cdi.Kind{Vendor: "example.com", Class: "vgpu"}
	if err := w.Write(cfg); !errors.Is(err, cdi.ErrInvalidConfig) || !strings.Contains(err.Error(), "example.com/vgpu") {
		t.Errorf("config of another kind: %v, want ErrInvalidConfig naming it", err)
	}
}

// The file names its owner in a comment the CDI library skips: the spec
// stays at the lowest cdiVersion its content needs.
func TestWriter_OwnerMark(t *testing.T) {
	w := mustWriter(t, t.TempDir())
	if err := w.Write(mustConfig(t, 1)); err != nil {
		t.Fatal(err)
	}
	b := readFile(t, w.Path())
	if want := "# owner: \"" + testOwner + "\"\n"; !bytes.Contains(b, []byte(want)) || !bytes.HasPrefix(b, []byte("# ")) {
		t.Errorf("spec file does not start with the owner mark %q:\n%s", want, b)
	}
	spec, err := cdilib.ReadSpec(w.Path(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Version != "0.5.0" || len(spec.Annotations) != 0 {
		t.Errorf("version %q annotations %v: the mark must not raise the version", spec.Version, spec.Annotations)
	}
}

// Two instances with one spec directory and one kind: the second never
// replaces the first's spec; it fails naming the file and its owner. The
// first keeps replacing its own.
func TestWriter_RefusesAnotherOwnersSpec(t *testing.T) {
	dir := t.TempDir()
	first := mustWriter(t, dir)
	if err := first.Write(mustConfig(t, 2)); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, first.Path())
	second, err := cdi.NewWriter(dir, cdi.DefaultKind, cdi.Owner{ID: "/srv/other/state.db", Adopt: func(*specs.Spec) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	err = second.Write(mustConfig(t, 1))
	if !errors.Is(err, cdi.ErrForeignSpec) || !strings.Contains(err.Error(), first.Path()) || !strings.Contains(err.Error(), testOwner) {
		t.Fatalf("second owner's Write = %v, want ErrForeignSpec naming %s and its owner %s", err, first.Path(), testOwner)
	}
	if !bytes.Equal(readFile(t, first.Path()), before) {
		t.Error("the refused write changed the first owner's spec")
	}
	if err := first.Write(mustConfig(t, 3)); err != nil {
		t.Errorf("the owner's own next write: %v", err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{cdi.DefaultKind.SpecFileName()}) {
		t.Errorf("spec dir holds %q, want only the spec", names)
	}
}

// A file without an owner mark is replaced only when the owner adopts it
// (a spec of its own earlier version); anything else is refused, untouched.
func TestWriter_UnmarkedSpec(t *testing.T) {
	cfg := mustConfig(t, 2)
	spec, err := cdi.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	unmarked, err := cdi.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ours := func(s *specs.Spec) bool { // mounts our status directory
		for _, m := range s.ContainerEdits.Mounts {
			if m.HostPath == cfg.Mounts[1].HostPath && m.ContainerPath == statusPath {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name    string
		content []byte
		adopt   func(*specs.Spec) bool
		naming  string // "" replaced
	}{
		{"adopted", unmarked, ours, ""},
		{"not adopted", unmarked, func(*specs.Spec) bool { return false }, `kind "unicore.mcyou.cc/gpu"`},
		{"no Adopt", unmarked, nil, "has no owner mark"},
		{"not a spec", []byte("{{{ not yaml"), ours, "not a CDI spec"},
		{"a bad mark", append([]byte("# owner: unquoted\n"), unmarked...), ours, "unreadable owner mark"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, cdi.DefaultKind.SpecFileName())
			if err := os.WriteFile(path, tc.content, 0o644); err != nil {
				t.Fatal(err)
			}
			w, err := cdi.NewWriter(dir, cdi.DefaultKind, cdi.Owner{ID: testOwner, Adopt: tc.adopt})
			if err != nil {
				t.Fatal(err)
			}
			err = w.Write(cfg)
			if tc.naming == "" {
				if err != nil {
					t.Fatalf("Write over an adopted spec: %v", err)
				}
				if b := readFile(t, path); !bytes.Contains(b, []byte("# owner: ")) {
					t.Errorf("the adopted spec was not replaced by a marked one:\n%s", b)
				}
				return
			}
			if !errors.Is(err, cdi.ErrForeignSpec) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.naming) {
				t.Fatalf("Write = %v, want ErrForeignSpec naming %s and %q", err, path, tc.naming)
			}
			if !bytes.Equal(readFile(t, path), tc.content) {
				t.Error("the refused write changed the file")
			}
		})
	}
}

// Two kinds in one directory: two files side by side, each Writer's
// temporary files its own.
func TestWriter_KindsSideBySide(t *testing.T) {
	dir := t.TempDir()
	a := mustWriter(t, dir)
	b, err := cdi.NewWriter(dir, cdi.Kind{Vendor: "example.com", Class: "vgpu"}, cdi.Owner{ID: "/srv/b/state.db"})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []*cdi.Writer{a, b} {
		if err := w.Write(mustConfig(t, 1)); err != nil {
			t.Fatal(err)
		}
	}
	leftA, leftB := filepath.Join(dir, ".unicore.mcyou.cc-gpu.tmp-1"), filepath.Join(dir, ".example.com-vgpu.tmp-1")
	for _, p := range []string{leftA, leftB} {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RemoveTemporaryFiles(); err != nil {
		t.Fatal(err)
	}
	want := []string{".example.com-vgpu.tmp-1", "example.com-vgpu.yaml", "unicore.mcyou.cc-gpu.yaml"}
	if names := dirNames(t, dir); !slices.Equal(names, want) {
		t.Errorf("spec dir holds %q, want %q", names, want)
	}
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(dir), cdilib.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the library's cache reports errors: %v", errs)
	}
	if got, want := cache.ListDevices(), []string{"example.com/vgpu=fake-0", "unicore.mcyou.cc/gpu=fake-0"}; !slices.Equal(got, want) {
		t.Errorf("devices %q, want %q", got, want)
	}
}
