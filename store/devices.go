package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Causes of health changes commonly passed to SetHealth and found in
// HealthEvent.Cause. Any other short string is allowed.
const (
	CauseAdmin          = "admin"           // an operator's request
	CauseFaultInjection = "fault-injection" // a simulated fault
	CauseReconcile      = "reconcile"       // Reconcile added the device
)

// Device is the stored state of one device. The JSON tags are the on-disk
// format (see doc.go), not an output format.
type Device struct {
	ID        string    `json:"id"`
	Index     int       `json:"index"`
	NUMA      int       `json:"numa"`
	Healthy   bool      `json:"healthy"`
	Reason    string    `json:"reason,omitempty"`    // why it is unhealthy (or was last changed)
	Since     time.Time `json:"since"`               // when Healthy or Reason last changed
	Removed   bool      `json:"removed,omitempty"`   // no longer configured; history kept
	RemovedAt time.Time `json:"removed_at,omitzero"` // zero unless Removed
	// UUID is the device's GPU UUID as its caller derived it (nvidia-smi's
	// form, "GPU-…"), stored by the first Reconcile that gave one and never
	// changed after; empty until then (a device of a file from before schema
	// version 3, or reconciled without one). Removed devices keep it. A
	// replica has none: it has its GPU's.
	UUID string `json:"uuid,omitempty"`
	// GPU is, for a replica of a shared GPU (schema version 4), the id of
	// the GPU device it is a replica of; empty for a GPU. A replica's
	// health is its GPU's: the Store's readers return the GPU's Healthy,
	// Reason and Since for it, and SetHealth refuses a replica.
	GPU string `json:"gpu,omitempty"`
	// Replica is a replica's number among its GPU's replicas (0 … n-1);
	// 0 for a GPU. For a MIG device it is a number unique among its GPU's
	// MIG devices (the plugin numbers its product's placements).
	Replica int `json:"replica,omitempty"`
	// MIG is, for a MIG device (schema version 6), its profile name
	// ("3g.40gb"); GPU is then the GPU it is a partition of. A MIG device
	// is a child of its GPU as a replica is: it has its GPU's health, and
	// SetHealth refuses it. Unlike a replica it has a UUID of its own
	// ("MIG-…").
	MIG string `json:"mig,omitempty"`
}

// IsReplica reports whether d is a child of a GPU (GPU is set): a replica
// of a shared GPU, or a MIG device (IsMIG). Both have their GPU's health.
func (d Device) IsReplica() bool { return d.GPU != "" }

// IsMIG reports whether d is a MIG device of its GPU.
func (d Device) IsMIG() bool { return d.MIG != "" }

// DeviceSpec is one configured device as Reconcile takes it. ID is stable
// across restarts and must be unique and non-empty; Index must be unique and
// non-negative. NUMA is stored as given (callers may use -1 for "none").
type DeviceSpec struct {
	ID    string
	Index int
	NUMA  int
	// UUID is the device's GPU UUID as the caller derives it (from the
	// node's identity and the device id). Reconcile stores it when the
	// device has none and otherwise keeps the stored one, so a device's UUID
	// never changes once stored. The store does not check its form; it must
	// be unique among the specs. Empty gives none (and keeps a stored one).
	// A replica has none; a MIG device has its own.
	UUID string
	// GPU makes the device a replica of the GPU with this id, which must be
	// a GPU spec (GPU empty) of the same Reconcile with the same Index; ""
	// is a GPU. Replica is its number, unique among the GPU's replicas.
	GPU     string
	Replica int
	// MIG makes the device (a child of GPU) a MIG device of this profile;
	// Replica is then a number unique among the GPU's MIG devices.
	MIG string
}

// UUIDConflict is a configured device whose spec gives a UUID other than
// the stored one, for instance after the node was renamed: Reconcile keeps
// the stored UUID, since a device's UUID never changes.
type UUIDConflict struct {
	ID     string
	Stored string // the UUID kept
	Given  string // the UUID of the spec, not stored
}

// DeviceChange is a configured device whose index or NUMA node differs from
// the stored one.
type DeviceChange struct {
	ID       string
	OldIndex int
	NewIndex int
	OldNUMA  int
	NewNUMA  int
}

