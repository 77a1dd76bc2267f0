package store

// SetNoSyncForTest turns off fsync on commit for tests and benchmarks that
// write tens of thousands of records to measure sizes, not durability.
// Production code has no way to do this.
func SetNoSyncForTest(s *Store) { s.db.NoSync = true }
