package store

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MaxClaimUID bounds Claim.UID, in bytes: a ResourceClaim's uid is a
// 36-character UUID; the bound keeps the claim_uids index key far below
// bbolt's key limit.
const MaxClaimUID = 256

// ConsumerPods is ClaimConsumer.Resource for a pod, the consumer the
// kubelet prepares claims for.
const ConsumerPods = "pods"

// ClaimConsumer is one consumer a claim is reserved for (an entry of the
// ResourceClaim's status.reservedFor), in the claim's namespace: in
// practice a pod.
type ClaimConsumer struct {
	Resource string `json:"resource"` // the consumer's resource, ConsumerPods for a pod; required
	Name     string `json:"name"`     // required
	UID      string `json:"uid"`      // required, each consumer's once
}

// Claim is one ResourceClaim the DRA driver prepared on this node: what it
// was given, for whom, and when it was prepared and unprepared. A UID
// prepared again after it was unprepared gets a record of its own. The
// JSON tags are the on-disk format (see doc.go), not an output format: dump
// and the admin API have their own types. Values returned by the Store are
// copies the caller may modify.
type Claim struct {
	Seq uint64 `json:"seq"` // assigned by RecordClaimPrepared; increasing, never reused
	// UID is the ResourceClaim's metadata.uid; required, at most
	// MaxClaimUID bytes.
	UID string `json:"uid"`
	// Namespace and Name name the ResourceClaim; required.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// DeviceIDs are the devices allocated to the claim in this node's
	// pool, in device order; required, each a known device, once.
	DeviceIDs []string `json:"device_ids"`
	// AdminDeviceIDs are the devices of DeviceIDs the claim reaches with
	// admin access only (DRA's adminAccess: monitoring, not use): they are
	// not held by it, and another claim may hold them. Empty when none.
	AdminDeviceIDs []string `json:"admin_device_ids,omitempty"`
	// GPUIDs are the physical GPUs of DeviceIDs when some of them are
	// replicas, as Allocation.GPUIDs: RecordClaimPrepared sets it from the
	// device records; empty when no device is a replica (see GPUs).
	GPUIDs []string `json:"gpu_ids,omitempty"`
	// Envs is the environment the claim's containers get, stored so that
	// a retried Prepare, before or after a restart, answers the same.
	Envs map[string]string `json:"envs,omitempty"`
	// ReservedFor are the consumers the claim is reserved for, as the
	// claim said when it was prepared; empty when it named none.
	ReservedFor []ClaimConsumer `json:"reserved_for,omitempty"`
	// PreparedAt is when the claim was prepared.
	PreparedAt time.Time `json:"prepared_at"`
	// UnpreparedAt is when it was unprepared; zero while it is prepared.
	// Never before PreparedAt.
	UnpreparedAt time.Time `json:"unprepared_at,omitzero"`
}

// Prepared reports whether the claim is still prepared: UnpreparedAt is
// zero. A prepared claim is active: it holds its devices.
func (c Claim) Prepared() bool { return c.UnpreparedAt.IsZero() }

// Holds reports whether the claim holds device id: one of its devices it
// does not reach with admin access only.
func (c Claim) Holds(id string) bool {
	return slices.Contains(c.DeviceIDs, id) && !slices.Contains(c.AdminDeviceIDs, id)
}

// GPUs returns the physical GPUs of the claim: GPUIDs when set, else
// DeviceIDs (no device is a replica). The caller must not modify it.
func (c Claim) GPUs() []string {
	if len(c.GPUIDs) > 0 {
		return c.GPUIDs
	}
	return c.DeviceIDs
}

func (c Claim) clone() Claim {
	c.DeviceIDs = slices.Clone(c.DeviceIDs)
	c.GPUIDs = slices.Clone(c.GPUIDs)
	c.AdminDeviceIDs = slices.Clone(c.AdminDeviceIDs)
	c.Envs = maps.Clone(c.Envs)
	c.ReservedFor = slices.Clone(c.ReservedFor)
	return c
}

// ClaimFilter selects claim records, as AllocationFilter selects
// allocation records. The zero value selects all.
type ClaimFilter struct {
	// DeviceID selects the records including this device, or (a GPU id)
	// a replica of it (in GPUIDs); "" means all.
	DeviceID string
	Since    time.Time // only records with PreparedAt at or after this; zero means all
	Prepared bool      // only records still prepared (UnpreparedAt zero)
	Limit    int       // at most this many (the newest); 0 means no limit
}

