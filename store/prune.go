package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultPruneBatch is the number of deletions per transaction when
// PruneOptions.Batch is zero.
const DefaultPruneBatch = 100

// PruneOptions bound the history Prune keeps: allocation records, claim
// records, health events and configuration events. The zero value prunes
// nothing.
//
// Prune keeps what is still active: a record of an allocation in
// StateAllocated or StateHeld, or of a claim still prepared, is never
// deleted while an inactive record (StateReleased, StateAbandoned, an
// unprepared claim, or any health or configuration event) could be deleted
// instead, and never for its age. Only when nothing but active records is
// left over MaxRecords or MaxBytes are the oldest active records deleted,
// so that the file stays bounded even when every record stays active (the
// lifecycle tracker off). The newest configuration event is never deleted:
// it describes the configuration in force.
type PruneOptions struct {
	// MaxRecords keeps at most this many records of each kind (allocation
	// records, claim records, health events, configuration events),
	// deleting the oldest inactive first. Zero means no count limit.
	MaxRecords int
	// MaxBytes keeps the encoded size of the allocation records, claim
	// records, health events and configuration events together (their keys
	// and JSON values, as Stats.HistoryBytes reports it) at or below this,
	// deleting the oldest inactive records of any kind first. The file is
	// larger by bbolt's page overhead. Zero means no byte limit.
	MaxBytes int64
	// MaxAge deletes inactive records that became inactive before
	// Now-MaxAge: an allocation record released or abandoned then
	// (ReleasedAt, or Time when unset), a claim unprepared then
	// (UnpreparedAt), a health or configuration event recorded then.
	// Active records (and the newest configuration event) are kept
	// whatever their age. Zero means no age limit.
	MaxAge time.Duration
	// Batch is the most deletions per transaction, so that writers such as
	// RecordAllocation wait at most one small transaction. Zero means
	// DefaultPruneBatch.
	Batch int
	// Now is the reference time for MaxAge. Zero means the Store's clock.
	Now time.Time
}

func (o PruneOptions) validate() error {
	if o.MaxRecords < 0 || o.MaxBytes < 0 || o.MaxAge < 0 || o.Batch < 0 {
		return fmt.Errorf("negative limit in %+v: %w", o, ErrInvalid)
	}
	return nil
}

// PruneResult says what Prune deleted. The zero value means nothing.
type PruneResult struct {
	Allocations       int // allocation records deleted
	ActiveAllocations int // of those, records still active: only active records were left over a limit
	Claims            int // claim records deleted
	ActiveClaims      int // of those, claims still prepared: only active records were left over a limit
	HealthEvents      int // health events deleted
	ConfigEvents      int // configuration events deleted
	Quarantined       int // damaged records met on the way and moved into quarantine
}

func (r *PruneResult) add(o PruneResult) {
	r.Allocations += o.Allocations
	r.ActiveAllocations += o.ActiveAllocations
	r.Claims += o.Claims
	r.ActiveClaims += o.ActiveClaims
	r.HealthEvents += o.HealthEvents
	r.ConfigEvents += o.ConfigEvents
	r.Quarantined += o.Quarantined
}

// Prune deletes the oldest history beyond o's limits, in transactions of at
// most o.Batch deletions each, and returns what it deleted. Inactive
// records go first, oldest (by when they became inactive) first; see
// PruneOptions. It walks each kind from its oldest inactive record and stops
// at the first it keeps, so a record with a non-monotonic time may outlive
// MaxAge until a count or byte limit reaches it. bbolt reuses the freed
// pages: with periodic pruning the file stops growing, though it never
// shrinks. Prune checks ctx between transactions and returns the result so
// far with ctx's error.
func (s *Store) Prune(ctx context.Context, o PruneOptions) (PruneResult, error) {
	var total PruneResult
	if err := o.validate(); err != nil {
		return total, fmt.Errorf("prune history: %w", err)
	}
	if o.MaxRecords == 0 && o.MaxBytes == 0 && o.MaxAge == 0 {
		return total, nil
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
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("prune history: %w", err)
		}
		var r PruneResult
		ops := 0
		err := s.update("prune history", func(tx *bolt.Tx) error {
			p, err := newPruneTx(s, tx, o, cutoff)
			if err != nil {
				return err
			}
			if err := p.plan(); err != nil {
				return err
			}
			r, ops = p.result, p.ops()
			if ops == 0 && len(p.delIndex) == 0 && len(p.delClaimIndex) == 0 {
				return errRollback // nothing to commit
			}
			return p.apply()
		})
		if err != nil && !isRollback(err) {
			return total, err
		}
		total.add(r)
		if ops < o.Batch {
			return total, nil
		}
	}
}

