package store

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultPruneBatch is the number of deletions per transaction when
// PruneOptions.Batch is zero.
const DefaultPruneBatch = 100

// PruneOptions bound the history Prune keeps. The same limits apply to
// allocation records and to health events, separately. The zero value prunes
// nothing.
type PruneOptions struct {
	// MaxRecords keeps at most this many records of each kind, deleting the
	// oldest. Zero means no count limit.
	MaxRecords int
	// MaxAge deletes records whose Time is before Now-MaxAge. Zero means no
	// age limit.
	MaxAge time.Duration
	// Batch is the most deletions per transaction, so that writers such as
	// RecordAllocation wait at most one small transaction. Zero means
	// DefaultPruneBatch.
	Batch int
	// Now is the reference time for MaxAge. Zero means the Store's clock.
	Now time.Time
	// KeepActive never deletes allocation records that are still active
	// (StateAllocated or StateHeld); they still count toward MaxRecords.
	// Default false: records are pruned whatever their state.
	KeepActive bool
}

// Prune deletes the oldest allocation records and health events beyond
// o.MaxRecords or older than o.MaxAge, in transactions of at most o.Batch
// deletions each, and returns how many it deleted. It walks each kind from
// the lowest sequence number and stops at the first record it keeps (skipping
// kept active records when o.KeepActive is set), so a record with a
// non-monotonic Time may outlive MaxAge until the count limit reaches it.
// bbolt reuses the freed pages: with periodic pruning the file stops
// growing, though it never shrinks. Prune checks ctx between transactions
// and returns the count so far with ctx's error.
func (s *Store) Prune(ctx context.Context, o PruneOptions) (int, error) {
	if o.MaxRecords < 0 || o.MaxAge < 0 || o.Batch < 0 {
		return 0, fmt.Errorf("prune: negative limit in %+v: %w", o, ErrInvalid)
	}
	if o.MaxRecords == 0 && o.MaxAge == 0 {
		return 0, nil
	}
	if o.Batch == 0 {
		o.Batch = DefaultPruneBatch
	}
	var cutoff time.Time
	if o.MaxAge > 0 {
		now := o.Now
		if now.IsZero() {
			now = s.now()
		}
		cutoff = now.Add(-o.MaxAge)
	}
	kinds := []struct {
		name       []byte
		keepActive bool
	}{
		{bucketAllocations, o.KeepActive},
		{bucketEvents, false},
	}
	total := 0
	for _, kind := range kinds {
		for {
			if err := ctx.Err(); err != nil {
				return total, fmt.Errorf("prune: %w", err)
			}
			n, err := s.pruneBatch(kind.name, o.MaxRecords, cutoff, o.Batch, kind.keepActive)
			total += n
			if err != nil {
				return total, err
			}
			if n < o.Batch {
				break
			}
		}
	}
	return total, nil
}

// pruneRecord is the part of an allocation record or health event that
// pruning looks at.
type pruneRecord struct {
	Time  time.Time `json:"time"`
	State string    `json:"state"`
}

// pruneBatch deletes at most batch records from bucket name in one
// transaction and returns how many it deleted.
func (s *Store) pruneBatch(name []byte, maxRecords int, cutoff time.Time, batch int, keepActive bool) (int, error) {
	deleted := 0
	err := s.update("prune "+string(name), func(tx *bolt.Tx) error {
		b := tx.Bucket(name)
		if b == nil {
			return errRollback
		}
		excess := 0
		if maxRecords > 0 {
			excess = b.Stats().KeyN - maxRecords
		}
		var doomed [][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil && len(doomed) < batch; k, v = c.Next() {
			var r pruneRecord
			if !cutoff.IsZero() || keepActive {
				if err := decode(v, &r); err != nil {
					return fmt.Errorf("record %x: %w", k, err)
				}
			}
			if keepActive && Active(r.State) {
				continue
			}
			tooMany := len(doomed) < excess
			tooOld := !cutoff.IsZero() && r.Time.Before(cutoff)
			if !tooMany && !tooOld {
				break
			}
			doomed = append(doomed, append([]byte(nil), k...))
		}
		if len(doomed) == 0 {
			return errRollback // nothing to commit
		}
		// Deleting after the walk: bbolt's cursor may skip a key when the
		// current one is deleted under it.
		for _, k := range doomed {
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("delete record %x: %w", k, err)
			}
		}
		deleted = len(doomed)
		return nil
	})
	if err != nil && !isRollback(err) {
		return 0, err
	}
	return deleted, nil
}
