package store_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

func setVersion(t *testing.T, path string, v uint64) {
	t.Helper()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b := binary.BigEndian.AppendUint64(nil, v)
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), b)
	})
}

func TestOpen_NewerSchema(t *testing.T) {
	path := newFile(t)
	setVersion(t, path, store.SchemaVersion+6)
	before := fileHash(t, path)
	for _, readOnly := range []bool{false, true} {
		_, err := store.Open(path, store.Options{ReadOnly: readOnly})
		if !errors.Is(err, store.ErrNewerSchema) {
			t.Fatalf("read-only %v: err = %v, want ErrNewerSchema", readOnly, err)
		}
		if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("version %d", store.SchemaVersion+6)) ||
			!strings.Contains(msg, fmt.Sprintf("up to %d", store.SchemaVersion)) || !strings.Contains(msg, path) {
			t.Errorf("error %q should name the file and both versions", msg)
		}
	}
	if fileHash(t, path) != before {
		t.Error("Open changed a file of a newer schema")
	}
}

func TestOpen_CurrentSchema(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{})
	if v, migrated := s.MigratedFrom(); v != 0 || !migrated {
		t.Errorf("new file: MigratedFrom() = %d, %v; want 0, true", v, migrated)
	}
	path := s.Path()
	s.Close()
	s = storetest.MustOpenPath(t, path, store.Options{})
	if v, migrated := s.MigratedFrom(); v != store.SchemaVersion || migrated || s.SchemaVersion() != store.SchemaVersion {
		t.Errorf("reopen: MigratedFrom() = %d, %v, SchemaVersion() = %d", v, migrated, s.SchemaVersion())
	}
}

// writeV0 writes a version-0 file as a pre-release build left it: the
// devices and allocations buckets with version-1 values, no meta bucket, no
// health_events bucket.
func writeV0(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		devs, err := tx.CreateBucket([]byte("devices"))
		if err != nil {
			return err
		}
		for _, kv := range [][2]string{
			{"fake-0", `{"id":"fake-0","index":0,"numa":0,"healthy":true,"since":"2025-12-01T00:00:00Z"}`},
			{"fake-1", `{"id":"fake-1","index":1,"numa":0,"healthy":false,"reason":"ecc","since":"2025-12-02T00:00:00Z"}`},
		} {
			if err := devs.Put([]byte(kv[0]), []byte(kv[1])); err != nil {
				return err
			}
		}
		allocs, err := tx.CreateBucket([]byte("allocations"))
		if err != nil {
			return err
		}
		if err := allocs.SetSequence(41); err != nil {
			return err
		}
		return allocs.Put(binary.BigEndian.AppendUint64(nil, 41),
			[]byte(`{"seq":41,"time":"2025-12-03T00:00:00Z","device_ids":["fake-0"],"envs":{"VIRTUAL_GPU_IDS":"fake-0"},"state":"allocated"}`))
	})
	return path
}

func TestOpen_MigratesV0(t *testing.T) {
	path := writeV0(t)
	before := fileHash(t, path)

	// Read-only: read as it is, not migrated.
	ro := storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})
	if ro.SchemaVersion() != 0 {
		t.Errorf("read-only SchemaVersion() = %d, want 0", ro.SchemaVersion())
	}
	if devs, err := ro.Devices(); err != nil || len(devs) != 2 || devs[1].Healthy {
		t.Errorf("read-only v0 Devices() = %+v, %v", devs, err)
	}
	if evs, err := ro.HealthEvents(store.EventFilter{}); err != nil || len(evs) != 0 {
		t.Errorf("read-only v0 HealthEvents() = %v, %v; want none", evs, err)
	}
	ro.Close()
	if fileHash(t, path) != before {
		t.Fatal("read-only open migrated the file")
	}

	s := storetest.MustOpenPath(t, path, store.Options{})
	if v, migrated := s.MigratedFrom(); v != 0 || !migrated || s.SchemaVersion() != store.SchemaVersion {
		t.Errorf("MigratedFrom() = %d, %v, SchemaVersion() = %d; want 0, true, %d", v, migrated, s.SchemaVersion(), store.SchemaVersion)
	}
	devs, err := s.Devices()
	if err != nil || len(devs) != 2 || devs[1].Healthy || devs[1].Reason != "ecc" {
		t.Fatalf("Devices() = %+v, %v", devs, err)
	}
	a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-1"}})
	if a.Seq != 42 {
		t.Errorf("first new record after migration: seq %d, want 42", a.Seq)
	}
	if _, _, err := s.SetHealth("fake-1", true, "", store.CauseAdmin); err != nil {
		t.Errorf("SetHealth after migration (health_events created): %v", err)
	}
	all, err := s.Allocations(store.AllocationFilter{})
	if err != nil || len(all) != 2 || all[1].Envs["VIRTUAL_GPU_IDS"] != "fake-0" {
		t.Errorf("Allocations() = %+v, %v", all, err)
	}
}

func TestOpen_MetaWithoutVersion(t *testing.T) {
	path := newFile(t)
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Delete([]byte("schema_version"))
	})
	if _, err := store.Open(path, store.Options{}); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("err = %v, want ErrCorrupt", err)
	}
}

func TestOpen_V1MissingBucket(t *testing.T) {
	path := newFile(t)
	rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("allocations")) })
	if _, err := store.Open(path, store.Options{}); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("err = %v, want ErrCorrupt", err)
	}
}

