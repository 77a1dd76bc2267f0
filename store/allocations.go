package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Allocation states. A record starts StateAllocated (the kubelet called
// Allocate); the lifecycle reconciler moves it to StateHeld once it sees a
// container using the devices, then to StateReleased when they are freed, or
// to StateAbandoned when no container ever used them.
const (
	StateAllocated = "allocated"
	StateHeld      = "held"
	StateReleased  = "released"
	StateAbandoned = "abandoned"
)

// ValidState reports whether state is one of the State constants.
func ValidState(state string) bool {
	switch state {
	case StateAllocated, StateHeld, StateReleased, StateAbandoned:
		return true
	}
	return false
}

// Active reports whether an allocation in this state still has its devices:
// StateAllocated or StateHeld.
func Active(state string) bool { return state == StateAllocated || state == StateHeld }

// Allocation is one answer given to the kubelet's Allocate, with what is
// later learned about who holds the devices. The JSON tags are the on-disk
// format (see doc.go), not an output format: dump and the admin API have
// their own types. Values returned by the Store are copies the caller may
// modify.
type Allocation struct {
	Seq       uint64    `json:"seq"`  // assigned by RecordAllocation; increasing, never reused
	Time      time.Time `json:"time"` // when Allocate answered
	DeviceIDs []string  `json:"device_ids"`
	// GPUIDs are the physical GPUs of DeviceIDs when some of them are
	// replicas of shared GPUs (schema version 4): each replica's GPU and
	// each other device itself, without repeats, in the order of
	// DeviceIDs. RecordAllocation sets it from the device records; empty
	// when no device is a replica (the devices are the GPUs: see GPUs).
	GPUIDs []string          `json:"gpu_ids,omitempty"`
	Envs   map[string]string `json:"envs,omitempty"` // environment handed to the container
	State  string            `json:"state"`          // one of the State constants

	Namespace  string    `json:"namespace,omitempty"` // holder, once known
	Pod        string    `json:"pod,omitempty"`
	Container  string    `json:"container,omitempty"`
	HeldSince  time.Time `json:"held_since,omitzero"`  // first seen in use
	ReleasedAt time.Time `json:"released_at,omitzero"` // seen released or abandoned
}

// Active reports whether the allocation still has its devices (see the
// package-level Active).
func (a Allocation) Active() bool { return Active(a.State) }

// GPUs returns the physical GPUs of the allocation: GPUIDs when set, else
// DeviceIDs (no device is a replica). The caller must not modify it.
func (a Allocation) GPUs() []string {
	if len(a.GPUIDs) > 0 {
		return a.GPUIDs
	}
	return a.DeviceIDs
}

func (a Allocation) clone() Allocation {
	a.DeviceIDs = slices.Clone(a.DeviceIDs)
	a.GPUIDs = slices.Clone(a.GPUIDs)
	a.Envs = maps.Clone(a.Envs)
	return a
}

// AllocationFilter selects allocation records. The zero value selects all.
type AllocationFilter struct {
	// DeviceID selects the records including this device, or (a GPU id)
	// a replica of it (in GPUIDs); "" means all.
	DeviceID string
	Since    time.Time // only records with Time at or after this; zero means all
	Active   bool      // only records in StateAllocated or StateHeld
	Limit    int       // at most this many (the newest); 0 means no limit
}

func (f AllocationFilter) match(a Allocation) bool {
	return (f.DeviceID == "" || slices.Contains(a.DeviceIDs, f.DeviceID) || slices.Contains(a.GPUIDs, f.DeviceID)) &&
		(f.Since.IsZero() || !a.Time.Before(f.Since)) &&
		(!f.Active || a.Active())
}

// RecordAllocation stores a new allocation record and returns it as stored:
// with Seq assigned, Time set to now if zero, times in UTC, State set to
// StateAllocated if empty, and GPUIDs set from the device records (the
// GPUs of its replicas; empty when none is a replica). Every device id must
// be known, removed devices included (ErrUnknownDevice); an empty or
// repeated id or an unknown state is ErrInvalid. The record is committed to
// disk before RecordAllocation returns.
func (s *Store) RecordAllocation(a Allocation) (Allocation, error) {
	a = a.clone()
	a.Seq, a.GPUIDs = 0, nil
	a.Time = s.stamp(a.Time)
	if a.State == "" {
		a.State = StateAllocated
	}
	normalizeTimes(&a)
	if err := validateAllocation(a); err != nil {
		return Allocation{}, fmt.Errorf("record allocation: %w", err)
	}
	err := s.update("record allocation", func(tx *bolt.Tx) error {
		gpus, err := gpusOf(tx, a.DeviceIDs)
		if err != nil {
			return err
		}
		a.GPUIDs = gpus
		b, err := bucket(tx, bucketAllocations)
		if err != nil {
			return err
		}
		b.FillPercent = appendFillPercent
		if a.Seq, err = b.NextSequence(); err != nil {
			return fmt.Errorf("next allocation sequence: %w", err)
		}
		if err := putJSON(b, u64(a.Seq), a); err != nil {
			return err
		}
		return indexAllocation(tx, nil, a)
	})
	if err != nil {
		return Allocation{}, err
	}
	return a.clone(), nil
}

func validateAllocation(a Allocation) error {
	if err := validateDeviceIDs(a.DeviceIDs); err != nil {
		return err
	}
	if !ValidState(a.State) {
		return fmt.Errorf("state %q: %w", a.State, ErrInvalid)
	}
	return validateGPUIDs(a.GPUIDs)
}

// validateDeviceIDs checks the device ids of an allocation or a claim: at
// least one, none empty, none twice.
func validateDeviceIDs(ids []string) error {
	if len(ids) == 0 {
		return fmt.Errorf("no device ids: %w", ErrInvalid)
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id == "" {
			return fmt.Errorf("empty device id: %w", ErrInvalid)
		}
		if seen[id] {
			return fmt.Errorf("device id %q listed twice: %w", id, ErrInvalid)
		}
		seen[id] = true
	}
	return nil
}

// validateGPUIDs checks the GPU ids of an allocation or a claim: none
// empty, none twice.
func validateGPUIDs(ids []string) error {
	gpus := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id == "" || gpus[id] {
			return fmt.Errorf("GPU id %q empty or listed twice: %w", id, ErrInvalid)
		}
		gpus[id] = true
	}
	return nil
}

