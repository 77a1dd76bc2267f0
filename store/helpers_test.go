package store_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// clock is a fake Options.Now that advances a second per call.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

// specs returns n device specs fake-0 … fake-(n-1), two per NUMA node.
func specs(n int) []store.DeviceSpec {
	out := make([]store.DeviceSpec, n)
	for i := range out {
		out[i] = store.DeviceSpec{ID: fmt.Sprintf("fake-%d", i), Index: i, NUMA: i / 2}
	}
	return out
}

// mustDevices opens a store with n reconciled devices and a fake clock.
func mustDevices(t testing.TB, n int) (*store.Store, *clock) {
	t.Helper()
	c := newClock()
	s := storetest.MustOpen(t, store.Options{Now: c.Now})
	if _, err := s.Reconcile(specs(n)); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return s, c
}

func mustRecord(t testing.TB, s *store.Store, a store.Allocation) store.Allocation {
	t.Helper()
	got, err := s.RecordAllocation(a)
	if err != nil {
		t.Fatalf("record allocation %v: %v", a.DeviceIDs, err)
	}
	return got
}

func fileHash(t testing.TB, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

func seqs(as []store.Allocation) []uint64 {
	out := make([]uint64, len(as))
	for i, a := range as {
		out[i] = a.Seq
	}
	return out
}
