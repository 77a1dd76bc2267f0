package store_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// historyFile writes a closed state file with four devices, six allocation
// records (seq 1-6, 2 and 4 released) and the health events of adding the
// devices (seq 1-4) plus one change (seq 5), and returns its path.
func historyFile(t *testing.T) string {
	t.Helper()
	s, _ := mustDevices(t, 4)
	for i := range 6 {
		a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{specs(4)[i%4].ID}})
		if i%2 == 1 {
			if _, err := s.UpdateAllocation(a.Seq, func(a *store.Allocation) error { a.State = store.StateReleased; return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustSetHealth(t, s, "fake-3", false, "ecc")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return s.Path()
}

func seqKey(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// TestOpen_DamagedRecords writes one damaged record value with bbolt
// directly into a real file, then opens it read-only (nothing written, the
// record reported, the rest readable) and read-write (the record moved into
// quarantine with its bytes, the rest readable).
func TestOpen_DamagedRecords(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bucket     string
		key        []byte
		value      string
		wantKey    string
		wantReason string
		// what stays readable
		devices, allocations, events int
	}{
		{"device not JSON", "devices", []byte("fake-1"), "\x00\x13garbage", "fake-1", "not a JSON object", 3, 6, 5},
		{"device JSON null", "devices", []byte("fake-1"), "null", "fake-1", "not a JSON object", 3, 6, 5},
		{"device truncated JSON", "devices", []byte("fake-1"), `{"id":"fake-1","index":1,"numa"`, "fake-1", "decode: unexpected end of JSON input", 3, 6, 5},
		{"device id mismatch", "devices", []byte("fake-1"), `{"id":"fake-9","index":1,"numa":0,"healthy":true,"since":"2026-03-01T12:00:00Z"}`, "fake-1", `id "fake-9" does not match its key`, 3, 6, 5},
		{"device negative index", "devices", []byte("fake-1"), `{"id":"fake-1","index":-4,"numa":0,"healthy":true,"since":"2026-03-01T12:00:00Z"}`, "fake-1", "negative index -4", 3, 6, 5},
		{"device wrong type", "devices", []byte("fake-1"), `{"id":"fake-1","index":"one"}`, "fake-1", "decode: json: cannot unmarshal string", 3, 6, 5},
		{"allocation array", "allocations", seqKey(3), `[1,2,3]`, "3", "not a JSON object", 4, 5, 5},
		{"allocation seq mismatch", "allocations", seqKey(3), `{"seq":7,"time":"2026-03-01T12:00:00Z","device_ids":["fake-0"],"state":"allocated"}`, "3", "seq 7 does not match its key 3", 4, 5, 5},
		{"allocation unknown state", "allocations", seqKey(3), `{"seq":3,"time":"2026-03-01T12:00:00Z","device_ids":["fake-0"],"state":"borrowed"}`, "3", `state "borrowed"`, 4, 5, 5},
		{"allocation no devices", "allocations", seqKey(3), `{"seq":3,"time":"2026-03-01T12:00:00Z","device_ids":[],"state":"held"}`, "3", "no device ids", 4, 5, 5},
		{"allocation no time", "allocations", seqKey(3), `{"seq":3,"device_ids":["fake-0"],"state":"held"}`, "3", "no time", 4, 5, 5},
		{"allocation key not a sequence", "allocations", []byte("abc"), `{"seq":3}`, "0x616263", "key 616263 is not a sequence number", 4, 6, 5},
		{"event trailing garbage", "health_events", seqKey(2), `{"seq":2,"time":"2026-03-01T12:00:00Z","device_id":"fake-1","healthy":true}xx`, "2", "decode: invalid character 'x' after top-level value", 4, 6, 4},
		{"event no device", "health_events", seqKey(2), `{"seq":2,"time":"2026-03-01T12:00:00Z","healthy":true}`, "2", "no device id", 4, 6, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := historyFile(t)
			rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte(tc.bucket)).Put(tc.key, []byte(tc.value)) })
			before := fileHash(t, path)

			readable := func(t *testing.T, s *store.Store) {
				t.Helper()
				if devs, err := s.Devices(); err != nil || len(devs) != tc.devices {
					t.Errorf("Devices() = %d, %v; want %d", len(devs), err, tc.devices)
				}
				if as, err := s.Allocations(store.AllocationFilter{}); err != nil || len(as) != tc.allocations {
					t.Errorf("Allocations() = %d, %v; want %d", len(as), err, tc.allocations)
				}
				if _, err := s.Allocations(store.AllocationFilter{Active: true}); err != nil {
					t.Errorf("Allocations(active): %v", err)
				}
				if evs, err := s.HealthEvents(store.EventFilter{}); err != nil || len(evs) != tc.events {
					t.Errorf("HealthEvents() = %d, %v; want %d", len(evs), err, tc.events)
				}
				if st, err := s.Stats(); err != nil || st.Devices != tc.devices || st.Damaged != 1 {
					t.Errorf("Stats() = %+v, %v; want %d devices, 1 damaged", st, err, tc.devices)
				}
			}
			checkDamaged := func(t *testing.T, s *store.Store, quarantined bool) {
				t.Helper()
				dmg, err := s.Damaged()
				if err != nil || len(dmg) != 1 {
					t.Fatalf("Damaged() = %+v, %v; want one record", dmg, err)
				}
				d := dmg[0]
				if d.Bucket != tc.bucket || d.Key != tc.wantKey || !strings.Contains(d.Reason, tc.wantReason) ||
					!bytes.Equal(d.Value, []byte(tc.value)) || d.Quarantined.IsZero() != !quarantined {
					t.Errorf("Damaged()[0] = %+v\nwant bucket %s, key %s, reason containing %q, the stored bytes, quarantined %v",
						d, tc.bucket, tc.wantKey, tc.wantReason, quarantined)
				}
			}

			// Read-only: reported, skipped, nothing written.
			ro := storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})
			checkDamaged(t, ro, false)
			readable(t, ro)
			ro.Close()
			if fileHash(t, path) != before {
				t.Fatal("read-only Open changed the file")
			}

			// Read-write: quarantined with its bytes, deleted from its bucket.
			s := storetest.MustOpenPath(t, path, store.Options{})
			checkDamaged(t, s, true)
			readable(t, s)
			s.Close()
			rawView(t, path, func(tx *bolt.Tx) error {
				if v := tx.Bucket([]byte(tc.bucket)).Get(tc.key); v != nil {
					t.Errorf("damaged record still in %s: %q", tc.bucket, v)
				}
				var n int
				err := tx.Bucket([]byte("quarantine")).ForEach(func(k, v []byte) error {
					n++
					var q struct {
						Bucket string    `json:"bucket"`
						Key    []byte    `json:"key"`
						Value  []byte    `json:"value"`
						Reason string    `json:"reason"`
						Time   time.Time `json:"time"`
					}
					if err := json.Unmarshal(v, &q); err != nil {
						return err
					}
					if q.Bucket != tc.bucket || !bytes.Equal(q.Key, tc.key) || string(q.Value) != tc.value || q.Reason == "" || q.Time.IsZero() {
						t.Errorf("quarantine entry %d = %+v", binary.BigEndian.Uint64(k), q)
					}
					return nil
				})
				if n != 1 {
					t.Errorf("%d quarantine entries, want 1", n)
				}
				return err
			})

			// Quarantined stays quarantined: a second Open finds nothing new.
			again := fileHash(t, path)
			s = storetest.MustOpenPath(t, path, store.Options{})
			checkDamaged(t, s, true)
			readable(t, s)
			s.Close()
			if fileHash(t, path) != again {
				t.Error("a second Open wrote to a file without new damage")
			}
		})
	}
}

