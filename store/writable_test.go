package store_test

import (
	"errors"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// TestWritable_States: writable while writes succeed, whatever calls
// rejected; never for a read-only or closed Store. (The disk-full case is in
// writable_linux_test.go.)
func TestWritable_States(t *testing.T) {
	s, _ := mustDevices(t, 1)
	if err := s.Writable(); err != nil {
		t.Errorf("fresh store: Writable() = %v", err)
	}
	// Rejected arguments are not write failures.
	if _, err := s.RecordAllocation(store.Allocation{DeviceIDs: []string{"nope"}}); !errors.Is(err, store.ErrUnknownDevice) {
		t.Fatalf("RecordAllocation(unknown) = %v", err)
	}
	if _, err := s.UpdateAllocation(99, func(*store.Allocation) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdateAllocation(99) = %v", err)
	}
	if err := s.Writable(); err != nil {
		t.Errorf("after rejected calls: Writable() = %v", err)
	}
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Writable(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("closed store: Writable() = %v, want ErrClosed", err)
	}
	ro, err := store.Open(path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Writable(); !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("read-only store: Writable() = %v, want ErrReadOnly", err)
	}
}
