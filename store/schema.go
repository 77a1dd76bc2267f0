package store

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is the layout version this build reads and writes. Open
// migrates files with a smaller version (see doc.go) and refuses files with a
// larger one (ErrNewerSchema).
const SchemaVersion = 6

// Bucket and key names. They are part of the on-disk format: never rename them
// without a migration step.
var (
	bucketMeta           = []byte("meta")
	bucketDevices        = []byte("devices")
	bucketAllocations    = []byte("allocations")
	bucketEvents         = []byte("health_events")
	bucketQuarantine     = []byte("quarantine")           // since version 2
	bucketInactive       = []byte("inactive_allocations") // since version 2
	bucketConfig         = []byte("config_events")        // since version 3
	bucketClaims         = []byte("claims")               // since version 5
	bucketClaimUIDs      = []byte("claim_uids")           // since version 5
	bucketInactiveClaims = []byte("inactive_claims")      // since version 5

	keySchemaVersion = []byte("schema_version")
)

// appendFillPercent is the page fill for the history buckets, whose keys
// only grow: bbolt's default (0.5) splits pages half full, which for
// append-only keys leaves every page half empty.
const appendFillPercent = 0.9

// dataBuckets are the buckets holding records; with bucketMeta they are every
// top-level bucket a version-1 file has.
var dataBuckets = [][]byte{bucketDevices, bucketAllocations, bucketEvents}

// recordBuckets are the buckets whose values are records Open checks (and
// quarantines when damaged): dataBuckets, config_events (since version 3)
// and claims (since version 5).
var recordBuckets = [][]byte{bucketDevices, bucketAllocations, bucketEvents, bucketConfig, bucketClaims}

// currentBuckets are every top-level bucket a file of SchemaVersion has.
var currentBuckets = [][]byte{bucketMeta, bucketDevices, bucketAllocations, bucketEvents, bucketQuarantine, bucketInactive, bucketConfig,
	bucketClaims, bucketClaimUIDs, bucketInactiveClaims}

// migration is one step of the schema history: it turns a file of version
// from into a file of version from+1. Steps run inside the single read-write
// transaction that Open uses for the whole migration, so a failing step leaves
// the file as it was.
type migration struct {
	from  int
	name  string
	apply func(tx *bolt.Tx) error
}

// migrations is the schema history, one step per version, in order. Append a
// step (and bump SchemaVersion) for every layout change; never edit a step
// that has shipped.
var migrations = []migration{
	{from: 0, name: "create buckets and record the schema version", apply: migrateV0toV1},
	{from: 1, name: "create the quarantine bucket and index inactive allocations", apply: migrateV1toV2},
	{from: 2, name: "create the config_events bucket", apply: migrateV2toV3},
	{from: 3, name: "admit replica device records and allocation GPU ids", apply: migrateV3toV4},
	{from: 4, name: "create the claims bucket and its indexes", apply: migrateV4toV5},
	{from: 5, name: "admit MIG device records", apply: migrateV5toV6},
}

// migrateV0toV1 adopts a version-0 file: one without a meta bucket. That is a
// file bbolt has just created (no buckets at all) or one written by a
// pre-release build, which used the version-1 buckets and value formats but
// recorded no version. Any other top-level bucket means the file belongs to
// something else, and it is refused rather than adopted.
func migrateV0toV1(tx *bolt.Tx) error {
	known := map[string]bool{}
	for _, name := range dataBuckets {
		known[string(name)] = true
	}
	err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		if !known[string(name)] {
			return fmt.Errorf("%w: unexpected bucket %q: not a state file", ErrCorrupt, name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, name := range dataBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %q: %w", name, err)
		}
	}
	return nil
}

// migrateV1toV2 creates the quarantine bucket, where Open moves damaged
// records, and the inactive_allocations index, filled from the allocation
// records (damaged ones are left to Open's record check). Values keep their
// format.
func migrateV1toV2(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketQuarantine, bucketInactive} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %q: %w", name, err)
		}
	}
	allocs := tx.Bucket(bucketAllocations)
	var keys [][]byte
	err := allocs.ForEach(func(k, v []byte) error {
		if a, err := decodeAllocation(k, v); err == nil && !a.Active() {
			keys = append(keys, inactiveKey(a))
		}
		return nil
	})
	if err != nil {
		return err
	}
	idx := tx.Bucket(bucketInactive)
	idx.FillPercent = appendFillPercent
	for _, k := range keys {
		if err := idx.Put(k, []byte{}); err != nil {
			return fmt.Errorf("index inactive allocations: %w", err)
		}
	}
	return nil
}

