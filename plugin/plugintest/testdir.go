package plugintest

import (
	"os"
	"testing"
	"time"
)

// ShortTempDir returns a new temporary directory whose path is short enough
// for unix sockets (sun_path holds 107 bytes; t.TempDir() paths, which
// carry the test's name, can be longer). It is removed when the test ends.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vgpu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test naming what it waited for if it does not hold within timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
