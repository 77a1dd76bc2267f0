package dra

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
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

// TestCollect_RestoresSpecs: a claim still prepared whose CDI spec is gone
// (a reboot emptied /var/run/cdi; the kubelet does not prepare it again)
// or damaged (empty: the machine crashed before it reached the disk) gets
// its spec written again, the same as Prepare wrote it; the CDI library
// loads it.
func TestCollect_RestoresSpecs(t *testing.T) {
	r := newRig(t, "dgx-a100")
	ctx := context.Background()
	const gone, empty = "00000000-0000-0000-0000-0000000000a1", "00000000-0000-0000-0000-0000000000a2"
	want := map[string][]byte{}
	for i, uid := range []string{gone, empty} {
		c := claimOf(uid, "claim-"+uid[len(uid)-1:], result("gpus", "fake-"+string(rune('0'+i))))
		mustPrepare(t, r.d, c)
		if _, err := r.client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(r.d.specs.Path(uid))
		if err != nil {
			t.Fatal(err)
		}
		want[uid] = b
	}
	if err := os.Remove(r.d.specs.Path(gone)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.d.specs.Path(empty), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	r.d.collect(ctx)

	for uid, b := range want {
		got, err := os.ReadFile(r.d.specs.Path(uid))
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("claim %s: spec %q, %v; want it written again as before", uid, got, err)
		}
		if rec, err := r.st.Claim(uid); err != nil || !rec.Prepared() {
			t.Errorf("claim %s: %+v, %v; want it still prepared", uid, rec, err)
		}
	}
	r.inject(mustPrepare(t, r.d, claimOf(gone, "claim-1", result("gpus", "fake-0"))))
}

// TestCollect_FollowsConsumers: a shared claim, prepared for its first pod,
// is reserved for a second one: the collector records it, and the
// telemetry then labels the claim's GPU with both pods. No consumers at all
// keeps the last ones.
func TestCollect_FollowsConsumers(t *testing.T) {
	r := newRig(t, "dgx-a100")
	ctx := context.Background()
	c := claimOf(uidA, "shared", result("gpus", "fake-0"))
	mustPrepare(t, r.d, c)
	two := c.DeepCopy()
	two.Status.ReservedFor = append(two.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "second", UID: "second-uid"})
	if _, err := r.client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, two, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.d.collect(ctx)
	rec, err := r.st.Claim(uidA)
	if err != nil || len(rec.ReservedFor) != 2 || rec.ReservedFor[1].Name != "second" || !rec.Prepared() {
		t.Fatalf("record %+v (%v): want it prepared and reserved for both pods", rec, err)
	}
	hs, err := Holders{Store: r.d}.Holdings()
	if err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, h := range hs {
		pods = append(pods, h.Holder.Pod)
	}
	if !slices.Equal(pods, []string{"shared-pod", "second"}) {
		t.Errorf("telemetry holders %v, want both pods", pods)
	}
	none := two.DeepCopy()
	none.Status.ReservedFor = nil
	if _, err := r.client.ResourceV1().ResourceClaims(c.Namespace).Update(ctx, none, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.d.collect(ctx)
	if rec, err := r.st.Claim(uidA); err != nil || len(rec.ReservedFor) != 2 {
		t.Errorf("after the pods ended: %+v (%v), want the last consumers kept", rec.ReservedFor, err)
	}
}
