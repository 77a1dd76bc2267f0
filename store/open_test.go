package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

const hint = "start with -state-move-aside to move it aside and start fresh"

func TestOpen_CreatesDirAndFile_Perms(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "var", "lib", "vgpu")
	path := filepath.Join(dir, "state.db")
	storetest.MustOpenPath(t, path, store.Options{})

	for _, tc := range []struct {
		path string
		want fs.FileMode
	}{
		{dir, 0o700 | fs.ModeDir},
		{filepath.Dir(dir), 0o700 | fs.ModeDir},
		{path, 0o600},
	} {
		fi, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != tc.want {
			t.Errorf("%s: mode %v, want %v", tc.path, fi.Mode(), tc.want)
		}
	}
}

func TestOpen_ReadOnly_MissingFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	path := filepath.Join(dir, "state.db")
	_, err := store.Open(path, store.Options{ReadOnly: true})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the file", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only open created the directory (stat: %v)", err)
	}
}

func TestOpen_ReadOnly_NeverWrites(t *testing.T) {
	s, _ := mustDevices(t, 2)
	mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}})
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := fileHash(t, path)

	ro := storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})
	if !ro.ReadOnly() {
		t.Error("ReadOnly() = false")
	}
	if devs, err := ro.Devices(); err != nil || len(devs) != 2 {
		t.Errorf("Devices() = %d devices, %v; want 2", len(devs), err)
	}
	// A second reader shares the lock.
	storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})

	writes := map[string]func() error{
		"Reconcile": func() error { _, err := ro.Reconcile(specs(1)); return err },
		"SetHealth": func() error { _, _, err := ro.SetHealth("fake-0", false, "x", store.CauseAdmin); return err },
		"RecordAllocation": func() error {
			_, err := ro.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}})
			return err
		},
		"UpdateAllocation": func() error {
			_, err := ro.UpdateAllocation(1, func(*store.Allocation) error { return nil })
			return err
		},
		"Prune": func() error { _, err := ro.Prune(t.Context(), store.PruneOptions{MaxRecords: 1}); return err },
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, store.ErrReadOnly) {
			t.Errorf("%s on read-only store: err = %v, want ErrReadOnly", name, err)
		}
	}
	if err := ro.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
	if got := fileHash(t, path); got != before {
		t.Error("read-only store changed the file")
	}
}

func TestOpen_Locked(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, second bool // ReadOnly
		wantLocked    bool
	}{
		{"writer then writer", false, false, true},
		{"writer then reader", false, true, true},
		{"reader then writer", true, false, true},
		{"reader then reader", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := newFile(t)
			first := storetest.MustOpenPath(t, path, store.Options{ReadOnly: tc.first})

			const timeout = 100 * time.Millisecond
			start := time.Now()
			second, err := store.Open(path, store.Options{ReadOnly: tc.second, Timeout: timeout})
			elapsed := time.Since(start)
			if !tc.wantLocked {
				if err != nil {
					t.Fatalf("second open: %v", err)
				}
				_ = second.Close()
				return
			}
			if !errors.Is(err, store.ErrLocked) || !errors.Is(err, berrors.ErrTimeout) {
				t.Fatalf("second open: err = %v, want ErrLocked wrapping bbolt's ErrTimeout", err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "another process") {
				t.Errorf("error %q should name the file and say another process holds it", err)
			}
			if elapsed < timeout/2 || elapsed > 20*time.Second { // waited, and not forever (loose: a loaded machine is slow)
				t.Errorf("gave up after %v, want about %v", elapsed, timeout)
			}
			// The first store is unaffected.
			if _, err := first.Devices(); err != nil {
				t.Errorf("first store after failed second open: %v", err)
			}
		})
	}
}

// newFile creates a valid, closed state file and returns its path.
func newFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOpen_DefaultTimeout(t *testing.T) {
	path := newFile(t)
	storetest.MustOpenPath(t, path, store.Options{})
	start := time.Now()
	_, err := store.Open(path, store.Options{})
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("err = %v, want ErrLocked", err)
	}
	// It waited for the lock (at least about the timeout) and gave up (not
	// forever); the upper bound is loose, a loaded machine is slow.
	if d := time.Since(start); d < store.DefaultTimeout/2 || d > 20*store.DefaultTimeout {
		t.Errorf("gave up after %v, want after about %v", d, store.DefaultTimeout)
	}
}

func TestStore_Closed(t *testing.T) {
	s, _ := mustDevices(t, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Devices(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Devices after Close: err = %v, want ErrClosed", err)
	}
	if _, err := s.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("RecordAllocation after Close: err = %v, want ErrClosed", err)
	}
}

