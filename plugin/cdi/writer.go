package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/atomicfile"
)

// File and directory modes: container runtimes read the spec as root, other
// tools (nvidia-ctk cdi list, a user's inspection) as anyone.
const (
	// FileMode is the mode of the spec file.
	FileMode fs.FileMode = 0o644
	// DirMode is the mode of a spec directory the Writer creates.
	DirMode fs.FileMode = 0o755
)

// tmpPrefix starts the names of the Writer's temporary files. Their names do
// not end in .yaml or .json, which CDI runtimes skip when they scan a spec
// directory, so a runtime never loads a half-written spec.
const tmpPrefix = "." + Vendor + "-" + Class + ".tmp-"

// Writer writes the plugin's CDI spec file, SpecFileName, into a spec
// directory. Each write replaces the file atomically: a runtime loading it
// sees the old spec or the new one, never a mix. It never removes the file
// (not at shutdown either): containers whose cached Allocate answer names
// its devices need it for as long as they may be restarted. A Writer is safe
// for concurrent use; build one with NewWriter. It holds no open files.
type Writer struct {
	dir string
	mu  sync.Mutex // serializes writes
}

// NewWriter returns a Writer for the spec directory dir, creating it with
// its parents if needed (the directory itself gets DirMode whatever the
// umask); an existing directory keeps its mode (it may be shared with other
// vendors' specs). dir must be an absolute, clean path of a directory (or a
// symbolic link to one); anything else there fails with syscall.ENOTDIR.
func NewWriter(dir string) (*Writer, error) {
	if err := checkPath(dir); err != nil {
		return nil, fmt.Errorf("cdi spec directory: %w", err)
	}
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, fmt.Errorf("create cdi spec directory %q: %w", dir, err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		// Created here: give it DirMode whatever the umask.
		if err := os.Chmod(dir, DirMode); err != nil {
			return nil, fmt.Errorf("set mode %v on cdi spec directory %q: %w", DirMode, dir, err)
		}
	}
	return &Writer{dir: dir}, nil
}

// Dir returns the spec directory.
func (w *Writer) Dir() string { return w.dir }

// Path returns the spec file's path, <dir>/SpecFileName.
func (w *Writer) Path() string { return filepath.Join(w.dir, SpecFileName) }

// Write builds the spec of cfg (see Build; its errors are returned as they
// are) and makes it the content of Path: unchanged if the file already holds
// exactly these bytes, otherwise through a temporary file in the same
// directory that is written, set to FileMode, flushed (fsync), loaded and
// validated with the CDI library's ReadSpec (a refusal wraps
// ErrInvalidSpec), renamed over Path, and the directory flushed. On error
// the previous file is untouched and the temporary file removed.
func (w *Writer) Write(cfg Config) error {
	spec, err := Build(cfg)
	if err != nil {
		return err
	}
	data, err := Marshal(spec)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	final := w.Path()
	if old, err := os.ReadFile(final); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := w.replace(final, data); err != nil {
		return err
	}
	return w.syncDir()
}

// replace writes data into a temporary file, validates it with the CDI
// library and renames it over final; w.mu is held.
func (w *Writer) replace(final string, data []byte) error {
	err := atomicfile.Replace(final, atomicfile.Options{Prefix: tmpPrefix, Mode: FileMode, Check: func(tmp string) error {
		if _, err := cdilib.ReadSpec(tmp, 0); err != nil {
			return fmt.Errorf("load with the cdi library: %w: %w", ErrInvalidSpec, err)
		}
		return nil
	}}, atomicfile.Bytes(data))
	if err != nil {
		return fmt.Errorf("write cdi spec: %w", err)
	}
	return nil
}

// syncDir flushes the directory, making the rename durable.
func (w *Writer) syncDir() error {
	if err := atomicfile.SyncDir(w.dir); err != nil {
		return fmt.Errorf("cdi spec: %w", err)
	}
	return nil
}

// RemoveTemporaryFiles removes temporary files a crashed Writer left in the
// spec directory (never the spec itself). The plugin may call it at start.
func (w *Writer) RemoveTemporaryFiles() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("list cdi spec directory %q: %w", w.dir, err)
	}
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		if err := os.Remove(filepath.Join(w.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove temporary cdi spec: %w", err))
		}
	}
	return errors.Join(errs...)
}