// TestOpen_ManyDamagedRecords: damage across every bucket is quarantined in
// one Open, and every record still readable is returned.
func TestOpen_ManyDamagedRecords(t *testing.T) {
	path := historyFile(t)
	for _, r := range []struct {
		bucket string
		key    []byte
	}{{"devices", []byte("fake-0")}, {"allocations", storetest.SeqKey(1)}, {"allocations", storetest.SeqKey(6)}, {"health_events", storetest.SeqKey(5)}} {
		storetest.Damage(t, path, r.bucket, r.key, []byte("garbage"))
	}
	s := storetest.MustOpenPath(t, path, store.Options{})
	dmg, err := s.Damaged()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range dmg {
		got = append(got, d.Bucket+"/"+d.Key)
	}
	want := []string{"devices/fake-0", "allocations/1", "allocations/6", "health_events/5"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Damaged() = %v, want %v (in the order found)", got, want)
	}
	as, err := s.Allocations(store.AllocationFilter{})
	if err != nil || !reflect.DeepEqual(seqs(as), []uint64{5, 4, 3, 2}) {
		t.Errorf("Allocations() = %v, %v; want 5 4 3 2", seqs(as), err)
	}
	// New records get new sequence numbers, past the quarantined ones.
	if a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-1"}}); a.Seq != 7 {
		t.Errorf("next seq %d, want 7", a.Seq)
	}
}

