package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/unixsock"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// helperEnv makes the test binary, run again by a test, serve HTTP on the
// socket it names and print "ready" (see TestMain).
const helperEnv = "VGPU_TEST_ADMIN_HOLD_SOCKET"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		lis, err := net.Listen("unix", path)
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		_ = http.Serve(lis, http.NotFoundHandler())
		return
	}
	os.Exit(m.Run())
}

// startHolder runs a separate process that holds an HTTP socket at path.
func startHolder(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("holder process: %q, %v", line, err)
	}
}

// source is a real store as the admin API reads it, with damaged records a
// test can set.
type source struct {
	*store.Store
	damaged []admin.DamagedRecord
}

func (s source) DamagedRecords() ([]admin.DamagedRecord, error) { return s.damaged, nil }

var _ admin.Source = source{}

// fixture is a store with two devices (fake-1 on NUMA node 1, reported to
// the kubelet without one) and three allocations.
func fixture(t *testing.T) *store.Store {
	t.Helper()
	st := storetest.MustOpen(t, store.Options{})
	if _, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0}, {ID: "fake-1", Index: 1, NUMA: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][]string{{"fake-0"}, {"fake-0", "fake-1"}, {"fake-1"}} {
		if _, err := st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: map[string]string{"VIRTUAL_GPU_IDS": strings.Join(ids, ",")}}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func reportedFixture() []gpuset.Device {
	return []gpuset.Device{{ID: "fake-0", NUMA: 0}, {ID: "fake-1", Index: 1, NUMA: -1}}
}

// storeHealth changes health in st, as the plugin's HealthFunc does.
func storeHealth(st *store.Store) admin.HealthFunc {
	return func(id string, healthy bool, reason string) error {
		_, _, err := st.SetHealth(id, healthy, reason, store.CauseAdmin)
		return err
	}
}

// run serves cfg on a real socket until the test ends, and checks that Run
// returns nil and removes the socket.
func run(t *testing.T, cfg admin.ServerConfig) *admin.Client {
	t.Helper()
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(plugintest.ShortTempDir(t), "admin.sock")
	}
	srv := admin.NewServer(cfg)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if _, err := os.Lstat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("admin socket left behind: %v", err)
		}
	})
	return admin.NewClient(cfg.Socket, 2*time.Second)
}

func TestServer_SocketMode0600(t *testing.T) {
	sock := filepath.Join(plugintest.ShortTempDir(t), "admin.sock")
	run(t, admin.ServerConfig{Socket: sock, Source: source{Store: fixture(t)}})
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin socket mode = %v, want 0600", fi.Mode().Perm())
	}
}

func TestClient_Snapshot_ReadsLikeTheStore(t *testing.T) {
	st := fixture(t)
	c := run(t, admin.ServerConfig{Source: source{Store: st}})
	tests := []struct {
		name string
		q    admin.Query
		f    store.AllocationFilter
	}{
		{"all", admin.Query{}, store.AllocationFilter{}},
		{"device", admin.Query{DeviceID: "fake-1"}, store.AllocationFilter{DeviceID: "fake-1"}},
		{"limit", admin.Query{Limit: 2}, store.AllocationFilter{Limit: 2}},
		{"since future", admin.Query{Since: time.Now().Add(time.Hour)}, store.AllocationFilter{Since: time.Now().Add(time.Hour)}},
		{"active", admin.Query{Active: true}, store.AllocationFilter{Active: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := st.Allocations(tt.f)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := c.Snapshot(context.Background(), tt.q)
			if err != nil {
				t.Fatal(err)
			}
			got := snap.Allocations
			if len(got) != len(want) {
				t.Fatalf("got %d records, want %d", len(got), len(want))
			}
			for i := range got {
				if got[i].Seq != want[i].Seq || !got[i].Time.Equal(want[i].Time) || !slices.Equal(got[i].DeviceIDs, want[i].DeviceIDs) {
					t.Errorf("record %d = %+v, want %+v", i, got[i], want[i])
				}
			}
			if len(snap.Devices) != 2 || snap.APIVersion != admin.APIVersion || snap.Kind != admin.KindSnapshot {
				t.Errorf("snapshot = %+v", snap)
			}
		})
	}
}