// candidate is the oldest deletable record of one kind.
type candidate struct {
	key   []byte    // record key (a copy)
	index []byte    // its inactive_allocations or inactive_claims key (a copy), for allocations and claims; nil when none
	at    time.Time // when it became inactive (an active record: when it was recorded)
	size  int64     // len(key)+len(value)
	uid   string    // a claim's uid
}

// pruneTx plans and applies one batch of deletions inside one write
// transaction. Nothing is deleted while cursors walk (bbolt's cursor may
// skip a key deleted under it): plan collects, apply deletes.
type pruneTx struct {
	s      *Store
	o      PruneOptions
	cutoff time.Time

	allocs, events, configs, index *bolt.Bucket
	claims, claimIndex, claimUIDs  *bolt.Bucket
	ic, ec, cc, lc                 *bolt.Cursor
	ik, ek, ev, ck, cv, lk         []byte // cursor positions (ev, cv: values at ek, ck); nil at the end
	lastConfig                     []byte // key of the newest configuration event, never deleted

	excessA, excessE, excessC, excessL int   // records over MaxRecords, per kind (L: claims)
	excessB                            int64 // bytes over MaxBytes

	delAllocs, delIndex, delEvents, delConfigs [][]byte
	delClaims, delClaimIndex, delClaimUIDs     [][]byte
	doomed                                     map[string]bool // allocation keys planned for deletion or quarantine
	doomedClaims                               map[string]bool // claim keys planned for deletion or quarantine
	bad                                        []damage
	result                                     PruneResult
}

func newPruneTx(s *Store, tx *bolt.Tx, o PruneOptions, cutoff time.Time) (*pruneTx, error) {
	p := &pruneTx{s: s, o: o, cutoff: cutoff, doomed: map[string]bool{}, doomedClaims: map[string]bool{}}
	for _, b := range []struct {
		b    **bolt.Bucket
		name []byte
	}{{&p.allocs, bucketAllocations}, {&p.events, bucketEvents}, {&p.index, bucketInactive}, {&p.configs, bucketConfig},
		{&p.claims, bucketClaims}, {&p.claimIndex, bucketInactiveClaims}, {&p.claimUIDs, bucketClaimUIDs}} {
		var err error
		if *b.b, err = bucket(tx, b.name); err != nil {
			return nil, err
		}
	}
	if k, _ := p.configs.Cursor().Last(); k != nil {
		p.lastConfig = bytes.Clone(k)
	}
	na, ba := kvStats(p.allocs)
	ne, be := kvStats(p.events)
	nc, bc := kvStats(p.configs)
	nl, bl := kvStats(p.claims)
	if o.MaxRecords > 0 {
		p.excessA, p.excessE, p.excessC, p.excessL = na-o.MaxRecords, ne-o.MaxRecords, nc-o.MaxRecords, nl-o.MaxRecords
	}
	if o.MaxBytes > 0 {
		p.excessB = ba + be + bc + bl - o.MaxBytes
	}
	return p, nil
}

func (p *pruneTx) ops() int {
	return len(p.delAllocs) + len(p.delEvents) + len(p.delConfigs) + len(p.delClaims) + len(p.bad)
}

func (p *pruneTx) room() bool { return p.ops() < p.o.Batch }

func (p *pruneTx) tooOld(t time.Time) bool { return !p.cutoff.IsZero() && t.Before(p.cutoff) }

