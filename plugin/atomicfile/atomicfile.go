// Package atomicfile replaces files so that a reader sees the old content
// or the new, never a part: the new content goes into a temporary file in
// the same directory, which is renamed over the old one. The plugin writes
// what containers read this way (status files, the CDI spec, the installed
// nvidia-smi). Its functions are safe for concurrent use on different
// paths; callers serialise writes to one path.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Options says how Replace writes.
type Options struct {
	// Prefix starts the temporary file's name (a random suffix follows);
	// it should start with a dot, so that readers listing the directory
	// skip it, and be distinct, so that leftovers of a crash can be found.
	Prefix string
	// Mode is the file's permission bits.
	Mode fs.FileMode
	// NoSync skips flushing the file to disk before the rename (for
	// content that is written again at start anyway).
	NoSync bool
	// Check, if set, is called with the temporary file's path once it is
	// complete and closed; an error stops the replacement.
	Check func(tmp string) error
}

// Replace replaces the file at path with what write writes: into a
// temporary file in path's directory, with o.Mode, flushed (unless
// o.NoSync), checked (o.Check), then renamed over path. On any error the
// temporary file is removed and path is unchanged. Replace does not flush
// the directory: call SyncDir after one or more replacements to make the
// renames durable.
func Replace(path string, o Options, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), o.Prefix+"*")
	if err != nil {
		return fmt.Errorf("replace %q: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("replace %q: write %q: %w", path, tmp, err)
	}
	if err := f.Chmod(o.Mode); err != nil {
		return fmt.Errorf("replace %q: set the mode of %q: %w", path, tmp, err)
	}
	if !o.NoSync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("replace %q: flush %q: %w", path, tmp, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("replace %q: close %q: %w", path, tmp, err)
	}
	if o.Check != nil {
		if err := o.Check(tmp); err != nil {
			return fmt.Errorf("replace %q: check %q: %w", path, tmp, err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace %q: %w", path, err)
	}
	return nil
}

// Bytes returns a write function for Replace that writes data.
func Bytes(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

// SyncDir flushes the directory dir, making the renames and removals in
// it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("flush directory %q: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("flush directory %q: %w", dir, err)
	}
	return nil
}

// Kind names the type of a file mode, with its article, for messages about
// what stands at a path: "a directory", "a named pipe", "a symbolic link".
func Kind(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeSymlink:
		return "a symbolic link"
	case fs.ModeNamedPipe:
		return "a named pipe"
	case fs.ModeSocket:
		return "a socket"
	case fs.ModeDevice:
		return "a block device"
	case fs.ModeDevice | fs.ModeCharDevice:
		return "a character device"
	}
	return "a " + m.Type().String() + " file"
}