func (f ClaimFilter) match(c Claim) bool {
	return (f.DeviceID == "" || slices.Contains(c.DeviceIDs, f.DeviceID) || slices.Contains(c.GPUIDs, f.DeviceID)) &&
		(f.Since.IsZero() || !c.PreparedAt.Before(f.Since)) &&
		(!f.Prepared || c.Prepared())
}

// RecordClaimPrepared stores a prepared claim and returns it as stored,
// with created true: with Seq assigned, PreparedAt set to now if zero,
// times in UTC, and GPUIDs set from the device records (the GPUs of its
// replicas; empty when none is a replica). The record is committed to disk
// before RecordClaimPrepared returns.
//
// Prepare is idempotent (the kubelet retries, and asks again after a
// restart): when the newest record of c.UID is still prepared,
// RecordClaimPrepared stores nothing and returns that record unchanged,
// with created false, whatever else c holds. A UID whose newest record was
// unprepared gets a new record. A damaged newest record is moved into
// quarantine and a new one stored.
//
// An empty UID, Namespace or Name, a UID over MaxClaimUID bytes, no device
// ids, an empty or repeated device id, a consumer without resource, name or
// uid or listed twice, or UnpreparedAt set is ErrInvalid; every device id
// must be known, removed devices included (ErrUnknownDevice).
func (s *Store) RecordClaimPrepared(c Claim) (stored Claim, created bool, err error) {
	const op = "record claim prepared"
	c = c.clone()
	c.Seq, c.GPUIDs = 0, nil
	c.PreparedAt = s.stamp(c.PreparedAt)
	if !c.UnpreparedAt.IsZero() {
		return Claim{}, false, fmt.Errorf("%s: claim %q: unprepared time set on a claim being prepared: %w", op, c.UID, ErrInvalid)
	}
	if err := validateClaim(c); err != nil {
		return Claim{}, false, fmt.Errorf("%s: claim %q: %w", op, c.UID, err)
	}
	err = s.update(op, func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketClaims)
		if err != nil {
			return err
		}
		uids, err := bucket(tx, bucketClaimUIDs)
		if err != nil {
			return err
		}
		if k, v := newestClaimValue(b, uids, c.UID); v != nil {
			old, err := decodeClaim(k, v)
			switch {
			case err != nil:
				if err := s.quarantine(tx, bucketClaims, k, v, err); err != nil {
					return err
				}
			case old.UID == c.UID && old.Prepared():
				stored = old
				return errRollback // nothing to write
			}
		}
		if c.GPUIDs, err = gpusOf(tx, c.DeviceIDs); err != nil {
			return fmt.Errorf("claim %q: %w", c.UID, err)
		}
		b.FillPercent = appendFillPercent
		if c.Seq, err = b.NextSequence(); err != nil {
			return fmt.Errorf("next claim sequence: %w", err)
		}
		if err := putJSON(b, u64(c.Seq), c); err != nil {
			return err
		}
		if err := uids.Put([]byte(c.UID), u64(c.Seq)); err != nil {
			return fmt.Errorf("index claim %q: %w", c.UID, err)
		}
		stored, created = c, true
		return nil
	})
	switch {
	case isRollback(err):
		return stored.clone(), false, nil
	case err != nil:
		return Claim{}, false, err
	}
	return stored.clone(), true, nil
}

// RecordClaimUnprepared marks the newest record of uid unprepared at at
// (now if zero), committed to disk before it returns, and returns the
// record as stored with changed true. Unprepare is idempotent: when uid
// has no record, or its newest record is unprepared already, nothing is
// written and changed is false (with the record, if there is one; not an
// error). An at before the record's PreparedAt is ErrInvalid; now before it
// (the clock stepped back) is taken as PreparedAt. An empty uid is
// ErrInvalid; a damaged record is ErrDamaged, and stays where it is until
// the next Open quarantines it.
func (s *Store) RecordClaimUnprepared(uid string, at time.Time) (c Claim, changed bool, err error) {
	const op = "record claim unprepared"
	if uid == "" {
		return Claim{}, false, fmt.Errorf("%s: no uid: %w", op, ErrInvalid)
	}
	given := !at.IsZero()
	at = s.stamp(at)
	return s.changePrepared(op, uid, func(tx *bolt.Tx, b *bolt.Bucket, c *Claim) error {
		old := c.clone()
		if at.Before(c.PreparedAt) {
			if given {
				return fmt.Errorf("claim %q: unprepared at %s, before it was prepared at %s: %w",
					uid, at.Format(time.RFC3339Nano), c.PreparedAt.Format(time.RFC3339Nano), ErrInvalid)
			}
			at = c.PreparedAt
		}
		c.UnpreparedAt = at
		if err := putJSON(b, u64(c.Seq), *c); err != nil {
			return err
		}
		return indexClaim(tx, &old, *c)
	})
}