func TestClient_Snapshot_Holders(t *testing.T) {
	c := run(t, admin.ServerConfig{Source: source{Store: fixture(t)}})
	snap, err := c.Snapshot(context.Background(), admin.Query{DevicesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	// Newest active allocation first: #3 holds fake-1, #2 holds fake-0.
	if h := snap.Devices[0].Holder; h == nil || h.Seq != 2 || h.State != store.StateAllocated {
		t.Errorf("fake-0 holder = %+v, want #2", h)
	}
	if h := snap.Devices[1].Holder; h == nil || h.Seq != 3 {
		t.Errorf("fake-1 holder = %+v, want #3", h)
	}
	if snap.Allocations != nil || snap.HealthEvents != nil || snap.DamagedRecords != nil {
		t.Errorf("devices-only snapshot has history: %+v", snap)
	}
}

func TestClient_Snapshot_ReportedNUMANode(t *testing.T) {
	st := fixture(t)
	tests := []struct {
		name     string
		reported func() []gpuset.Device
		want     []*int // per device; nil: unknown
	}{
		{"plugin knows", reportedFixture, []*int{ptr(0), ptr(-1)}},
		{"unknown", nil, []*int{nil, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := run(t, admin.ServerConfig{Source: source{Store: st}, Reported: tt.reported})
			snap, err := c.Snapshot(context.Background(), admin.Query{})
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range snap.Devices {
				if d.NUMANode != i {
					t.Errorf("%s: numaNode = %d, want the topology's %d", d.ID, d.NUMANode, i)
				}
				if got, want := d.ReportedNUMANode, tt.want[i]; (got == nil) != (want == nil) || got != nil && *got != *want {
					t.Errorf("%s: reportedNUMANode = %v, want %v", d.ID, deref(got), deref(want))
				}
			}
		})
	}
}

func ptr(n int) *int { return &n }

func deref(p *int) any {
	if p == nil {
		return "unknown"
	}
	return *p
}

func TestClient_Snapshot_DamagedRecords(t *testing.T) {
	damaged := []admin.DamagedRecord{{Bucket: "allocations", Key: "0000000000000007", Reason: "not JSON"}}
	c := run(t, admin.ServerConfig{Source: source{Store: fixture(t), damaged: damaged}})
	snap, err := c.Snapshot(context.Background(), admin.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(snap.DamagedRecords, damaged) {
		t.Errorf("damagedRecords = %+v, want %+v", snap.DamagedRecords, damaged)
	}
}

func TestClient_SetHealth(t *testing.T) {
	st := fixture(t)
	c := run(t, admin.ServerConfig{Source: source{Store: st}, Health: storeHealth(st), Reported: reportedFixture})
	snap, err := c.SetHealth(context.Background(), "fake-1", false, "XID 48")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Devices) != 1 {
		t.Fatalf("answer = %+v, want one device", snap)
	}
	d := snap.Devices[0]
	if d.ID != "fake-1" || d.Healthy || d.Reason != "XID 48" || d.Holder == nil || d.Holder.Seq != 3 || d.ReportedNUMANode == nil || d.Since.IsZero() {
		t.Errorf("answer = %+v, want fake-1 unhealthy with the reason, its holder and reported NUMA node", d)
	}
	if snap.Source.Type != admin.SourcePlugin {
		t.Errorf("source = %+v", snap.Source)
	}
	stored, err := st.Device("fake-1")
	if err != nil || stored.Healthy {
		t.Errorf("stored = %+v, %v; want unhealthy", stored, err)
	}
	events, err := st.HealthEvents(store.EventFilter{DeviceID: "fake-1", Limit: 1})
	if err != nil || len(events) != 1 || events[0].Cause != store.CauseAdmin || events[0].Healthy {
		t.Errorf("events = %+v, %v", events, err)
	}
}

func TestClient_SetHealth_UnknownDevice(t *testing.T) {
	st := storetest.MustOpen(t, store.Options{})
	var specs []store.DeviceSpec
	for i := range 20 {
		specs = append(specs, store.DeviceSpec{ID: fmt.Sprintf("fake-%d", i), Index: i})
	}
	if _, err := st.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reconcile(specs[:19]); err != nil { // fake-19 is removed
		t.Fatal(err)
	}
	c := run(t, admin.ServerConfig{Source: source{Store: st}, Health: storeHealth(st)})
	long := strings.Repeat("x", 200)
	tests := []struct {
		name, id, want string
	}{
		{"unknown", "fake-99", `unknown device "fake-99" (devices: fake-0, fake-1, fake-2, fake-3, fake-4, fake-5, fake-6, fake-7, … and 11 more)`},
		{"removed", "fake-19", `unknown device "fake-19": removed from the configuration (devices: fake-0,`},
		{"long id clipped", long, `unknown device "` + strings.Repeat("x", 64) + `…" (devices:`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.SetHealth(context.Background(), tt.id, false, "")
			if !errors.Is(err, store.ErrUnknownDevice) || !errors.Is(err, admin.ErrRequest) {
				t.Errorf("err = %v, want ErrUnknownDevice and ErrRequest", err)
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("err = %v\nwant prefix %s", err, tt.want)
			}
		})
	}
	if _, err := c.Snapshot(context.Background(), admin.Query{DeviceID: "fake-99"}); !errors.Is(err, store.ErrUnknownDevice) ||
		!strings.Contains(err.Error(), "(devices: fake-0") {
		t.Errorf("snapshot of an unknown device: %v", err)
	}
	if _, err := c.Snapshot(context.Background(), admin.Query{DeviceID: "fake-19"}); err != nil {
		t.Errorf("history of a removed device: %v", err)
	}
}

// TestServer_SetHealth_ReadBackFails: the change is made, so the answer is
// a success with what is known even though the store fails afterwards.
func TestServer_SetHealth_ReadBackFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0, NUMA: 1}}); err != nil {
		t.Fatal(err)
	}
	var logs plugintest.LogBuffer
	health := func(id string, healthy bool, reason string) error {
		if err := storeHealth(st)(id, healthy, reason); err != nil {
			return err
		}
		return st.Close() // every read after the change fails
	}
	h := admin.NewServer(admin.ServerConfig{Source: source{Store: st}, Health: health, Reported: reportedFixture, Logger: zerolog.New(&logs)}).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/devices/fake-0/health", strings.NewReader(`{"healthy":false,"reason":"XID 79"}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("answer %d %s, want 200: the change was made", rec.Code, rec.Body)
	}
	var snap admin.Snapshot
	if err := json.Unmarshal(rec.Body.Bytes(), &snap); err != nil || len(snap.Devices) != 1 {
		t.Fatalf("answer %s: %v", rec.Body, err)
	}
	if d := snap.Devices[0]; d.ID != "fake-0" || d.Healthy || d.Reason != "XID 79" || d.NUMANode != 1 {
		t.Errorf("answer = %+v, want what is known: fake-0 unhealthy, XID 79, NUMA 1", d)
	}
	if logs.Count(`"level":"warn"`) != 1 || logs.Count("reading the device back failed") != 1 {
		t.Errorf("log = %s, want one warning about the read-back", logs.String())
	}
}

