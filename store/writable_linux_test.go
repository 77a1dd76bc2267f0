//go:build linux

package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// TestWritable_DiskFull fills a real file system under a store: writes fail
// with a clear error naming their operation once, Writable reports it, and
// once space is freed Writable recovers through its own probe, without any
// other write, at most once a second.
func TestWritable_DiskFull(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "small")
	storetest.MountSmallFS(t, dir, 1<<20)
	c := storetest.NewClock(t, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	path := filepath.Join(dir, "state.db")
	s := storetest.MustOpenPath(t, path, store.Options{Now: c.Now})
	if _, err := s.Reconcile(specs(2)); err != nil {
		t.Fatal(err)
	}
	for range 2000 { // a history of several pages, as a plugin has after a while
		mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Envs: map[string]string{"VIRTUAL_GPU_IDS": "fake-0"}})
	}
	if err := s.Writable(); err != nil {
		t.Fatalf("Writable() before the disk is full = %v", err)
	}
	filler := storetest.FillFS(t, dir)

	// Writes go on into free pages the file already has, then fail.
	var err error
	var n int
	for n = 0; n < 100000 && err == nil; n++ {
		_, err = s.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0", "fake-1"},
			Envs: map[string]string{"VIRTUAL_GPU_IDS": "fake-0,fake-1"}, Namespace: "default", Pod: "p", Container: "c"})
	}
	t.Logf("record %d failed: %v", n, err)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("RecordAllocation on a full disk: err = %v, want ENOSPC", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "record allocation: ") || strings.Count(msg, "record allocation") != 1 ||
		!strings.Contains(msg, "no space left on device") {
		t.Errorf("error %q should name its operation once and say the disk is full", msg)
	}
	werr := s.Writable()
	t.Logf("Writable() = %v", werr)
	if !errors.Is(werr, syscall.ENOSPC) || !strings.HasPrefix(werr.Error(), "state not writable: ") {
		t.Fatalf("Writable() on a full disk = %v, want ENOSPC", werr)
	}
	// Reads still work.
	if devs, err := s.Devices(); err != nil || len(devs) != 2 {
		t.Errorf("Devices() on a full disk = %d, %v", len(devs), err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Within the second since its last probe Writable does not write again.
	if err := s.Writable(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Writable() within the probe gap = %v, want the last error still", err)
	}
	c.Advance(store.WritableProbeGap)
	if err := s.Writable(); err != nil {
		t.Errorf("Writable() a probe gap after space was freed = %v, want nil", err)
	}
	if _, err := s.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}}); err != nil {
		t.Errorf("RecordAllocation after space was freed: %v", err)
	}
	if err := s.Writable(); err != nil {
		t.Errorf("Writable() after a successful write = %v", err)
	}
}
