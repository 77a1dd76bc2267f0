package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// MoveAside renames the (damaged) state file at path to
// "<path>.corrupt-<UTC time as 20060102T150405Z>", adding "-1", "-2", … if
// that name is taken, and returns the new path. It never deletes and never
// overwrites a file, and refuses (ErrLocked) while a process holds the
// file open through a Store. A missing file is an error wrapping
// fs.ErrNotExist. The next Open at path starts a fresh file.
func MoveAside(path string, now time.Time) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", fmt.Errorf("move state %q aside: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("move state %q aside: not a regular file: %w", path, ErrInvalid)
	}
	if err := checkUnlocked(path); err != nil {
		return "", fmt.Errorf("move state %q aside: %w", path, err)
	}
	base := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	for i := 0; i < 1000; i++ {
		dst := base
		if i > 0 {
			dst = fmt.Sprintf("%s-%d", base, i)
		}
		moved, err := renameNoReplace(path, dst)
		if err != nil {
			return "", fmt.Errorf("move state %q aside to %q: %w", path, dst, err)
		}
		if moved {
			return dst, nil
		}
	}
	return "", fmt.Errorf("move state %q aside: too many files named %q-*", path, base)
}

// renameNoReplace renames src to dst unless dst exists, in which case it
// returns false. A hard link then unlink never replaces dst; where links are
// not supported it falls back to a checked rename.
func renameNoReplace(src, dst string) (bool, error) {
	err := os.Link(src, dst)
	switch {
	case err == nil:
		if err := os.Remove(src); err != nil {
			return false, fmt.Errorf("linked, but remove the old name: %w", err)
		}
		return true, nil
	case errors.Is(err, fs.ErrExist):
		return false, nil
	}
	// No hard links on this file system: rename if dst is free. The window
	// between the check and the rename is the best this fallback can do.
	if _, err := os.Lstat(dst); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.Rename(src, dst); err != nil {
		return false, err
	}
	return true, nil
}

// checkUnlocked returns an error wrapping ErrLocked if a process holds the
// lock on path that a Store holds on its file.
func checkUnlocked(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close() // releases the lock taken below
	if err := lockFile(f, true, 0); err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return fmt.Errorf("%w: it is open in another process", ErrLocked)
		}
		return err
	}
	return nil
}