// TestServer_HealthFailure_ReturnedNotLogged: a failed change is answered,
// not also logged (handle or return).
func TestServer_HealthFailure_ReturnedNotLogged(t *testing.T) {
	var logs plugintest.LogBuffer
	failing := func(string, bool, string) error { return errors.New("record health: disk full") }
	h := admin.NewServer(admin.ServerConfig{Source: source{Store: fixture(t)}, Health: failing, Logger: zerolog.New(&logs)}).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/devices/fake-0/health", strings.NewReader(`{"healthy":false}`)))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "disk full") {
		t.Errorf("answer %d %s, want 500 naming the cause", rec.Code, rec.Body)
	}
	if logs.String() != "" {
		t.Errorf("the failure was logged too: %s", logs.String())
	}
}

func TestHandler_BadInput(t *testing.T) {
	st := fixture(t)
	h := admin.NewServer(admin.ServerConfig{Source: source{Store: st}, Health: storeHealth(st)}).Handler()
	tests := []struct {
		name, method, url, body string
		code                    int
		want                    string
	}{
		{"bad since", "GET", "/v1/snapshot?since=yesterday", "", 400, `since \"yesterday\": want an RFC 3339 time`},
		{"negative limit", "GET", "/v1/snapshot?limit=-2", "", 400, `limit \"-2\"`},
		{"bad active", "GET", "/v1/snapshot?active=maybe", "", 400, `active \"maybe\"`},
		{"bad devicesOnly", "GET", "/v1/snapshot?devicesOnly=x", "", 400, `devicesOnly \"x\"`},
		{"unknown parameter", "GET", "/v1/snapshot?limt=5", "", 400, `unknown parameter \"limt\"`},
		{"long value clipped", "GET", "/v1/snapshot?limit=" + strings.Repeat("9", 100), "", 400, `limit \"` + strings.Repeat("9", 64) + `…\"`},
		{"unknown device", "GET", "/v1/snapshot?device=fake-7", "", 404, `unknown device \"fake-7\" (devices: fake-0, fake-1)`},
		{"healthy not a bool", "PUT", "/v1/devices/fake-0/health", `{"healthy":"no"}`, 400, "health request"},
		{"unknown field", "PUT", "/v1/devices/fake-0/health", `{"healthy":false,"color":"red"}`, 400, `unknown field \"color\"`},
		{"healthy missing", "PUT", "/v1/devices/fake-0/health", `{}`, 400, `\"healthy\" is required`},
		{"trailing object", "PUT", "/v1/devices/fake-0/health", `{"healthy":false}{"healthy":true}`, 400, "unexpected data after the JSON object"},
		{"trailing garbage", "PUT", "/v1/devices/fake-0/health", `{"healthy":false} x`, 400, "unexpected data after the JSON object"},
		{"reason with healthy", "PUT", "/v1/devices/fake-0/health", `{"healthy":true,"reason":"fixed"}`, 400, `\"reason\" is only for \"healthy\": false`},
		{"reason too long", "PUT", "/v1/devices/fake-0/health", `{"healthy":false,"reason":"` + strings.Repeat("x", 1025) + `"}`, 400, `\"reason\" is 1025 bytes: at most 1024`},
		{"trailing whitespace is fine", "PUT", "/v1/devices/fake-0/health", "{\"healthy\":true}\n ", 200, `"id":"fake-0"`},
		{"unknown device health", "PUT", "/v1/devices/fake-9/health", `{"healthy":false}`, 404, `unknown device \"fake-9\" (devices: fake-0, fake-1)`},
		{"wrong method", "DELETE", "/v1/snapshot", "", 405, `{"error":"DELETE /v1/snapshot: method not allowed"}`},
		{"unknown route", "GET", "/v2/things", "", 404, `{"error":"GET /v2/things: not found"}`},
		// Issue #20 item 9: an empty value is not a wildcard, a repeated
		// parameter or key is not the last one, and a path the mux would
		// clean is not redirected.
		{"empty device", "GET", "/v1/snapshot?device=", "", 400, `parameter device is empty: give a value, or leave device out`},
		{"empty limit", "GET", "/v1/snapshot?limit=", "", 400, `parameter limit is empty`},
		{"empty devicesOnly", "GET", "/v1/snapshot?devicesOnly", "", 400, `parameter devicesOnly is empty`},
		{"repeated device", "GET", "/v1/snapshot?device=fake-0&device=fake-1", "", 400, `parameter device given 2 times: give it once`},
		{"empty device id", "PUT", "/v1/devices//health", `{"healthy":false}`, 404, `{"error":"PUT /v1/devices//health: not found: the path has an empty, . or .. segment"}`},
		{"dot device id", "PUT", "/v1/devices/./health", `{"healthy":false}`, 404, `not found: the path has an empty, . or .. segment`},
		{"double slash snapshot", "GET", "/v1//snapshot", "", 404, `{"error":"GET /v1//snapshot: not found: the path has an empty, . or .. segment"}`},
		{"escaped dots are an id", "PUT", "/v1/devices/a%2F..%2Fb/health", `{"healthy":false}`, 404, `unknown device \"a/../b\"`},
		{"duplicate key", "PUT", "/v1/devices/fake-0/health", `{"healthy":true,"healthy":false}`, 400, `health request: duplicate key \"healthy\"`},
		{"duplicate key, other case", "PUT", "/v1/devices/fake-0/health", `{"healthy":false,"reason":"a","Reason":"b"}`, 400, `duplicate key \"Reason\": the same as \"reason\" (keys are matched without regard to case)`},
		{"duplicate key after a nested value", "PUT", "/v1/devices/fake-0/health", `{"healthy":false,"x":{"healthy":1},"healthy":false}`, 400, `duplicate key \"healthy\"`},
		{"same key in nested objects", "PUT", "/v1/devices/fake-0/health", `{"healthy":false,"x":[{"a":1},{"a":2}]}`, 400, `unknown field \"x\"`},
		{"body too large", "PUT", "/v1/devices/fake-0/health", `{"healthy":false,"reason":"` + strings.Repeat("x", 70<<10) + `"}`, 400, `health request: http: request body too large`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.url, strings.NewReader(tt.body)))
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("%d %s, want %d containing %s", rec.Code, rec.Body.String(), tt.code, tt.want)
			}
		})
	}
	if d, err := st.Device("fake-0"); err != nil || !d.Healthy {
		t.Errorf("a refused request changed fake-0: %+v, %v", d, err)
	}
}