// writeV2 writes a version-2 file as the build before UUIDs and
// configuration events left it: every version-2 bucket, device records
// without "uuid", no config_events bucket.
func writeV2(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		for _, name := range []string{"meta", "devices", "allocations", "health_events", "quarantine", "inactive_allocations"} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		if err := tx.Bucket([]byte("meta")).Put([]byte("schema_version"), binary.BigEndian.AppendUint64(nil, 2)); err != nil {
			return err
		}
		devs := tx.Bucket([]byte("devices"))
		for _, kv := range [][2]string{
			{"fake-0", `{"id":"fake-0","index":0,"numa":0,"healthy":true,"since":"2026-01-01T00:00:00Z"}`},
			{"fake-1", `{"id":"fake-1","index":1,"numa":0,"healthy":false,"reason":"ecc","since":"2026-01-02T00:00:00Z"}`},
			{"fake-2", `{"id":"fake-2","index":2,"numa":1,"healthy":true,"since":"2026-01-01T00:00:00Z","removed":true,"removed_at":"2026-01-03T00:00:00Z"}`},
		} {
			if err := devs.Put([]byte(kv[0]), []byte(kv[1])); err != nil {
				return err
			}
		}
		events := tx.Bucket([]byte("health_events"))
		if err := events.SetSequence(1); err != nil {
			return err
		}
		return events.Put(binary.BigEndian.AppendUint64(nil, 1),
			[]byte(`{"seq":1,"time":"2026-01-02T00:00:00Z","device_id":"fake-1","healthy":false,"reason":"ecc","cause":"admin"}`))
	})
	return path
}

// TestOpen_MigratesV2: a version-2 file is read as it is read-only, and
// read-write gets the config_events bucket; its devices, removed ones
// included, get their UUIDs at the next Reconcile, and keep them.
func TestOpen_MigratesV2(t *testing.T) {
	path := writeV2(t)
	before := fileHash(t, path)

	ro := storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})
	if ro.SchemaVersion() != 2 {
		t.Errorf("read-only SchemaVersion() = %d, want 2", ro.SchemaVersion())
	}
	if evs, err := ro.ConfigEvents(store.ConfigFilter{}); err != nil || len(evs) != 0 {
		t.Errorf("read-only v2 ConfigEvents() = %v, %v; want none", evs, err)
	}
	if devs, err := ro.Devices(); err != nil || len(devs) != 3 || devs[0].UUID != "" {
		t.Errorf("read-only v2 Devices() = %+v, %v", devs, err)
	}
	if dmg, err := ro.Damaged(); err != nil || len(dmg) != 0 {
		t.Errorf("read-only v2 Damaged() = %+v, %v; want none", dmg, err)
	}
	ro.Close()
	if fileHash(t, path) != before {
		t.Fatal("read-only open migrated the file")
	}

	s := storetest.MustOpenPath(t, path, store.Options{})
	if v, migrated := s.MigratedFrom(); v != 2 || !migrated || s.SchemaVersion() != store.SchemaVersion {
		t.Errorf("MigratedFrom() = %d, %v, SchemaVersion() = %d; want 2, true, %d", v, migrated, s.SchemaVersion(), store.SchemaVersion)
	}
	uuid := func(id string) string { return "GPU-node-" + id }
	config := []store.DeviceSpec{{ID: "fake-0", Index: 0, NUMA: 0, UUID: uuid("fake-0")}, {ID: "fake-1", Index: 1, NUMA: 0, UUID: uuid("fake-1")}}
	rep, err := s.Reconcile(config)
	if err != nil {
		t.Fatal(err)
	}
	want := store.ReconcileReport{UUIDsAssigned: []string{"fake-0", "fake-1"}, Configured: 2}
	if !reflect.DeepEqual(rep, want) || rep.Empty() {
		t.Errorf("first Reconcile after the upgrade = %+v, want %+v (not empty)", rep, want)
	}
	// The removed fake-2 gets its UUID when it is configured again.
	config = append(config, store.DeviceSpec{ID: "fake-2", Index: 2, NUMA: 1, UUID: uuid("fake-2")})
	rep, err = s.Reconcile(config)
	if want := (store.ReconcileReport{Restored: []string{"fake-2"}, UUIDsAssigned: []string{"fake-2"}, Configured: 3}); err != nil || !reflect.DeepEqual(rep, want) {
		t.Errorf("restoring fake-2 = %+v, %v; want %+v", rep, err, want)
	}
	devs, err := s.Devices()
	if err != nil || len(devs) != 3 {
		t.Fatalf("Devices() = %+v, %v", devs, err)
	}
	for _, d := range devs {
		if d.UUID != uuid(d.ID) {
			t.Errorf("%s: UUID %q, want %q", d.ID, d.UUID, uuid(d.ID))
		}
	}
	if devs[1].Healthy || devs[1].Reason != "ecc" {
		t.Errorf("fake-1 = %+v: health lost in the upgrade", devs[1])
	}
	if _, err := s.RecordConfigChange(store.ConfigEvent{Why: store.WhyFlags, Devices: 3}); err != nil {
		t.Errorf("RecordConfigChange after the upgrade: %v", err)
	}
	if rep, err := s.Reconcile(config); err != nil || !rep.Empty() {
		t.Errorf("Reconcile again = %+v, %v; want no change", rep, err)
	}
}
