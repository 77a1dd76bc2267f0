package admin_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

var claimsBase = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// claimsFixture is a store of four GPUs, fake-3 shared as 2 replicas, with
// a history of both kinds, a minute apart:
//
//	allocation 1  fake-0          +0m  held by default/a/c
//	claim 1       fake-1          +1m  prepared, for pod p1 (uid-1)
//	allocation 2  fake-2          +2m  released at +3m
//	claim 2       fake-2          +4m  unprepared at +5m (uid-2)
//	claim 3       fake-3::0       +6m  prepared (uid-3), no consumers
//	allocation 3  fake-3::1       +7m  allocated
//	claim 4       fake-0          +8m  prepared (uid-4), for p4: fake-0's newest holder
func claimsFixture(t *testing.T) *store.Store {
	t.Helper()
	st := storetest.MustOpen(t, store.Options{})
	specs := []store.DeviceSpec{{ID: "fake-0", Index: 0}, {ID: "fake-1", Index: 1}, {ID: "fake-2", Index: 2, NUMA: 1}, {ID: "fake-3", Index: 3, NUMA: 1},
		{ID: "fake-3::0", Index: 3, NUMA: 1, GPU: "fake-3"}, {ID: "fake-3::1", Index: 3, NUMA: 1, GPU: "fake-3", Replica: 1}}
	if _, err := st.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	at := func(m int) time.Time { return claimsBase.Add(time.Duration(m) * time.Minute) }
	alloc := func(m int, state string, ids ...string) store.Allocation {
		a, err := st.RecordAllocation(store.Allocation{Time: at(m), DeviceIDs: ids, State: state})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	prepare := func(m int, uid string, pods []string, ids ...string) {
		c := store.Claim{UID: uid, Namespace: "team", Name: "claim-" + uid, DeviceIDs: ids, PreparedAt: at(m),
			Envs: map[string]string{"VIRTUAL_GPU_IDS": strings.Join(ids, ",")}}
		for _, p := range pods {
			c.ReservedFor = append(c.ReservedFor, store.ClaimConsumer{Resource: store.ConsumerPods, Name: p, UID: "pod-" + p})
		}
		if _, created, err := st.RecordClaimPrepared(c); err != nil || !created {
			t.Fatalf("prepare %s: %v, %v", uid, created, err)
		}
	}
	a1 := alloc(0, store.StateHeld, "fake-0")
	if _, err := st.UpdateAllocation(a1.Seq, func(a *store.Allocation) error {
		a.Namespace, a.Pod, a.Container, a.HeldSince = "default", "a", "c", at(0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	prepare(1, "uid-1", []string{"p1"}, "fake-1")
	a2 := alloc(2, store.StateAllocated, "fake-2")
	if _, err := st.UpdateAllocation(a2.Seq, func(a *store.Allocation) error { a.State, a.ReleasedAt = store.StateReleased, at(3); return nil }); err != nil {
		t.Fatal(err)
	}
	prepare(4, "uid-2", []string{"p2", "p3"}, "fake-2")
	if _, _, err := st.RecordClaimUnprepared("uid-2", at(5)); err != nil {
		t.Fatal(err)
	}
	prepare(6, "uid-3", nil, "fake-3::0")
	alloc(7, store.StateAllocated, "fake-3::1")
	prepare(8, "uid-4", []string{"p4"}, "fake-0")
	return st
}

// The admin API selects claims as it selects allocations: the device (a
// GPU selecting its replicas' claims), since, the newest n, active (still
// prepared), and answers them as the store has them.
func TestClient_Snapshot_Claims(t *testing.T) {
	st := claimsFixture(t)
	c := run(t, admin.ServerConfig{Source: source{Store: st}})
	for _, tt := range []struct {
		name string
		q    admin.Query
		f    store.ClaimFilter
		want []uint64
	}{
		{"all", admin.Query{}, store.ClaimFilter{}, []uint64{4, 3, 2, 1}},
		{"device", admin.Query{DeviceID: "fake-2"}, store.ClaimFilter{DeviceID: "fake-2"}, []uint64{2}},
		{"GPU of a replica", admin.Query{DeviceID: "fake-3"}, store.ClaimFilter{DeviceID: "fake-3"}, []uint64{3}},
		{"limit", admin.Query{Limit: 2}, store.ClaimFilter{Limit: 2}, []uint64{4, 3}},
		{"since", admin.Query{Since: claimsBase.Add(4 * time.Minute)}, store.ClaimFilter{Since: claimsBase.Add(4 * time.Minute)}, []uint64{4, 3, 2}},
		{"active", admin.Query{Active: true}, store.ClaimFilter{Prepared: true}, []uint64{4, 3, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, err := st.Claims(tt.f)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := c.Snapshot(context.Background(), tt.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for i, cl := range snap.Claims {
				got = append(got, cl.Seq)
				w := want[i]
				state := admin.ClaimPrepared
				if !w.Prepared() {
					state = admin.ClaimUnprepared
				}
				if cl.UID != w.UID || cl.Namespace != w.Namespace || cl.Name != w.Name || !slices.Equal(cl.DeviceIDs, w.DeviceIDs) ||
					!slices.Equal(cl.GPUIDs, w.GPUIDs) || !reflect.DeepEqual(cl.Envs, w.Envs) || cl.State != state ||
					!cl.PreparedAt.Equal(w.PreparedAt) || !cl.UnpreparedAt.Equal(w.UnpreparedAt) || len(cl.ReservedFor) != len(w.ReservedFor) {
					t.Errorf("claim %d = %+v, want %+v", cl.Seq, cl, w)
				}
				for k, r := range w.ReservedFor {
					if cl.ReservedFor[k] != (admin.ClaimConsumer{Resource: r.Resource, Name: r.Name, UID: r.UID}) {
						t.Errorf("claim %d consumer %d = %+v, want %+v", cl.Seq, k, cl.ReservedFor[k], r)
					}
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("claims %v, want %v", got, tt.want)
			}
		})
	}
	snap, err := c.Snapshot(context.Background(), admin.Query{DeviceID: "fake-3"})
	if err != nil || len(snap.Claims) != 1 || !slices.Equal(snap.Claims[0].GPUIDs, []string{"fake-3"}) {
		t.Errorf("claim of a replica = %+v, %v; want its GPU in gpuIDs", snap.Claims, err)
	}
	only, err := c.Snapshot(context.Background(), admin.Query{DevicesOnly: true})
	if err != nil || only.Claims != nil {
		t.Errorf("devices-only snapshot has claims: %+v, %v", only.Claims, err)
	}
}

// A prepared claim holds its devices: the holder names the claim, its uid
// and pods; the newest holder of a device wins whichever its kind; an
// unprepared claim holds nothing; replicas list claims among their holders.
func TestClient_Snapshot_ClaimHolders(t *testing.T) {
	c := run(t, admin.ServerConfig{Source: source{Store: claimsFixture(t)}})
	snap, err := c.Snapshot(context.Background(), admin.Query{DevicesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]admin.Device{}
	for _, d := range snap.Devices {
		byID[d.ID] = d
	}
	for _, tt := range []struct {
		id   string
		want *admin.Holder
	}{
		// claim 4 (+8m) is newer than the held allocation 1 (+0m)
		{"fake-0", &admin.Holder{Seq: 4, State: admin.ClaimPrepared, Namespace: "team", Claim: "claim-uid-4", ClaimUID: "uid-4", Pods: []string{"p4"}}},
		{"fake-1", &admin.Holder{Seq: 1, State: admin.ClaimPrepared, Namespace: "team", Claim: "claim-uid-1", ClaimUID: "uid-1", Pods: []string{"p1"}}},
		{"fake-2", nil}, // released allocation, unprepared claim
		{"fake-3", nil}, // shared: its replicas hold
		{"fake-3::0", &admin.Holder{Seq: 3, State: admin.ClaimPrepared, Namespace: "team", Claim: "claim-uid-3", ClaimUID: "uid-3"}},
		{"fake-3::1", &admin.Holder{Seq: 3, State: store.StateAllocated}},
	} {
		if got := byID[tt.id].Holder; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s holder = %+v, want %+v", tt.id, got, tt.want)
		}
	}
	// Allocation 3 and claim 3 hold fake-3's replicas: two holders of one
	// seq (the kinds number apart), the newest (allocation 3, +7m) first,
	// though its replica comes second.
	want := &admin.ReplicaUse{Total: 2, InUse: 2, Holders: []admin.Holder{
		{Seq: 3, State: store.StateAllocated, DeviceIDs: []string{"fake-3::1"}},
		{Seq: 3, State: admin.ClaimPrepared, Namespace: "team", Claim: "claim-uid-3", ClaimUID: "uid-3", DeviceIDs: []string{"fake-3::0"}},
	}}
	if got := byID["fake-3"].Replicas; !reflect.DeepEqual(got, want) {
		t.Errorf("fake-3 replicas = %+v\nwant %+v", got, want)
	}
}

// rawSnapshot is the body of GET /v1/snapshot on the socket of c's server.
func rawSnapshot(t *testing.T, sock, query string) string {
	t.Helper()
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://admin/v1/snapshot" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// The JSON of a snapshot: without claims there is no "claims" key at all
// (the document of a device-plugin node is what it was); with claims, the
// documented camelCase fields, and a claim's holder fields on its device.
func TestServer_Snapshot_ClaimsJSON(t *testing.T) {
	sock := plugintest.ShortTempDir(t) + "/admin.sock"
	run(t, admin.ServerConfig{Socket: sock, Source: source{Store: fixture(t)}})
	if body := rawSnapshot(t, sock, ""); strings.Contains(body, "claim") || !strings.Contains(body, `"allocations":[`) {
		t.Errorf("a snapshot without claims mentions claims:\n%s", body)
	}
	sock2 := plugintest.ShortTempDir(t) + "/admin.sock"
	run(t, admin.ServerConfig{Socket: sock2, Source: source{Store: claimsFixture(t)}})
	body := rawSnapshot(t, sock2, "?device=fake-2")
	for _, want := range []string{
		`"claims":[{"seq":2,"uid":"uid-2","namespace":"team","name":"claim-uid-2","deviceIDs":["fake-2"],"envs":{"VIRTUAL_GPU_IDS":"fake-2"},` +
			`"reservedFor":[{"resource":"pods","name":"p2","uid":"pod-p2"},{"resource":"pods","name":"p3","uid":"pod-p3"}],` +
			`"state":"unprepared","preparedAt":"2026-11-30T08:04:00Z","unpreparedAt":"2026-11-30T08:05:00Z"}]`,
		`"holder":{"seq":1,"state":"prepared","namespace":"team","claim":"claim-uid-1","claimUID":"uid-1","pods":["p1"]}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("snapshot lacks %s:\n%s", want, body)
		}
	}
	if body := rawSnapshot(t, sock2, "?device=fake-1&active=true"); !strings.Contains(body, `"state":"prepared","preparedAt":"2026-11-30T08:01:00Z"}]`) ||
		strings.Contains(body, "unpreparedAt") {
		t.Errorf("a prepared claim has an unpreparedAt, or is missing:\n%s", body)
	}
}
