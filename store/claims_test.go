package store_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// claim returns a claim of the given uid on the devices ids, reserved for
// one pod, as the DRA driver prepares it.
func claim(uid string, ids ...string) store.Claim {
	return store.Claim{
		UID: uid, Namespace: "default", Name: "claim-" + uid, DeviceIDs: ids,
		Envs:        map[string]string{"VIRTUAL_GPU_IDS": strings.Join(ids, ",")},
		ReservedFor: []store.ClaimConsumer{{Resource: store.ConsumerPods, Name: "pod-" + uid, UID: "pod-uid-" + uid}},
	}
}

func mustPrepare(t testing.TB, s *store.Store, c store.Claim) store.Claim {
	t.Helper()
	got, created, err := s.RecordClaimPrepared(c)
	if err != nil || !created {
		t.Fatalf("prepare claim %s: created %v, %v", c.UID, created, err)
	}
	return got
}

func mustUnprepare(t testing.TB, s *store.Store, uid string, at time.Time) store.Claim {
	t.Helper()
	got, changed, err := s.RecordClaimUnprepared(uid, at)
	if err != nil || !changed {
		t.Fatalf("unprepare claim %s: changed %v, %v", uid, changed, err)
	}
	return got
}

func claimSeqs(cs []store.Claim) []uint64 {
	out := make([]uint64, len(cs))
	for i, c := range cs {
		out[i] = c.Seq
	}
	return out
}

// TestRecordClaimPrepared: a claim is stored with its sequence number and
// prepared time, as a copy; preparing the same uid again, before and after
// a restart, answers the stored record and writes nothing.
func TestRecordClaimPrepared(t *testing.T) {
	s, c := mustDevices(t, 4)
	in := claim("uid-a", "fake-1", "fake-2")
	got := mustPrepare(t, s, in)
	if got.Seq != 1 || got.PreparedAt.IsZero() || got.PreparedAt.Location() != time.UTC || !got.Prepared() || got.GPUIDs != nil {
		t.Errorf("stored %+v: want seq 1, prepared now in UTC, no GPU ids (no replica)", got)
	}
	if !slices.Equal(got.GPUs(), []string{"fake-1", "fake-2"}) {
		t.Errorf("GPUs() = %v, want the devices", got.GPUs())
	}
	// The caller's value and the returned one are independent copies.
	got.Envs["VIRTUAL_GPU_IDS"] = "changed"
	got.ReservedFor[0].Name = "changed"
	in.DeviceIDs[0] = "changed"
	back, err := s.Claim("uid-a")
	if err != nil {
		t.Fatal(err)
	}
	if back.Envs["VIRTUAL_GPU_IDS"] != "fake-1,fake-2" || back.ReservedFor[0].Name != "pod-uid-a" || back.DeviceIDs[0] != "fake-1" {
		t.Errorf("read back %+v", back)
	}

	// Idempotent: the stored record, whatever the retry holds; nothing written.
	before := fileHash(t, s.Path())
	again, created, err := s.RecordClaimPrepared(claim("uid-a", "fake-3"))
	if err != nil || created || !reflect.DeepEqual(again, back) {
		t.Errorf("prepare again = %+v, %v, %v; want the stored %+v, not created", again, created, err, back)
	}
	if fileHash(t, s.Path()) != before {
		t.Error("a repeated prepare wrote to the file")
	}

	// After a restart, the same answer.
	path := s.Path()
	s.Close()
	s = storetest.MustOpenPath(t, path, store.Options{Now: c.Now})
	if again, created, err := s.RecordClaimPrepared(claim("uid-a", "fake-1", "fake-2")); err != nil || created || !reflect.DeepEqual(again, back) {
		t.Errorf("prepare after restart = %+v, %v, %v; want the stored %+v", again, created, err, back)
	}

	// Unprepared, then prepared again: a new record; Claim answers the newest.
	mustUnprepare(t, s, "uid-a", time.Time{})
	second := mustPrepare(t, s, claim("uid-a", "fake-0"))
	if second.Seq != 2 {
		t.Errorf("prepared again: seq %d, want 2", second.Seq)
	}
	if newest, err := s.Claim("uid-a"); err != nil || newest.Seq != 2 || !newest.Prepared() {
		t.Errorf("Claim(uid-a) = %+v, %v; want record 2, prepared", newest, err)
	}
	all, err := s.Claims(store.ClaimFilter{})
	if err != nil || !slices.Equal(claimSeqs(all), []uint64{2, 1}) || all[1].Prepared() {
		t.Errorf("Claims() = %+v, %v; want 2 (prepared) and 1 (unprepared)", all, err)
	}

	// A given time is kept, in UTC.
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600))
	b := claim("uid-b", "fake-3")
	b.PreparedAt = at
	if got := mustPrepare(t, s, b); !got.PreparedAt.Equal(at) || got.PreparedAt.Location() != time.UTC {
		t.Errorf("prepared at %v, want %v in UTC", got.PreparedAt, at)
	}
}

