package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// checkRegular looks at what path is, following symlinks, before anything
// opens it: bbolt given a device, a directory or a pipe fails with a bare
// "invalid argument" or worse. It returns whether path exists; a missing
// path (or a symlink to a missing file) is fine. Anything but a regular file
// is an error wrapping ErrNotRegularFile that says what it is and, for a
// symlink, where it points.
func checkRegular(path string) (exists bool, err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case fi.Mode().IsRegular():
		return true, nil
	}
	return true, notRegular(path, fi.Mode())
}

// CheckPath reports whether path can be a state file, without opening it:
// nil for a regular file or a missing one (Open creates it), else an error
// wrapping ErrNotRegularFile that says what path is and, for a symlink,
// where it points ("a symlink to "/dev/null", which is a character
// device"). Open runs the same check; callers use it to refuse a bad path
// before anything starts.
func CheckPath(path string) error {
	_, err := checkRegular(path)
	return err
}

// notRegular describes path, which is of mode m (after following symlinks),
// as an error wrapping ErrNotRegularFile.
func notRegular(path string, m fs.FileMode) error {
	what := fileKind(m)
	if li, err := os.Lstat(path); err == nil && li.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			target, _ = os.Readlink(path)
		}
		return fmt.Errorf("a symlink to %q, which is %s: %w", target, what, ErrNotRegularFile)
	}
	return fmt.Errorf("%s: %w", what, ErrNotRegularFile)
}

// fileKind names the type of a file mode, with its article.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return fmt.Sprintf("an irregular file (mode %v)", m)
}
