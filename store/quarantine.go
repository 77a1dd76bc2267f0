package store

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DamagedRecord is a stored record whose value the store refused: not JSON,
// not an object, or one that decodes to nonsense (a sequence number or id
// that does not match its key, a missing time, an unknown state). The rest of
// the file stays readable; see Store.Damaged.
type DamagedRecord struct {
	// Bucket is where the record was: devices, allocations, health_events,
	// config_events or claims (quarantine for a damaged quarantine entry).
	Bucket string
	// Key names the record: the device id, or the sequence number in
	// decimal; a key that is neither is shown in hex ("0x…").
	Key string
	// Reason says why the value was refused.
	Reason string
	// Quarantined is when a read-write Open moved the record into the
	// quarantine bucket; zero while it is still in Bucket (found by a
	// read-only Store, or found by a reader since Open).
	Quarantined time.Time
	// Value is the stored bytes as found.
	Value []byte
}

// quarantined is the on-disk form of a quarantine entry (see doc.go).
type quarantined struct {
	Bucket string    `json:"bucket"`
	Key    []byte    `json:"key"`   // base64 in JSON
	Value  []byte    `json:"value"` // base64 in JSON
	Reason string    `json:"reason"`
	Time   time.Time `json:"time"`
}

// damage is a damaged record found in place.
type damage struct {
	bucket     string
	key, value []byte // copies
	reason     string
}

func (d damage) id() string { return d.bucket + "\x00" + string(d.key) }

// Damaged lists the damaged records: first those in the quarantine bucket
// (moved there by a read-write Open, oldest first), then those still in
// place, which a read-only Open found or which readers have met since Open
// (sorted by bucket and key). Readers never fail on a damaged record: they
// skip it and it shows up here. The plugin logs them at start; dump shows
// them. Nil means none.
func (s *Store) Damaged() ([]DamagedRecord, error) {
	var out []DamagedRecord
	err := s.view("list damaged records", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketQuarantine)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			q, err := decodeQuarantined(k, v)
			if err != nil {
				out = append(out, DamagedRecord{Bucket: string(bucketQuarantine), Key: keyName(string(bucketQuarantine), k),
					Reason: reasonOf(err), Value: bytes.Clone(v)})
				return nil
			}
			out = append(out, DamagedRecord{Bucket: q.Bucket, Key: keyName(q.Bucket, q.Key), Reason: q.Reason,
				Quarantined: q.Time, Value: q.Value})
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	s.dmu.Lock()
	found := make([]damage, 0, len(s.found))
	for _, d := range s.found {
		found = append(found, d)
	}
	s.dmu.Unlock()
	slices.SortFunc(found, func(a, b damage) int {
		if c := strings.Compare(a.bucket, b.bucket); c != 0 {
			return c
		}
		return bytes.Compare(a.key, b.key)
	})
	for _, d := range found {
		out = append(out, DamagedRecord{Bucket: d.bucket, Key: keyName(d.bucket, d.key), Reason: d.reason, Value: bytes.Clone(d.value)})
	}
	return out, nil
}

func decodeQuarantined(k, v []byte) (quarantined, error) {
	if _, err := seqKey(k); err != nil {
		return quarantined{}, err
	}
	var q quarantined
	if err := decodeObject(v, &q); err != nil {
		return quarantined{}, err
	}
	if q.Bucket == "" || len(q.Key) == 0 {
		return quarantined{}, damaged("no bucket or key")
	}
	return q, nil
}

// noteDamaged remembers a damaged record a reader met, for Damaged. k and v
// may be bbolt memory: they are copied.
func (s *Store) noteDamaged(bucket []byte, k, v []byte, err error) {
	d := damage{bucket: string(bucket), key: bytes.Clone(k), value: bytes.Clone(v), reason: reasonOf(err)}
	s.dmu.Lock()
	defer s.dmu.Unlock()
	if s.found == nil {
		s.found = map[string]damage{}
	}
	s.found[d.id()] = d
}

// quarantine moves the damaged record k (value v, refused with err) from
// bucket into the quarantine bucket, in tx. The record leaves the in-memory
// list of records found in place once tx commits.
func (s *Store) quarantine(tx *bolt.Tx, bucket []byte, k, v []byte, err error) error {
	q, qerr := tx.CreateBucketIfNotExists(bucketQuarantine)
	if qerr != nil {
		return fmt.Errorf("create bucket %q: %w", bucketQuarantine, qerr)
	}
	seq, qerr := q.NextSequence()
	if qerr != nil {
		return fmt.Errorf("next quarantine sequence: %w", qerr)
	}
	key := bytes.Clone(k) // k may point into the page Delete rewrites
	entry := quarantined{Bucket: string(bucket), Key: key, Value: bytes.Clone(v), Reason: reasonOf(err), Time: s.stamp(time.Time{})}
	if err := putJSON(q, u64(seq), entry); err != nil {
		return err
	}
	if err := tx.Bucket(bucket).Delete(key); err != nil {
		return fmt.Errorf("delete damaged record %q from %q: %w", keyName(string(bucket), key), bucket, err)
	}
	id := damage{bucket: string(bucket), key: key}.id()
	tx.OnCommit(func() {
		s.dmu.Lock()
		delete(s.found, id)
		s.dmu.Unlock()
	})
	return nil
}

