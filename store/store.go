package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DefaultTimeout is how long Open waits for another process to release the
// state file when Options.Timeout is zero.
const DefaultTimeout = time.Second

// DefaultRecoveryHint ends ErrCorrupt messages when Options.RecoveryHint is
// empty.
const DefaultRecoveryHint = "move it aside and start fresh"

// Options configure Open. The zero value opens read-write, waits
// DefaultTimeout for the file lock and uses the wall clock.
type Options struct {
	// Timeout bounds the wait for the file lock held by another process.
	// Zero or negative means DefaultTimeout (1s); Open never waits forever.
	Timeout time.Duration

	// ReadOnly opens an existing file for inspection: nothing is written,
	// no directory or file is created, no migration runs, and a missing file
	// is an error wrapping fs.ErrNotExist. Read-only opens share the lock
	// with each other but not with a writer: while the plugin runs they fail
	// with ErrLocked. Default false.
	ReadOnly bool

	// RecoveryHint ends the message of ErrCorrupt errors and should tell the
	// operator how to get going again, e.g. "start with -state-move-aside to
	// move it aside and start fresh". Empty means DefaultRecoveryHint.
	RecoveryHint string

	// Now is the clock used to stamp records whose time is unset and to
	// space Writable's probe writes. Nil means time.Now.
	Now func() time.Time
}

// Store is an open state file. It is safe for concurrent use by multiple
// goroutines: reads run in parallel, writes are serialized by bbolt, and each
// write is committed and fsynced in its own transaction before the method
// returns. A Store holds an exclusive lock on its file (a shared one when read
// only) until Close. The zero Store is not usable; get one from Open.
type Store struct {
	db           *bolt.DB
	file         *os.File // db's file, owned by db
	path         string
	readOnly     bool
	now          func() time.Time
	version      int  // schema version of the file after Open
	migratedFrom int  // schema version found by Open
	foundEmpty   bool // Open found an existing empty file and initialised it

	dmu   sync.Mutex
	found map[string]damage // damaged records in place, by damage.id

	wmu       sync.Mutex
	writeErr  error     // error of the last failed commit, nil once one succeeds
	lastProbe time.Time // of Writable
	closed    bool
}

// Open opens the state file at path, creating it (mode 0600) and its
// directory (mode 0700) when missing unless opts.ReadOnly is set, checks its
// integrity and migrates an older schema. An existing file of zero bytes is
// initialised as a new one read-write (FoundEmpty says so) and is ErrCorrupt
// read-only. Errors wrap ErrLocked (another
// process holds the file), ErrCorrupt (damaged file; see MoveAside),
// ErrNewerSchema or, read-only, fs.ErrNotExist. Open never panics on a
// damaged file. The caller must Close the Store.
func Open(path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("open state: empty path: %w", ErrInvalid)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	hint := opts.RecoveryHint
	if hint == "" {
		hint = DefaultRecoveryHint
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	fail := func(err error) error {
		switch {
		case errors.Is(err, berrors.ErrTimeout):
			how := ""
			if opts.ReadOnly {
				how = " for writing; stop the plugin to inspect it"
			}
			return fmt.Errorf("open state %q: %w%s (gave up after %s): %w", path, ErrLocked, how, timeout, err)
		case errors.Is(err, ErrCorrupt):
			return fmt.Errorf("open state %q: %w; %s", path, err, hint)
		case isCorruptOpen(err):
			return fmt.Errorf("open state %q: %w: %w; %s", path, ErrCorrupt, err, hint)
		}
		return fmt.Errorf("open state %q: %w", path, err)
	}

	exists, err := checkRegular(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("open state %q: %w", path, err)
	case opts.ReadOnly && !exists:
		return nil, fmt.Errorf("open state %q read-only: %w", path, fs.ErrNotExist)
	case !opts.ReadOnly:
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("open state %q: create directory: %w", path, err)
		}
	}

	db, file, empty, err := openBolt(path, timeout, opts.ReadOnly)
	if err != nil {
		return nil, fail(err)
	}
	s := &Store{db: db, file: file, path: path, readOnly: opts.ReadOnly, now: now, foundEmpty: exists && empty}
	if err := guard(s.verify); err != nil {
		_ = db.Close() // the verify error is the one worth reporting
		return nil, fail(err)
	}
	if err := s.initSchema(); err != nil {
		_ = db.Close()
		return nil, fail(err)
	}
	if err := s.checkRecords(); err != nil {
		_ = db.Close()
		return nil, fail(err)
	}
	return s, nil
}

// isCorruptOpen reports whether err from bbolt's Open (or a recovered panic)
// means the file content is damaged.
func isCorruptOpen(err error) bool {
	var p *panicError
	return errors.Is(err, berrors.ErrInvalid) ||
		errors.Is(err, berrors.ErrChecksum) ||
		errors.Is(err, berrors.ErrVersionMismatch) ||
		errors.As(err, &p)
}