// fixture writes a state file with some history and returns its path, its
// bbolt page size and its high-water mark in bytes. The file is built once
// per test binary and copied.
func fixture(t testing.TB) (path string, pageSize int, dataSize int64) {
	t.Helper()
	fixtureOnce.Do(func() {
		dir, err := os.MkdirTemp("", "store-fixture-")
		if err != nil {
			fixtureOnce.err = err
			return
		}
		defer os.RemoveAll(dir)
		fixtureOnce.data, fixtureOnce.dataSize, fixtureOnce.err = buildFixture(filepath.Join(dir, "state.db"))
	})
	if fixtureOnce.err != nil {
		t.Fatalf("build fixture: %v", fixtureOnce.err)
	}
	path = filepath.Join(t.TempDir(), "state.db")
	write(t, path, fixtureOnce.data)
	return path, os.Getpagesize(), fixtureOnce.dataSize
}

var fixtureOnce struct {
	sync.Once
	data     []byte
	dataSize int64
	err      error
}

func buildFixture(path string) ([]byte, int64, error) {
	s, err := store.Open(path, store.Options{Now: newClock().Now})
	if err != nil {
		return nil, 0, err
	}
	defer s.Close()
	store.SetNoSyncForTest(s) // content, not durability, matters here
	devs := specs(8)
	if _, err := s.Reconcile(devs); err != nil {
		return nil, 0, err
	}
	for i := range 300 {
		id := devs[i%8].ID
		if _, err := s.RecordAllocation(store.Allocation{DeviceIDs: []string{id}, Envs: map[string]string{"VIRTUAL_GPU_IDS": id}}); err != nil {
			return nil, 0, err
		}
		if i%10 == 0 {
			if _, _, err := s.SetHealth(id, i%20 == 0, "flap", store.CauseFaultInjection); err != nil {
				return nil, 0, err
			}
		}
	}
	st, err := s.Stats()
	if err != nil {
		return nil, 0, err
	}
	if err := s.Close(); err != nil {
		return nil, 0, err
	}
	data, err := os.ReadFile(path)
	return data, st.DataSize, err
}

func TestOpen_Corrupt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, pageSize int, dataSize int64)
	}{
		{"random garbage", func(t *testing.T, path string, _ int, _ int64) {
			garbage := make([]byte, 64<<10)
			r := rand.NewChaCha8([32]byte{1})
			_, _ = r.Read(garbage)
			write(t, path, garbage)
		}},
		{"short garbage", func(t *testing.T, path string, _ int, _ int64) {
			write(t, path, []byte("definitely not a bbolt file"))
		}},
		{"truncated to half", func(t *testing.T, path string, _ int, dataSize int64) {
			fi, _ := os.Stat(path)
			half := fi.Size() / 2
			if half >= dataSize {
				t.Fatalf("fixture too small: half of %d bytes keeps all %d bytes of data", fi.Size(), dataSize)
			}
			if err := os.Truncate(path, half); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated to one page", func(t *testing.T, path string, pageSize int, _ int64) {
			if err := os.Truncate(path, int64(pageSize)); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated by one page", func(t *testing.T, path string, pageSize int, dataSize int64) {
			if err := os.Truncate(path, dataSize-int64(pageSize)); err != nil {
				t.Fatal(err)
			}
		}},
		{"meta page 0 zeroed", func(t *testing.T, path string, pageSize int, _ int64) {
			overwrite(t, path, 0, make([]byte, pageSize))
		}},
		{"meta page 1 zeroed", func(t *testing.T, path string, pageSize int, _ int64) {
			overwrite(t, path, int64(pageSize), make([]byte, pageSize))
		}},
		{"both meta pages zeroed", func(t *testing.T, path string, pageSize int, _ int64) {
			overwrite(t, path, 0, make([]byte, 2*pageSize))
		}},
		{"meta checksum flipped in both", func(t *testing.T, path string, pageSize int, _ int64) {
			for _, off := range []int64{0, int64(pageSize)} {
				flip(t, path, off+16+8) // inside the meta (after the page header)
			}
		}},
		{"root page garbage", func(t *testing.T, path string, pageSize int, dataSize int64) {
			// Overwrite every data page: whatever the layout, the live tree is hit.
			garbage := make([]byte, int(dataSize)-2*pageSize)
			r := rand.NewChaCha8([32]byte{2})
			_, _ = r.Read(garbage)
			overwrite(t, path, int64(2*pageSize), garbage)
		}},
	} {
		for _, readOnly := range []bool{false, true} {
			name := tc.name
			if readOnly {
				name += "/read-only"
			}
			t.Run(name, func(t *testing.T) {
				path, pageSize, dataSize := fixture(t)
				tc.damage(t, path, pageSize, dataSize)
				before := fileHash(t, path)

				s, err := store.Open(path, store.Options{ReadOnly: readOnly, RecoveryHint: hint})
				if err == nil {
					s.Close()
					t.Fatal("Open succeeded on a damaged file")
				}
				if !errors.Is(err, store.ErrCorrupt) {
					t.Fatalf("err = %v, want ErrCorrupt", err)
				}
				t.Log(err)
				if msg := err.Error(); !strings.Contains(msg, path) || !strings.HasSuffix(msg, hint) {
					t.Errorf("error %q should name the file and end with the hint", msg)
				}
				if fileHash(t, path) != before {
					t.Error("Open changed the damaged file")
				}
				// The failed Open released the file.
				if _, err := store.MoveAside(path, time.Now()); err != nil {
					t.Errorf("MoveAside after failed Open: %v", err)
				}
			})
		}
	}
}

