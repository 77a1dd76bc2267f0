package store

import bolt "go.etcd.io/bbolt"

// SetNoSyncForTest turns off fsync on commit for tests and benchmarks that
// write tens of thousands of records to measure sizes, not durability.
// Production code has no way to do this.
func SetNoSyncForTest(s *Store) { s.db.NoSync = true }

// RecordAllocationsForTest stores many allocation records in one
// transaction, as RecordAllocation would one by one, to build large files
// quickly for benchmarks.
func RecordAllocationsForTest(s *Store, as []Allocation) error {
	return s.update("record allocations", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAllocations)
		b.FillPercent = appendFillPercent
		for _, a := range as {
			var err error
			if a.Seq, err = b.NextSequence(); err != nil {
				return err
			}
			a.Time = s.stamp(a.Time)
			if a.State == "" {
				a.State = StateAllocated
			}
			if err := putJSON(b, u64(a.Seq), a); err != nil {
				return err
			}
			if err := indexAllocation(tx, nil, a); err != nil {
				return err
			}
		}
		return nil
	})
}

// WritableProbeGap is the least time between two probe writes of Writable.
const WritableProbeGap = writableProbeGap
