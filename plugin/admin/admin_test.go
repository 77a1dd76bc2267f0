package admin_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// serve runs an admin Server over a real store on a real socket and returns
// a Client for it.
func serve(t *testing.T) (*admin.Client, *store.Store, string) {
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
	health := func(id string, healthy bool, reason string) error {
		_, _, err := st.SetHealth(id, healthy, reason, store.CauseAdmin)
		return err
	}
	dir, err := os.MkdirTemp("", "vgpu-admin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	srv := admin.NewServer(sock, st, health, zerolog.New(zerolog.NewTestWriter(t)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("admin socket left behind: %v", err)
		}
	})
	c := admin.NewClient(sock, 2*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := c.Devices(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("admin server not answering: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c, st, sock
}

func TestAdmin_SocketMode0600(t *testing.T) {
	_, _, sock := serve(t)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin socket mode = %v, want 0600", fi.Mode().Perm())
	}
}

func TestAdmin_ReadsLikeTheStore(t *testing.T) {
	c, st, _ := serve(t)
	tests := []struct {
		name string
		f    store.AllocationFilter
	}{
		{"all", store.AllocationFilter{}},
		{"device", store.AllocationFilter{DeviceID: "fake-1"}},
		{"limit", store.AllocationFilter{Limit: 2}},
		{"since future", store.AllocationFilter{Since: time.Now().Add(time.Hour)}},
		{"active", store.AllocationFilter{Active: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := st.Allocations(tt.f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Allocations(tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("got %d records, want %d", len(got), len(want))
			}
			for i := range got {
				if got[i].Seq != want[i].Seq || !got[i].Time.Equal(want[i].Time) || strings.Join(got[i].DeviceIDs, ",") != strings.Join(want[i].DeviceIDs, ",") {
					t.Errorf("record %d = %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
	devs, err := c.Devices()
	if err != nil || len(devs) != 2 || devs[1].NUMA != 1 {
		t.Errorf("Devices = %+v, %v", devs, err)
	}
}

func TestAdmin_SetHealth(t *testing.T) {
	c, st, _ := serve(t)
	d, err := c.SetHealth("fake-1", false, "XID 48")
	if err != nil {
		t.Fatal(err)
	}
	if d.Healthy || d.Reason != "XID 48" {
		t.Errorf("answer = %+v, want unhealthy with the reason", d)
	}
	stored, err := st.Device("fake-1")
	if err != nil || stored.Healthy {
		t.Errorf("stored = %+v, %v; want unhealthy", stored, err)
	}
	events, err := c.HealthEvents(store.EventFilter{DeviceID: "fake-1", Limit: 1})
	if err != nil || len(events) != 1 || events[0].Cause != store.CauseAdmin || events[0].Healthy {
		t.Errorf("events = %+v, %v", events, err)
	}
}

func TestAdmin_BadRequests(t *testing.T) {
	c, _, _ := serve(t)
	_, err := c.SetHealth("fake-9", false, "")
	if !errors.Is(err, admin.ErrRequest) || !strings.Contains(err.Error(), `unknown device "fake-9"`) {
		t.Errorf("unknown device: %v", err)
	}
	_, err = c.Allocations(store.AllocationFilter{Limit: -1})
	if err != nil {
		t.Errorf("negative limit is dropped by the client, got %v", err)
	}
}

func TestClient_NoPlugin(t *testing.T) {
	c := admin.NewClient(filepath.Join(t.TempDir(), "admin.sock"), time.Second)
	if _, err := c.Devices(); !errors.Is(err, admin.ErrNoPlugin) {
		t.Errorf("err = %v, want ErrNoPlugin", err)
	}
}

func TestServer_RefusesNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin.sock")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := admin.NewServer(path, nil, nil, zerolog.Nop()).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not a unix socket") {
		t.Errorf("err = %v", err)
	}
}

func TestHandler_BadInput(t *testing.T) {
	st := storetest.MustOpen(t, store.Options{})
	h := admin.NewServer("", st, func(string, bool, string) error { return nil }, zerolog.Nop()).Handler()
	tests := []struct {
		method, url, body string
		code              int
		want              string
	}{
		{"GET", "/v1/allocations?since=yesterday", "", 400, `since \"yesterday\": want an RFC 3339 time`},
		{"GET", "/v1/allocations?limit=-2", "", 400, `limit \"-2\"`},
		{"GET", "/v1/allocations?active=maybe", "", 400, `active \"maybe\"`},
		{"GET", "/v1/events?limit=x", "", 400, `limit \"x\"`},
		{"PUT", "/v1/devices/fake-0/health", `{"healthy":"no"}`, 400, "health request"},
		{"PUT", "/v1/devices/fake-0/health", `{"healthy":false,"color":"red"}`, 400, `unknown field \"color\"`},
		{"PUT", "/v1/devices/fake-0/health", `{}`, 400, `\"healthy\" is required`},
		{"DELETE", "/v1/devices", "", 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.url, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.url, strings.NewReader(tt.body)))
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("%d %s, want %d containing %q", rec.Code, rec.Body.String(), tt.code, tt.want)
			}
		})
	}
}
