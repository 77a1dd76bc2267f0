package store

import (
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestKVStats pins kvStats, which derives the bytes of keys and values from
// bbolt's page statistics, to the sum over every record: for an inline
// bucket, for one of many pages, and after deletions leave pages part full.
func TestKVStats(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "kv.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check := func(step string) {
		t.Helper()
		err := db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				var n int
				var size int64
				_ = b.ForEach(func(k, v []byte) error {
					n++
					size += int64(len(k) + len(v))
					return nil
				})
				if gotN, gotSize := kvStats(b); gotN != n || gotSize != size {
					t.Errorf("%s: bucket %s: kvStats = %d keys, %d bytes; the records have %d, %d", step, name, gotN, gotSize, n, size)
				}
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"empty", "inline", "large"} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		if err := tx.Bucket([]byte("inline")).Put([]byte("k"), []byte("a small value")); err != nil {
			return err
		}
		b := tx.Bucket([]byte("large"))
		for i := range 5000 {
			v := fmt.Appendf(nil, `{"seq":%d,"pad":"%*s"}`, i, i%300, "")
			if i%997 == 0 {
				v = make([]byte, 9000) // overflow pages
			}
			if err := b.Put(u64(uint64(i)), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check("filled")
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("large"))
		for i := 0; i < 5000; i += 3 {
			if err := b.Delete(u64(uint64(i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check("after deleting every third")
}

// BenchmarkKVStats compares kvStats (page headers only) with summing every
// record's size, over 100,000 records: why Prune can afford a byte limit.
func BenchmarkKVStats(b *testing.B) {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "kv.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucket([]byte("records"))
		if err != nil {
			return err
		}
		bk.FillPercent = appendFillPercent
		for i := range 100000 {
			if err := bk.Put(u64(uint64(i)), fmt.Appendf(nil, `{"seq":%d,"time":"2026-03-01T12:00:00Z","device_ids":["fake-0","fake-1"],"state":"allocated"}`, i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, how := range []string{"kvStats", "walk"} {
		b.Run(how, func(b *testing.B) {
			for b.Loop() {
				_ = db.View(func(tx *bolt.Tx) error {
					bk := tx.Bucket([]byte("records"))
					if how == "kvStats" {
						kvStats(bk)
						return nil
					}
					var size int64
					return bk.ForEach(func(k, v []byte) error { size += int64(len(k) + len(v)); return nil })
				})
			}
		})
	}
}
