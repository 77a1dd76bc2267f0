// Package store keeps the plugin's durable state in one bbolt file: the
// virtual devices with their health and GPU UUIDs, the history of health
// changes, the history of configuration changes, the history of
// allocations handed to the kubelet, and the history of the claims the DRA
// driver prepared. The file lives on a hostPath
// and survives plugin restarts. The package imports nothing else from the
// project and logs nothing: it returns errors (see errors.go) and reports
// (ReconcileReport, Stats) for the caller to log.
//
// # Lifetime and concurrency
//
// Open returns a *Store holding an exclusive lock on the file until Close;
// a second opener fails with ErrLocked after Options.Timeout instead of
// hanging. A read-only Store (Options.ReadOnly, for the dump subcommand while
// the plugin is stopped) takes a shared lock and never writes. A Store is
// safe for concurrent use. Every write method runs one bbolt transaction,
// committed and fsynced before it returns. Read methods return copies that
// outlive their transaction.
//
// # Write failures
//
// A write whose commit fails (disk full, I/O error) changes nothing and
// returns the error, which names the operation once and then the file, e.g.
// "record allocation: write /var/lib/virtual-gpu/state.db: no space left on
// device". Store.Writable reports such a failure for a readiness probe until
// a write succeeds again, probing by itself at most once a second so that it
// recovers without traffic. The probe leaves the content as it was: on Linux
// it reserves disk space for a few pages past the data (fallocate, keeping
// the file size), then adds and deletes a record in one transaction, which
// rewrites the pages a new allocation record touches. A small write alone
// would pass on a full disk where a real one does not.
//
// # Damage
//
// Open checks the file before trusting it. Holding the file lock, it first
// reads the file with plain reads (no mapping): a valid meta page, a length
// covering every page the meta page claims (truncation), a sane freelist
// page, and a page tree that stays inside the file with no page reached
// twice. Only then does bbolt map the file, and bbolt's Tx.Check runs.
// Damage found at any step, and any panic or memory fault inside bbolt, is
// returned as ErrCorrupt naming the file and ending with
// Options.RecoveryHint. Open is built so that a damaged file does not panic,
// hang or crash it (FuzzOpen exercises this). A damaged file is never
// repaired or deleted: MoveAside renames it to "<path>.corrupt-<UTC time>"
// and the next Open starts fresh. A meta page with a bad checksum is not
// damage when the other one is good (bbolt keeps two and falls back, as
// after a crash during a commit); a zeroed meta page fails bbolt's check and
// is damage. A path that is not a regular file (a directory, /dev/null
// through a symlink) is refused before bbolt sees it, with
// ErrNotRegularFile. An existing empty file (zero bytes) holds nothing to
// lose: read-write it is initialised as a new file and Store.FoundEmpty
// reports it, for the caller to say so; read-only it is ErrCorrupt.
//
// # Damaged records
//
// One bad record must not hide the rest. Open also checks every record
// value (devices, allocations, health_events, config_events, claims): it
// must be a JSON object that decodes into its type and makes sense (a
// device's "id" and a record's "seq" match the key, times are set, an
// allocation has device ids and a known state, a health event a device id,
// a configuration event a "why", a claim a uid, namespace, name, device ids
// and no "unprepared_at" before its "prepared_at", no negative count and no
// empty or repeated device id). A read-write Open moves every value
// that fails into the quarantine bucket, with its original bytes, the bucket
// and key it came from, the reason and the time, deleting it from its bucket,
// all in one transaction; a file without damage is not written. A read-only
// Open writes nothing and remembers what it found. Store.Damaged lists both,
// so that the plugin can log and dump can show them. Every reader decodes
// with the same checks and skips (and reports through Damaged) a value
// damaged after Open, instead of failing the whole list; the calls that ask
// for one record return ErrDamaged for it; the write transactions that walk
// records (Reconcile over the devices, Prune over the oldest history,
// RecordClaimPrepared over the newest record of its uid) quarantine one
// they meet. A quarantined device is no longer
// known: Reconcile adds it again as new, healthy, and lists it in
// ReconcileReport.Recreated. Quarantine entries are never pruned.
//
// # Device identity
//
// A device's "uuid" is its GPU UUID, which the caller derives (from the
// node's identity and the device id) and passes in DeviceSpec.UUID. The
// store keeps the first one it is given, for good: Reconcile stores it for a
// device that has none (a new device, or one of a file from before version
// 3) and never replaces it. A spec with another UUID (a renamed node, a
// changed derivation) leaves the stored one and is reported in
// ReconcileReport.UUIDConflicts. A removed device keeps its UUID and has it
// again when restored. A device recreated after its record was damaged gets
// the UUID of its spec (the same, when the derivation has not changed).
//
// # Shared GPUs (replicas)
//
// A GPU shared by time-slicing is advertised as replicas, each a device of
// its own (version 4): its record names its GPU ("gpu", the GPU's id) and
// its number ("replica"), has the GPU's index and NUMA node and no UUID.
// The GPU keeps its own record, configured (not removed) while its
// replicas are, with the UUID and the health: health is per GPU. A
// replica record's own "healthy", "reason" and "since" are those of when it
// was added and are never read: Devices and Device return the GPU's for
// it, SetHealth refuses a replica (ErrInvalid), health events name GPUs
// only, and Reconcile adds a replica without a health event. Reconcile
// treats replicas as any device otherwise: a replica no longer configured
// (sharing off, fewer replicas) is flagged removed, one configured again
// is restored, so allocation records and configuration events keep
// resolving their ids, and the ids of a GPU's history stay GPU ids. An
// allocation record with replica ids lists their GPUs in "gpu_ids"
// (RecordAllocation derives them from the device records);
// AllocationFilter.DeviceID with a GPU id selects the records of its
// replicas too.
//
// # Claims (version 5)
//
// The DRA driver records every ResourceClaim it prepares (Claim): its uid,
// namespace and name, its devices (and their GPUs, as an allocation's), the
// environment its containers get, the consumers it is reserved for, and
// when it was prepared and unprepared. RecordClaimPrepared is idempotent: a
// claim whose newest record is still prepared is answered with that record,
// so that the kubelet's retry and a restarted driver get the same answer;
// a uid unprepared and prepared again gets a new record, so the history
// keeps both. The claim_uids index names each uid's newest record, so that
// Claim, RecordClaimPrepared and RecordClaimUnprepared find it without
// walking the history. Claims are history as allocations are: an
// unprepared claim is the released kind, a prepared one is active.
//
// # MIG devices (version 6)
//
// A MIG device is a child of its GPU as a replica is ("gpu" names the GPU,
// "replica" a number unique among its GPU's MIG devices) with its profile
// in "mig" and a "uuid" of its own (MIG-…). It has its GPU's health; a
// layout that no longer has it flags it removed, and one that places the
// same profile at the same slice again restores it, UUID and history kept.
// An allocation or claim of MIG devices lists their GPUs in "gpu_ids", so
// its records show under the GPU. A configuration event says the MIG
// strategy ("mig_strategy") and layout ("mig_layout") in force.
//
// # Schema (version 6)
//
// Top-level buckets; integers in keys are 8-byte big-endian, so byte order
// is numeric order; values are JSON objects with snake_case keys and RFC 3339
// times in UTC, omitting unset optional fields:
//
//	meta                  "schema_version" -> uint64 (8 bytes big-endian), = SchemaVersion
//	devices               device id        -> Device      {"id","index","numa","healthy","reason","since","removed","removed_at",
//	                                                       "uuid" (version 3), "gpu","replica" (version 4), "mig" (version 6)}
//	allocations           seq (uint64)     -> Allocation  {"seq","time","device_ids","gpu_ids" (version 4),"envs","state",
//	                                                       "namespace","pod","container","held_since","released_at"}
//	health_events         seq (uint64)     -> HealthEvent {"seq","time","device_id","healthy","reason","cause"}
//	quarantine            seq (uint64)     -> entry       {"bucket","key","value","reason","time"}      (version 2)
//	inactive_allocations  since+seq        -> empty       (16-byte key, see below)                       (version 2)
//	config_events         seq (uint64)     -> ConfigEvent {"seq","time","profile","previous_profile","why","detail",
//	                                                       "resource_name","machine","devices","replicas",
//	                                                       "mig_strategy","mig_layout" (version 6),
//	                                                       "added","removed","restored"}                 (version 3)
//	claims                seq (uint64)     -> Claim       {"seq","uid","namespace","name","device_ids","gpu_ids",
//	                                                       "envs","reserved_for":[{"resource","name","uid"}],
//	                                                       "prepared_at","unprepared_at"}                (version 5)
//	claim_uids            uid              -> seq (uint64, 8 bytes big-endian)                           (version 5)
//	inactive_claims       since+seq        -> empty       (16-byte key, as inactive_allocations)         (version 5)
//
// Sequence numbers come from the bucket's NextSequence: they start at 1, only
// grow and are never reused, even after Prune deletes the oldest records. The
// key is authoritative; "seq" inside the value is a copy for readers of the
// JSON and must match it, as a device's "id" must match its key. Devices are
// never deleted (a damaged one is moved to quarantine): a device no longer
// configured is flagged "removed" by Reconcile, so history always resolves
// its ids. Allocation
// "state" is one of allocated, held, released, abandoned. A configuration
// event records a configuration taking effect: the "profile" in force ("" or
// absent: none, flags only) and the one before, "why" it was chosen
// (node-label, file-changed, default, flags, or another short string), an
// optional "detail", the "resource_name", the "machine" (topology) name, the
// number of "devices" advertised (a shared GPU counting as its replicas)
// and of "replicas" per GPU (absent: not shared), and
// the device ids Reconcile "added", flagged "removed" and "restored" for it;
// every id names a device of the devices bucket. A claim record's "uid"
// is the ResourceClaim's metadata.uid (at most MaxClaimUID bytes),
// "device_ids" name devices of the devices bucket in the order of the
// claim's devices, "reserved_for" lists the claim's consumers ("resource"
// "pods" for a pod, its "name" and "uid"), and "unprepared_at" is absent
// while the claim is prepared. A quarantine entry holds a damaged record:
// "bucket" it came from, its "key" and "value" bytes exactly as found
// (base64, as JSON encodes bytes), the "reason" it was refused and the
// "time" it was moved.
//
// inactive_allocations indexes the allocation records no longer active
// (released or abandoned) by when they became so: the key is that time
// (ReleasedAt, or Time when unset) in Unix nanoseconds with the sign bit
// flipped, so that byte order is time order, followed by the record's seq.
// Every write of an allocation record updates it in the same transaction; it
// is derived data, and a read-write Open brings it back in step with the
// records if it is not. Prune walks it to delete inactive records first
// without decoding every record. inactive_claims is the same index for the
// claim records, keyed by "unprepared_at". claim_uids maps each uid to the
// seq of its newest record; every write of a claim record updates it in
// the same transaction, Prune deletes a uid's entry with the record it
// names, and a read-write Open brings both indexes back in step with the
// records (an entry that names no record or an older one of its uid is
// replaced).
//
// Records written by earlier builds may carry an "annotations" object in
// allocations; readers ignore it and a rewrite drops it. The JSON tags of
// Device, Allocation, HealthEvent, ConfigEvent and Claim describe this file
// format only; they are nobody's output format.
//
// # Versions and migration
//
// A file whose schema version is above SchemaVersion is refused with
// ErrNewerSchema, naming both versions, and left untouched. An older file is
// migrated by Open (read-write only) by running the steps of the migration
// table in order inside one transaction, so a failed migration changes
// nothing. Version 0 is a file without a meta bucket: one bbolt has just
// created, or one from a pre-release build with the version-1 buckets and
// values but no version; the 0→1 step creates the missing buckets and
// refuses a file holding any other bucket (ErrCorrupt: not a state file).
// The 1→2 step creates the quarantine bucket and builds the
// inactive_allocations index. The 2→3 step creates the config_events bucket;
// device records keep their format (the "uuid" field is optional), and the
// devices of an upgraded file get their UUIDs at the next Reconcile, which
// lists them in ReconcileReport.UUIDsAssigned. The 3→4 step writes nothing
// but the version: the fields of replicas and their allocations are
// optional, and a build of version 3 must not take replica records for
// GPUs. The 4→5 step creates the claims, claim_uids and inactive_claims
// buckets, empty; every other bucket keeps its keys and values as they
// are. The 5→6 step writes nothing but the version: MIG device records
// and the configuration events' MIG fields are optional, and a build of
// version 5 must not take MIG records for replicas. A read-only Store reads an older file as it is (a missing bucket
// reads as empty: a file of version 4 has no claims). To change the
// layout, bump SchemaVersion and append a step; never edit a shipped step.
//
// # Retention
//
// History grows with every Allocate, claim prepared, health change and
// configuration change. Prune deletes records beyond a count per kind
// (PruneOptions.MaxRecords), beyond a byte size of the four kinds together
// (MaxBytes: keys plus JSON values, as Stats.HistoryBytes reports; the file
// is about twice that, from bbolt's page overhead and free pages) and
// inactive records older than an age (MaxAge, counted from when they became
// inactive), in small transactions, oldest first across the kinds. The
// newest configuration event is never deleted: it describes the
// configuration in force. What is still active is kept: records of
// allocations in state allocated or held, and of claims still prepared, go
// only after every inactive record (released or abandoned allocations,
// unprepared claims, health and configuration events) that a limit could
// take instead, oldest first, and never for their age; only when nothing
// but active records is left over a count or byte limit are the oldest of
// them deleted (by when they were recorded, across the two kinds), so that
// the file stays bounded when every record stays allocated (the lifecycle
// tracker off). Counting bytes reads bbolt's page statistics, as counting
// records does, not every record. bbolt reuses the freed pages, so with
// periodic pruning the file size plateaus (it never shrinks). A Pruner runs
// Prune off the caller's path: at start, every PrunerConfig.Interval, and
// after Kick at most once per MinGap.
package store