// openBolt opens path with bbolt. It opens and locks the file itself first,
// so that preflight reads a file no other process is writing, then hands the
// locked file to bbolt (whose own flock on it succeeds at once), and returns
// it too: bbolt owns it; and whether the file was empty once locked, before
// bbolt initialised it. A panic or memory fault inside bbolt becomes an
// error, and the file is released.
func openBolt(path string, timeout time.Duration, readOnly bool) (*bolt.DB, *os.File, bool, error) {
	flag := os.O_RDWR | os.O_CREATE
	if readOnly {
		flag = os.O_RDONLY
	}
	file, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, nil, false, err
	}
	release := func() {
		unlockFile(file)
		_ = file.Close()
	}
	// Open checked the path before; this catches a swap since.
	if fi, err := file.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = file.Close()
		if err == nil {
			err = notRegular(path, fi.Mode())
		}
		return nil, nil, false, err
	}
	if err := lockFile(file, !readOnly, timeout); err != nil {
		release()
		return nil, nil, false, err
	}
	fi, err := file.Stat()
	if err != nil {
		release()
		return nil, nil, false, err
	}
	empty := fi.Size() == 0
	if err := guard(func() error { return preflight(file, readOnly) }); err != nil {
		release()
		return nil, nil, false, err
	}
	bo := &bolt.Options{
		Timeout:         timeout,
		ReadOnly:        readOnly,
		PreLoadFreelist: true, // read the freelist here, where faults are caught
		OpenFile: func(string, int, os.FileMode) (*os.File, error) {
			return file, nil // bbolt owns it from here and closes it
		},
	}
	var db *bolt.DB
	err = guard(func() error {
		var err error
		db, err = bolt.Open(path, 0o600, bo)
		return err
	})
	var p *panicError
	if errors.As(err, &p) {
		// bbolt did not get to clean up. Its mapping of the file, if any,
		// cannot be reached and stays until the process exits; the lock
		// must not.
		release()
	}
	return db, file, empty, err
}

// panicError is a panic or memory fault recovered from bbolt.
type panicError struct{ v any }

func (p *panicError) Error() string { return fmt.Sprintf("bbolt panicked: %v", p.v) }

// guard runs fn and turns a panic, or a memory fault on the mmapped file
// (a truncated file gives SIGBUS), into a *panicError. Faults become panics
// only on the calling goroutine, so everything touching possibly damaged
// pages must run inside guard.
func guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{v: r}
		}
	}()
	return fn()
}

// verify runs bbolt's consistency check once bbolt has opened the file.
// Preflight has made sure the page tree can be walked without faults or
// endless loops; what bbolt still panics on, its check recovers on its own
// goroutine and reports.
func (s *Store) verify() error {
	return s.db.View(func(tx *bolt.Tx) error {
		var problems []error
		for err := range tx.Check() {
			problems = append(problems, err)
		}
		if len(problems) > 0 {
			return fmt.Errorf("%w: consistency check found %d problem(s), first: %w", ErrCorrupt, len(problems), problems[0])
		}
		return nil
	})
}

// initSchema checks the schema version and, read-write, migrates an older
// file. A read-only Store reads an older file as it is: every migration so
// far keeps the value formats, and readers treat missing buckets as empty.
func (s *Store) initSchema() error {
	var version int
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		version, err = readVersion(tx)
		if err != nil || version != SchemaVersion {
			return err
		}
		for _, name := range currentBuckets {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("%w: bucket %q missing", ErrCorrupt, name)
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case version > SchemaVersion:
		return newerSchemaError(version, SchemaVersion)
	case version == SchemaVersion || s.readOnly:
		s.version, s.migratedFrom = version, version
		return nil
	}
	var from int
	err = s.db.Update(func(tx *bolt.Tx) error {
		var err error
		from, err = migrate(tx, migrations, SchemaVersion)
		return err
	})
	if err != nil {
		return err
	}
	s.version, s.migratedFrom = SchemaVersion, from
	return nil
}

// Close releases the file and its lock. It waits for running transactions.
// Calling Close again returns nil; any other method then returns ErrClosed.
func (s *Store) Close() error {
	s.wmu.Lock()
	s.closed = true
	s.wmu.Unlock()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close state %q: %w", s.path, err)
	}
	return nil
}

// Path returns the file path given to Open.
func (s *Store) Path() string { return s.path }

// ReadOnly reports whether the Store was opened with Options.ReadOnly.
func (s *Store) ReadOnly() bool { return s.readOnly }

// SchemaVersion returns the schema version of the open file: SchemaVersion
// for a read-write Store, possibly older for a read-only one.
func (s *Store) SchemaVersion() int { return s.version }

// FoundEmpty reports whether Open found an existing file of zero bytes and
// initialised it as a new state file, with no history: what touch, a
// hostPath volume of type File or a crash right after the file was created
// leaves, and also a file whose content was lost. Callers should say so.
// A file Open created itself is not reported; read-only, an empty file is
// ErrCorrupt.
func (s *Store) FoundEmpty() bool { return s.foundEmpty }

