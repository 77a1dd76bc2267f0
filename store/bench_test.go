package store_test

import (
	"path/filepath"
	"testing"

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
// integrity check included: the cost added to every plugin start.
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
	for range 10000 {
		if _, err := s.RecordAllocation(benchAllocation()); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	for b.Loop() {
		s, err := store.Open(path, store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
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