// migrateV2toV3 creates the config_events bucket. Device records keep their
// format: the "uuid" field they gain in version 3 is optional, and Reconcile
// stores it for a device that has none, so a device of an upgraded file gets
// its UUID at the next Reconcile rather than here (the store does not derive
// UUIDs; its caller does).
func migrateV2toV3(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketConfig); err != nil {
		return fmt.Errorf("create bucket %q: %w", bucketConfig, err)
	}
	return nil
}

// migrateV3toV4 changes nothing stored: version 4 adds optional fields
// ("gpu" and "replica" of replica device records, "gpu_ids" of allocation
// records) that a file of version 3 lacks and reads correctly without. The
// version is bumped so that a build of version 3, which would take replica
// records for GPUs of their own (and show them with a health of their own),
// refuses the file instead.
func migrateV3toV4(*bolt.Tx) error { return nil }

// migrateV4toV5 creates the buckets of the DRA driver's claim records: claims
// and its two indexes, claim_uids and inactive_claims, all empty (a file of
// version 4 has no claim). Every other bucket and record stays as it is.
func migrateV4toV5(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketClaims, bucketClaimUIDs, bucketInactiveClaims} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %q: %w", name, err)
		}
	}
	return nil
}

// readVersion returns the schema version recorded in tx: 0 when there is no
// meta bucket.
func readVersion(tx *bolt.Tx) (int, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return 0, nil
	}
	v := meta.Get(keySchemaVersion)
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: meta bucket has no valid %q (%d bytes)", ErrCorrupt, keySchemaVersion, len(v))
	}
	n := binary.BigEndian.Uint64(v)
	if n > 1<<31 {
		return 0, fmt.Errorf("%w: implausible schema version %d", ErrCorrupt, n)
	}
	return int(n), nil
}

// writeVersion records version v in tx, creating the meta bucket if needed.
func writeVersion(tx *bolt.Tx, v int) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return fmt.Errorf("create bucket %q: %w", bucketMeta, err)
	}
	if err := meta.Put(keySchemaVersion, u64(uint64(v))); err != nil {
		return fmt.Errorf("write schema version: %w", err)
	}
	return nil
}

// migrate brings the file in tx from its recorded version up to target by
// running the steps of table in order, recording the version after each. It
// returns the version found. A version above target is ErrNewerSchema; a gap
// in table is an error. migrate writes nothing when the file is at target.
func migrate(tx *bolt.Tx, table []migration, target int) (from int, err error) {
	from, err = readVersion(tx)
	if err != nil {
		return 0, err
	}
	if from > target {
		return from, newerSchemaError(from, target)
	}
	for v := from; v < target; v++ {
		step, ok := findStep(table, v)
		if !ok {
			return from, fmt.Errorf("no migration from schema version %d", v)
		}
		if err := step.apply(tx); err != nil {
			return from, fmt.Errorf("migrate schema %d -> %d (%s): %w", v, v+1, step.name, err)
		}
		if err := writeVersion(tx, v+1); err != nil {
			return from, err
		}
	}
	return from, nil
}

func findStep(table []migration, from int) (migration, bool) {
	for _, m := range table {
		if m.from == from {
			return m, true
		}
	}
	return migration{}, false
}

func newerSchemaError(file, supported int) error {
	return fmt.Errorf("%w: file has schema version %d, this build supports up to %d; upgrade the plugin or move the file aside",
		ErrNewerSchema, file, supported)
}

// u64 encodes n as an 8-byte big-endian key, so byte order is numeric order.
func u64(n uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, n)
	return b
}

// be decodes an 8-byte big-endian key written by u64.
func be(k []byte) uint64 { return binary.BigEndian.Uint64(k) }

// migrateV5toV6 changes nothing stored: version 6 adds optional fields
// ("mig" of MIG device records, which also carry a "uuid" of their own,
// and "mig_strategy" and "mig_layout" of configuration events) that a file
// of version 5 lacks and reads correctly without. The version is bumped so
// that a build of version 5, which would take a MIG device record for a
// replica with a UUID it must not have, refuses the file instead.
func migrateV5toV6(*bolt.Tx) error { return nil }