// MigratedFrom returns the schema version Open found, and whether Open
// migrated the file from it (so that the caller can log it).
func (s *Store) MigratedFrom() (version int, migrated bool) {
	return s.migratedFrom, s.migratedFrom != s.version
}

// Check runs bbolt's consistency check on the open file and returns an error
// wrapping ErrCorrupt listing what it found. Open already runs it; Check is
// for long-running processes and tools. On a read-write Store it blocks
// writers while it runs.
func (s *Store) Check() error {
	check := func(tx *bolt.Tx) error {
		var problems []error
		for err := range tx.Check() {
			problems = append(problems, err)
		}
		if len(problems) > 0 {
			return fmt.Errorf("%w: %w", ErrCorrupt, errors.Join(problems...))
		}
		return errRollback
	}
	var err error
	if s.readOnly {
		err = s.db.View(check)
	} else {
		// bbolt's check is only safe against concurrent writers inside a
		// write transaction; errRollback keeps it from committing.
		err = s.db.Update(check)
	}
	if errors.Is(err, errRollback) {
		return nil
	}
	return s.wrap("check state", err)
}

// errRollback makes Update roll back a transaction that has nothing to commit.
var errRollback = errors.New("rollback")

// Stats describe the content and size of a state file. The zero value means
// an empty store.
type Stats struct {
	SchemaVersion  int
	Devices        int   // all devices, removed ones included
	RemovedDevices int   // devices flagged removed
	Allocations    int   // allocation records kept
	Claims         int   // claim records kept
	HealthEvents   int   // health events kept
	ConfigEvents   int   // configuration events kept
	HistoryBytes   int64 // keys and values of the allocation records, claim records, health events and configuration events, as PruneOptions.MaxBytes counts them
	Damaged        int   // damaged records: quarantined, and found in place (see Store.Damaged)
	FileSize       int64 // bytes on disk; bbolt grows the file ahead of use
	DataSize       int64 // bytes up to bbolt's high-water mark
}

// Stats counts the records and reports the file size. Damaged device
// records are not counted as devices.
func (s *Store) Stats() (Stats, error) {
	st := Stats{SchemaVersion: s.version}
	err := s.db.View(func(tx *bolt.Tx) error {
		st.DataSize = tx.Size()
		if b := tx.Bucket(bucketDevices); b != nil {
			err := b.ForEach(func(k, v []byte) error {
				d, err := decodeDevice(k, v)
				if err != nil {
					s.noteDamaged(bucketDevices, k, v, err)
					return nil
				}
				st.Devices++
				if d.Removed {
					st.RemovedDevices++
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		for _, kind := range []struct {
			name []byte
			n    *int
		}{{bucketAllocations, &st.Allocations}, {bucketClaims, &st.Claims}, {bucketEvents, &st.HealthEvents}, {bucketConfig, &st.ConfigEvents}} {
			if b := tx.Bucket(kind.name); b != nil {
				n, size := kvStats(b)
				*kind.n += n
				st.HistoryBytes += size
			}
		}
		st.Damaged = keyCount(tx.Bucket(bucketQuarantine))
		return nil
	})
	if err != nil {
		return Stats{}, s.wrap("state stats", err)
	}
	s.dmu.Lock()
	st.Damaged += len(s.found)
	s.dmu.Unlock()
	fi, err := os.Stat(s.path)
	if err != nil {
		return Stats{}, fmt.Errorf("state stats: %w", err)
	}
	st.FileSize = fi.Size()
	return st, nil
}

func keyCount(b *bolt.Bucket) int {
	if b == nil {
		return 0
	}
	return b.Stats().KeyN
}

// wrap adds op to err and maps bbolt's closed and read-only errors to this
// package's sentinels.
func (s *Store) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return fmt.Errorf("%s: %w", op, ErrClosed)
	case errors.Is(err, berrors.ErrDatabaseReadOnly):
		return fmt.Errorf("%s: %w", op, ErrReadOnly)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// update runs fn in its own read-write transaction, committed (and fsynced)
// before it returns. If fn fails, nothing is written. The outcome of the
// commit, where the file is written, is what Writable reports.
func (s *Store) update(op string, fn func(tx *bolt.Tx) error) error {
	if s.readOnly {
		return fmt.Errorf("%s: %w", op, ErrReadOnly)
	}
	tx, err := s.db.Begin(true)
	if err != nil {
		return s.wrap(op, err)
	}
	defer func() { _ = tx.Rollback() }() // after a commit: ErrTxClosed, nothing to do
	if err := fn(tx); err != nil {
		return s.wrap(op, err)
	}
	err = s.wrap(op, tx.Commit())
	s.wmu.Lock()
	s.writeErr = err
	s.wmu.Unlock()
	return err
}

// view runs fn in a read-only transaction.
func (s *Store) view(op string, fn func(tx *bolt.Tx) error) error {
	return s.wrap(op, s.db.View(fn))
}

// stamp returns t, or the clock's time when t is zero, in UTC without a
// monotonic reading (as it will read back from the file).
func (s *Store) stamp(t time.Time) time.Time {
	if t.IsZero() {
		t = s.now()
	}
	return t.UTC()
}
