package view

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/atomicfile"
)

// installTool installs the file src as dir/name for containers: mode 0755,
// replaced atomically (a temporary file in dir, written, flushed, renamed
// over the old one, the directory flushed) and only when its content
// differs, so a running container's bind mount keeps the file it has and a
// new one gets the new file. It creates dir (0755) if needed, removes
// temporary files an interrupted install left, and reports whether it
// wrote the file.
func installTool(src, dir, name string) (changed bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("install %s: create %q: %w", name, dir, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, toolTmpPrefix+"*")); len(leftovers) > 0 {
		for _, p := range leftovers {
			_ = os.Remove(p) // best effort: a leftover only costs space
		}
	}
	dst := filepath.Join(dir, name)
	// What stands there must be a file (or a link to one, or nothing): a
	// directory would make the rename fail, a FIFO block the comparison.
	if fi, err := os.Stat(dst); err == nil && !fi.Mode().IsRegular() {
		return false, fmt.Errorf("install %s: %q is %s, not a file: remove it (the plugin installs its %s there)", name, dst, atomicfile.Kind(fi.Mode()), name)
	}
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("install %s: open %q: %w", name, src, err)
	}
	defer in.Close()
	same, err := sameContent(in, dst)
	if err != nil {
		return false, fmt.Errorf("install %s: compare with %q: %w", name, dst, err)
	}
	if same {
		if fi, err := os.Stat(dst); err == nil && fi.Mode().Perm() != 0o755 {
			if err := os.Chmod(dst, 0o755); err != nil {
				return false, fmt.Errorf("install %s: %w", name, err)
			}
		}
		return false, nil
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return false, fmt.Errorf("install %s: read %q: %w", name, src, err)
	}
	copyIn := func(w io.Writer) error {
		if _, err := io.Copy(w, in); err != nil {
			return fmt.Errorf("copy %q: %w", src, err)
		}
		return nil
	}
	if err := atomicfile.Replace(dst, atomicfile.Options{Prefix: toolTmpPrefix, Mode: 0o755}, copyIn); err != nil {
		return false, fmt.Errorf("install %s: %w", name, err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return true, fmt.Errorf("install %s: %w", name, err)
	}
	return true, nil
}

// sameContent reports whether the file at path holds exactly what r reads
// from its start; a missing file is not the same.
func sameContent(r io.Reader, path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	const chunk = 1 << 20
	a, b := make([]byte, chunk), make([]byte, chunk)
	for {
		na, errA := io.ReadFull(r, a)
		nb, errB := io.ReadFull(f, b)
		if !bytes.Equal(a[:na], b[:nb]) {
			return false, nil
		}
		doneA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		doneB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		switch {
		case errA != nil && !doneA:
			return false, errA
		case errB != nil && !doneB:
			return false, errB
		case doneA || doneB:
			return doneA && doneB, nil
		}
	}
}