// TestReconcile_QuarantinedDevice: a device whose record was quarantined is
// added again as new, and the report says so.
func TestReconcile_QuarantinedDevice(t *testing.T) {
	path := historyFile(t)
	rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("devices")).Put([]byte("fake-3"), []byte("{")) })
	s := storetest.MustOpenPath(t, path, store.Options{})
	rep, err := s.Reconcile(specs(4))
	if err != nil {
		t.Fatal(err)
	}
	want := store.ReconcileReport{Added: []string{"fake-3"}, Recreated: []string{"fake-3"}, Configured: 4}
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("report = %+v, want %+v", rep, want)
	}
	// fake-3 was unhealthy ("ecc"); that health is lost and it starts over.
	if d, err := s.Device("fake-3"); err != nil || !d.Healthy || d.Index != 3 {
		t.Errorf("Device(fake-3) = %+v, %v; want healthy at index 3", d, err)
	}
	// Its history is kept.
	if evs, err := s.HealthEvents(store.EventFilter{DeviceID: "fake-3"}); err != nil || len(evs) != 3 {
		t.Errorf("fake-3 has %d health events, %v; want 3 (added, ecc, added again)", len(evs), err)
	}
	if rep, err := s.Reconcile(specs(4)); err != nil || !rep.Empty() {
		t.Errorf("second Reconcile = %+v, %v; want no change", rep, err)
	}
	if dmg, _ := s.Damaged(); len(dmg) != 1 || dmg[0].Key != "fake-3" {
		t.Errorf("Damaged() = %+v; want fake-3 kept in quarantine", dmg)
	}
}

// TestOpen_MigratesV1WithDamage: a version-1 file gets the quarantine
// bucket, and its damaged records go there in the same Open.
func TestOpen_MigratesV1WithDamage(t *testing.T) {
	path := historyFile(t)
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("quarantine")); err != nil {
			return err
		}
		if err := tx.Bucket([]byte("meta")).Put([]byte("schema_version"), seqKey(1)); err != nil {
			return err
		}
		return tx.Bucket([]byte("allocations")).Put(seqKey(2), []byte("garbage"))
	})
	ro := storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})
	if dmg, err := ro.Damaged(); err != nil || len(dmg) != 1 || ro.SchemaVersion() != 1 {
		t.Errorf("read-only v1: Damaged() = %+v, %v, version %d", dmg, err, ro.SchemaVersion())
	}
	ro.Close()
	s := storetest.MustOpenPath(t, path, store.Options{})
	if v, migrated := s.MigratedFrom(); v != 1 || !migrated {
		t.Errorf("MigratedFrom() = %d, %v; want 1, true", v, migrated)
	}
	if dmg, err := s.Damaged(); err != nil || len(dmg) != 1 || dmg[0].Key != "2" || dmg[0].Quarantined.IsZero() {
		t.Errorf("Damaged() = %+v, %v", dmg, err)
	}
}

// TestOpen_NestedBucketInRecords: a bucket where records belong is a layout
// no build writes: the file is refused, not quarantined.
func TestOpen_NestedBucketInRecords(t *testing.T) {
	path := historyFile(t)
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		_, err := tx.Bucket([]byte("allocations")).CreateBucket([]byte("odd"))
		return err
	})
	for _, readOnly := range []bool{true, false} {
		if _, err := store.Open(path, store.Options{ReadOnly: readOnly}); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "nested bucket") {
			t.Errorf("read-only %v: err = %v, want ErrCorrupt naming the nested bucket", readOnly, err)
		}
	}
}
