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
// the same Profile, ResourceName, Machine, Devices and Replicas. Why,
// Detail and the device changes are not compared. A caller can compare the
// configuration it starts with against the newest stored event to decide
// whether to record a change.
func (e ConfigEvent) SameConfig(o ConfigEvent) bool {
	return e.Profile == o.Profile && e.ResourceName == o.ResourceName && e.Machine == o.Machine &&
		e.Devices == o.Devices && e.Replicas == o.Replicas
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