// ReconcileReport says what Reconcile changed; ids are sorted. With the
// caller's description of the configuration it is what a ConfigEvent needs
// (see ConfigEvent.FromReport). Empty reports whether anything changed.
type ReconcileReport struct {
	Added    []string       // new devices, stored healthy
	Removed  []string       // no longer configured, flagged removed
	Restored []string       // configured again, health kept
	Changed  []DeviceChange // index or NUMA node updated
	// Recreated are the ids in Added whose stored record was damaged and
	// is in quarantine (see Store.Damaged): their stored health is lost and
	// they start over, healthy. Their history is kept.
	Recreated []string
	// UUIDsAssigned are known devices (not in Added) that had no UUID and
	// got the one of their spec: every device of a file from before schema
	// version 3, at the first Reconcile after the upgrade. Added devices get
	// the UUID of their spec without being listed here.
	UUIDsAssigned []string
	// UUIDConflicts are configured devices whose spec gave a UUID other than
	// the stored one, which was kept (sorted by id). Nothing is written for
	// them; every Reconcile with the same specs reports them again.
	UUIDConflicts []UUIDConflict
	// Configured is the number of devices Reconcile was given: the
	// configured devices, none of them removed after it.
	Configured int
	// SharedGPUs is the number of configured GPUs with configured
	// replicas: they are advertised as their replicas, not themselves.
	SharedGPUs int
}

// Empty reports whether the report records no change to the stored
// devices. UUIDConflicts change nothing; UUIDsAssigned do.
func (r ReconcileReport) Empty() bool {
	return len(r.Added) == 0 && len(r.Removed) == 0 && len(r.Restored) == 0 && len(r.Changed) == 0 &&
		len(r.UUIDsAssigned) == 0
}

// Reconcile makes the stored devices match the configured ones, in one
// transaction: new ids are added healthy (with a health event of cause
// CauseReconcile; a new replica gets none, its health being its GPU's),
// known ids keep their health and get the configured index, NUMA node and
// GPU, ids no longer configured are flagged removed (never deleted), and a
// removed id configured again is restored with the health it had. A device's UUID is stored once, from the first spec that gives one,
// and kept as it is after that: a spec with another UUID is reported in
// UUIDConflicts and changes nothing; a removed device keeps its UUID and has
// it again when restored. No history is touched except the health event of
// an added device. Invalid specs (ErrInvalid) change nothing. A device whose
// stored record is damaged is moved into quarantine (if Open has not done so
// already) and added again, listed in Recreated, with the UUID of its spec.
func (s *Store) Reconcile(devices []DeviceSpec) (ReconcileReport, error) {
	if err := validateSpecs(devices); err != nil {
		return ReconcileReport{}, fmt.Errorf("reconcile devices: %w", err)
	}
	var rep ReconcileReport
	err := s.update("reconcile devices", func(tx *bolt.Tx) error {
		var err error
		rep, err = s.reconcile(tx, devices)
		return err
	})
	if err != nil {
		return ReconcileReport{}, err
	}
	return rep, nil
}

