package plugintest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// OpenSockets counts the sockets the test process has open (Linux: it
// reads /proc/self/fd; elsewhere the test is skipped).
func OpenSockets(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range entries {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}