// plan picks this batch's deletions: inactive records of every kind, then,
// if only active allocation records and claims are left over a limit, the
// oldest of those.
func (p *pruneTx) plan() error {
	p.ic = p.index.Cursor()
	p.ik, _ = p.ic.First()
	p.ec = p.events.Cursor()
	p.ek, p.ev = p.ec.First()
	p.cc = p.configs.Cursor()
	p.ck, p.cv = p.cc.First()
	p.lc = p.claimIndex.Cursor()
	p.lk, _ = p.lc.First()
	var a, e, c, l *candidate
	for p.room() {
		if a == nil {
			a = p.nextInactive()
		}
		if e == nil {
			e = p.nextEvent()
		}
		if c == nil {
			c = p.nextConfig()
		}
		if l == nil {
			l = p.nextInactiveClaim()
		}
		takeA := a != nil && (p.tooOld(a.at) || p.excessA > 0)
		takeE := e != nil && (p.tooOld(e.at) || p.excessE > 0)
		takeC := c != nil && (p.tooOld(c.at) || p.excessC > 0)
		takeL := l != nil && (p.tooOld(l.at) || p.excessL > 0)
		if !takeA && !takeE && !takeC && !takeL && p.excessB > 0 {
			switch oldest(a, e, c, l) {
			case 0:
				takeA = true
			case 1:
				takeE = true
			case 2:
				takeC = true
			case 3:
				takeL = true
			}
		}
		if !takeA && !takeE && !takeC && !takeL {
			break
		}
		if takeA {
			p.deleteAllocation(a, false)
			a = nil
		}
		if takeE && p.room() {
			p.delEvents = append(p.delEvents, e.key)
			p.excessE--
			p.excessB -= e.size
			p.result.HealthEvents++
			e = nil
		}
		if takeC && p.room() {
			p.delConfigs = append(p.delConfigs, c.key)
			p.excessC--
			p.excessB -= c.size
			p.result.ConfigEvents++
			c = nil
		}
		if takeL && p.room() {
			p.deleteClaim(l, false)
			l = nil
		}
	}
	if !p.room() || (p.excessA <= 0 && p.excessL <= 0 && p.excessB <= 0) {
		return nil
	}
	p.planActive()
	return nil
}

// planActive plans the deletion of the oldest records once nothing
// inactive is left over the limits: allocation records while their count
// is over, claims while theirs is, and while the bytes are over the older
// of the two (by when they were recorded). Records still active are
// counted as such; an inactive one met here was missing from its index.
func (p *pruneTx) planActive() {
	ac, lc := p.allocs.Cursor(), p.claims.Cursor()
	ak, av := ac.First()
	lk, lv := lc.First()
	var a, l *candidate
	var aActive, lActive bool
	for p.room() && (p.excessA > 0 || p.excessL > 0 || p.excessB > 0) {
		for a == nil && ak != nil && (p.excessA > 0 || p.excessB > 0) && p.room() {
			a, aActive = p.activeAllocation(ak, av)
			ak, av = ac.Next()
		}
		for l == nil && lk != nil && (p.excessL > 0 || p.excessB > 0) && p.room() {
			l, lActive = p.activeClaim(lk, lv)
			lk, lv = lc.Next()
		}
		if !p.room() {
			return
		}
		takeA := a != nil && p.excessA > 0
		takeL := l != nil && p.excessL > 0
		if !takeA && !takeL && p.excessB > 0 {
			switch oldest(a, l) {
			case 0:
				takeA = true
			case 1:
				takeL = true
			}
		}
		if !takeA && !takeL {
			return
		}
		if takeA {
			p.deleteAllocation(a, aActive)
			a = nil
		}
		if takeL && p.room() {
			p.deleteClaim(l, lActive)
			l = nil
		}
	}
}

// activeAllocation returns the allocation record k, v as a candidate of
// planActive and whether it is active, or nil when it is planned already,
// not a record or damaged (then planned for quarantine).
func (p *pruneTx) activeAllocation(k, v []byte) (*candidate, bool) {
	if p.doomed[string(k)] || v == nil {
		return nil, false
	}
	r, err := decodeAllocation(k, v)
	if err != nil {
		p.damaged(bucketAllocations, k, v, err)
		p.excessA--
		return nil, false
	}
	return &candidate{key: bytes.Clone(k), index: inactiveKey(r), at: r.Time, size: int64(len(k) + len(v))}, r.Active()
}

// activeClaim is activeAllocation for a claim record.
func (p *pruneTx) activeClaim(k, v []byte) (*candidate, bool) {
	if p.doomedClaims[string(k)] || v == nil {
		return nil, false
	}
	r, err := decodeClaim(k, v)
	if err != nil {
		p.damaged(bucketClaims, k, v, err)
		p.excessL--
		return nil, false
	}
	return &candidate{key: bytes.Clone(k), index: claimInactiveKey(r), at: r.PreparedAt, size: int64(len(k) + len(v)), uid: r.UID}, r.Prepared()
}

// deleteAllocation plans the deletion of the allocation record a, and of
// its index entry, if any; active says that it is still active.
func (p *pruneTx) deleteAllocation(a *candidate, active bool) {
	p.delAllocs = append(p.delAllocs, a.key)
	if a.index != nil {
		p.delIndex = append(p.delIndex, a.index)
	}
	p.doomed[string(a.key)] = true
	p.excessA--
	p.excessB -= a.size
	p.result.Allocations++
	if active {
		p.result.ActiveAllocations++
	}
}

