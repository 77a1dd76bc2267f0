// Package storetest provides test helpers for code that uses package store.
// Its functions are meant for tests only: they take a testing.TB and fail the
// test on error.
package storetest

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// MustOpen opens a new store in a fresh directory under t.TempDir() and
// registers a cleanup that closes it and checks the file's integrity with
// bbolt's Tx.Check. opts are passed to store.Open as they are.
func MustOpen(t testing.TB, opts store.Options) *store.Store {
	t.Helper()
	return MustOpenPath(t, filepath.Join(t.TempDir(), "state", "state.db"), opts)
}

// MustOpenPath is MustOpen at a given path, for tests that reopen a file.
// Cleanups run in reverse order, so a store opened later is closed before an
// earlier one's file is checked.
func MustOpenPath(t testing.TB, path string, opts store.Options) *store.Store {
	t.Helper()
	s, err := store.Open(path, opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
		CheckFile(t, path)
	})
	return s
}

// CheckFile opens the bbolt file at path read-only and fails the test for
// every problem bbolt's Tx.Check reports. The file must not be held open for
// writing.
func CheckFile(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Errorf("integrity check %s: open: %v", path, err)
		return
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("integrity check %s: %v", path, err)
		}
		return nil
	})
	if err != nil {
		t.Errorf("integrity check %s: %v", path, err)
	}
}

// Damage overwrites the value of one record in the closed state file at
// path with bbolt directly, bypassing the store, as bit rot or a foreign
// writer would: bucket is "devices" (key: the device id), "allocations",
// "health_events", "config_events" or "claims" (key: SeqKey(n)). It fails the test if
// the file cannot be written or the bucket is missing. The next read-write
// store.Open moves the record into quarantine; a read-only one reports it
// (see Store.Damaged).
func Damage(t testing.TB, path, bucket string, key, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("damage %s: open: %v", path, err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return fmt.Errorf("no bucket %q", bucket)
		}
		return b.Put(key, value)
	})
	if err != nil {
		t.Fatalf("damage %s: put %s/%x: %v", path, bucket, key, err)
	}
}

// SeqKey is the key of the allocation record, claim record, health event
// or configuration event with sequence number n.
func SeqKey(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
