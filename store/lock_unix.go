//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// lockPollInterval is how often lockFile retries, as bbolt's own flock does:
// flock cannot wait with a timeout.
const lockPollInterval = 50 * time.Millisecond

// lockFile takes the lock bbolt uses (flock: exclusive for a writer, shared
// for readers) on f, retrying until timeout; then it returns bbolt's
// ErrTimeout. A timeout of zero tries once.
func lockFile(f *os.File, exclusive bool, timeout time.Duration) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock: %w", err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return berrors.ErrTimeout
		}
		time.Sleep(min(lockPollInterval, left))
	}
}

// unlockFile drops the flock on f. Closing f alone is not enough when a
// mapping of the file outlives it: the lock belongs to the open file, which
// the mapping keeps alive.
func unlockFile(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) // best effort; f is closed next
}