// deleteClaim plans the deletion of the claim record l, of its
// inactive_claims entry, if any, and of its uid's claim_uids entry when
// that names it; active says that it is still prepared.
func (p *pruneTx) deleteClaim(l *candidate, active bool) {
	p.delClaims = append(p.delClaims, l.key)
	if l.index != nil {
		p.delClaimIndex = append(p.delClaimIndex, l.index)
	}
	if uid := []byte(l.uid); len(uid) > 0 && bytes.Equal(p.claimUIDs.Get(uid), l.key) {
		p.delClaimUIDs = append(p.delClaimUIDs, uid)
	}
	p.doomedClaims[string(l.key)] = true
	p.excessL--
	p.excessB -= l.size
	p.result.Claims++
	if active {
		p.result.ActiveClaims++
	}
}

// nextInactive returns the oldest inactive allocation record not yet
// planned, from the inactive_allocations index, or nil. Index entries that
// no longer match a record are planned for deletion; damaged records for
// quarantine.
func (p *pruneTx) nextInactive() *candidate {
	for ; p.ik != nil && p.room(); p.ik, _ = p.ic.Next() {
		ik := bytes.Clone(p.ik)
		if len(ik) != 16 {
			p.delIndex = append(p.delIndex, ik)
			continue
		}
		key := ik[8:]
		v := p.allocs.Get(key)
		if v == nil || p.doomed[string(key)] {
			if v == nil {
				p.delIndex = append(p.delIndex, ik)
			}
			continue
		}
		r, err := decodeAllocation(key, v)
		if err != nil {
			p.delIndex = append(p.delIndex, ik)
			p.damaged(bucketAllocations, key, v, err)
			p.excessA--
			continue
		}
		if r.Active() || !bytes.Equal(inactiveKey(r), ik) { // stale entry
			p.delIndex = append(p.delIndex, ik)
			continue
		}
		p.ik, _ = p.ic.Next()
		return &candidate{key: bytes.Clone(key), index: ik, at: inactiveSince(r), size: int64(len(key) + len(v))}
	}
	return nil
}

// nextInactiveClaim returns the oldest unprepared claim record not yet
// planned, from the inactive_claims index, or nil, as nextInactive does
// for allocation records.
func (p *pruneTx) nextInactiveClaim() *candidate {
	for ; p.lk != nil && p.room(); p.lk, _ = p.lc.Next() {
		ik := bytes.Clone(p.lk)
		if len(ik) != 16 {
			p.delClaimIndex = append(p.delClaimIndex, ik)
			continue
		}
		key := ik[8:]
		v := p.claims.Get(key)
		if v == nil || p.doomedClaims[string(key)] {
			if v == nil {
				p.delClaimIndex = append(p.delClaimIndex, ik)
			}
			continue
		}
		r, err := decodeClaim(key, v)
		if err != nil {
			p.delClaimIndex = append(p.delClaimIndex, ik)
			p.damaged(bucketClaims, key, v, err)
			p.excessL--
			continue
		}
		if r.Prepared() || !bytes.Equal(claimInactiveKey(r), ik) { // stale entry
			p.delClaimIndex = append(p.delClaimIndex, ik)
			continue
		}
		p.lk, _ = p.lc.Next()
		return &candidate{key: bytes.Clone(key), index: ik, at: r.UnpreparedAt, size: int64(len(key) + len(v)), uid: r.UID}
	}
	return nil
}

// nextEvent returns the oldest health event not yet planned, or nil.
func (p *pruneTx) nextEvent() *candidate {
	for ; p.ek != nil && p.room(); p.ek, p.ev = p.ec.Next() {
		k, v := p.ek, p.ev
		if v == nil {
			continue
		}
		e, err := decodeEvent(k, v)
		if err != nil {
			p.damaged(bucketEvents, k, v, err)
			p.excessE--
			continue
		}
		c := &candidate{key: bytes.Clone(k), at: e.Time, size: int64(len(k) + len(v))}
		p.ek, p.ev = p.ec.Next()
		return c
	}
	return nil
}

// nextConfig returns the oldest configuration event not yet planned, or
// nil. The newest is never a candidate.
func (p *pruneTx) nextConfig() *candidate {
	for ; p.ck != nil && p.room(); p.ck, p.cv = p.cc.Next() {
		k, v := p.ck, p.cv
		if bytes.Equal(k, p.lastConfig) {
			return nil
		}
		if v == nil {
			continue
		}
		e, err := decodeConfigEvent(k, v)
		if err != nil {
			p.damaged(bucketConfig, k, v, err)
			p.excessC--
			continue
		}
		c := &candidate{key: bytes.Clone(k), at: e.Time, size: int64(len(k) + len(v))}
		p.ck, p.cv = p.cc.Next()
		return c
	}
	return nil
}