// changePrepared runs change on the newest record of uid in one update
// transaction, if it is prepared, and returns the record as change left it
// with changed true. No record, or one not prepared, changes nothing
// (changed false, not an error); change returning errRollback neither. A
// damaged record is ErrDamaged.
func (s *Store) changePrepared(op, uid string, change func(tx *bolt.Tx, b *bolt.Bucket, c *Claim) error) (c Claim, changed bool, err error) {
	err = s.update(op, func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketClaims)
		if err != nil {
			return err
		}
		uids, err := bucket(tx, bucketClaimUIDs)
		if err != nil {
			return err
		}
		if c, err = s.newestClaim(b, uids, uid); err != nil {
			c = Claim{}
			if isNotFound(err) {
				return errRollback
			}
			return err
		}
		if !c.Prepared() {
			return errRollback
		}
		if err := change(tx, b, &c); err != nil {
			return err
		}
		changed = true
		return nil
	})
	switch {
	case isRollback(err):
		return c.clone(), false, nil
	case err != nil:
		return Claim{}, false, err
	}
	return c.clone(), changed, nil
}

// SetClaimConsumers replaces the consumers of the prepared claim uid with
// rs (the claim's status.reservedFor as the API server has it now: a shared
// claim is reserved for more pods than the one it was prepared for, and the
// kubelet prepares it once), committed to disk before it returns, and
// returns the record with changed true. The same consumers, a claim not
// prepared, or no record change nothing (changed false, not an error). An
// empty uid or an invalid consumer is ErrInvalid; a damaged record
// ErrDamaged.
func (s *Store) SetClaimConsumers(uid string, rs []ClaimConsumer) (c Claim, changed bool, err error) {
	const op = "set claim consumers"
	if uid == "" {
		return Claim{}, false, fmt.Errorf("%s: no uid: %w", op, ErrInvalid)
	}
	rs = slices.Clone(rs)
	return s.changePrepared(op, uid, func(_ *bolt.Tx, b *bolt.Bucket, c *Claim) error {
		if slices.Equal(c.ReservedFor, rs) {
			return errRollback
		}
		c.ReservedFor = rs
		if err := validateClaim(*c); err != nil {
			return fmt.Errorf("claim %q: %w", uid, err)
		}
		return putJSON(b, u64(c.Seq), *c)
	})
}

// Claim returns the newest record of the claim uid, prepared or not, from
// the claim_uids index (no walk of the history), or an error wrapping
// ErrNotFound (never prepared, or pruned), or ErrDamaged if its stored
// value is damaged.
func (s *Store) Claim(uid string) (Claim, error) {
	var c Claim
	err := s.view("get claim", func(tx *bolt.Tx) error {
		b, uids := tx.Bucket(bucketClaims), tx.Bucket(bucketClaimUIDs)
		if b == nil || uids == nil { // an older file, read-only
			return fmt.Errorf("claim %q: %w", uid, ErrNotFound)
		}
		var err error
		c, err = s.newestClaim(b, uids, uid)
		return err
	})
	return c, err
}

// Claims returns the claim records selected by f, newest (highest Seq)
// first. Damaged records are skipped (see Damaged). A read-only Store of a
// file from before schema version 5 has none.
func (s *Store) Claims(f ClaimFilter) ([]Claim, error) {
	return listNewest(s, "list claims", bucketClaims, f.Limit, decodeClaim,
		func(c *Claim) bool { return f.match(*c) })
}

// PreparedClaims returns the claims still prepared, newest first: what a
// restarted driver reconciles with the claims the kubelet still has. It is
// Claims(ClaimFilter{Prepared: true}).
func (s *Store) PreparedClaims() ([]Claim, error) {
	return s.Claims(ClaimFilter{Prepared: true})
}