// Replicas: a claim on replicas records their GPUs, as an allocation does.
func TestRecordClaimPrepared_Replicas(t *testing.T) {
	s := storetest.MustOpen(t, store.Options{Now: newClock().Now})
	if _, err := s.Reconcile(sharedSpecs(3, 2, 0, 2)); err != nil {
		t.Fatal(err)
	}
	c := mustPrepare(t, s, claim("uid-r", "fake-0::1", "fake-1", "fake-2::0", "fake-2::1"))
	if want := []string{"fake-0", "fake-1", "fake-2"}; !slices.Equal(c.GPUIDs, want) || !slices.Equal(c.GPUs(), want) {
		t.Errorf("GPUIDs = %v, GPUs() = %v; want %v", c.GPUIDs, c.GPUs(), want)
	}
	in := claim("uid-s", "fake-1")
	in.GPUIDs = []string{"ignored"}
	if c := mustPrepare(t, s, in); c.GPUIDs != nil {
		t.Errorf("whole GPU: GPUIDs = %v, want none", c.GPUIDs)
	}
}

func TestRecordClaimPrepared_Invalid(t *testing.T) {
	s, _ := mustDevices(t, 2)
	with := func(f func(c *store.Claim)) store.Claim {
		c := claim("uid-x", "fake-0")
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		c    store.Claim
		want error
		msg  string
	}{
		{"no uid", with(func(c *store.Claim) { c.UID = "" }), store.ErrInvalid, "no uid"},
		{"uid too long", with(func(c *store.Claim) { c.UID = strings.Repeat("u", store.MaxClaimUID+1) }), store.ErrInvalid, "uid is 257 bytes, at most 256"},
		{"no namespace", with(func(c *store.Claim) { c.Namespace = "" }), store.ErrInvalid, "no namespace"},
		{"no name", with(func(c *store.Claim) { c.Name = "" }), store.ErrInvalid, "no name"},
		{"no devices", with(func(c *store.Claim) { c.DeviceIDs = nil }), store.ErrInvalid, "no device ids"},
		{"empty device id", with(func(c *store.Claim) { c.DeviceIDs = []string{"fake-0", ""} }), store.ErrInvalid, "empty device id"},
		{"repeated device id", with(func(c *store.Claim) { c.DeviceIDs = []string{"fake-0", "fake-0"} }), store.ErrInvalid, `device id "fake-0" listed twice`},
		{"consumer without uid", with(func(c *store.Claim) { c.ReservedFor[0].UID = "" }), store.ErrInvalid, "resource, name and uid are required"},
		{"consumer without resource", with(func(c *store.Claim) { c.ReservedFor[0].Resource = "" }), store.ErrInvalid, "resource, name and uid are required"},
		{"consumer twice", with(func(c *store.Claim) { c.ReservedFor = append(c.ReservedFor, c.ReservedFor[0]) }), store.ErrInvalid, `consumer uid "pod-uid-uid-x" listed twice`},
		{"admin device not the claim's", with(func(c *store.Claim) { c.AdminDeviceIDs = []string{"fake-3"} }), store.ErrInvalid, `admin device "fake-3" is not one of the claim's devices`},
		{"admin device twice", with(func(c *store.Claim) { c.AdminDeviceIDs = []string{c.DeviceIDs[0], c.DeviceIDs[0]} }), store.ErrInvalid, "listed twice"},
		{"unprepared set", with(func(c *store.Claim) { c.UnpreparedAt = time.Now() }), store.ErrInvalid, "unprepared time set on a claim being prepared"},
		{"unknown device", with(func(c *store.Claim) { c.DeviceIDs = []string{"fake-0", "fake-9"} }), store.ErrUnknownDevice, `"fake-9"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, created, err := s.RecordClaimPrepared(tc.c)
			if !errors.Is(err, tc.want) || created || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, created %v; want %v with %q", err, created, tc.want, tc.msg)
			}
			if all, err := s.Claims(store.ClaimFilter{}); err != nil || len(all) != 0 {
				t.Errorf("Claims() = %+v, %v after a refused prepare", all, err)
			}
		})
	}
}

// TestRecordClaimUnprepared: the prepared record is marked unprepared;
// unpreparing again, or a uid never prepared, changes nothing and is no
// error.
func TestRecordClaimUnprepared(t *testing.T) {
	s, _ := mustDevices(t, 2)
	c := mustPrepare(t, s, claim("uid-a", "fake-0"))

	if got, changed, err := s.RecordClaimUnprepared("never", time.Time{}); err != nil || changed || !reflect.DeepEqual(got, store.Claim{}) {
		t.Errorf("unprepare of an unknown uid = %+v, %v, %v; want nothing, no error", got, changed, err)
	}
	if _, _, err := s.RecordClaimUnprepared("uid-a", c.PreparedAt.Add(-time.Second)); !errors.Is(err, store.ErrInvalid) ||
		!strings.Contains(err.Error(), "before it was prepared") {
		t.Errorf("unprepare before prepare: err = %v, want ErrInvalid", err)
	}
	if _, _, err := s.RecordClaimUnprepared("", time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("unprepare without uid: err = %v, want ErrInvalid", err)
	}

	at := c.PreparedAt.Add(time.Minute)
	u := mustUnprepare(t, s, "uid-a", at)
	if u.Seq != c.Seq || !u.UnpreparedAt.Equal(at) || u.Prepared() {
		t.Errorf("unprepared = %+v, want record %d unprepared at %v", u, c.Seq, at)
	}
	before := fileHash(t, s.Path())
	again, changed, err := s.RecordClaimUnprepared("uid-a", time.Time{})
	if err != nil || changed || !reflect.DeepEqual(again, u) {
		t.Errorf("unprepare again = %+v, %v, %v; want the record unchanged", again, changed, err)
	}
	if fileHash(t, s.Path()) != before {
		t.Error("a repeated unprepare wrote to the file")
	}
	if back, err := s.Claim("uid-a"); err != nil || !reflect.DeepEqual(back, u) {
		t.Errorf("Claim = %+v, %v; want %+v", back, err, u)
	}
}

// A clock that stepped back between prepare and unprepare does not make
// Unprepare fail: the record is unprepared when it was prepared.
func TestRecordClaimUnprepared_ClockStepsBack(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := storetest.MustOpen(t, store.Options{Now: func() time.Time { return now }})
	if _, err := s.Reconcile(specs(1)); err != nil {
		t.Fatal(err)
	}
	c := mustPrepare(t, s, claim("uid-a", "fake-0"))
	now = now.Add(-time.Hour)
	if u := mustUnprepare(t, s, "uid-a", time.Time{}); !u.UnpreparedAt.Equal(c.PreparedAt) {
		t.Errorf("unprepared at %v, want the prepared time %v", u.UnpreparedAt, c.PreparedAt)
	}
}

// Concurrent prepares of one uid (the kubelet retrying while the first is
// still being written) store one record, and all get it.
func TestRecordClaimPrepared_Concurrent(t *testing.T) {
	s, _ := mustDevices(t, 2)
	const n = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		seqs    = map[uint64]bool{}
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, ok, err := s.RecordClaimPrepared(claim("uid-a", "fake-0"))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				created++
			}
			seqs[c.Seq] = true
		}()
	}
	wg.Wait()
	if all, _ := s.Claims(store.ClaimFilter{}); created != 1 || len(seqs) != 1 || len(all) != 1 {
		t.Errorf("%d created, seqs %v, %d records; want one", created, seqs, len(all))
	}
}

// TestClaims_Filter selects claims as AllocationFilter selects
// allocations: by device (a GPU id selects its replicas' claims too), since
// a time, still prepared, the newest n.
func TestClaims_Filter(t *testing.T) {
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	s := storetest.MustOpen(t, store.Options{Now: func() time.Time { return base }})
	if _, err := s.Reconcile(sharedSpecs(3, 2, 2)); err != nil {
		t.Fatal(err)
	}
	// 1: fake-0 at base (unprepared), 2: fake-0,fake-1 at +1h, 3: fake-2::1 at +2h, 4: fake-1 at +3h (unprepared).
	for i, ids := range [][]string{{"fake-0"}, {"fake-0", "fake-1"}, {"fake-2::1"}, {"fake-1"}} {
		c := claim(fmt.Sprintf("uid-%d", i+1), ids...)
		c.PreparedAt = base.Add(time.Duration(i) * time.Hour)
		mustPrepare(t, s, c)
	}
	mustUnprepare(t, s, "uid-1", base.Add(time.Hour))
	mustUnprepare(t, s, "uid-4", base.Add(4*time.Hour))
	for _, tc := range []struct {
		name string
		f    store.ClaimFilter
		want []uint64
	}{
		{"all", store.ClaimFilter{}, []uint64{4, 3, 2, 1}},
		{"device", store.ClaimFilter{DeviceID: "fake-0"}, []uint64{2, 1}},
		{"replica", store.ClaimFilter{DeviceID: "fake-2::1"}, []uint64{3}},
		{"GPU of a replica", store.ClaimFilter{DeviceID: "fake-2"}, []uint64{3}},
		{"since", store.ClaimFilter{Since: base.Add(90 * time.Minute)}, []uint64{4, 3}},
		{"since, inclusive", store.ClaimFilter{Since: base.Add(time.Hour)}, []uint64{4, 3, 2}},
		{"prepared", store.ClaimFilter{Prepared: true}, []uint64{3, 2}},
		{"limit", store.ClaimFilter{Limit: 3}, []uint64{4, 3, 2}},
		{"device and prepared", store.ClaimFilter{DeviceID: "fake-1", Prepared: true}, []uint64{2}},
		{"unknown device", store.ClaimFilter{DeviceID: "fake-9"}, []uint64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Claims(tc.f)
			if err != nil || !slices.Equal(claimSeqs(got), tc.want) {
				t.Errorf("Claims(%+v) = %v, %v; want %v", tc.f, claimSeqs(got), err, tc.want)
			}
		})
	}
	prepared, err := s.PreparedClaims()
	if err != nil || !slices.Equal(claimSeqs(prepared), []uint64{3, 2}) {
		t.Errorf("PreparedClaims() = %v, %v; want 3, 2", claimSeqs(prepared), err)
	}
	if _, err := s.Claim("uid-9"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `claim "uid-9"`) {
		t.Errorf("Claim of an unknown uid: %v, want ErrNotFound naming it", err)
	}
	st, err := s.Stats()
	if err != nil || st.Claims != 4 {
		t.Errorf("Stats() = %+v, %v; want 4 claims", st, err)
	}
}

// TestStats_ClaimsInHistoryBytes: claim records count in the history's
// bytes, which the byte limit bounds.
func TestStats_ClaimsInHistoryBytes(t *testing.T) {
	s, _ := mustDevices(t, 1)
	before, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	mustPrepare(t, s, claim("uid-a", "fake-0"))
	after, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if after.Claims != 1 || after.HistoryBytes <= before.HistoryBytes+100 {
		t.Errorf("Stats() %+v -> %+v: want one claim, its bytes counted", before, after)
	}
}

// TestClaim_SurvivesReopen: a prepared claim, its devices and environment
// are there after a restart, and can be unprepared then.
func TestClaim_SurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := storetest.MustOpenPath(t, path, store.Options{})
	if _, err := s.Reconcile(specs(2)); err != nil {
		t.Fatal(err)
	}
	c := mustPrepare(t, s, claim("uid-a", "fake-1"))
	s.Close()
	s = storetest.MustOpenPath(t, path, store.Options{})
	prepared, err := s.PreparedClaims()
	if err != nil || len(prepared) != 1 || !reflect.DeepEqual(prepared[0], c) {
		t.Fatalf("PreparedClaims() after reopen = %+v, %v; want %+v", prepared, err, c)
	}
	mustUnprepare(t, s, "uid-a", time.Time{})
	if prepared, _ := s.PreparedClaims(); len(prepared) != 0 {
		t.Errorf("PreparedClaims() after unprepare = %+v", prepared)
	}
}

// rawBuckets returns every top-level bucket of the closed file at path but
// meta, key by key, as stored.
func rawBuckets(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	rawView(t, path, func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if string(name) == "meta" {
				return nil
			}
			kv := map[string]string{}
			out[string(name)] = kv
			return b.ForEach(func(k, v []byte) error {
				kv[string(k)] = string(v)
				return nil
			})
		})
	})
	return out
}

// writeV4 writes a version-4 file as the build before claims left it:
// devices (one shared as replicas, one removed), allocation records
// (active and released), health events, configuration events and a
// quarantined record, without the claims buckets.
func writeV4(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	c := newClock()
	s := storetest.MustOpenPath(t, path, store.Options{Now: c.Now})
	if _, err := s.ReconcileConfig(sharedSpecs(3, 2, 1), store.ConfigEvent{Why: store.WhyFlags, Machine: "m", Replicas: 2}, nil); err != nil {
		t.Fatal(err)
	}
	for i, ids := range [][]string{{"fake-0"}, {"fake-1::0", "fake-1::1"}, {"fake-2"}, {"fake-0", "fake-2"}} {
		a := mustRecord(t, s, store.Allocation{DeviceIDs: ids, Envs: map[string]string{"VIRTUAL_GPU_IDS": strings.Join(ids, ",")}})
		if i%2 == 0 {
			release(t, s, a.Seq, c.Now())
		}
	}
	mustSetHealth(t, s, "fake-2", false, "XID 79")
	if _, err := s.ReconcileConfig(sharedSpecs(2, 2, 1), store.ConfigEvent{Why: store.WhyFileChanged, Machine: "m", Replicas: 2}, nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	storetest.Damage(t, path, "health_events", storetest.SeqKey(1), []byte("rot"))
	s = storetest.MustOpenPath(t, path, store.Options{Now: c.Now}) // quarantines it
	s.Close()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		for _, name := range []string{"claims", "claim_uids", "inactive_claims"} {
			if err := tx.DeleteBucket([]byte(name)); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), binary.BigEndian.AppendUint64(nil, 4))
	})
	return path
}

// TestOpen_MigratesV4: a version-4 file is read as it is read-only (no
// claims); read-write it gets the claims buckets, empty, and every other
// bucket keeps every key and value byte for byte: the history reads as it
// did.
func TestOpen_MigratesV4(t *testing.T) {
	path := writeV4(t)
	before := fileHash(t, path)
	raw := rawBuckets(t, path)
	if len(raw["allocations"]) != 4 || len(raw["config_events"]) != 2 || len(raw["quarantine"]) != 1 || len(raw["inactive_allocations"]) != 2 {
		t.Fatalf("the v4 fixture lacks history: %v", raw)
	}
	type history struct {
		Devices     []store.Device
		Allocations []store.Allocation
		Events      []store.HealthEvent
		Configs     []store.ConfigEvent
		Damaged     []store.DamagedRecord
	}
	read := func(t *testing.T, s *store.Store) history {
		t.Helper()
		var h history
		var err error
		if h.Devices, err = s.Devices(); err != nil {
			t.Fatal(err)
		}
		if h.Allocations, err = s.Allocations(store.AllocationFilter{}); err != nil {
			t.Fatal(err)
		}
		if h.Events, err = s.HealthEvents(store.EventFilter{}); err != nil {
			t.Fatal(err)
		}
		if h.Configs, err = s.ConfigEvents(store.ConfigFilter{}); err != nil {
			t.Fatal(err)
		}
		if h.Damaged, err = s.Damaged(); err != nil {
			t.Fatal(err)
		}
		return h
	}

	ro := storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})
	if ro.SchemaVersion() != 4 {
		t.Errorf("read-only SchemaVersion() = %d, want 4", ro.SchemaVersion())
	}
	if cs, err := ro.Claims(store.ClaimFilter{}); err != nil || len(cs) != 0 {
		t.Errorf("read-only v4 Claims() = %+v, %v; want none", cs, err)
	}
	if _, err := ro.Claim("uid-a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("read-only v4 Claim() = %v, want ErrNotFound", err)
	}
	want := read(t, ro)
	ro.Close()
	if fileHash(t, path) != before {
		t.Fatal("read-only open migrated the file")
	}

	s := storetest.MustOpenPath(t, path, store.Options{})
	if v, migrated := s.MigratedFrom(); v != 4 || !migrated || s.SchemaVersion() != store.SchemaVersion {
		t.Errorf("MigratedFrom() = %d, %v, SchemaVersion() = %d; want 4, true, %d", v, migrated, s.SchemaVersion(), store.SchemaVersion)
	}
	if got := read(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("history after the migration:\n%+v\nwant as before:\n%+v", got, want)
	}
	s.Close()
	after := rawBuckets(t, path)
	for name, kv := range raw {
		if !reflect.DeepEqual(after[name], kv) {
			t.Errorf("bucket %s changed in the migration:\n%q\nwant\n%q", name, after[name], kv)
		}
	}
	for _, name := range []string{"claims", "claim_uids", "inactive_claims"} {
		if kv, ok := after[name]; !ok || len(kv) != 0 {
			t.Errorf("bucket %s after the migration: %q, present %v; want it empty", name, kv, ok)
		}
	}

	// The migrated file takes claims, and keeps its sequences going.
	s = storetest.MustOpenPath(t, path, store.Options{})
	mustPrepare(t, s, claim("uid-a", "fake-1::0"))
	if a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}}); a.Seq != 5 {
		t.Errorf("first allocation after the migration: seq %d, want 5", a.Seq)
	}
	if c, err := s.Claim("uid-a"); err != nil || !slices.Equal(c.GPUIDs, []string{"fake-1"}) {
		t.Errorf("Claim after the migration = %+v, %v", c, err)
	}
}

// TestOpen_DamagedClaimRecords: a claim record that makes no sense is
// reported read-only and quarantined read-write, the other claims kept;
// its index entries go with it, so its uid is not found and a prepare of it
// records anew.
func TestOpen_DamagedClaimRecords(t *testing.T) {
	prepared := `"prepared_at":"2026-03-01T12:00:00Z"`
	for _, tc := range []struct {
		name, value, reason string
	}{
		{"not JSON", "\x00rot", "not a JSON object"},
		{"seq mismatch", `{"seq":9,"uid":"uid-b","namespace":"ns","name":"n","device_ids":["fake-0"],` + prepared + `}`, "seq 9 does not match its key 2"},
		{"no uid", `{"seq":2,"namespace":"ns","name":"n","device_ids":["fake-0"],` + prepared + `}`, "no uid"},
		{"no name", `{"seq":2,"uid":"uid-b","namespace":"ns","device_ids":["fake-0"],` + prepared + `}`, "no name"},
		{"no devices", `{"seq":2,"uid":"uid-b","namespace":"ns","name":"n",` + prepared + `}`, "no device ids"},
		{"no prepared time", `{"seq":2,"uid":"uid-b","namespace":"ns","name":"n","device_ids":["fake-0"]}`, "no prepared time"},
		{"unprepared before prepared", `{"seq":2,"uid":"uid-b","namespace":"ns","name":"n","device_ids":["fake-0"],` + prepared +
			`,"unprepared_at":"2026-03-01T11:00:00Z"}`, "before it was prepared"},
		{"consumer without uid", `{"seq":2,"uid":"uid-b","namespace":"ns","name":"n","device_ids":["fake-0"],` + prepared +
			`,"reserved_for":[{"resource":"pods","name":"p"}]}`, "resource, name and uid are required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			s := storetest.MustOpenPath(t, path, store.Options{Now: newClock().Now})
			if _, err := s.Reconcile(specs(2)); err != nil {
				t.Fatal(err)
			}
			mustPrepare(t, s, claim("uid-a", "fake-0"))
			mustPrepare(t, s, claim("uid-b", "fake-1"))
			mustUnprepare(t, s, "uid-b", time.Time{})
			mustPrepare(t, s, claim("uid-c", "fake-1"))
			s.Close()
			storetest.Damage(t, path, "claims", storetest.SeqKey(2), []byte(tc.value))
			before := fileHash(t, path)

			ro := storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})
			dmg, err := ro.Damaged()
			if err != nil || len(dmg) != 1 || dmg[0].Bucket != "claims" || dmg[0].Key != "2" || !strings.Contains(dmg[0].Reason, tc.reason) || !dmg[0].Quarantined.IsZero() {
				t.Errorf("read-only Damaged() = %+v, %v; want claims/2 in place: %s", dmg, err, tc.reason)
			}
			if cs, err := ro.Claims(store.ClaimFilter{}); err != nil || !slices.Equal(claimSeqs(cs), []uint64{3, 1}) {
				t.Errorf("read-only Claims() = %v, %v; want 3 and 1", claimSeqs(cs), err)
			}
			ro.Close()
			if fileHash(t, path) != before {
				t.Fatal("read-only Open changed the file")
			}

			s = storetest.MustOpenPath(t, path, store.Options{Now: newClock().Now})
			dmg, err = s.Damaged()
			if err != nil || len(dmg) != 1 || dmg[0].Bucket != "claims" || dmg[0].Quarantined.IsZero() {
				t.Errorf("Damaged() = %+v, %v; want claims/2 quarantined", dmg, err)
			}
			if _, err := s.Claim("uid-b"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Claim of the quarantined record's uid: %v, want ErrNotFound", err)
			}
			if c, err := s.Claim("uid-a"); err != nil || c.Seq != 1 {
				t.Errorf("Claim(uid-a) = %+v, %v", c, err)
			}
			if c := mustPrepare(t, s, claim("uid-b", "fake-1")); c.Seq != 4 {
				t.Errorf("uid-b prepared again: seq %d, want 4", c.Seq)
			}
			s.Close()
			rawView(t, path, func(tx *bolt.Tx) error {
				if n := tx.Bucket([]byte("inactive_claims")).Stats().KeyN; n != 0 {
					t.Errorf("inactive_claims holds %d entries, want none: record 2 is quarantined", n)
				}
				return nil
			})
		})
	}
}

// TestOpen_FixesClaimIndexes: the claim indexes are derived data; Open
// brings them back in step with the records (entries lost, pointing
// nowhere, or at an older record of the uid), and a sound file is not
// written.
func TestOpen_FixesClaimIndexes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := storetest.MustOpenPath(t, path, store.Options{Now: newClock().Now})
	if _, err := s.Reconcile(specs(2)); err != nil {
		t.Fatal(err)
	}
	mustPrepare(t, s, claim("uid-a", "fake-0"))
	mustUnprepare(t, s, "uid-a", time.Time{})
	mustPrepare(t, s, claim("uid-a", "fake-1")) // 2, the newest of uid-a
	mustPrepare(t, s, claim("uid-b", "fake-0")) // 3
	mustUnprepare(t, s, "uid-b", time.Time{})
	s.Close()
	sound := rawBuckets(t, path)
	if len(sound["claim_uids"]) != 2 || len(sound["inactive_claims"]) != 2 {
		t.Fatalf("indexes of a sound file: %q", sound)
	}
	again := fileHash(t, path)
	s = storetest.MustOpenPath(t, path, store.Options{})
	s.Close()
	if fileHash(t, path) != again {
		t.Fatal("Open wrote to a sound file")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		damage func(tx *bolt.Tx) error
	}{
		{"entries lost", func(tx *bolt.Tx) error {
			for _, name := range []string{"claim_uids", "inactive_claims"} {
				if err := tx.DeleteBucket([]byte(name)); err != nil {
					return err
				}
				if _, err := tx.CreateBucket([]byte(name)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"entries pointing nowhere or at an older record", func(tx *bolt.Tx) error {
			uids := tx.Bucket([]byte("claim_uids"))
			if err := uids.Put([]byte("uid-a"), seqKey(1)); err != nil {
				return err
			}
			if err := uids.Put([]byte("uid-z"), seqKey(99)); err != nil {
				return err
			}
			return tx.Bucket([]byte("inactive_claims")).Put(append(seqKey(5), seqKey(99)...), []byte{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "state.db")
			write(t, p, data)
			rawUpdate(t, p, tc.damage)
			s := storetest.MustOpenPath(t, p, store.Options{})
			s.Close()
			if got := rawBuckets(t, p); !reflect.DeepEqual(got["claim_uids"], sound["claim_uids"]) || !reflect.DeepEqual(got["inactive_claims"], sound["inactive_claims"]) {
				t.Errorf("indexes after Open:\n%q\n%q\nwant\n%q\n%q", got["claim_uids"], got["inactive_claims"], sound["claim_uids"], sound["inactive_claims"])
			}
			s = storetest.MustOpenPath(t, p, store.Options{})
			if c, err := s.Claim("uid-a"); err != nil || c.Seq != 2 {
				t.Errorf("Claim(uid-a) = %+v, %v; want record 2", c, err)
			}
		})
	}
}

// TestPrune_Claims: claim records are history under the limits of the
// other kinds: unprepared claims (the released kind) go first, oldest
// unprepared first, by count, bytes and age; prepared claims never for
// their age, and by count or bytes only once nothing inactive is left. A
// pruned uid is not found, and sequence numbers are not reused.
func TestPrune_Claims(t *testing.T) {
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	now := base.Add(10 * time.Hour)
	// Health event 1 (the device added) at base. Claims 1..6 prepared at
	// base+1h..+6h; 1, 3 and 5 unprepared at +7h, +3h30m and +9h (so 3 is
	// the oldest unprepared); 2, 4 and 6 prepared. Allocation 1 released
	// at base+8h, allocation 2 held since base+30m.
	fill := func(t *testing.T) *store.Store {
		s := storetest.MustOpen(t, store.Options{Now: func() time.Time { return base }})
		if _, err := s.Reconcile(specs(1)); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 6; i++ {
			c := claim(fmt.Sprintf("uid-%d", i), "fake-0")
			c.PreparedAt = base.Add(time.Duration(i) * time.Hour)
			mustPrepare(t, s, c)
		}
		for uid, at := range map[string]time.Duration{"uid-1": 7 * time.Hour, "uid-3": 3*time.Hour + 30*time.Minute, "uid-5": 9 * time.Hour} {
			mustUnprepare(t, s, uid, base.Add(at))
		}
		a := mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: base.Add(time.Hour), State: store.StateReleased})
		release(t, s, a.Seq, base.Add(8*time.Hour))
		mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: base.Add(30 * time.Minute), State: store.StateHeld})
		return s
	}
	for _, tc := range []struct {
		name       string
		o          func(st store.Stats) store.PruneOptions
		wantClaims []uint64 // kept, newest first
		want       store.PruneResult
	}{
		{"count per kind: unprepared first, oldest unprepared first", func(store.Stats) store.PruneOptions { return store.PruneOptions{MaxRecords: 4} },
			[]uint64{6, 5, 4, 2}, store.PruneResult{Claims: 2}},
		{"count: every unprepared claim before a prepared one", func(store.Stats) store.PruneOptions { return store.PruneOptions{MaxRecords: 3, Batch: 2} },
			[]uint64{6, 4, 2}, store.PruneResult{Claims: 3}},
		{"count below the prepared ones: the oldest prepared go last", func(store.Stats) store.PruneOptions { return store.PruneOptions{MaxRecords: 1, Batch: 2} },
			[]uint64{6}, store.PruneResult{Claims: 5, ActiveClaims: 2, Allocations: 1}},
		{"age counts from unprepare and spares prepared claims", func(store.Stats) store.PruneOptions {
			return store.PruneOptions{MaxAge: 2*time.Hour + 30*time.Minute, Now: now}
		}, []uint64{6, 5, 4, 2}, store.PruneResult{Claims: 2, HealthEvents: 1}},
		{"age: nothing prepared, however old", func(store.Stats) store.PruneOptions {
			return store.PruneOptions{MaxAge: time.Nanosecond, Now: now.Add(1000 * time.Hour)}
		}, []uint64{6, 4, 2}, store.PruneResult{Claims: 3, Allocations: 1, HealthEvents: 1}},
		{"bytes: the oldest inactive record of any kind first", func(st store.Stats) store.PruneOptions {
			return store.PruneOptions{MaxBytes: st.HistoryBytes - 1}
		}, []uint64{6, 5, 4, 3, 2, 1}, store.PruneResult{HealthEvents: 1}},
		{"bytes: after the event, the unprepared claim 3 (3h30m) before the released allocation (8h)", func(st store.Stats) store.PruneOptions {
			return store.PruneOptions{MaxBytes: st.HistoryBytes - 200}
		}, []uint64{6, 5, 4, 2, 1}, store.PruneResult{HealthEvents: 1, Claims: 1}},
		{"bytes: everything, active records last, oldest first across kinds", func(store.Stats) store.PruneOptions {
			return store.PruneOptions{MaxBytes: 1, Batch: 3}
		}, nil, store.PruneResult{Claims: 6, ActiveClaims: 3, Allocations: 2, ActiveAllocations: 1, HealthEvents: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fill(t)
			st, err := s.Stats()
			if err != nil || st.Claims != 6 || st.Allocations != 2 || st.HealthEvents != 1 {
				t.Fatalf("Stats() = %+v, %v", st, err)
			}
			got, err := s.Prune(t.Context(), tc.o(st))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Prune = %+v, want %+v", got, tc.want)
			}
			kept, _ := s.Claims(store.ClaimFilter{})
			if !slices.Equal(claimSeqs(kept), tc.wantClaims) && !(len(kept) == 0 && len(tc.wantClaims) == 0) {
				t.Errorf("kept claims %v, want %v", claimSeqs(kept), tc.wantClaims)
			}
			after, _ := s.Stats()
			if after.Claims != len(kept) || after.HistoryBytes >= st.HistoryBytes {
				t.Errorf("Stats() after = %+v; want %d claims and fewer bytes than %d", after, len(kept), st.HistoryBytes)
			}
			// A pruned uid is gone from the index; a kept one is found.
			for i := 1; i <= 6; i++ {
				uid := fmt.Sprintf("uid-%d", i)
				_, err := s.Claim(uid)
				if keptIt := slices.Contains(tc.wantClaims, uint64(i)); keptIt != (err == nil) || (!keptIt && !errors.Is(err, store.ErrNotFound)) {
					t.Errorf("Claim(%s) after prune: %v; kept %v", uid, err, keptIt)
				}
			}
			if c := mustPrepare(t, s, claim("uid-new", "fake-0")); c.Seq != 7 {
				t.Errorf("next seq %d, want 7", c.Seq)
			}
		})
	}
}

// TestPrune_ClaimsPlateau: a node preparing and unpreparing claims for
// ever, pruned to a count, keeps its prepared claims and a bounded history,
// and a prepared claim's uid keeps answering.
func TestPrune_ClaimsPlateau(t *testing.T) {
	s, _ := mustDevices(t, 2)
	store.SetNoSyncForTest(s)
	long := mustPrepare(t, s, claim("long-lived", "fake-1"))
	for i := range 600 {
		uid := fmt.Sprintf("uid-%d", i)
		mustPrepare(t, s, claim(uid, "fake-0"))
		mustUnprepare(t, s, uid, time.Time{})
		if i%100 == 99 {
			if _, err := s.Prune(t.Context(), store.PruneOptions{MaxRecords: 50}); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, _ := s.Stats()
	if st.Claims != 50 {
		t.Errorf("%d claims kept, want 50", st.Claims)
	}
	if c, err := s.Claim("long-lived"); err != nil || !reflect.DeepEqual(c, long) {
		t.Errorf("Claim(long-lived) = %+v, %v; want it kept, prepared", c, err)
	}
	rawIndex := 0
	path := s.Path()
	s.Close()
	rawView(t, path, func(tx *bolt.Tx) error {
		rawIndex = tx.Bucket([]byte("claim_uids")).Stats().KeyN
		return nil
	})
	if rawIndex != 50 {
		t.Errorf("claim_uids holds %d entries, want one per kept claim (50)", rawIndex)
	}
}

// TestPrune_ActiveAcrossKinds: when only active records are left over the
// byte limit, the oldest goes first whichever its kind: here the held
// allocation (recorded at +30m) before the prepared claim 2 (+1h), and
// that before claim 4 (+4h).
func TestPrune_ActiveAcrossKinds(t *testing.T) {
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	s := storetest.MustOpen(t, store.Options{Now: func() time.Time { return base }})
	if _, err := s.Reconcile(specs(1)); err != nil {
		t.Fatal(err)
	}
	for _, h := range []int{1, 4} {
		c := claim(fmt.Sprintf("uid-%d", h), "fake-0")
		c.PreparedAt = base.Add(time.Duration(h) * time.Hour)
		mustPrepare(t, s, c)
	}
	mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}, Time: base.Add(30 * time.Minute), State: store.StateHeld})
	// The one inactive record, the health event, goes by age.
	if r, err := s.Prune(t.Context(), store.PruneOptions{MaxAge: time.Nanosecond, Now: base.Add(time.Hour)}); err != nil || r != (store.PruneResult{HealthEvents: 1}) {
		t.Fatalf("Prune by age = %+v, %v", r, err)
	}
	for _, step := range []struct {
		want       store.PruneResult
		keptClaims []uint64
		keptAllocs int
	}{
		{store.PruneResult{Allocations: 1, ActiveAllocations: 1}, []uint64{2, 1}, 0},
		{store.PruneResult{Claims: 1, ActiveClaims: 1}, []uint64{2}, 0},
	} {
		st, _ := s.Stats()
		r, err := s.Prune(t.Context(), store.PruneOptions{MaxBytes: st.HistoryBytes - 1})
		if err != nil || r != step.want {
			t.Errorf("Prune to %d bytes = %+v, %v; want %+v", st.HistoryBytes-1, r, err, step.want)
		}
		cs, _ := s.Claims(store.ClaimFilter{})
		as, _ := s.Allocations(store.AllocationFilter{})
		if !slices.Equal(claimSeqs(cs), step.keptClaims) || len(as) != step.keptAllocs {
			t.Errorf("kept claims %v, %d allocations; want %v, %d", claimSeqs(cs), len(as), step.keptClaims, step.keptAllocs)
		}
	}
}

// SetClaimConsumers replaces a prepared claim's consumers, committed; the
// same ones, an unprepared claim or an unknown uid change nothing; an
// invalid consumer is refused and the record kept.
func TestSetClaimConsumers(t *testing.T) {
	s, _ := mustDevices(t, 2)
	c := mustPrepare(t, s, claim("uid-x", "fake-0"))
	more := append(slices.Clone(c.ReservedFor), store.ClaimConsumer{Resource: store.ConsumerPods, Name: "b", UID: "pod-b"})
	got, changed, err := s.SetClaimConsumers("uid-x", more)
	if err != nil || !changed || !slices.Equal(got.ReservedFor, more) || got.Seq != c.Seq {
		t.Fatalf("SetClaimConsumers: %+v, %v, %v", got, changed, err)
	}
	if rec, err := s.Claim("uid-x"); err != nil || !slices.Equal(rec.ReservedFor, more) {
		t.Errorf("stored %+v (%v)", rec.ReservedFor, err)
	}
	if _, changed, err := s.SetClaimConsumers("uid-x", more); err != nil || changed {
		t.Errorf("the same consumers again: changed %v, %v", changed, err)
	}
	if _, _, err := s.SetClaimConsumers("uid-x", []store.ClaimConsumer{{Resource: store.ConsumerPods, Name: "c"}}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a consumer without uid: %v, want ErrInvalid", err)
	}
	if _, changed, err := s.SetClaimConsumers("no-such", more); err != nil || changed {
		t.Errorf("unknown uid: changed %v, %v", changed, err)
	}
	mustUnprepare(t, s, "uid-x", time.Time{})
	if _, changed, err := s.SetClaimConsumers("uid-x", c.ReservedFor); err != nil || changed {
		t.Errorf("unprepared claim: changed %v, %v", changed, err)
	}
	if _, _, err := s.SetClaimConsumers("", more); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("no uid: %v", err)
	}
}

func TestClaimedDevices(t *testing.T) {
	got := store.ClaimedDevices([]store.Claim{{DeviceIDs: []string{"fake-0", "fake-1-mig-3g40gb-4"}}, {DeviceIDs: []string{"fake-0"}}, {}})
	if len(got) != 2 || !got["fake-0"] || !got["fake-1-mig-3g40gb-4"] {
		t.Errorf("ClaimedDevices = %v", got)
	}
}
