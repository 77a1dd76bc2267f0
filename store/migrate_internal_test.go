package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestMigrate_Table runs the migration framework on a synthetic history of
// three steps: steps run in order from the file's version, the version is
// recorded, and a failing step rolls everything back.
func TestMigrate_Table(t *testing.T) {
	var ran []int
	step := func(from int) migration {
		return migration{from: from, name: fmt.Sprintf("step %d", from), apply: func(tx *bolt.Tx) error {
			ran = append(ran, from)
			_, err := tx.CreateBucketIfNotExists([]byte(fmt.Sprintf("v%d", from+1)))
			return err
		}}
	}
	failing := migration{from: 2, name: "broken", apply: func(*bolt.Tx) error { return errors.New("boom") }}

	for _, tc := range []struct {
		name      string
		start     int // version written before migrating; 0 = no meta bucket
		table     []migration
		target    int
		wantRan   []int
		wantFinal int
		wantErr   bool
	}{
		{"from 0 to 3", 0, []migration{step(0), step(1), step(2)}, 3, []int{0, 1, 2}, 3, false},
		{"from 1 to 3", 1, []migration{step(0), step(1), step(2)}, 3, []int{1, 2}, 3, false},
		{"table order does not matter", 0, []migration{step(2), step(0), step(1)}, 3, []int{0, 1, 2}, 3, false},
		{"already current", 3, []migration{step(0), step(1), step(2)}, 3, nil, 3, false},
		{"gap", 0, []migration{step(0), step(2)}, 3, []int{0}, 0, true},
		{"failing step rolls back", 0, []migration{step(0), step(1), failing}, 3, []int{0, 1}, 0, true},
		{"newer", 4, []migration{step(0)}, 3, nil, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran = nil
			db, err := bolt.Open(filepath.Join(t.TempDir(), "m.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if tc.start > 0 {
				if err := db.Update(func(tx *bolt.Tx) error { return writeVersion(tx, tc.start) }); err != nil {
					t.Fatal(err)
				}
			}
			err = db.Update(func(tx *bolt.Tx) error {
				from, err := migrate(tx, tc.table, tc.target)
				if err == nil && from != tc.start {
					t.Errorf("from = %d, want %d", from, tc.start)
				}
				return err
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.name == "newer" && !errors.Is(err, ErrNewerSchema) {
				t.Errorf("err = %v, want ErrNewerSchema", err)
			}
			if !reflect.DeepEqual(ran, tc.wantRan) {
				t.Errorf("ran steps %v, want %v", ran, tc.wantRan)
			}
			var final int
			_ = db.View(func(tx *bolt.Tx) error {
				final, err = readVersion(tx)
				if tc.wantErr && tc.start == 0 && tx.Bucket([]byte("v1")) != nil {
					t.Error("failed migration left bucket v1 behind")
				}
				return nil
			})
			if err != nil || final != tc.wantFinal {
				t.Errorf("version after = %d, %v; want %d", final, err, tc.wantFinal)
			}
		})
	}
}

// TestMigrations_Complete: the shipped table has exactly one step per version.
func TestMigrations_Complete(t *testing.T) {
	for v := 0; v < SchemaVersion; v++ {
		if _, ok := findStep(migrations, v); !ok {
			t.Errorf("no migration from version %d", v)
		}
	}
	if len(migrations) != SchemaVersion {
		t.Errorf("%d migrations for schema version %d", len(migrations), SchemaVersion)
	}
}