func normalizeTimes(a *Allocation) {
	a.Time = a.Time.UTC()
	if !a.HeldSince.IsZero() {
		a.HeldSince = a.HeldSince.UTC()
	}
	if !a.ReleasedAt.IsZero() {
		a.ReleasedAt = a.ReleasedAt.UTC()
	}
}

// Allocation returns the record with sequence number seq, or an error
// wrapping ErrNotFound, or ErrDamaged if its stored value is damaged.
func (s *Store) Allocation(seq uint64) (Allocation, error) {
	var a Allocation
	err := s.view("get allocation", func(tx *bolt.Tx) error {
		var err error
		a, err = s.getAllocation(tx.Bucket(bucketAllocations), seq)
		return err
	})
	return a, err
}

// Allocations returns the records selected by f, newest (highest Seq) first.
// Damaged records are skipped (see Damaged).
func (s *Store) Allocations(f AllocationFilter) ([]Allocation, error) {
	return listNewest(s, "list allocations", bucketAllocations, f.Limit, decodeAllocation,
		func(a *Allocation) bool { return f.match(*a) })
}

// listNewest decodes the records of a sequence-keyed bucket from the newest,
// keeping those keep accepts, at most limit of them (0: all). A record
// decode refuses is skipped and remembered for Damaged.
func listNewest[T any](s *Store, op string, name []byte, limit int, decode func(k, v []byte) (T, error), keep func(*T) bool) ([]T, error) {
	var out []T
	err := s.view(op, func(tx *bolt.Tx) error {
		b := tx.Bucket(name)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Last(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Prev() {
			r, err := decode(k, v)
			if err != nil {
				s.noteDamaged(name, k, v, err)
				continue
			}
			if keep(&r) {
				out = append(out, r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// UpdateAllocation applies fn to the record with sequence number seq and
// stores the result, in one transaction: the lifecycle reconciler uses it to
// fill in the holder and move State on. If fn returns an error nothing is
// written and the error is returned (wrapped). fn must not change Seq, must
// leave a valid State and known device ids (else ErrInvalid or
// ErrUnknownDevice, and nothing is written) and must not call the Store (it runs inside the write
// transaction and would deadlock). A missing record is ErrNotFound, a
// damaged one ErrDamaged.
func (s *Store) UpdateAllocation(seq uint64, fn func(*Allocation) error) (Allocation, error) {
	var a Allocation
	err := s.update("update allocation", func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketAllocations)
		if err != nil {
			return err
		}
		if a, err = s.getAllocation(b, seq); err != nil {
			return err
		}
		old := a.clone()
		if err := fn(&a); err != nil {
			return err
		}
		if a.Seq != seq {
			return fmt.Errorf("record %d: sequence number changed to %d: %w", seq, a.Seq, ErrInvalid)
		}
		normalizeTimes(&a)
		if err := validateAllocation(a); err != nil {
			return fmt.Errorf("record %d: %w", seq, err)
		}
		if err := knownDevices(tx, a.DeviceIDs); err != nil {
			return fmt.Errorf("record %d: %w", seq, err)
		}
		if err := putJSON(b, u64(seq), a); err != nil {
			return err
		}
		return indexAllocation(tx, &old, a)
	})
	if err != nil {
		return Allocation{}, err
	}
	return a.clone(), nil
}

func (s *Store) getAllocation(b *bolt.Bucket, seq uint64) (Allocation, error) {
	var v []byte
	if b != nil {
		v = b.Get(u64(seq))
	}
	if v == nil {
		return Allocation{}, fmt.Errorf("record %d: %w", seq, ErrNotFound)
	}
	a, err := decodeAllocation(u64(seq), v)
	if err != nil {
		s.noteDamaged(bucketAllocations, u64(seq), v, err)
		return Allocation{}, fmt.Errorf("record %d: %w: %w", seq, ErrDamaged, err)
	}
	return a, nil
}

// gpusOf returns the physical GPUs of the devices ids as
// Allocation.GPUIDs has them (nil when none is a replica), or
// ErrUnknownDevice for the first id not in the devices bucket (removed
// devices are known). A damaged device record counts as a GPU.
func gpusOf(tx *bolt.Tx, ids []string) ([]string, error) {
	devs, err := bucket(tx, bucketDevices)
	if err != nil {
		return nil, err
	}
	var gpus []string
	replicas := false
	for _, id := range ids {
		v := devs.Get([]byte(id))
		if v == nil {
			return nil, fmt.Errorf("%q: %w", id, ErrUnknownDevice)
		}
		gpu := id
		if d, err := decodeDevice([]byte(id), v); err == nil && d.IsReplica() {
			gpu, replicas = d.GPU, true
		}
		if !slices.Contains(gpus, gpu) {
			gpus = append(gpus, gpu)
		}
	}
	if !replicas {
		return nil, nil
	}
	return gpus, nil
}

// knownDevices returns ErrUnknownDevice for the first id not in the devices
// bucket. Removed devices are known.
func knownDevices(tx *bolt.Tx, ids []string) error {
	devs, err := bucket(tx, bucketDevices)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if devs.Get([]byte(id)) == nil {
			return fmt.Errorf("%q: %w", id, ErrUnknownDevice)
		}
	}
	return nil
}

func isRollback(err error) bool { return errors.Is(err, errRollback) }
