package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// FuzzOpen writes arbitrary bytes as a state file: Open must not panic, and
// must either succeed with a readable store or fail with ErrCorrupt or
// ErrNewerSchema.
func FuzzOpen(f *testing.F) {
	seed := filepath.Join(f.TempDir(), "seed.db")
	s, err := store.Open(seed, store.Options{Now: newClock().Now})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := s.Reconcile(specs(2)); err != nil {
		f.Fatal(err)
	}
	for range 3 {
		mustRecord(f, s, store.Allocation{DeviceIDs: []string{"fake-1"}, Envs: map[string]string{"K": "V"}})
	}
	mustConfig(f, s, store.ConfigEvent{Profile: "p", Why: store.WhyNodeLabel, Devices: 2, Added: []string{"fake-0", "fake-1"}})
	mustPrepare(f, s, claim("uid-a", "fake-0"))
	mustPrepare(f, s, claim("uid-b", "fake-1"))
	mustUnprepare(f, s, "uid-a", time.Time{})
	s.Close()
	valid, err := os.ReadFile(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(valid[:8192])
	f.Add([]byte{})
	f.Add([]byte("not a bbolt file"))

	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "state.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, readOnly := range []bool{true, false} {
			s, err := store.Open(path, store.Options{ReadOnly: readOnly})
			if err != nil {
				if !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, store.ErrNewerSchema) {
					t.Fatalf("read-only %v: unexpected error: %v", readOnly, err)
				}
				continue
			}
			// Whatever Open accepted must be readable without a panic.
			for _, read := range []func() error{
				func() error { _, err := s.Devices(); return err },
				func() error { _, err := s.Allocations(store.AllocationFilter{}); return err },
				func() error { _, err := s.HealthEvents(store.EventFilter{}); return err },
				func() error { _, err := s.ConfigEvents(store.ConfigFilter{}); return err },
				func() error { _, err := s.Claims(store.ClaimFilter{}); return err },
				func() error {
					if _, err := s.Claim("uid-b"); !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrDamaged) {
						return err
					}
					return nil
				},
				func() error { _, err := s.Stats(); return err },
				func() error { _, err := s.Damaged(); return err },
			} {
				if err := read(); err != nil && !errors.Is(err, store.ErrCorrupt) {
					t.Errorf("read-only %v: read: %v", readOnly, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
