package store

import "errors"

// Sentinel errors returned (wrapped, with context) by this package. Compare
// with errors.Is, never by message: the messages carry the file name and other
// details and may change.
var (
	// ErrLocked means another process (or another Store in this process)
	// holds the state file open and Open gave up after Options.Timeout. It
	// wraps bbolt's timeout error (go.etcd.io/bbolt/errors.ErrTimeout). A
	// read-only Open also gets it while a writer holds the file.
	ErrLocked = errors.New("state file is held by another process")

	// ErrCorrupt means the state file is damaged (not a bbolt file, bad
	// checksums, truncated, or failing bbolt's consistency check) or is not a
	// state file at all. The message names the file and ends with
	// Options.RecoveryHint; MoveAside is the way out. The store never repairs
	// or deletes a damaged file itself.
	ErrCorrupt = errors.New("state file is corrupt")

	// ErrNewerSchema means the state file was written by a newer version of
	// the plugin, with a schema version this build does not know. The file is
	// left untouched; the message names both versions.
	ErrNewerSchema = errors.New("state file has a newer schema")

	// ErrUnknownDevice means a device id is not in the store (it was never
	// passed to Reconcile). Removed devices are known.
	ErrUnknownDevice = errors.New("unknown device")

	// ErrNotFound means no allocation record has the given sequence number,
	// or no claim record the given uid (it never existed or was pruned).
	ErrNotFound = errors.New("record not found")

	// ErrDamaged means the one record asked for (Device, Allocation,
	// SetHealth, UpdateAllocation, Claim, RecordClaimUnprepared) has a
	// stored value the store refuses: not JSON, or nonsense. Nothing was
	// changed; the message names the record and the reason, and
	// Store.Damaged lists it. Lists skip such records instead of failing,
	// and a read-write Open moves them into quarantine.
	ErrDamaged = errors.New("damaged record")

	// ErrInvalid means an argument was rejected before anything was written:
	// an empty or duplicate device id, index or UUID, an unknown allocation
	// state, a changed sequence number, a configuration event without a why,
	// a claim without uid, namespace or name.
	ErrInvalid = errors.New("invalid argument")

	// ErrNotRegularFile means the state path exists but is not a regular
	// file (after following symlinks): a directory, a device such as
	// /dev/null, a pipe or a socket. The message names the path, where a
	// symlink points and what it found. Nothing was opened or created.
	ErrNotRegularFile = errors.New("not a regular file")

	// ErrReadOnly means a write was attempted on a Store opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("store is read-only")

	// ErrClosed means the Store was used after Close.
	ErrClosed = errors.New("store is closed")
)