// TestSnapshot_JSON pins the wire format: camelCase keys, apiVersion and
// kind, empty history as [] in a full snapshot, no history at all in a
// devices-only one.
func TestSnapshot_JSON(t *testing.T) {
	st := storetest.MustOpen(t, store.Options{})
	if _, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0, NUMA: -1}}); err != nil {
		t.Fatal(err)
	}
	full, err := admin.Read(source{Store: st}, admin.Query{}, map[string]int{"fake-0": -1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"apiVersion":"virtual-gpu.unicore.mcyou.cc/v1"`, `"kind":"Snapshot"`,
		`"numaNode":-1`, `"reportedNUMANode":-1`, `"allocations":[]`, `"configEvents":[]`, `"damagedRecords":[]`, `"deviceID":"fake-0"`, `"cause":"reconcile"`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("snapshot JSON lacks %s:\n%s", want, b)
		}
	}
	devs, err := admin.Read(source{Store: st}, admin.Query{DevicesOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err = json.Marshal(devs)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{"allocations", "healthEvents", "configEvents", "damagedRecords", "reportedNUMANode", "holder", "uuid"} {
		if strings.Contains(string(b), absent) {
			t.Errorf("devices-only snapshot has %s:\n%s", absent, b)
		}
	}
}

// TestSnapshot_JSON_UUIDAndConfigEvents pins the wire names of the device
// UUID and of configuration events.
func TestSnapshot_JSON_UUIDAndConfigEvents(t *testing.T) {
	st := storetest.MustOpen(t, store.Options{})
	rep, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", UUID: "GPU-00000000-1111-2222-3333-444444444444"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.RecordConfigChange(store.ConfigEvent{Time: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), Profile: "one", PreviousProfile: "none",
		Why: store.WhyNodeLabel, Detail: "unicore.mcyou.cc/gpu-profile=one", ResourceName: "unicore.mcyou.cc/gpu", Machine: "single", Replicas: 2}.FromReport(rep))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := admin.Read(source{Store: st}, admin.Query{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	want := `"configEvents":[{"seq":1,"time":"2026-11-30T08:00:00Z","profile":"one","previousProfile":"none","why":"node-label",` +
		`"detail":"unicore.mcyou.cc/gpu-profile=one","resourceName":"unicore.mcyou.cc/gpu","machine":"single","devices":1,"replicas":2,"added":["fake-0"]}]`
	for _, w := range []string{`"index":0,"uuid":"GPU-00000000-1111-2222-3333-444444444444"`, want} {
		if !strings.Contains(string(b), w) {
			t.Errorf("snapshot JSON lacks %s:\n%s", w, b)
		}
	}
	// A minimal event: the optional fields are left out, devices is not.
	if _, err := st.RecordConfigChange(store.ConfigEvent{Time: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Why: store.WhyFlags}); err != nil {
		t.Fatal(err)
	}
	snap, _ = admin.Read(source{Store: st}, admin.Query{Limit: 1}, nil)
	b, _ = json.Marshal(snap.ConfigEvents)
	if got := string(b); got != `[{"seq":2,"time":"2026-11-30T09:00:00Z","why":"flags","devices":0}]` {
		t.Errorf("minimal config event = %s", got)
	}
}

// TestClient_Snapshot_ConfigEvents: the configuration events come over the
// socket newest first, selected like the rest of the history.
func TestClient_Snapshot_ConfigEvents(t *testing.T) {
	st := fixture(t) // fake-0 and fake-1
	if _, err := st.RecordConfigChange(store.ConfigEvent{Why: store.WhyFlags, Devices: 2, Added: []string{"fake-0", "fake-1"}}); err != nil {
		t.Fatal(err)
	}
	mid := time.Now()
	rep, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordConfigChange(store.ConfigEvent{Profile: "small", Why: store.WhyNodeLabel}.FromReport(rep)); err != nil {
		t.Fatal(err)
	}
	c := run(t, admin.ServerConfig{Source: source{Store: st}})
	for _, tt := range []struct {
		name string
		q    admin.Query
		want []uint64
	}{
		{"all, newest first", admin.Query{}, []uint64{2, 1}},
		{"limit", admin.Query{Limit: 1}, []uint64{2}},
		{"since", admin.Query{Since: mid}, []uint64{2}},
		{"device added and removed", admin.Query{DeviceID: "fake-1"}, []uint64{2, 1}},
		{"device only added", admin.Query{DeviceID: "fake-0"}, []uint64{1}},
		{"active does not filter events", admin.Query{Active: true}, []uint64{2, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap, err := c.Snapshot(context.Background(), tt.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for _, e := range snap.ConfigEvents {
				got = append(got, e.Seq)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("config events %v, want %v", got, tt.want)
			}
		})
	}
	snap, err := c.Snapshot(context.Background(), admin.Query{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if e := snap.ConfigEvents[0]; e.Profile != "small" || e.Why != store.WhyNodeLabel || e.Devices != 1 ||
		!slices.Equal(e.Removed, []string{"fake-1"}) || e.Added != nil || e.Time.IsZero() {
		t.Errorf("newest config event = %+v", e)
	}
	devs, err := c.Snapshot(context.Background(), admin.Query{DevicesOnly: true})
	if err != nil || devs.ConfigEvents != nil {
		t.Errorf("devices-only snapshot = %+v, %v; want no config events", devs, err)
	}
}

func TestServer_Listen_ClaimsOnlyStaleSockets(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the socket path
		wantErr error
	}{
		{"another process's socket", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "admin.sock")
			startHolder(t, p)
			return p
		}, unixsock.ErrInUse},
		{"the kubelet's live gRPC socket", func(t *testing.T, dir string) string {
			plugintest.StartKubelet(t, dir)
			return filepath.Join(dir, "kubelet.sock")
		}, unixsock.ErrInUse},
		{"a regular file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "admin.sock")
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, unixsock.ErrNotSocket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.setup(t, plugintest.ShortTempDir(t))
			before, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			srv := admin.NewServer(admin.ServerConfig{Socket: path, ProbeTimeout: 200 * time.Millisecond})
			err = srv.Run(context.Background())
			if !errors.Is(err, tt.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Run = %v, want one line wrapping %v", err, tt.wantErr)
			}
			if err := srv.Close(); err != nil {
				t.Fatal(err)
			}
			after, err := os.Lstat(path)
			if err != nil || !os.SameFile(before, after) {
				t.Errorf("the file at %s was touched: %v", path, err)
			}
			if before.Mode().Type() == os.ModeSocket {
				conn, err := net.Dial("unix", path)
				if err != nil {
					t.Errorf("the other socket no longer answers: %v", err)
				} else {
					conn.Close()
				}
			}
		})
	}
}

func TestServer_Listen_ReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(plugintest.ShortTempDir(t), "admin.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close() // a killed process's socket: nothing listens
	c := run(t, admin.ServerConfig{Socket: path, Source: source{Store: fixture(t)}, ProbeTimeout: 200 * time.Millisecond})
	if _, err := c.Snapshot(context.Background(), admin.Query{}); err != nil {
		t.Errorf("after replacing the stale socket: %v", err)
	}
}

// TestServer_RemovesOnlyItsOwnSocket: a socket put at the path by someone
// else while the server runs survives the server's exit.
func TestServer_RemovesOnlyItsOwnSocket(t *testing.T) {
	path := filepath.Join(plugintest.ShortTempDir(t), "admin.sock")
	srv := admin.NewServer(admin.ServerConfig{Socket: path, Source: source{Store: fixture(t)}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	c := admin.NewClient(path, time.Second)
	plugintest.WaitFor(t, 5*time.Second, "the admin API", func() bool {
		_, err := c.Snapshot(context.Background(), admin.Query{})
		return err == nil
	})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("the other program's socket was removed at exit: %v", err)
	}
}

func TestServer_CloseBeforeRun(t *testing.T) {
	path := filepath.Join(plugintest.ShortTempDir(t), "admin.sock")
	srv := admin.NewServer(admin.ServerConfig{Socket: path})
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Close: %v", err)
	}
	if err := srv.Run(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Run after Close = %v, want net.ErrClosed", err)
	}
}

func TestClient_NoPlugin(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	stale := filepath.Join(dir, "stale.sock")
	lis, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
	for _, path := range []string{filepath.Join(dir, "missing.sock"), stale, filepath.Join(dir, "missing", "admin.sock")} {
		c := admin.NewClient(path, time.Second)
		if _, err := c.Snapshot(context.Background(), admin.Query{}); !errors.Is(err, admin.ErrNoPlugin) || errors.Is(err, admin.ErrPermission) {
			t.Errorf("%s: err = %v, want ErrNoPlugin", path, err)
		}
	}
}

// TestClient_PluginGone: a plugin that takes the request and goes away
// (it stopped or crashed) is ErrGone, said as such, not the transport's
// bare EOF with the client's made-up URL.
func TestClient_PluginGone(t *testing.T) {
	path := filepath.Join(plugintest.ShortTempDir(t), "admin.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			// Reads the request's head, then closes without a word.
			_, _ = http.ReadRequest(bufio.NewReader(conn))
			conn.Close()
		}
	}()
	c := admin.NewClient(path, 5*time.Second)
	for name, call := range map[string]func() error{
		"snapshot":   func() error { _, err := c.Snapshot(context.Background(), admin.Query{}); return err },
		"set health": func() error { _, err := c.SetHealth(context.Background(), "fake-0", false, "x"); return err },
	} {
		err := call()
		if !errors.Is(err, admin.ErrGone) || errors.Is(err, admin.ErrNoPlugin) || errors.Is(err, admin.ErrRequest) {
			t.Errorf("%s: err = %v, want ErrGone", name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "the plugin went away without answering (it stopped or crashed)") || strings.Contains(msg, "http://") {
			t.Errorf("%s: %q", name, msg)
		}
	}
}

func TestClient_PermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root is never denied; cmd's TestBinary_HealthSet_PermissionDenied runs the client as nobody")
	}
	dir := plugintest.ShortTempDir(t)
	sock := filepath.Join(dir, "admin.sock")
	run(t, admin.ServerConfig{Socket: sock, Source: source{Store: fixture(t)}})
	if err := os.Chmod(sock, 0); err != nil {
		t.Fatal(err)
	}
	_, err := admin.NewClient(sock, time.Second).Snapshot(context.Background(), admin.Query{})
	if !errors.Is(err, admin.ErrPermission) || !errors.Is(err, syscall.EACCES) || errors.Is(err, admin.ErrNoPlugin) {
		t.Errorf("err = %v, want ErrPermission", err)
	}
}

func TestClient_HonoursContext(t *testing.T) {
	// A socket that accepts and never answers.
	path := filepath.Join(plugintest.ShortTempDir(t), "silent.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		conn, err := lis.Accept()
		if err == nil {
			cancel() // the client is connected and waiting: interrupt it
			defer conn.Close()
			_, _ = conn.Read(make([]byte, 1024))
		}
	}()
	_, err = admin.NewClient(path, time.Hour).Snapshot(ctx, admin.Query{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestClip(t *testing.T) {
	tests := []struct{ in, want string }{
		{"fake-0", "fake-0"},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{strings.Repeat("a", 65), strings.Repeat("a", 64) + "…"},
		{strings.Repeat("a", 63) + "é", strings.Repeat("a", 63) + "…"}, // never half a character
	}
	for _, tt := range tests {
		if got := topology.Clip(tt.in); got != tt.want {
			t.Errorf("topology.Clip(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestShortList(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	tests := []struct {
		ids  []string
		want string
	}{
		{nil, "none"},
		{ids[:3], "a, b, c"},
		{ids[:8], "a, b, c, d, e, f, g, h"},
		{ids, "a, b, c, d, e, f, g, h, … and 2 more"},
	}
	for _, tt := range tests {
		if got := admin.ShortList(tt.ids); got != tt.want {
			t.Errorf("ShortList(%v) = %q, want %q", tt.ids, got, tt.want)
		}
	}
}

// FuzzHandler_HealthRequest: any body is a clean answer, never a panic, and
// only one well-formed object changes anything.
func FuzzHandler_HealthRequest(f *testing.F) {
	for _, s := range []string{`{"healthy":false,"reason":"x"}`, `{"healthy":true}`, `{}`, `{"healthy":true}{}`, `[`, `null`, `{"healthy":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var calls int
		health := func(string, bool, string) error { calls++; return nil }
		h := admin.NewServer(admin.ServerConfig{Source: fuzzSource{}, Health: health}).Handler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/devices/fake-0/health", strings.NewReader(body)))
		switch rec.Code {
		case http.StatusOK:
			var req map[string]any
			dec := json.NewDecoder(strings.NewReader(body))
			if dec.Decode(&req) != nil || dec.More() || calls != 1 {
				t.Errorf("accepted %q (calls %d)", body, calls)
			}
		case http.StatusBadRequest:
			if calls != 0 {
				t.Errorf("refused %q but changed health", body)
			}
		default:
			t.Errorf("%q: status %d %s", body, rec.Code, rec.Body)
		}
	})
}

// fuzzSource is one healthy device, in memory: the fuzz target runs too
// often for a bbolt file per input.
type fuzzSource struct{}

func (fuzzSource) Devices() ([]store.Device, error) {
	return []store.Device{{ID: "fake-0", Healthy: true, Since: time.Unix(0, 0)}}, nil
}
func (fuzzSource) Allocations(store.AllocationFilter) ([]store.Allocation, error) { return nil, nil }
func (fuzzSource) Claims(store.ClaimFilter) ([]store.Claim, error)                { return nil, nil }
func (fuzzSource) HealthEvents(store.EventFilter) ([]store.HealthEvent, error)    { return nil, nil }
func (fuzzSource) ConfigEvents(store.ConfigFilter) ([]store.ConfigEvent, error)   { return nil, nil }
func (fuzzSource) DamagedRecords() ([]admin.DamagedRecord, error)                 { return nil, nil }

// gatedSource is a real store whose Allocations wait at a gate while the
// test holds it, and which counts its concurrent and total reads.
type gatedSource struct {
	source
	gate            chan struct{} // closed: reads pass
	mu              sync.Mutex
	reads, in, most int
	entered         chan struct{}
}

func (g *gatedSource) Allocations(f store.AllocationFilter) ([]store.Allocation, error) {
	g.mu.Lock()
	g.reads++
	g.in++
	g.most = max(g.most, g.in)
	g.mu.Unlock()
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	g.mu.Lock()
	g.in--
	g.mu.Unlock()
	return g.source.Allocations(f)
}

// TestServer_SnapshotsOneAtATime: a burst of snapshot requests once read
// the whole history once each, all at the same time (2.2 GB for 30 dumps
// of a 33 MB history), and went on for clients that had given up. Now one
// snapshot is read at a time, a request whose client is gone reads
// nothing, and a health change waiting behind a snapshot still answers
// that it was made.
func TestServer_SnapshotsOneAtATime(t *testing.T) {
	st := fixture(t)
	g := &gatedSource{source: source{Store: st}, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	sock := filepath.Join(plugintest.ShortTempDir(t), "admin.sock")
	c := run(t, admin.ServerConfig{Socket: sock, Source: g, Health: storeHealth(st), Reported: reportedFixture})

	first := make(chan error, 1)
	go func() { _, err := c.Snapshot(context.Background(), admin.Query{}); first <- err }()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first snapshot never reached the store")
	}
	// Clients that give up while the first is read.
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if _, err := c.Snapshot(ctx, admin.Query{}); err == nil {
				t.Error("a snapshot answered while another was being read")
			}
		}()
	}
	wg.Wait()
	// A health change behind the snapshot: made, and answered as made.
	snap, err := c.SetHealth(context.Background(), "fake-1", false, "XID 48")
	if err != nil || len(snap.Devices) != 1 || snap.Devices[0].Healthy || snap.Devices[0].Reason != "XID 48" {
		t.Fatalf("health change behind a snapshot: %+v, %v; want it answered as made", snap.Devices, err)
	}
	close(g.gate)
	if err := <-first; err != nil {
		t.Fatalf("first snapshot: %v", err)
	}
	if _, err := c.Snapshot(context.Background(), admin.Query{}); err != nil {
		t.Fatalf("a snapshot after the burst: %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.most != 1 {
		t.Errorf("%d snapshots read at once, want 1", g.most)
	}
	// The first and the last snapshot read twice each (active, then the
	// history); the clients that gave up read nothing.
	if g.reads != 4 {
		t.Errorf("%d reads of the allocations, want 4: the abandoned requests read too", g.reads)
	}
}
