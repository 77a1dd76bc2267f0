package status

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/atomicfile"
)

// File and directory modes: containers run as any user and read the files
// through a read-only bind mount.
const (
	// FileMode is the mode of every status file.
	FileMode fs.FileMode = 0o644
	// DirMode is the mode of the status directory.
	DirMode fs.FileMode = 0o755
)

// tmpPrefix starts the names of the Writer's temporary files; readers never
// open them (they open <uuid>.json only) and Sync removes leftovers.
const tmpPrefix = ".tmp-"

// FileName returns the name of the status file of the GPU uuid:
// "<uuid>.json".
func FileName(uuid string) string { return uuid + ".json" }

// Writer writes the status files of a node's GPUs into one directory, which
// it owns. Each file is replaced atomically: a reader sees the old document
// or the new one, never a mix. A Writer is safe for concurrent use; build one
// with NewWriter. It holds no open files, so it needs no closing, and nothing
// it does at shutdown removes the files: containers keep reading them while
// the plugin is down.
type Writer struct {
	dir string
	mu  sync.Mutex // serializes writes and pruning
}

// NewWriter returns a Writer for dir, creating it if needed (with parents)
// and setting its mode to DirMode. dir must not be empty; an existing dir
// must be a directory (or a symbolic link to one).
func NewWriter(dir string) (*Writer, error) {
	if dir == "" {
		return nil, errors.New("status directory: empty path")
	}
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, fmt.Errorf("create status directory %q: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("status directory %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("status directory %q is a %s, not a directory: %w", dir, fi.Mode().Type(), fs.ErrInvalid)
	}
	if fi.Mode().Perm() != DirMode {
		if err := os.Chmod(dir, DirMode); err != nil {
			return nil, fmt.Errorf("set mode %v on status directory %q: %w", DirMode, dir, err)
		}
	}
	return &Writer{dir: dir}, nil
}

// Dir returns the directory the Writer writes into.
func (w *Writer) Dir() string { return w.dir }

// Write validates g and writes its status file, replacing the previous one
// atomically: a temporary file in the same directory, written, set to
// FileMode, flushed to disk (fsync) and renamed over <uuid>.json, then the
// directory is flushed. On error the previous file is untouched and the
// temporary file removed. Errors wrap ErrInvalidStatus or
// ErrUnsupportedVersion for a bad g.
func (w *Writer) Write(g *GPU) error {
	data, err := Marshal(g)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.write(g.UUID, data); err != nil {
		return err
	}
	return w.syncDir()
}

// Sync makes the directory hold exactly the given GPUs: it writes the file of
// each (as Write does) and removes the status files of GPUs not among them
// (files named <uuid>.json with a valid UUID; other files are left alone) and
// any temporary file a crashed writer left. Every GPU is validated before
// anything is written; two GPUs with the same UUID are an error wrapping
// ErrInvalidStatus. An empty list removes every status file.
func (w *Writer) Sync(gpus []*GPU) error {
	data := make([][]byte, len(gpus))
	keep := make(map[string]bool, len(gpus))
	for i, g := range gpus {
		var err error
		if data[i], err = Marshal(g); err != nil {
			return err
		}
		if keep[g.UUID] {
			return fmt.Errorf("status of %s twice: %w", g.UUID, ErrInvalidStatus)
		}
		keep[g.UUID] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, g := range gpus {
		if err := w.write(g.UUID, data[i]); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("list status directory %q: %w", w.dir, err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		uuid, isStatus := strings.CutSuffix(name, ".json")
		switch {
		case strings.HasPrefix(name, tmpPrefix):
		case isStatus && ValidUUID(uuid) && !keep[uuid]:
		default:
			continue
		}
		if err := os.Remove(filepath.Join(w.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove stale status file: %w", err))
		}
	}
	if err := w.syncDir(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// write replaces the file of uuid with data, flushed; w.mu is held.
func (w *Writer) write(uuid string, data []byte) error { return w.replace(FileName(uuid), data, true) }

// replace replaces the file name with data through a temporary file,
// flushed to disk first if flush; w.mu is held.
func (w *Writer) replace(name string, data []byte, flush bool) error {
	o := atomicfile.Options{Prefix: tmpPrefix + name + "-", Mode: FileMode, NoSync: !flush}
	if err := atomicfile.Replace(filepath.Join(w.dir, name), o, atomicfile.Bytes(data)); err != nil {
		return fmt.Errorf("status file: %w", err)
	}
	return nil
}

// remove removes the file name, if it exists; w.mu is held.
func (w *Writer) remove(name string) error {
	if err := os.Remove(filepath.Join(w.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %q: %w", name, err)
	}
	return nil
}

// syncDir flushes the directory, making renames and removals durable.
func (w *Writer) syncDir() error {
	if err := atomicfile.SyncDir(w.dir); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	return nil
}
