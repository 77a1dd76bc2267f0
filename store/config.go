package store

import (
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Why a configuration is in force, commonly passed in ConfigEvent.Why. Any
// other short string is allowed.
const (
	WhyNodeLabel   = "node-label"   // a label of the node selected the profile
	WhyFileChanged = "file-changed" // the file holding the profiles changed
	WhyDefault     = "default"      // no profile selected: the default one
	WhyFlags       = "flags"        // no profile: flags and environment only
)

// ConfigEvent is one recorded change of the plugin's configuration: the
// profile (or flags) in force from Time on, why, and what it did to the
// devices. The caller describes the configuration; Reconcile's report gives
// the device part (FromReport). The JSON tags are the on-disk format (see
// doc.go), not an output format. Values returned by the Store are copies the
// caller may modify.
type ConfigEvent struct {
	Seq  uint64    `json:"seq"`  // assigned by RecordConfigChange; increasing, never reused
	Time time.Time `json:"time"` // when the configuration took effect
	// Profile names the profile in force; "" none (flags only).
	Profile string `json:"profile,omitempty"`
	// PreviousProfile names the profile in force before; "" none, or
	// nothing known before (the first event).
	PreviousProfile string `json:"previous_profile,omitempty"`
	// Why says what chose the configuration: one of the Why constants or
	// another short string. Required.
	Why string `json:"why"`
	// Detail says more, e.g. the label and its value or the file; optional.
	Detail string `json:"detail,omitempty"`
	// ResourceName is the extended resource advertised, e.g.
	// "unicore.mcyou.cc/gpu".
	ResourceName string `json:"resource_name,omitempty"`
	// Machine names the topology (a preset or a file).
	Machine string `json:"machine,omitempty"`
	// Devices is the number of devices advertised: those configured, a
	// shared GPU counting as its replicas, not itself (see FromReport).
	Devices int `json:"devices"`
	// Replicas is the number of device ids each GPU is shared as; 0 when
	// the configuration does not share GPUs.
	Replicas int `json:"replicas,omitempty"`
	// MIGStrategy is how MIG devices are advertised through the device
	// plugin (single, mixed; schema version 6); "" or none: they are not.
	MIGStrategy string `json:"mig_strategy,omitempty"`
	// MIGLayout names the MIG layout in force (a mig-parted configuration
	// name, "all-1g.10gb"); "" none.
	MIGLayout string `json:"mig_layout,omitempty"`
	// Added, Removed and Restored are the device ids the change added,
	// flagged removed and restored (as ReconcileReport lists them).
	Added    []string `json:"added,omitempty"`
	Removed  []string `json:"removed,omitempty"`
	Restored []string `json:"restored,omitempty"`
}

// FromReport returns e with the device part of a Reconcile report filled
// in: Devices from r.Configured less r.SharedGPUs, and copies of r.Added,
// r.Removed and r.Restored.
func (e ConfigEvent) FromReport(r ReconcileReport) ConfigEvent {
	e.Devices = r.Configured - r.SharedGPUs
	e.Added, e.Removed, e.Restored = slices.Clone(r.Added), slices.Clone(r.Removed), slices.Clone(r.Restored)
	return e
}

// SameConfig reports whether e and o describe the same configuration:
// the same Profile, ResourceName, Machine, Devices, Replicas and MIG
// strategy and layout. Why,
// Detail and the device changes are not compared. A caller can compare the
// configuration it starts with against the newest stored event to decide
// whether to record a change.
func (e ConfigEvent) SameConfig(o ConfigEvent) bool {
	return e.Profile == o.Profile && e.ResourceName == o.ResourceName && e.Machine == o.Machine &&
		e.Devices == o.Devices && e.Replicas == o.Replicas && e.MIGStrategy == o.MIGStrategy && e.MIGLayout == o.MIGLayout
}

func (e ConfigEvent) clone() ConfigEvent {
	e.Added, e.Removed, e.Restored = slices.Clone(e.Added), slices.Clone(e.Removed), slices.Clone(e.Restored)
	return e
}

// ConfigFilter selects configuration events. The zero value selects all.
type ConfigFilter struct {
	DeviceID string    // only events that added, removed or restored this device; "" means all
	Since    time.Time // only events at or after this time; zero means all
	Limit    int       // at most this many (the newest); 0 means no limit
}

func (f ConfigFilter) match(e ConfigEvent) bool {
	return (f.DeviceID == "" || slices.Contains(e.Added, f.DeviceID) || slices.Contains(e.Removed, f.DeviceID) ||
		slices.Contains(e.Restored, f.DeviceID)) &&
		(f.Since.IsZero() || !e.Time.Before(f.Since))
}

// RecordConfigChange stores a configuration event and returns it as
// stored: with Seq assigned and Time set to now if zero, in UTC. An empty
// Why, a negative Devices or Replicas, or an empty or repeated id in Added,
// Removed or Restored is ErrInvalid; every id must be a known device (call
// Reconcile first), else ErrUnknownDevice. The event is committed to disk
// before RecordConfigChange returns. Configuration events are history: Prune
// deletes them under the limits of the health events, keeping the newest.
func (s *Store) RecordConfigChange(e ConfigEvent) (ConfigEvent, error) {
	e = e.clone()
	e.Seq = 0
	e.Time = s.stamp(e.Time)
	if err := validateConfigEvent(e); err != nil {
		return ConfigEvent{}, fmt.Errorf("record config change: %w", err)
	}
	err := s.update("record config change", func(tx *bolt.Tx) error {
		for _, ids := range [][]string{e.Added, e.Removed, e.Restored} {
			if err := knownDevices(tx, ids); err != nil {
				return err
			}
		}
		b, err := bucket(tx, bucketConfig)
		if err != nil {
			return err
		}
		b.FillPercent = appendFillPercent
		if e.Seq, err = b.NextSequence(); err != nil {
			return fmt.Errorf("next config event sequence: %w", err)
		}
		return putJSON(b, u64(e.Seq), e)
	})
	if err != nil {
		return ConfigEvent{}, err
	}
	return e.clone(), nil
}

// ConfigChange is what ReconcileConfig did.
type ConfigChange struct {
	// Report is what reconciling the stored devices changed.
	Report ReconcileReport
	// Event is the newest configuration event after the change: the one
	// recorded, or, when nothing was recorded, the newest stored before
	// (zero with Recorded false if there is none).
	Event ConfigEvent
	// Recorded reports whether an event was recorded.
	Recorded bool
}

// ReconcileConfig makes the stored devices match the configured ones, as
// Reconcile does, and records the configuration event e of the change, as
// RecordConfigChange does, in one transaction: a crash leaves both or
// neither. e describes the configuration (Profile, Why, Detail,
// ResourceName, Machine, Replicas, Devices; Time, if zero, is now); its
// device changes are the reconcile's report (ConfigEvent.FromReport),
// whatever e holds, and so is Devices when e's is 0 (a caller that
// advertises other than every configured GPU and replica, MIG devices of
// a layout, says how many it does), and
// its PreviousProfile the Profile of the newest stored event (damaged
// records skipped), left empty if there is none. No event is recorded when
// e is that newest event's configuration (SameConfig) and the report is
// Empty: a start with the configuration in force records nothing.
//
// check, if not nil, is given the stored devices as Devices would return
// them after the change, inside the transaction; an error from it commits
// nothing and is returned (wrapped). It must not call the Store (it would
// deadlock). Invalid specs or an e without Why are ErrInvalid, and change
// nothing.
func (s *Store) ReconcileConfig(devices []DeviceSpec, e ConfigEvent, check func([]Device) error) (ConfigChange, error) {
	const op = "reconcile devices and record config change"
	advertised := e.Devices
	e = e.FromReport(ReconcileReport{})
	e.Seq, e.PreviousProfile = 0, ""
	e.Time = s.stamp(e.Time)
	if err := validateSpecs(devices); err != nil {
		return ConfigChange{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := validateConfigEvent(e); err != nil {
		return ConfigChange{}, fmt.Errorf("%s: %w", op, err)
	}
	var out ConfigChange
	err := s.update(op, func(tx *bolt.Tx) error {
		out = ConfigChange{}
		rep, err := s.reconcile(tx, devices)
		if err != nil {
			return err
		}
		out.Report = rep
		e := e.FromReport(rep)
		if advertised > 0 {
			e.Devices = advertised
		}
		newest, found, err := s.newestConfigEvent(tx)
		if err != nil {
			return err
		}
		if found {
			out.Event = newest
			e.PreviousProfile = newest.Profile
		}
		if !found || !e.SameConfig(newest) || !rep.Empty() {
			b, err := bucket(tx, bucketConfig)
			if err != nil {
				return err
			}
			b.FillPercent = appendFillPercent
			if e.Seq, err = b.NextSequence(); err != nil {
				return fmt.Errorf("next config event sequence: %w", err)
			}
			if err := putJSON(b, u64(e.Seq), e); err != nil {
				return err
			}
			out.Event, out.Recorded = e, true
		}
		if check == nil {
			return nil
		}
		stored, err := s.devices(tx)
		if err != nil {
			return err
		}
		return check(stored)
	})
	if err != nil {
		return ConfigChange{}, err
	}
	out.Event = out.Event.clone()
	return out, nil
}

// newestConfigEvent returns the newest configuration event in tx that is
// not damaged, and whether there is one.
func (s *Store) newestConfigEvent(tx *bolt.Tx) (ConfigEvent, bool, error) {
	b := tx.Bucket(bucketConfig)
	if b == nil {
		return ConfigEvent{}, false, nil
	}
	c := b.Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		e, err := decodeConfigEvent(k, v)
		if err != nil {
			s.noteDamaged(bucketConfig, k, v, err)
			continue
		}
		return e, true, nil
	}
	return ConfigEvent{}, false, nil
}

// ConfigEvents returns the configuration events selected by f, newest
// first. Damaged records are skipped (see Damaged). A read-only Store of a
// file from before schema version 3 has none.
func (s *Store) ConfigEvents(f ConfigFilter) ([]ConfigEvent, error) {
	return listNewest(s, "list config events", bucketConfig, f.Limit, decodeConfigEvent,
		func(e *ConfigEvent) bool { return f.match(*e) })
}

func validateConfigEvent(e ConfigEvent) error {
	switch {
	case e.Why == "":
		return fmt.Errorf("no why: %w", ErrInvalid)
	case e.Devices < 0:
		return fmt.Errorf("negative device count %d: %w", e.Devices, ErrInvalid)
	case e.Replicas < 0:
		return fmt.Errorf("negative replicas %d: %w", e.Replicas, ErrInvalid)
	}
	for _, l := range []struct {
		name string
		ids  []string
	}{{"added", e.Added}, {"removed", e.Removed}, {"restored", e.Restored}} {
		seen := make(map[string]bool, len(l.ids))
		for _, id := range l.ids {
			switch {
			case id == "":
				return fmt.Errorf("empty device id in %s: %w", l.name, ErrInvalid)
			case seen[id]:
				return fmt.Errorf("device id %q listed twice in %s: %w", id, l.name, ErrInvalid)
			}
			seen[id] = true
		}
	}
	return nil
}