// oldest returns the index of the candidate that became inactive first
// (the first of those on a tie), or -1 when all are nil.
func oldest(cs ...*candidate) int {
	best := -1
	for i, c := range cs {
		if c != nil && (best < 0 || c.at.Before(cs[best].at)) {
			best = i
		}
	}
	return best
}

func (p *pruneTx) damaged(name, k, v []byte, err error) {
	switch string(name) {
	case string(bucketAllocations):
		p.doomed[string(k)] = true
	case string(bucketClaims):
		p.doomedClaims[string(k)] = true
	}
	p.bad = append(p.bad, damage{bucket: string(name), key: bytes.Clone(k), value: bytes.Clone(v), reason: reasonOf(err)})
	p.excessB -= int64(len(k) + len(v))
	p.result.Quarantined++
}

// apply carries out the plan.
func (p *pruneTx) apply() error {
	tx := p.allocs.Tx()
	for _, d := range p.bad {
		if err := p.s.quarantine(tx, []byte(d.bucket), d.key, d.value, &errRecord{d.reason}); err != nil {
			return err
		}
	}
	for _, del := range []struct {
		b    *bolt.Bucket
		keys [][]byte
	}{{p.allocs, p.delAllocs}, {p.index, p.delIndex}, {p.events, p.delEvents}, {p.configs, p.delConfigs},
		{p.claims, p.delClaims}, {p.claimIndex, p.delClaimIndex}, {p.claimUIDs, p.delClaimUIDs}} {
		for _, k := range del.keys {
			if err := del.b.Delete(k); err != nil {
				return fmt.Errorf("delete %x: %w", k, err)
			}
		}
	}
	return nil
}

// kvStats returns the number of keys in b and the bytes of its keys and
// values, from bbolt's page statistics: a leaf page's used bytes are its
// 16-byte header, a 16-byte header per element, and the keys and values.
// That reads page headers only, as counting the keys does, instead of
// every record.
func kvStats(b *bolt.Bucket) (n int, size int64) {
	st := b.Stats()
	used := st.LeafInuse + st.InlineBucketInuse
	pages := st.LeafPageN + st.InlineBucketN
	return st.KeyN, int64(used - boltPageHeaderSize*pages - boltElementSize*st.KeyN)
}

// inactiveSince is when an inactive allocation record became inactive:
// ReleasedAt, or Time when that is unset.
func inactiveSince(a Allocation) time.Time {
	if !a.ReleasedAt.IsZero() {
		return a.ReleasedAt
	}
	return a.Time
}

// inactiveKey is the inactive_allocations key of a: when it became inactive
// (Unix nanoseconds, sign bit flipped so that byte order is time order),
// then its sequence number. Nil for an active record.
func inactiveKey(a Allocation) []byte {
	if a.Active() {
		return nil
	}
	return sinceSeqKey(inactiveSince(a), a.Seq)
}

// sinceSeqKey is the 16-byte key of an index of inactive records: the time
// t in Unix nanoseconds with the sign bit flipped, so that byte order is
// time order, then the record's sequence number.
func sinceSeqKey(t time.Time, seq uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, uint64(t.UnixNano())^(1<<63))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

// indexAllocation keeps the inactive_allocations entry of a record in step
// with a change from old (nil for a new record) to a.
func indexAllocation(tx *bolt.Tx, old *Allocation, a Allocation) error {
	var oldKey []byte
	if old != nil {
		oldKey = inactiveKey(*old)
	}
	return moveIndexKey(tx, bucketInactive, oldKey, inactiveKey(a), "record", a.Seq)
}

// moveIndexKey replaces the entry oldKey of the index bucket name by
// newKey (either nil: none), for the record what seq.
func moveIndexKey(tx *bolt.Tx, name, oldKey, newKey []byte, what string, seq uint64) error {
	if bytes.Equal(oldKey, newKey) {
		return nil
	}
	idx, err := bucket(tx, name)
	if err != nil {
		return err
	}
	if oldKey != nil {
		if err := idx.Delete(oldKey); err != nil {
			return fmt.Errorf("unindex %s %d: %w", what, seq, err)
		}
	}
	if newKey != nil {
		if err := idx.Put(newKey, []byte{}); err != nil {
			return fmt.Errorf("index %s %d: %w", what, seq, err)
		}
	}
	return nil
}