// recordScan is what checkRecords found: damaged records, and the changes
// that bring the indexes (inactive_allocations, inactive_claims,
// claim_uids) in step with the records.
type recordScan struct {
	damaged []damage
	fixes   []indexFix
}

func (r recordScan) empty() bool { return len(r.damaged) == 0 && len(r.fixes) == 0 }

// indexFix is what brings one index bucket in step with the records: the
// entries to delete, and those to add or set.
type indexFix struct {
	bucket []byte
	del    [][]byte
	put    [][2][]byte // key, value
}

// diffIndex compares the index bucket name in tx with want (key -> value,
// as the records call for) and returns what differs; ok false when
// nothing does or the bucket is missing (an older file, read-only).
func diffIndex(tx *bolt.Tx, name []byte, want map[string][]byte) (fix indexFix, ok bool, err error) {
	idx := tx.Bucket(name)
	if idx == nil {
		return indexFix{}, false, nil
	}
	fix.bucket = name
	left := maps.Clone(want)
	err = idx.ForEach(func(k, v []byte) error {
		w, wanted := left[string(k)]
		switch {
		case !wanted:
			fix.del = append(fix.del, bytes.Clone(k))
		case !bytes.Equal(v, w):
			fix.put = append(fix.put, [2][]byte{bytes.Clone(k), w})
		}
		delete(left, string(k))
		return nil
	})
	for _, k := range slices.Sorted(maps.Keys(left)) {
		fix.put = append(fix.put, [2][]byte{[]byte(k), left[k]})
	}
	return fix, len(fix.del) > 0 || len(fix.put) > 0, err
}

// scanRecords checks every record of the record buckets in tx, and the
// indexes against the records: inactive_allocations, and for the claims
// inactive_claims and claim_uids (each uid's newest record). A nested
// bucket where records belong is not a record value but a layout no build
// writes: ErrCorrupt.
func scanRecords(tx *bolt.Tx) (recordScan, error) {
	var r recordScan
	inactive := map[string][]byte{}       // inactive_allocations keys the records call for
	inactiveClaims := map[string][]byte{} // inactive_claims keys
	claimUIDs := map[string][]byte{}      // claim_uids: uid -> newest seq
	for _, name := range recordBuckets {
		b := tx.Bucket(name)
		if b == nil { // an older file, read-only
			continue
		}
		err := b.ForEach(func(k, v []byte) error {
			if v == nil {
				return fmt.Errorf("%w: bucket %q holds a nested bucket %q: not a state file layout", ErrCorrupt, name, k)
			}
			var err error
			switch string(name) {
			case string(bucketDevices):
				_, err = decodeDevice(k, v)
			case string(bucketAllocations):
				var a Allocation
				if a, err = decodeAllocation(k, v); err == nil && !a.Active() {
					inactive[string(inactiveKey(a))] = []byte{}
				}
			case string(bucketEvents):
				_, err = decodeEvent(k, v)
			case string(bucketConfig):
				_, err = decodeConfigEvent(k, v)
			case string(bucketClaims):
				var c Claim
				if c, err = decodeClaim(k, v); err == nil {
					if !c.Prepared() {
						inactiveClaims[string(claimInactiveKey(c))] = []byte{}
					}
					claimUIDs[c.UID] = u64(c.Seq) // keys ascend: the newest last
				}
			}
			if err != nil {
				r.damaged = append(r.damaged, damage{bucket: string(name), key: bytes.Clone(k), value: bytes.Clone(v), reason: reasonOf(err)})
			}
			return nil
		})
		if err != nil {
			return recordScan{}, err
		}
	}
	for _, ix := range []struct {
		name []byte
		want map[string][]byte
	}{{bucketInactive, inactive}, {bucketInactiveClaims, inactiveClaims}, {bucketClaimUIDs, claimUIDs}} {
		fix, ok, err := diffIndex(tx, ix.name, ix.want)
		if err != nil {
			return recordScan{}, err
		}
		if ok {
			r.fixes = append(r.fixes, fix)
		}
	}
	return r, nil
}

// checkRecords runs at Open. It checks every record; a read-only Store
// remembers the damaged ones, a read-write Store moves them into the
// quarantine bucket and brings the indexes in step with the records, in
// one transaction. A sound file is not written.
func (s *Store) checkRecords() error {
	var r recordScan
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		r, err = scanRecords(tx)
		return err
	})
	if err != nil || r.empty() {
		return err
	}
	if s.readOnly {
		s.dmu.Lock()
		s.found = make(map[string]damage, len(r.damaged))
		for _, d := range r.damaged {
			s.found[d.id()] = d
		}
		s.dmu.Unlock()
		return nil
	}
	return s.update("check records", func(tx *bolt.Tx) error {
		for _, d := range r.damaged {
			if err := s.quarantine(tx, []byte(d.bucket), d.key, d.value, &errRecord{reason: d.reason}); err != nil {
				return err
			}
		}
		for _, fix := range r.fixes {
			idx := tx.Bucket(fix.bucket)
			for _, k := range fix.del {
				if err := idx.Delete(k); err != nil {
					return fmt.Errorf("fix index %s: %w", fix.bucket, err)
				}
			}
			for _, kv := range fix.put {
				if err := idx.Put(kv[0], kv[1]); err != nil {
					return fmt.Errorf("fix index %s: %w", fix.bucket, err)
				}
			}
		}
		return nil
	})
}