// ClaimedDevices returns the device ids claims hold, as a set.
func ClaimedDevices(claims []Claim) map[string]bool {
	out := map[string]bool{}
	for _, c := range claims {
		for _, id := range c.DeviceIDs {
			out[id] = true
		}
	}
	return out
}

// newestClaimValue returns the key and value of the record the claim_uids
// index names for uid, or nil ones when there is none.
func newestClaimValue(b, uids *bolt.Bucket, uid string) (k, v []byte) {
	if uid == "" {
		return nil, nil
	}
	seq := uids.Get([]byte(uid))
	if len(seq) != 8 {
		return nil, nil
	}
	k = bytes.Clone(seq)
	return k, b.Get(k)
}

// newestClaim returns the newest record of uid: ErrNotFound when the index
// names none, or a record of another uid (a stale entry); ErrDamaged,
// noted for Damaged, when the record is damaged.
func (s *Store) newestClaim(b, uids *bolt.Bucket, uid string) (Claim, error) {
	k, v := newestClaimValue(b, uids, uid)
	if v == nil {
		return Claim{}, fmt.Errorf("claim %q: %w", uid, ErrNotFound)
	}
	c, err := decodeClaim(k, v)
	if err != nil {
		s.noteDamaged(bucketClaims, k, v, err)
		return Claim{}, fmt.Errorf("claim %q (record %d): %w: %w", uid, be(k), ErrDamaged, err)
	}
	if c.UID != uid {
		return Claim{}, fmt.Errorf("claim %q: %w", uid, ErrNotFound)
	}
	return c, nil
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// validateClaim checks what every stored claim must satisfy.
func validateClaim(c Claim) error {
	switch {
	case c.UID == "":
		return fmt.Errorf("no uid: %w", ErrInvalid)
	case len(c.UID) > MaxClaimUID:
		return fmt.Errorf("uid is %d bytes, at most %d: %w", len(c.UID), MaxClaimUID, ErrInvalid)
	case c.Namespace == "":
		return fmt.Errorf("no namespace: %w", ErrInvalid)
	case c.Name == "":
		return fmt.Errorf("no name: %w", ErrInvalid)
	case c.PreparedAt.IsZero():
		return fmt.Errorf("no prepared time: %w", ErrInvalid)
	case !c.UnpreparedAt.IsZero() && c.UnpreparedAt.Before(c.PreparedAt):
		return fmt.Errorf("unprepared at %s, before it was prepared at %s: %w",
			c.UnpreparedAt.Format(time.RFC3339Nano), c.PreparedAt.Format(time.RFC3339Nano), ErrInvalid)
	}
	if err := validateDeviceIDs(c.DeviceIDs); err != nil {
		return err
	}
	if err := validateGPUIDs(c.GPUIDs); err != nil {
		return err
	}
	for i, id := range c.AdminDeviceIDs {
		switch {
		case !slices.Contains(c.DeviceIDs, id):
			return fmt.Errorf("admin device %q is not one of the claim's devices: %w", id, ErrInvalid)
		case slices.Contains(c.AdminDeviceIDs[:i], id):
			return fmt.Errorf("admin device %q listed twice: %w", id, ErrInvalid)
		}
	}
	seen := make(map[string]bool, len(c.ReservedFor))
	for i, r := range c.ReservedFor {
		switch {
		case r.Resource == "" || r.Name == "" || r.UID == "":
			return fmt.Errorf("consumer %d (%s %q, uid %q): resource, name and uid are required: %w", i, r.Resource, r.Name, r.UID, ErrInvalid)
		case seen[r.UID]:
			return fmt.Errorf("consumer uid %q listed twice: %w", r.UID, ErrInvalid)
		}
		seen[r.UID] = true
	}
	return nil
}

// claimInactiveKey is the inactive_claims key of c: when it was
// unprepared, then its sequence number (see inactiveKey). Nil for a
// prepared claim.
func claimInactiveKey(c Claim) []byte {
	if c.Prepared() {
		return nil
	}
	return sinceSeqKey(c.UnpreparedAt, c.Seq)
}

// indexClaim keeps the inactive_claims entry of a record in step with a
// change from old (nil for a new record) to c.
func indexClaim(tx *bolt.Tx, old *Claim, c Claim) error {
	var oldKey []byte
	if old != nil {
		oldKey = claimInactiveKey(*old)
	}
	return moveIndexKey(tx, bucketInactiveClaims, oldKey, claimInactiveKey(c), "claim record", c.Seq)
}
