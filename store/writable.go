package store

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// writableProbeGap is the least time between two probe writes of Writable.
const writableProbeGap = time.Second

// writableReservePages is how many pages past the file's data Writable's
// probe reserves on disk: more than recording an allocation can need
// (a split leaf, the branches above it, the freelist, with room to spare).
const writableReservePages = 16

// keyWriteProbe is the key probeWrite writes and deletes again: past every
// sequence number, so on the page where new allocation records go.
var keyWriteProbe = u64(1<<64 - 1)

// probeWrite checks, inside a write transaction, that the file takes what
// recording an allocation needs, leaving its content as it was. A small
// write alone proves little on a full disk: it fits in pages the file
// already has where a record that splits a page does not. So it first
// reserves disk space for writableReservePages pages past the data, where
// bbolt grows the file (Linux fallocate, keeping the file size), then
// rewrites the pages a new record touches: it adds a record past the last
// one and deletes it again, which dirties the last leaf of the allocations
// bucket, the pages above it, the freelist and the meta page.
func (s *Store) probeWrite(tx *bolt.Tx) error {
	pageSize := int64(tx.DB().Info().PageSize)
	if err := reserve(s.file, tx.Size(), writableReservePages*pageSize); err != nil {
		return err
	}
	b, err := bucket(tx, bucketAllocations)
	if err != nil {
		return err
	}
	if err := b.Put(keyWriteProbe, []byte("{}")); err != nil {
		return err
	}
	return b.Delete(keyWriteProbe)
}

// Writable reports whether the state file takes writes, for a readiness
// probe: nil while writes succeed. After a write failed to reach the file
// (disk full, I/O error) it returns that error, naming the operation that
// failed, until a write succeeds again. Meanwhile it tries a small write of
// its own, at most once a second (on Options.Now's clock), so that it
// recovers without other traffic once the cause is gone; the probe leaves
// the file's content unchanged and, on Linux, reserves the disk space the
// next writes need (see probeWrite). Rejected arguments (ErrInvalid, ...) are not
// write failures. A read-only or closed Store is not writable.
func (s *Store) Writable() error {
	if s.readOnly {
		return fmt.Errorf("state not writable: %w", ErrReadOnly)
	}
	s.wmu.Lock()
	if s.closed {
		s.wmu.Unlock()
		return fmt.Errorf("state not writable: %w", ErrClosed)
	}
	werr := s.writeErr
	now := s.now()
	probe := werr != nil && (!now.Before(s.lastProbe.Add(writableProbeGap)) || now.Before(s.lastProbe))
	if probe {
		s.lastProbe = now
	}
	s.wmu.Unlock()
	if werr == nil {
		return nil
	}
	if probe {
		werr = s.update("write probe", s.probeWrite)
		if werr == nil {
			return nil
		}
	}
	return fmt.Errorf("state not writable: %w", werr)
}
