package store

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func testClaim(uid string, ids ...string) Claim {
	return Claim{UID: uid, Namespace: "ns", Name: "n-" + uid, DeviceIDs: ids}
}

// TestClaims_DamagedAfterOpen: a claim record damaged while the Store is
// open is skipped by the lists and named by Damaged; Claim and
// RecordClaimUnprepared of its uid are ErrDamaged, and change nothing; a
// prepare of its uid moves it into quarantine and records anew.
func TestClaims_DamagedAfterOpen(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Reconcile([]DeviceSpec{{ID: "a"}, {ID: "b", Index: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Claim{testClaim("u1", "a"), testClaim("u2", "b")} {
		if _, _, err := s.RecordClaimPrepared(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketClaims).Put(u64(1), []byte(`{"seq":1}`)) }); err != nil {
		t.Fatal(err)
	}
	if cs, err := s.Claims(ClaimFilter{}); err != nil || len(cs) != 1 || cs[0].UID != "u2" {
		t.Errorf("Claims() = %+v, %v; want u2 alone", cs, err)
	}
	if _, err := s.Claim("u1"); !errors.Is(err, ErrDamaged) {
		t.Errorf("Claim(u1) = %v, want ErrDamaged", err)
	}
	if _, changed, err := s.RecordClaimUnprepared("u1", time.Time{}); !errors.Is(err, ErrDamaged) || changed {
		t.Errorf("RecordClaimUnprepared(u1) = %v, %v; want ErrDamaged", changed, err)
	}
	if got, want := damagedNames(t, s), []string{"claims/1 in place"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Damaged() = %v, want %v", got, want)
	}
	c, created, err := s.RecordClaimPrepared(testClaim("u1", "a"))
	if err != nil || !created || c.Seq != 3 {
		t.Errorf("prepare of u1 again = %+v, %v, %v; want a new record 3", c, created, err)
	}
	if got, want := damagedNames(t, s), []string{"claims/1 quarantined"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after the prepare, Damaged() = %v, want %v", got, want)
	}
	if back, err := s.Claim("u1"); err != nil || back.Seq != 3 {
		t.Errorf("Claim(u1) = %+v, %v; want record 3", back, err)
	}
}

// TestPrune_QuarantinesDamagedClaims: Prune walking over damaged claim
// records, from the inactive_claims index and among the prepared ones,
// moves them into quarantine.
func TestPrune_QuarantinesDamagedClaims(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Reconcile([]DeviceSpec{{ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"u1", "u2", "u3", "u4"} {
		if _, _, err := s.RecordClaimPrepared(testClaim(uid, "a")); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.RecordClaimUnprepared("u1", time.Time{}); err != nil {
		t.Fatal(err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketClaims).Put(u64(1), []byte("rot")); err != nil { // indexed as inactive
			return err
		}
		return tx.Bucket(bucketClaims).Put(u64(2), []byte("rot")) // prepared
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Prune(t.Context(), PruneOptions{MaxRecords: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Four records, one kept: the inactive 1 (damaged), then the oldest
	// prepared 2 (damaged) and 3.
	if r.Quarantined != 2 || r.Claims != 1 || r.ActiveClaims != 1 {
		t.Errorf("Prune = %+v, want 2 quarantined, 1 prepared claim deleted", r)
	}
	if cs, err := s.Claims(ClaimFilter{}); err != nil || len(cs) != 1 || cs[0].UID != "u4" {
		t.Errorf("kept %+v, %v; want u4", cs, err)
	}
	if got, want := damagedNames(t, s), []string{"claims/1 quarantined", "claims/2 quarantined"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Damaged() = %v, want %v", got, want)
	}
}
