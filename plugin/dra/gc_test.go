package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
)

// TestCollect: prepared claims the API server no longer has (deleted,
// replaced, deallocated) are unprepared and their specs removed; a claim
// it has stays prepared; a spec of a claim not prepared (a crash between
// the record and the spec) is removed; other files are left alone.
func TestCollect(t *testing.T) {
	r := newRig(t, "dgx-a100")
	ctx := context.Background()
	const (
		kept        = "00000000-0000-0000-0000-00000000000a"
		deleted     = "00000000-0000-0000-0000-00000000000b"
		replaced    = "00000000-0000-0000-0000-00000000000c"
		deallocated = "00000000-0000-0000-0000-00000000000d"
		stray       = "00000000-0000-0000-0000-00000000000e"
	)
	for i, uid := range []string{kept, deleted, replaced, deallocated} {
		c := claimOf(uid, "claim-"+uid[len(uid)-1:], result("gpus", "fake-"+string(rune('0'+i))))
		mustPrepare(t, r.d, c)
		switch uid {
		case deleted:
			continue
		case replaced:
			c = c.DeepCopy()
			c.UID = types.UID("ffffffff-0000-0000-0000-00000000000c")
		case deallocated:
			c = c.DeepCopy()
			c.Status.Allocation = nil
		}
		if _, err := r.client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A spec of the driver's kind with no record, and a file of another kind.
	if err := r.d.specs.Write(cdi.ClaimConfig{UID: stray, Devices: []cdi.ClaimDevice{{Name: stray + "-gpus", Envs: map[string]string{"A": "1"}}}}); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(r.cdiDir(), "example.com-gpu.yaml")
	if err := os.WriteFile(other, []byte("cdiVersion: 0.5.0\nkind: example.com/gpu\ndevices: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	r.d.collect(ctx)

	for uid, wantPrepared := range map[string]bool{kept: true, deleted: false, replaced: false, deallocated: false} {
		rec, err := r.st.Claim(uid)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Prepared() != wantPrepared {
			t.Errorf("claim %s: prepared %v, want %v", rec.Name, rec.Prepared(), wantPrepared)
		}
		if ok, _ := r.d.specs.Exists(uid); ok != wantPrepared {
			t.Errorf("claim %s: spec there %v, want %v", rec.Name, ok, wantPrepared)
		}
	}
	if ok, _ := r.d.specs.Exists(stray); ok {
		t.Error("the spec of a claim not prepared is still there")
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another kind's spec: %v", err)
	}
	// The devices of the unprepared claims are free.
	mustPrepare(t, r.d, claimOf("00000000-0000-0000-0000-00000000000f", "after", result("gpus", "fake-1"), result("gpus", "fake-2"), result("gpus", "fake-3")))
}

// TestCollect_APIUnreachable: a claim the API server cannot be asked about
// stays prepared.
func TestCollect_APIUnreachable(t *testing.T) {
	r := newRig(t, "dgx-a100")
	mustPrepare(t, r.d, claimOf(uidA, "a", result("gpus", "fake-0")))
	r.client.PrependReactor("get", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	r.d.collect(context.Background())
	if rec, err := r.st.Claim(uidA); err != nil || !rec.Prepared() {
		t.Errorf("record %+v (%v): want it prepared", rec, err)
	}
}
