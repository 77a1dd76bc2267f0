//go:build linux

package store

import (
	"errors"
	"os"
	"syscall"
)

// fallocKeepSize is FALLOC_FL_KEEP_SIZE: allocate without changing the
// file's size.
const fallocKeepSize = 0x01

// reserve allocates disk space for n bytes of f from off on, without
// changing f's size or content, so that later writes there cannot run out
// of space. File systems that cannot do it are not an error: nothing is
// reserved.
func reserve(f *os.File, off, n int64) error {
	err := syscall.Fallocate(int(f.Fd()), fallocKeepSize, off, n)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "reserve space in", Path: f.Name(), Err: err}
	}
	return nil
}
