package store

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Record validation. Every value read from the devices, allocations,
// health_events, config_events and claims buckets goes through one of the
// decode functions below, at Open and in every reader, so that what Open
// accepted the readers accept too. A value they refuse is a damaged record:
// Open moves it to the quarantine bucket (read-write) or reports it
// (read-only), readers skip and report it (see Store.Damaged).

// errRecord is the reason a record value is refused. It is wrapped with
// ErrDamaged where a caller asked for that very record.
type errRecord struct{ reason string }

func (e *errRecord) Error() string { return e.reason }

func damaged(format string, args ...any) error {
	return &errRecord{reason: fmt.Sprintf(format, args...)}
}

// reasonOf returns the reason a decode function refused a record, or "" if
// err is not such a refusal.
func reasonOf(err error) string {
	var r *errRecord
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// decodeObject unmarshals a stored JSON object into v. json.Unmarshal
// copies strings out of data, so the result outlives the transaction.
func decodeObject(data []byte, v any) error {
	if data == nil {
		return damaged("a nested bucket, not a record")
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return damaged("not a JSON object: %s", preview(data))
	}
	if err := json.Unmarshal(data, v); err != nil {
		return damaged("decode: %v", err)
	}
	return nil
}

// preview quotes the start of a refused value for a reason message.
func preview(data []byte) string {
	const n = 32
	if len(data) > n {
		return strconv.Quote(string(data[:n])) + "…"
	}
	return strconv.Quote(string(data))
}

// seqKey returns the sequence number a history key encodes.
func seqKey(k []byte) (uint64, error) {
	if len(k) != 8 {
		return 0, damaged("key %x is not a sequence number", k)
	}
	return be(k), nil
}

// decodeDevice decodes and checks the device stored under key k: a JSON
// object whose "id" is k, with a non-negative index and a "since" time; a
// replica names another device as its "gpu" and has a non-negative
// "replica" number, a GPU has no replica number.
func decodeDevice(k, v []byte) (Device, error) {
	var d Device
	if err := decodeObject(v, &d); err != nil {
		return Device{}, err
	}
	switch {
	case d.ID != string(k):
		return Device{}, damaged("id %q does not match its key", d.ID)
	case d.Index < 0:
		return Device{}, damaged("negative index %d", d.Index)
	case d.Since.IsZero():
		return Device{}, damaged("no since time")
	case d.GPU == d.ID:
		return Device{}, damaged("replica of itself")
	case d.Replica < 0:
		return Device{}, damaged("negative replica number %d", d.Replica)
	case d.GPU == "" && d.Replica != 0:
		return Device{}, damaged("replica number %d without a GPU", d.Replica)
	case d.GPU == "" && d.MIG != "":
		return Device{}, damaged("MIG device (%s) without a GPU", d.MIG)
	}
	return d, nil
}

// decodeAllocation decodes and checks the allocation record stored under
// key k: a JSON object whose "seq" is the key, with a time, device ids and a
// known state.
func decodeAllocation(k, v []byte) (Allocation, error) {
	seq, err := seqKey(k)
	if err != nil {
		return Allocation{}, err
	}
	var a Allocation
	if err := decodeObject(v, &a); err != nil {
		return Allocation{}, err
	}
	switch {
	case a.Seq != seq:
		return Allocation{}, damaged("seq %d does not match its key %d", a.Seq, seq)
	case a.Time.IsZero():
		return Allocation{}, damaged("no time")
	}
	if err := validateAllocation(a); err != nil {
		return Allocation{}, damaged("%v", err)
	}
	return a, nil
}

// decodeEvent decodes and checks the health event stored under key k: a
// JSON object whose "seq" is the key, with a time and a device id.
func decodeEvent(k, v []byte) (HealthEvent, error) {
	seq, err := seqKey(k)
	if err != nil {
		return HealthEvent{}, err
	}
	var e HealthEvent
	if err := decodeObject(v, &e); err != nil {
		return HealthEvent{}, err
	}
	switch {
	case e.Seq != seq:
		return HealthEvent{}, damaged("seq %d does not match its key %d", e.Seq, seq)
	case e.Time.IsZero():
		return HealthEvent{}, damaged("no time")
	case e.DeviceID == "":
		return HealthEvent{}, damaged("no device id")
	}
	return e, nil
}

// decodeConfigEvent decodes and checks the configuration event stored
// under key k: a JSON object whose "seq" is the key, with a time, a why, and
// what RecordConfigChange accepts.
func decodeConfigEvent(k, v []byte) (ConfigEvent, error) {
	seq, err := seqKey(k)
	if err != nil {
		return ConfigEvent{}, err
	}
	var e ConfigEvent
	if err := decodeObject(v, &e); err != nil {
		return ConfigEvent{}, err
	}
	switch {
	case e.Seq != seq:
		return ConfigEvent{}, damaged("seq %d does not match its key %d", e.Seq, seq)
	case e.Time.IsZero():
		return ConfigEvent{}, damaged("no time")
	}
	if err := validateConfigEvent(e); err != nil {
		return ConfigEvent{}, damaged("%v", err)
	}
	return e, nil
}

// decodeClaim decodes and checks the claim record stored under key k: a
// JSON object whose "seq" is the key, with what RecordClaimPrepared
// accepts (a uid, namespace, name, device ids, a prepared time) and no
// unprepared time before the prepared one.
func decodeClaim(k, v []byte) (Claim, error) {
	seq, err := seqKey(k)
	if err != nil {
		return Claim{}, err
	}
	var c Claim
	if err := decodeObject(v, &c); err != nil {
		return Claim{}, err
	}
	if c.Seq != seq {
		return Claim{}, damaged("seq %d does not match its key %d", c.Seq, seq)
	}
	if err := validateClaim(c); err != nil {
		return Claim{}, damaged("%v", err)
	}
	return c, nil
}

// keyName renders a record key for people: a device id as it is, a
// sequence number in decimal, anything else in hex.
func keyName(bucket string, k []byte) string {
	if bucket == string(bucketDevices) {
		return string(k)
	}
	if len(k) == 8 {
		return strconv.FormatUint(be(k), 10)
	}
	return "0x" + hex.EncodeToString(k)
}
