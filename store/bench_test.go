package store_test

import (
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

func benchAllocation() store.Allocation {
	return store.Allocation{
		DeviceIDs: []string{"fake-0", "fake-1"},
		Envs:      map[string]string{"VIRTUAL_GPU_IDS": "fake-0,fake-1"},
	}
}

// BenchmarkRecordAllocation measures one durable write: a transaction
// committed and fsynced (twice: data, then meta page) per record. The
// nosync variant shows the CPU part alone.
func BenchmarkRecordAllocation(b *testing.B) {
	for _, sync := range []bool{true, false} {
		name := "fsync"
		if !sync {
			name = "nosync"
		}
		b.Run(name, func(b *testing.B) {
			s, _ := mustDevices(b, 2)
			if !sync {
				store.SetNoSyncForTest(s)
			}
			a := benchAllocation()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.RecordAllocation(a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFileSize records 10,000 allocations into a fresh file per
// iteration and reports the file size and bbolt's high-water mark per 10,000
// records, without pruning.
func BenchmarkFileSize(b *testing.B) {
	const n = 10000
	var st store.Stats
	for b.Loop() {
		s, err := store.Open(filepath.Join(b.TempDir(), "state.db"), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		store.SetNoSyncForTest(s) // sizes do not depend on fsync
		if _, err := s.Reconcile(specs(2)); err != nil {
			b.Fatal(err)
		}
		a := benchAllocation()
		a.Namespace, a.Pod, a.Container = "default", "inference-7f9c6d5b8-xk2lp", "server"
		for range n {
			if _, err := s.RecordAllocation(a); err != nil {
				b.Fatal(err)
			}
		}
		if st, err = s.Stats(); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
	b.ReportMetric(float64(st.FileSize), "bytes/10k-allocs")
	b.ReportMetric(float64(st.DataSize), "data-bytes/10k-allocs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkOpen measures Open of a file holding 10,000 allocation records,
// integrity check and record check included: the cost added to every plugin
// start. For scale, in the same run: "bbolt-check" is opening the file with
// bbolt and running its Tx.Check alone (the page-level part of Open), and
// "list-all" is listing every record once on an open Store (what the record
// check costs at least, as it decodes each record).
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "state.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	store.SetNoSyncForTest(s)
	if _, err := s.Reconcile(specs(2)); err != nil {
		b.Fatal(err)
	}
	as := make([]store.Allocation, 10000)
	for i := range as {
		as[i] = benchAllocation()
	}
	if err := store.RecordAllocationsForTest(s, as); err != nil {
		b.Fatal(err)
	}
	s.Close()
	b.Run("store", func(b *testing.B) {
		for b.Loop() {
			s, err := store.Open(path, store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
	b.Run("bbolt-check", func(b *testing.B) {
		for b.Loop() {
			db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			err = db.View(func(tx *bolt.Tx) error {
				for err := range tx.Check() {
					return err
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			db.Close()
		}
	})
	b.Run("list-all", func(b *testing.B) {
		s, err := store.Open(path, store.Options{ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for b.Loop() {
			if as, err := s.Allocations(store.AllocationFilter{}); err != nil || len(as) != 10000 {
				b.Fatal(len(as), err)
			}
		}
	})
}

// BenchmarkAllocations_Active lists the active records among 10,000.
func BenchmarkAllocations_Active(b *testing.B) {
	s, _ := mustDevices(b, 2)
	store.SetNoSyncForTest(s)
	for range 10000 {
		if _, err := s.RecordAllocation(benchAllocation()); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := s.Allocations(store.AllocationFilter{Active: true, Limit: 100}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPrune_100k prunes a history of 100,000 allocation records (the
// default -history-max-records) and 1,000 health events, once by count
// alone and once by count and bytes, to show what the byte accounting
// costs: "at-limit" finds nothing to delete (the common case: Prune runs
// after every Allocate, at most once a second), "one-over" deletes the one
// record an Allocate added (its RecordAllocation is not timed).
func BenchmarkPrune_100k(b *testing.B) {
	const n = 100000
	build := func(b *testing.B) *store.Store {
		s, _ := mustDevices(b, 2)
		store.SetNoSyncForTest(s)
		as := make([]store.Allocation, n)
		for i := range as {
			as[i] = benchAllocation()
			as[i].Namespace, as[i].Pod, as[i].Container = "default", "inference-7f9c6d5b8-xk2lp", "server"
			if i%2 == 0 {
				as[i].State = store.StateReleased
			}
		}
		if err := store.RecordAllocationsForTest(s, as); err != nil {
			b.Fatal(err)
		}
		for i := range 1000 {
			if _, _, err := s.SetHealth("fake-1", i%2 == 0, "flap", store.CauseFaultInjection); err != nil {
				b.Fatal(err)
			}
		}
		return s
	}
	for _, limit := range []string{"count", "count+bytes"} {
		o := store.PruneOptions{MaxRecords: n}
		if limit == "count+bytes" {
			o.MaxBytes = 1 << 40 // never binding: the accounting alone is measured
		}
		b.Run(limit+"/at-limit", func(b *testing.B) {
			s := build(b)
			for b.Loop() {
				if r, err := s.Prune(b.Context(), o); err != nil || r.Allocations != 0 {
					b.Fatal(r, err)
				}
			}
		})
		b.Run(limit+"/one-over", func(b *testing.B) {
			s := build(b)
			a := benchAllocation()
			a.State = store.StateReleased
			for b.Loop() {
				b.StopTimer()
				if _, err := s.RecordAllocation(a); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if r, err := s.Prune(b.Context(), o); err != nil || r.Allocations != 1 {
					b.Fatal(r, err)
				}
			}
		})
	}
}
