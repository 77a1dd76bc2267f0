package atomicfile_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/atomicfile"
)

func TestReplace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var checked string
	o := atomicfile.Options{Prefix: ".f.tmp-", Mode: 0o644, Check: func(tmp string) error {
		b, err := os.ReadFile(tmp)
		checked = string(b)
		return err
	}}
	if err := atomicfile.Replace(path, o, atomicfile.Bytes([]byte("new"))); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if err != nil || string(b) != "new" || fi.Mode().Perm() != 0o644 || checked != "new" {
		t.Errorf("after Replace: %q (%v), mode %v, checked %q; want new, 0644, checked new", b, err, fi.Mode().Perm(), checked)
	}
	assertOnly(t, dir, "f.json")
}

// TestReplace_FailureKeepsTheOldFile: a failed write or check leaves the
// old content and no temporary file.
func TestReplace_FailureKeepsTheOldFile(t *testing.T) {
	refuse := errors.New("refused")
	for name, tc := range map[string]struct {
		write func(io.Writer) error
		check func(string) error
	}{
		"write fails": {write: func(io.Writer) error { return refuse }},
		"check fails": {write: atomicfile.Bytes([]byte("bad")), check: func(string) error { return refuse }},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := atomicfile.Replace(path, atomicfile.Options{Prefix: ".f.tmp-", Mode: 0o644, NoSync: true, Check: tc.check}, tc.write)
			if !errors.Is(err, refuse) {
				t.Fatalf("Replace = %v, want the refusal", err)
			}
			if b, _ := os.ReadFile(path); string(b) != "old" {
				t.Errorf("content %q, want old", b)
			}
			assertOnly(t, dir, "f")
		})
	}
	// A directory that does not exist: an error naming the path.
	missing := filepath.Join(t.TempDir(), "none", "f")
	if err := atomicfile.Replace(missing, atomicfile.Options{Mode: 0o644}, atomicfile.Bytes(nil)); err == nil {
		t.Error("Replace into a missing directory succeeded")
	}
	if err := atomicfile.SyncDir(filepath.Dir(missing)); err == nil {
		t.Error("SyncDir of a missing directory succeeded")
	}
}

// assertOnly checks that dir holds exactly the file name.
func assertOnly(t *testing.T, dir, name string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != name {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v (%v), want only %s", names, err, name)
	}
}