// reconcile is Reconcile's work inside tx, for valid specs.
func (s *Store) reconcile(tx *bolt.Tx, devices []DeviceSpec) (ReconcileReport, error) {
	var rep ReconcileReport
	err := func() error {
		b, err := bucket(tx, bucketDevices)
		if err != nil {
			return err
		}
		now := s.stamp(time.Time{})
		lost, err := quarantinedDevices(tx)
		if err != nil {
			return err
		}
		configured := make(map[string]bool, len(devices))
		for _, spec := range devices {
			configured[spec.ID] = true
			d, found, err := s.getDevice(b, spec.ID)
			if reasonOf(err) != "" {
				if err := s.quarantine(tx, bucketDevices, []byte(spec.ID), b.Get([]byte(spec.ID)), err); err != nil {
					return err
				}
				lost[spec.ID], found, err = true, false, nil
			}
			if err != nil {
				return err
			}
			if !found {
				d = Device{ID: spec.ID, Index: spec.Index, NUMA: spec.NUMA, Healthy: true, Since: now, UUID: spec.UUID, GPU: spec.GPU, Replica: spec.Replica, MIG: spec.MIG}
				if err := putJSON(b, []byte(d.ID), d); err != nil {
					return err
				}
				if !d.IsReplica() {
					if err := addEvent(tx, HealthEvent{Time: now, DeviceID: d.ID, Healthy: true, Reason: "device added", Cause: CauseReconcile}); err != nil {
						return err
					}
				}
				rep.Added = append(rep.Added, d.ID)
				if lost[d.ID] {
					rep.Recreated = append(rep.Recreated, d.ID)
				}
				continue
			}
			changed := false
			if d.Removed {
				d.Removed, d.RemovedAt = false, time.Time{}
				rep.Restored = append(rep.Restored, d.ID)
				changed = true
			}
			if d.Index != spec.Index || d.NUMA != spec.NUMA || d.GPU != spec.GPU || d.Replica != spec.Replica || d.MIG != spec.MIG {
				rep.Changed = append(rep.Changed, DeviceChange{ID: d.ID, OldIndex: d.Index, NewIndex: spec.Index, OldNUMA: d.NUMA, NewNUMA: spec.NUMA})
				d.Index, d.NUMA, d.GPU, d.Replica, d.MIG = spec.Index, spec.NUMA, spec.GPU, spec.Replica, spec.MIG
				changed = true
			}
			switch {
			case spec.UUID == "" || spec.UUID == d.UUID:
			case d.UUID == "":
				d.UUID = spec.UUID
				rep.UUIDsAssigned = append(rep.UUIDsAssigned, d.ID)
				changed = true
			default:
				rep.UUIDConflicts = append(rep.UUIDConflicts, UUIDConflict{ID: d.ID, Stored: d.UUID, Given: spec.UUID})
			}
			if changed {
				if err := putJSON(b, []byte(d.ID), d); err != nil {
					return err
				}
			}
		}
		var (
			vanished []Device
			bad      []damage
		)
		err = b.ForEach(func(k, v []byte) error {
			if configured[string(k)] {
				return nil
			}
			d, err := decodeDevice(k, v)
			if err != nil {
				bad = append(bad, damage{key: bytes.Clone(k), value: bytes.Clone(v), reason: reasonOf(err)})
				return nil
			}
			if !d.Removed {
				vanished = append(vanished, d)
			}
			return nil
		})
		if err != nil {
			return err
		}
		// Not inside ForEach: bbolt forbids writes while iterating.
		for _, d := range bad {
			if err := s.quarantine(tx, bucketDevices, d.key, d.value, &errRecord{d.reason}); err != nil {
				return err
			}
		}
		for _, d := range vanished {
			d.Removed, d.RemovedAt = true, now
			if err := putJSON(b, []byte(d.ID), d); err != nil {
				return err
			}
			rep.Removed = append(rep.Removed, d.ID)
		}
		return nil
	}()
	if err != nil {
		return ReconcileReport{}, err
	}
	slices.Sort(rep.Added)
	slices.Sort(rep.Removed)
	slices.Sort(rep.Restored)
	slices.Sort(rep.Recreated)
	slices.Sort(rep.UUIDsAssigned)
	slices.SortFunc(rep.Changed, func(a, b DeviceChange) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(rep.UUIDConflicts, func(a, b UUIDConflict) int { return strings.Compare(a.ID, b.ID) })
	rep.Configured = len(devices)
	shared := map[string]bool{}
	for _, d := range devices {
		if d.GPU != "" {
			shared[d.GPU] = true
		}
	}
	rep.SharedGPUs = len(shared)
	return rep, nil
}

// quarantinedDevices returns the ids of the device records in the
// quarantine bucket.
func quarantinedDevices(tx *bolt.Tx) (map[string]bool, error) {
	ids := map[string]bool{}
	q := tx.Bucket(bucketQuarantine)
	if q == nil {
		return ids, nil
	}
	err := q.ForEach(func(k, v []byte) error {
		if e, err := decodeQuarantined(k, v); err == nil && e.Bucket == string(bucketDevices) {
			ids[string(e.Key)] = true
		}
		return nil
	})
	return ids, err
}

func validateSpecs(devices []DeviceSpec) error {
	ids := make(map[string]bool, len(devices))
	indexes := make(map[int]string, len(devices)) // of GPUs
	gpus := make(map[string]int, len(devices))    // GPU id -> index
	uuids := make(map[string]string, len(devices))
	for _, d := range devices {
		switch {
		case d.ID == "":
			return fmt.Errorf("device with index %d has an empty id: %w", d.Index, ErrInvalid)
		case d.Index < 0:
			return fmt.Errorf("device %q has negative index %d: %w", d.ID, d.Index, ErrInvalid)
		case ids[d.ID]:
			return fmt.Errorf("device id %q listed twice: %w", d.ID, ErrInvalid)
		case d.GPU == "" && d.Replica != 0:
			return fmt.Errorf("device %q has replica number %d but no GPU: %w", d.ID, d.Replica, ErrInvalid)
		case d.GPU == "" && indexes[d.Index] != "":
			return fmt.Errorf("devices %q and %q share index %d: %w", indexes[d.Index], d.ID, d.Index, ErrInvalid)
		case d.MIG != "" && d.GPU == "":
			return fmt.Errorf("MIG device %q (%s) has no GPU: %w", d.ID, d.MIG, ErrInvalid)
		case d.UUID != "" && d.GPU != "" && d.MIG == "":
			return fmt.Errorf("replica %q has a UUID of its own (a replica has its GPU's): %w", d.ID, ErrInvalid)
		case d.UUID != "" && uuids[d.UUID] != "":
			return fmt.Errorf("devices %q and %q share UUID %q: %w", uuids[d.UUID], d.ID, d.UUID, ErrInvalid)
		}
		ids[d.ID] = true
		if d.GPU == "" {
			indexes[d.Index] = d.ID
			gpus[d.ID] = d.Index
		}
		if d.UUID != "" {
			uuids[d.UUID] = d.ID
		}
	}
	replicas := make(map[string]map[int]string) // GPU id -> replica number -> id
	for _, d := range devices {
		if d.GPU == "" {
			continue
		}
		idx, ok := gpus[d.GPU]
		switch {
		case !ok:
			return fmt.Errorf("replica %q: its GPU %q is not a GPU of the configured devices: %w", d.ID, d.GPU, ErrInvalid)
		case idx != d.Index:
			return fmt.Errorf("replica %q has index %d, its GPU %q %d: %w", d.ID, d.Index, d.GPU, idx, ErrInvalid)
		case d.Replica < 0:
			return fmt.Errorf("replica %q has negative replica number %d: %w", d.ID, d.Replica, ErrInvalid)
		case replicas[d.GPU][d.Replica] != "":
			return fmt.Errorf("replicas %q and %q are both replica %d of %q: %w", replicas[d.GPU][d.Replica], d.ID, d.Replica, d.GPU, ErrInvalid)
		}
		if replicas[d.GPU] == nil {
			replicas[d.GPU] = map[int]string{}
		}
		replicas[d.GPU][d.Replica] = d.ID
	}
	return nil
}

// Devices returns every stored device, removed ones included (flagged),
// sorted by Index, a GPU before its replicas, replicas by number, then by
// ID. A replica has its GPU's health (Healthy, Reason, Since). Damaged
// records are skipped (see Damaged).
func (s *Store) Devices() ([]Device, error) {
	var out []Device
	err := s.view("list devices", func(tx *bolt.Tx) error {
		var err error
		out, err = s.devices(tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// devices is Devices inside tx.
func (s *Store) devices(tx *bolt.Tx) ([]Device, error) {
	var out []Device
	if b := tx.Bucket(bucketDevices); b != nil {
		err := b.ForEach(func(k, v []byte) error {
			d, err := decodeDevice(k, v)
			if err != nil {
				s.noteDamaged(bucketDevices, k, v, err)
				return nil
			}
			out = append(out, d)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, compareDevices)
	var gpus map[string]int // GPU id -> position in out
	for i, d := range out {
		if !d.IsReplica() {
			continue
		}
		if gpus == nil {
			gpus = make(map[string]int)
			for j, g := range out {
				if !g.IsReplica() {
					gpus[g.ID] = j
				}
			}
		}
		if j, ok := gpus[d.GPU]; ok {
			out[i] = withGPUHealth(d, out[j])
		}
	}
	return out, nil
}

// compareDevices orders devices by Index, a GPU before its replicas,
// replicas by number, then by ID.
func compareDevices(a, b Device) int {
	switch {
	case a.Index != b.Index:
		return a.Index - b.Index
	case a.IsReplica() != b.IsReplica():
		if a.IsReplica() {
			return 1
		}
		return -1
	case a.Replica != b.Replica:
		return a.Replica - b.Replica
	}
	return strings.Compare(a.ID, b.ID)
}

// withGPUHealth returns replica r with the health of its GPU g.
func withGPUHealth(r, g Device) Device {
	r.Healthy, r.Reason, r.Since = g.Healthy, g.Reason, g.Since
	return r
}

// Device returns the stored device id (a replica with its GPU's health),
// or an error wrapping ErrUnknownDevice, or ErrDamaged if its stored value
// is damaged.
func (s *Store) Device(id string) (Device, error) {
	var d Device
	err := s.view("get device", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDevices)
		if b == nil {
			return fmt.Errorf("%q: %w", id, ErrUnknownDevice)
		}
		var found bool
		var err error
		d, found, err = s.getDevice(b, id)
		if err == nil && !found {
			err = fmt.Errorf("%q: %w", id, ErrUnknownDevice)
		}
		if err != nil || !d.IsReplica() {
			return err
		}
		if g, ok, gerr := s.getDevice(b, d.GPU); gerr == nil && ok {
			d = withGPUHealth(d, g)
		}
		return nil
	})
	return d, err
}

// SetHealth sets the health of device id and returns the stored device and
// whether anything changed. A change of Healthy or Reason updates Since and
// records a HealthEvent with cause (e.g. CauseAdmin); setting the current
// state again writes nothing. An unknown id is ErrUnknownDevice, a damaged
// record ErrDamaged, a replica ErrInvalid (its health is its GPU's: set the
// GPU). Removed devices can be set too.
func (s *Store) SetHealth(id string, healthy bool, reason, cause string) (Device, bool, error) {
	var (
		d       Device
		changed bool
	)
	err := s.update("set device health", func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketDevices)
		if err != nil {
			return err
		}
		var found bool
		d, found, err = s.getDevice(b, id)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%q: %w", id, ErrUnknownDevice)
		}
		if d.IsMIG() {
			return fmt.Errorf("%q is a MIG device (%s) of GPU %q, whose health it has: set the GPU's: %w", id, d.MIG, d.GPU, ErrInvalid)
		}
		if d.IsReplica() {
			return fmt.Errorf("%q is replica %d of GPU %q, whose health it has: set the GPU's: %w", id, d.Replica, d.GPU, ErrInvalid)
		}
		if d.Healthy == healthy && d.Reason == reason {
			changed = false
			return errRollback
		}
		changed = true
		d.Healthy, d.Reason, d.Since = healthy, reason, s.stamp(time.Time{})
		if err := putJSON(b, []byte(id), d); err != nil {
			return err
		}
		return addEvent(tx, HealthEvent{Time: d.Since, DeviceID: id, Healthy: healthy, Reason: reason, Cause: cause})
	})
	if err != nil && !isRollback(err) {
		return Device{}, false, err
	}
	return d, changed, nil
}

// HealthEvent is one recorded health change. The JSON tags are the on-disk
// format (see doc.go), not an output format.
type HealthEvent struct {
	Seq      uint64    `json:"seq"` // increasing, never reused, even after Prune
	Time     time.Time `json:"time"`
	DeviceID string    `json:"device_id"`
	Healthy  bool      `json:"healthy"`
	Reason   string    `json:"reason,omitempty"`
	Cause    string    `json:"cause,omitempty"` // e.g. CauseAdmin
}

// EventFilter selects health events. The zero value selects all.
type EventFilter struct {
	DeviceID string    // only this device; "" means all
	Since    time.Time // only events at or after this time; zero means all
	Limit    int       // at most this many (the newest); 0 means no limit
}

// HealthEvents returns the events selected by f, newest first. Damaged
// records are skipped (see Damaged).
func (s *Store) HealthEvents(f EventFilter) ([]HealthEvent, error) {
	return listNewest(s, "list health events", bucketEvents, f.Limit, decodeEvent,
		func(e *HealthEvent) bool { return f.match(*e) })
}

func (f EventFilter) match(e HealthEvent) bool {
	return (f.DeviceID == "" || e.DeviceID == f.DeviceID) && (f.Since.IsZero() || !e.Time.Before(f.Since))
}

func addEvent(tx *bolt.Tx, e HealthEvent) error {
	b, err := bucket(tx, bucketEvents)
	if err != nil {
		return err
	}
	b.FillPercent = appendFillPercent
	if e.Seq, err = b.NextSequence(); err != nil {
		return fmt.Errorf("next event sequence: %w", err)
	}
	return putJSON(b, u64(e.Seq), e)
}

// getDevice reads device id from b. A damaged record is an error wrapping
// ErrDamaged and an *errRecord, and is remembered for Damaged.
func (s *Store) getDevice(b *bolt.Bucket, id string) (Device, bool, error) {
	v := b.Get([]byte(id))
	if v == nil {
		return Device{}, false, nil
	}
	d, err := decodeDevice([]byte(id), v)
	if err != nil {
		s.noteDamaged(bucketDevices, []byte(id), v, err)
		return Device{}, false, fmt.Errorf("device %q: %w: %w", id, ErrDamaged, err)
	}
	return d, true, nil
}

// bucket returns the named top-level bucket for writing. Open guarantees it
// exists in a read-write Store.
func bucket(tx *bolt.Tx, name []byte) (*bolt.Bucket, error) {
	b := tx.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("%w: bucket %q missing", ErrCorrupt, name)
	}
	return b, nil
}

// putJSON stores v as JSON under key. bbolt copies nothing: the encoded
// slice is fresh and never reused, as bbolt requires until commit.
func putJSON(b *bolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %q: %w", key, err)
	}
	if err := b.Put(key, data); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	return nil
}
