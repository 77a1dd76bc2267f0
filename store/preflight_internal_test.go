package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestPreflight_AgreesWithBbolt pins preflight's reading of bbolt's format to
// bbolt's own: on a file bbolt wrote, preflight passes and finds bbolt's
// page size and high-water mark.
func TestPreflight_AgreesWithBbolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("outer"))
		if err != nil {
			return err
		}
		if _, err := b.CreateBucket([]byte("inline")); err != nil { // small: stored inline
			return err
		}
		big, err := b.CreateBucket([]byte("big"))
		if err != nil {
			return err
		}
		for i := range 2000 {
			if err := big.Put(u64(uint64(i)), make([]byte, 100)); err != nil {
				return err
			}
		}
		return big.Put([]byte("overflow"), make([]byte, 3*os.Getpagesize())) // spans overflow pages
	})
	if err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := preflight(f, true); err != nil {
		t.Fatalf("preflight of a good file: %v", err)
	}
	pageSize := int64(db.Info().PageSize)
	var newest boltMeta
	for i := range int64(2) {
		page := make([]byte, boltPageHeaderSize+boltMetaSize)
		if _, err := f.ReadAt(page, i*pageSize); err != nil {
			t.Fatal(err)
		}
		m := readMeta(page)
		if m.valid != nil || int64(m.pageSize) != pageSize {
			t.Errorf("meta %d: %+v, bbolt's page size %d", i, m, pageSize)
		}
		if m.txid >= newest.txid {
			newest = m
		}
	}
	_ = db.View(func(tx *bolt.Tx) error {
		if got := int64(newest.highWater) * pageSize; got != tx.Size() {
			t.Errorf("high-water mark %d bytes, bbolt says %d", got, tx.Size())
		}
		return nil
	})
}

func TestPreflight_EmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := preflight(f, false); err != nil {
		t.Errorf("read-write: %v, want nil (bbolt initialises it)", err)
	}
	if err := preflight(f, true); !errors.Is(err, ErrCorrupt) {
		t.Errorf("read-only: %v, want ErrCorrupt", err)
	}
}
