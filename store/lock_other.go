//go:build !unix

package store

import (
	"os"
	"time"
)

// lockFile is a no-op where bbolt does not use flock; bbolt takes its own
// lock when it opens the file.
func lockFile(*os.File, bool, time.Duration) error { return nil }

// unlockFile is a no-op where bbolt does not use flock.
func unlockFile(*os.File) {}