// TestOpen_EveryPageDamaged overwrites each page of a fixture in turn: Open
// must either succeed with a consistent file (the page was free) or fail with
// ErrCorrupt, and never panic.
func TestOpen_EveryPageDamaged(t *testing.T) {
	path, pageSize, dataSize := fixture(t)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.NewChaCha8([32]byte{3})
	var ok, corrupt int
	for pg := 2; pg < int(dataSize)/pageSize; pg++ {
		for _, fill := range []string{"zero", "random"} {
			data := bytes.Clone(orig)
			page := data[pg*pageSize : (pg+1)*pageSize]
			if fill == "zero" {
				clear(page)
			} else {
				_, _ = r.Read(page)
			}
			write(t, path, data)
			s, err := store.Open(path, store.Options{ReadOnly: true})
			switch {
			case err == nil:
				ok++
				if _, err := s.Allocations(store.AllocationFilter{}); err != nil && !errors.Is(err, store.ErrCorrupt) {
					t.Errorf("page %d %s: Allocations: %v", pg, fill, err)
				}
				s.Close()
			case errors.Is(err, store.ErrCorrupt):
				corrupt++
			default:
				t.Errorf("page %d %s: err = %v, want nil or ErrCorrupt", pg, fill, err)
			}
		}
	}
	t.Logf("%d damaged files opened (free pages), %d refused as corrupt", ok, corrupt)
	if corrupt == 0 {
		t.Error("no damage detected at all")
	}
}

// TestOpen_OneMetaChecksumBad: bbolt keeps two meta pages and falls back to
// the other when one fails its checksum, as after a crash in the middle of a
// commit. That is not damage. (A zeroed meta page is: see TestOpen_Corrupt.)
func TestOpen_OneMetaChecksumBad(t *testing.T) {
	for _, page := range []int{0, 1} {
		path, pageSize, _ := fixture(t)
		flip(t, path, int64(page*pageSize)+16+8)
		s := storetest.MustOpenPath(t, path, store.Options{})
		devs, err := s.Devices()
		if err != nil || len(devs) != 8 {
			t.Errorf("meta page %d damaged: Devices() = %d, %v; want 8 devices", page, len(devs), err)
		}
	}
}

func TestOpen_EmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	write(t, path, nil)
	if _, err := store.Open(path, store.Options{ReadOnly: true}); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("read-only open of an empty file: err = %v, want ErrCorrupt", err)
	}
	// Read-write, an empty file is what touch, a hostPath volume of type File
	// or a crash right after creation leaves: it is initialised, and
	// FoundEmpty says so for the caller to warn about.
	s := storetest.MustOpenPath(t, path, store.Options{})
	if !s.FoundEmpty() {
		t.Error("FoundEmpty() = false after opening an empty file")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s := storetest.MustOpenPath(t, path, store.Options{}); s.FoundEmpty() {
		t.Error("FoundEmpty() = true for the file it initialised before")
	}
	if s := storetest.MustOpenPath(t, filepath.Join(t.TempDir(), "new.db"), store.Options{}); s.FoundEmpty() {
		t.Error("FoundEmpty() = true for a file Open created")
	}
}

func TestOpen_ForeignBboltFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("users"))
		if err != nil {
			return err
		}
		return b.Put([]byte("alice"), []byte("{}"))
	})
	before := fileHash(t, path)
	_, err := store.Open(path, store.Options{})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "not a state file") {
		t.Errorf("err = %v, want ErrCorrupt: not a state file", err)
	}
	if fileHash(t, path) != before {
		t.Error("Open changed a foreign file")
	}
}

func TestMoveAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	now := time.Date(2026, 3, 1, 12, 30, 45, 0, time.FixedZone("CET", 3600))
	want := path + ".corrupt-20260301T113045Z"

	var moved []string
	for i, content := range []string{"garbage one", "garbage two", "garbage three"} {
		write(t, path, []byte(content))
		if _, err := store.Open(path, store.Options{}); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("open: err = %v, want ErrCorrupt", err)
		}
		got, err := store.MoveAside(path, now)
		if err != nil {
			t.Fatal(err)
		}
		wantPath := want
		if i > 0 {
			wantPath = want + "-" + string(rune('0'+i))
		}
		if got != wantPath {
			t.Errorf("MoveAside #%d = %q, want %q", i, got, wantPath)
		}
		moved = append(moved, got)
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("old path still exists (stat: %v)", err)
		}
	}
	// Nothing was overwritten.
	for i, content := range []string{"garbage one", "garbage two", "garbage three"} {
		if data, err := os.ReadFile(moved[i]); err != nil || string(data) != content {
			t.Errorf("%s = %q, %v; want %q", moved[i], data, err, content)
		}
	}
	// And a fresh file starts at the old path.
	s := storetest.MustOpenPath(t, path, store.Options{})
	if st, err := s.Stats(); err != nil || st.Allocations != 0 {
		t.Errorf("fresh store stats = %+v, %v", st, err)
	}

	if _, err := store.MoveAside(path, now); !errors.Is(err, store.ErrLocked) {
		t.Errorf("MoveAside of an open file: err = %v, want ErrLocked", err)
	}
	if _, err := store.MoveAside(filepath.Join(dir, "missing.db"), now); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("MoveAside of a missing file: err = %v, want fs.ErrNotExist", err)
	}
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func overwrite(t testing.TB, path string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

func flip(t testing.TB, path string, off int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	overwrite(t, path, off, []byte{^data[off]})
}

// rawUpdate writes to a bbolt file directly, bypassing the store, to build
// files of other layouts and versions.
func rawUpdate(t testing.TB, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpen_NotRegularFile: a state path that is not a regular file is refused
// before bbolt sees it, with an error saying what it is and where a symlink
// points, read-write and read-only.
func TestOpen_NotRegularFile(t *testing.T) {
	if _, err := os.Stat(os.DevNull); err != nil {
		t.Skipf("no %s: %v", os.DevNull, err)
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, path string)
		want  []string // in the message, after the path
	}{
		{"symlink to /dev/null", func(t *testing.T, path string) {
			mustSymlink(t, os.DevNull, path)
		}, []string{`a symlink to "` + os.DevNull + `"`, "a character device", "not a regular file"}},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, []string{"a directory", "not a regular file"}},
		{"symlink to a directory", func(t *testing.T, path string) {
			dir := filepath.Join(filepath.Dir(path), "elsewhere")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			mustSymlink(t, dir, path)
		}, []string{`a symlink to "`, `elsewhere"`, "a directory"}},
		{"chain of symlinks to /dev/null", func(t *testing.T, path string) {
			mid := filepath.Join(filepath.Dir(path), "mid")
			mustSymlink(t, os.DevNull, mid)
			mustSymlink(t, mid, path)
		}, []string{`a symlink to "` + os.DevNull + `"`, "a character device"}},
	} {
		for _, readOnly := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/read-only=%v", tc.name, readOnly), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "state.db")
				tc.setup(t, path)
				s, err := store.Open(path, store.Options{ReadOnly: readOnly})
				if err == nil {
					s.Close()
					t.Fatal("Open succeeded")
				}
				if !errors.Is(err, store.ErrNotRegularFile) {
					t.Errorf("err = %v, want ErrNotRegularFile", err)
				}
				msg := err.Error()
				if !strings.HasPrefix(msg, fmt.Sprintf("open state %q: ", path)) {
					t.Errorf("error %q does not start with the operation and the path", msg)
				}
				for _, w := range tc.want {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q lacks %q", msg, w)
					}
				}
				if strings.Contains(msg, "invalid argument") {
					t.Errorf("error %q still says only invalid argument", msg)
				}
			})
		}
	}
}

// TestOpen_DanglingSymlink: a symlink to a file not yet there is a missing
// file: read-write creates the target, read-only reports it missing.
func TestOpen_DanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	target, path := filepath.Join(dir, "real.db"), filepath.Join(dir, "state.db")
	mustSymlink(t, target, path)
	if _, err := store.Open(path, store.Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only: err = %v, want fs.ErrNotExist", err)
	}
	storetest.MustOpenPath(t, path, store.Options{})
	if fi, err := os.Stat(target); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("target after Open: %v, %v; want a regular file", fi, err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
}

// rawView reads a bbolt file directly, bypassing the store.
func rawView(t testing.TB, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(fn); err != nil {
		t.Fatal(err)
	}
}
