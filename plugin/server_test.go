package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// fakeDevices returns n healthy devices fake-0 … fake-n-1 on NUMA node i/2%2
// (negative numa reports none).
func fakeDevices(n int, numa bool) []gpuset.Device {
	devs := make([]gpuset.Device, n)
	for i := range devs {
		devs[i] = gpuset.Device{ID: fmt.Sprintf("fake-%d", i), Index: i, NUMA: -1, Healthy: true}
		if numa {
			devs[i].NUMA = i / 2 % 2
		}
	}
	return devs
}

// mustServer builds a Server for cfg, logging to the test.
func mustServer(t testing.TB, cfg plugin.ServerConfig) *plugin.Server {
	t.Helper()
	if _, bench := t.(*testing.B); !bench {
		cfg.Logger = zerolog.New(zerolog.NewTestWriter(t))
	}
	return mustServerLogging(t, cfg)
}

// mustServerLogging builds a Server for cfg (4 devices and the lowest-index
// policy by default) that logs to cfg.Logger.
func mustServerLogging(t testing.TB, cfg plugin.ServerConfig) *plugin.Server {
	t.Helper()
	if cfg.Catalog.Devices == nil {
		cfg.Catalog.Devices = fakeDevices(4, false)
	}
	if cfg.Catalog.Prefer == nil {
		cfg.Catalog.Prefer = lowestIndex(t, len(cfg.Catalog.Devices))
	}
	srv, err := plugin.NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// lowestIndex is the lowest-index policy for n devices fake-0 … fake-n-1.
func lowestIndex(t testing.TB, n int) plugin.PreferFunc {
	t.Helper()
	m, err := topology.Generic(max(n, 1))
	if err != nil {
		t.Fatal(err)
	}
	return plugin.PreferByIndex(func(available, mustInclude []int, size int) ([]int, error) {
		return allocator.LowestIndex(m, available, mustInclude, size)
	})
}

// dial serves srv on a real unix socket in a temp dir and returns a client.
func dial(t testing.TB, srv *plugin.Server) pluginapi.DevicePluginClient {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "p.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(gs, srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop(); <-done })
	return pluginapi.NewDevicePluginClient(conn)
}

func allocReq(sets ...[]string) *pluginapi.AllocateRequest {
	req := &pluginapi.AllocateRequest{}
	for _, ids := range sets {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: ids})
	}
	return req
}

func TestServer_Allocate_Env(t *testing.T) {
	extra := func(devs []gpuset.Device) map[string]string {
		return map[string]string{"VIRTUAL_GPU_COUNT": fmt.Sprint(len(devs))}
	}
	client := dial(t, mustServer(t, plugin.ServerConfig{Catalog: plugin.Catalog{Env: extra}}))
	resp, err := client.Allocate(context.Background(), allocReq([]string{"fake-2", "fake-0"}, []string{"fake-3"}))
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	want := []map[string]string{
		{"VIRTUAL_GPU_IDS": "fake-0,fake-2", "VIRTUAL_GPU_COUNT": "2"},
		{"VIRTUAL_GPU_IDS": "fake-3", "VIRTUAL_GPU_COUNT": "1"},
	}
	if len(resp.ContainerResponses) != len(want) {
		t.Fatalf("got %d container responses, want %d", len(resp.ContainerResponses), len(want))
	}
	for i, cr := range resp.ContainerResponses {
		if fmt.Sprint(cr.Envs) != fmt.Sprint(want[i]) {
			t.Errorf("container %d envs = %v, want %v", i, cr.Envs, want[i])
		}
	}
}

func TestServer_Allocate_Idempotent(t *testing.T) {
	client := dial(t, mustServer(t, plugin.ServerConfig{}))
	var first string
	for i := range 3 {
		resp, err := client.Allocate(context.Background(), allocReq([]string{"fake-1", "fake-3"}))
		if err != nil {
			t.Fatalf("Allocate #%d: %v", i, err)
		}
		got := fmt.Sprint(resp.ContainerResponses[0].Envs)
		if i == 0 {
			first = got
		} else if got != first {
			t.Fatalf("Allocate #%d = %s, first answer was %s", i, got, first)
		}
	}
}

func TestServer_Allocate_BadInput(t *testing.T) {
	srv := mustServer(t, plugin.ServerConfig{})
	if _, err := srv.SetHealth("fake-1", false, "ECC errors"); err != nil {
		t.Fatal(err)
	}
	client := dial(t, srv)
	tests := []struct {
		name string
		req  *pluginapi.AllocateRequest
		code codes.Code
		msg  string
	}{
		{"no container requests", allocReq(), codes.InvalidArgument, "no container requests"},
		{"empty ids", allocReq([]string{}), codes.InvalidArgument, "no device ids"},
		{"unknown id", allocReq([]string{"fake-0", "gpu-9"}), codes.InvalidArgument, `unknown device "gpu-9"`},
		{"duplicate id", allocReq([]string{"fake-0", "fake-0"}), codes.InvalidArgument, `device "fake-0" requested twice`},
		{"unhealthy id", allocReq([]string{"fake-1"}), codes.FailedPrecondition, `device "fake-1" is unhealthy: ECC errors`},
		{"second container bad", allocReq([]string{"fake-0"}, []string{"fake-7"}), codes.InvalidArgument, "container request 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Allocate(context.Background(), tt.req)
			assertStatus(t, err, tt.code, tt.msg)
		})
	}
}

type failingRecorder struct{}

func (failingRecorder) RecordAllocation(context.Context, []string, map[string]string) (plugin.Record, error) {
	return plugin.Record{}, errors.New("disk full")
}

func TestServer_Allocate_RecordFails_Unavailable(t *testing.T) {
	client := dial(t, mustServer(t, plugin.ServerConfig{Recorder: failingRecorder{}}))
	_, err := client.Allocate(context.Background(), allocReq([]string{"fake-0"}))
	assertStatus(t, err, codes.Unavailable, "disk full")
}

// assertStatus checks err's gRPC code and that its message contains msg.
func assertStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, ok := status.FromError(err)
	if err == nil || !ok {
		t.Fatalf("err = %v, want gRPC status %v", err, code)
	}
	if st.Code() != code {
		t.Errorf("code = %v, want %v (%s)", st.Code(), code, st.Message())
	}
	if !strings.Contains(st.Message(), msg) {
		t.Errorf("message %q does not contain %q", st.Message(), msg)
	}
}

func prefReq(avail, must []string, size int32) *pluginapi.PreferredAllocationRequest {
	return &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: avail, MustIncludeDeviceIDs: must, AllocationSize: size,
	}}}
}

func TestServer_Preferred_LowestIndex(t *testing.T) {
	client := dial(t, mustServer(t, plugin.ServerConfig{}))
	tests := []struct {
		name        string
		avail, must []string
		size        int32
		want        []string
	}{
		{"lowest first", []string{"fake-3", "fake-1", "fake-2"}, nil, 2, []string{"fake-1", "fake-2"}},
		{"must include", []string{"fake-0", "fake-1", "fake-3"}, []string{"fake-3"}, 2, []string{"fake-0", "fake-3"}},
		{"all", []string{"fake-0", "fake-1", "fake-2", "fake-3"}, nil, 4, []string{"fake-0", "fake-1", "fake-2", "fake-3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.GetPreferredAllocation(context.Background(), prefReq(tt.avail, tt.must, tt.size))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestServer_Preferred_BadInput(t *testing.T) {
	client := dial(t, mustServer(t, plugin.ServerConfig{}))
	all := []string{"fake-0", "fake-1", "fake-2"}
	tests := []struct {
		name string
		req  *pluginapi.PreferredAllocationRequest
		msg  string
	}{
		{"no requests", &pluginapi.PreferredAllocationRequest{}, "no container requests"},
		{"size zero", prefReq(all, nil, 0), "allocation size 0"},
		{"size negative", prefReq(all, nil, -2), "allocation size -2"},
		{"size above available", prefReq(all, nil, 4), "more than the 3 available"},
		{"must include unavailable", prefReq(all, []string{"fake-3"}, 2), `must-include device "fake-3" is not available`},
		{"must include more than size", prefReq(all, []string{"fake-0", "fake-1"}, 1), "do not fit allocation size 1"},
		{"unknown available", prefReq([]string{"fake-0", "nope"}, nil, 1), `unknown device "nope"`},
		{"unknown must include", prefReq(all, []string{"nope"}, 1), `unknown device "nope"`},
		{"duplicate available", prefReq([]string{"fake-0", "fake-0"}, nil, 1), "requested twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.GetPreferredAllocation(context.Background(), tt.req)
			assertStatus(t, err, codes.InvalidArgument, tt.msg)
		})
	}
}

func TestServer_Preferred_PolicyAnswerChecked(t *testing.T) {
	bad := func(avail, must []gpuset.Device, size int) ([]string, error) { return []string{avail[0].ID}, nil }
	client := dial(t, mustServer(t, plugin.ServerConfig{Catalog: plugin.Catalog{Prefer: bad}}))
	_, err := client.GetPreferredAllocation(context.Background(), prefReq([]string{"fake-0", "fake-1"}, nil, 2))
	assertStatus(t, err, codes.Internal, "1 devices chosen, want 2")
}

func TestServer_Options(t *testing.T) {
	client := dial(t, mustServer(t, plugin.ServerConfig{}))
	opts, err := client.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if !opts.GetPreferredAllocationAvailable || opts.PreStartRequired {
		t.Errorf("options = %v, want preferred allocation and no pre-start", opts)
	}
	if _, err := client.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"fake-0"}}); err != nil {
		t.Errorf("PreStartContainer: %v", err)
	}
}

// recv reads the next ListAndWatch message with a deadline.
func recv(t *testing.T, stream grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse]) *pluginapi.ListAndWatchResponse {
	t.Helper()
	type result struct {
		l   *pluginapi.ListAndWatchResponse
		err error
	}
	ch := make(chan result, 1)
	go func() { l, err := stream.Recv(); ch <- result{l, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("ListAndWatch: %v", r.err)
		}
		return r.l
	case <-time.After(5 * time.Second):
		t.Fatal("no ListAndWatch message within 5s")
		return nil
	}
}

func health(l *pluginapi.ListAndWatchResponse) string {
	s := ""
	for _, d := range l.Devices {
		s += fmt.Sprintf("%s=%s ", d.ID, d.Health)
	}
	return s
}

func TestServer_ListAndWatch_BroadcastsToEveryStream(t *testing.T) {
	srv := mustServer(t, plugin.ServerConfig{Catalog: plugin.Catalog{Devices: fakeDevices(4, true)}})
	client := dial(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse]
	for range 2 {
		s, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		first := recv(t, s)
		if got := health(first); got != "fake-0=Healthy fake-1=Healthy fake-2=Healthy fake-3=Healthy " {
			t.Fatalf("first list = %s", got)
		}
		if n := first.Devices[2].GetTopology().GetNodes(); len(n) != 1 || n[0].ID != 1 {
			t.Errorf("fake-2 topology = %v, want NUMA node 1", n)
		}
		streams = append(streams, s)
	}
	if changed, err := srv.SetHealth("fake-2", false, "XID 79"); err != nil || !changed {
		t.Fatalf("SetHealth = %v, %v", changed, err)
	}
	for i, s := range streams {
		if got := health(recv(t, s)); got != "fake-0=Healthy fake-1=Healthy fake-2=Unhealthy fake-3=Healthy " {
			t.Errorf("stream %d after SetHealth: %s", i, got)
		}
	}
	// The same health again changes nothing; healing does.
	if changed, _ := srv.SetHealth("fake-2", false, "XID 79"); changed {
		t.Error("SetHealth with the same state reported a change")
	}
	if _, err := srv.SetHealth("fake-2", true, ""); err != nil {
		t.Fatal(err)
	}
	for i, s := range streams {
		if got := health(recv(t, s)); got != "fake-0=Healthy fake-1=Healthy fake-2=Healthy fake-3=Healthy " {
			t.Errorf("stream %d after healing: %s (an unchanged SetHealth must not send)", i, got)
		}
	}
}

func TestServer_ListAndWatch_EndsOnClose(t *testing.T) {
	srv := mustServer(t, plugin.ServerConfig{})
	client := dial(t, srv)
	s, err := client.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, s)
	srv.Close()
	done := make(chan error, 1)
	go func() { _, err := s.Recv(); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("stream sent a message after Close, want end of stream")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open 5s after Close")
	}
}

func TestServer_SetHealth_UnknownDevice(t *testing.T) {
	srv := mustServer(t, plugin.ServerConfig{})
	if _, err := srv.SetHealth("fake-9", false, "x"); !errors.Is(err, store.ErrUnknownDevice) {
		t.Errorf("err = %v, want store.ErrUnknownDevice", err)
	}
}

func TestNewServer_BadDevices(t *testing.T) {
	tests := []struct {
		name    string
		devices []gpuset.Device
		want    error
	}{
		{"none", nil, plugin.ErrNoDevices},
		{"no policy", fakeDevices(1, false), plugin.ErrNoPreferFunc},
		{"empty id", []gpuset.Device{{ID: "", Index: 0}}, plugin.ErrEmptyID},
		{"duplicate id", []gpuset.Device{{ID: "a", Index: 0}, {ID: "a", Index: 1}}, plugin.ErrDuplicateDevice},
		{"duplicate index", []gpuset.Device{{ID: "a", Index: 1}, {ID: "b", Index: 1}}, plugin.ErrDuplicateDevice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefer := func([]gpuset.Device, []gpuset.Device, int) ([]string, error) { return nil, nil }
			if tt.want == plugin.ErrNoPreferFunc {
				prefer = nil
			}
			if _, err := plugin.NewServer(plugin.ServerConfig{Catalog: plugin.Catalog{Devices: tt.devices, Prefer: prefer}}); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func BenchmarkAllocate_UnixSocket(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			client := dial(b, mustServer(b, plugin.ServerConfig{Catalog: plugin.Catalog{Devices: fakeDevices(8, false)}}))
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("fake-%d", i)
			}
			req := allocReq(ids)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Allocate(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// flakyRecorder keeps allocations in memory and fails those that include
// failFor, with an error that names its operation as the store's do.
type flakyRecorder struct {
	failFor string
	mu      sync.Mutex
	records [][]string
}

func (r *flakyRecorder) RecordAllocation(_ context.Context, ids []string, envs map[string]string) (plugin.Record, error) {
	if slices.Contains(ids, r.failFor) {
		return plugin.Record{}, errors.New("record allocation: disk full")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, slices.Clone(ids))
	return plugin.Record{Seq: uint64(len(r.records)), IDs: ids, Envs: envs}, nil
}

func (r *flakyRecorder) recorded() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.records)
}

// One AllocateRequest must not hand one device to two containers; nothing
// of the request is recorded then.
func TestServer_Allocate_DeviceInTwoContainers(t *testing.T) {
	rec := &flakyRecorder{}
	client := dial(t, mustServer(t, plugin.ServerConfig{Recorder: rec}))
	_, err := client.Allocate(context.Background(), allocReq([]string{"fake-0", "fake-1"}, []string{"fake-2"}, []string{"fake-3", "fake-1"}))
	assertStatus(t, err, codes.InvalidArgument, `container request 2: device "fake-1" is also in container request 0`)
	if got := rec.recorded(); len(got) != 0 {
		t.Errorf("recorded %v for a refused request", got)
	}
	if _, err := client.Allocate(context.Background(), allocReq([]string{"fake-0"}, []string{"fake-1"})); err != nil {
		t.Errorf("distinct devices for two containers: %v", err)
	}
}

// Error messages quote ids of any length and number in bounded space.
func TestServer_Messages_ShortIDs(t *testing.T) {
	long := strings.Repeat("a", 10_000)
	cut := strings.Repeat("a", 64) + "…"
	wide := strings.Repeat("é", 40) // 80 bytes: cut on a rune boundary
	devs := fakeDevices(20, false)
	srv := mustServer(t, plugin.ServerConfig{Catalog: plugin.Catalog{Devices: devs}, Recorder: &flakyRecorder{failFor: "fake-19"}})
	client := dial(t, srv)
	var all []string
	for _, d := range devs {
		all = append(all, d.ID)
	}
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"unknown long id", func() error { _, err := client.Allocate(context.Background(), allocReq([]string{long})); return err },
			codes.InvalidArgument, `allocate: container request 0: unknown device "` + cut + `"`},
		{"repeated long id", func() error {
			_, err := client.Allocate(context.Background(), allocReq([]string{"fake-0", long + "b", long + "b"}))
			return err
		}, codes.InvalidArgument, `unknown device "` + cut + `"`},
		{"multi-byte id", func() error { _, err := client.Allocate(context.Background(), allocReq([]string{wide})); return err },
			codes.InvalidArgument, `unknown device "` + strings.Repeat("é", 32) + `…"`},
		{"unknown long must-include", func() error {
			_, err := client.GetPreferredAllocation(context.Background(), prefReq([]string{"fake-0", long}, nil, 1))
			return err
		}, codes.InvalidArgument, `available devices: unknown device "` + cut + `"`},
		{"long list not recorded", func() error { _, err := client.Allocate(context.Background(), allocReq(all)); return err },
			codes.Unavailable, "allocate fake-0,fake-1,fake-2,fake-3,fake-4,fake-5,fake-6,fake-7,… (+12 more): not recorded: record allocation: disk full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			assertStatus(t, err, tt.code, tt.msg)
			if msg := status.Convert(err).Message(); len(msg) > 200 || !utf8.ValidString(msg) {
				t.Errorf("message of %d bytes (valid UTF-8: %v): %q", len(msg), utf8.ValidString(msg), msg)
			}
		})
	}
}

// storeRecorder records in a real store, as the command does.
type storeRecorder struct{ st *store.Store }

func (r storeRecorder) RecordAllocation(_ context.Context, ids []string, envs map[string]string) (plugin.Record, error) {
	a, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: envs})
	return plugin.Record{Seq: a.Seq, IDs: a.DeviceIDs, Envs: a.Envs}, err
}

// A store that cannot record: the message names the store's operation once.
func TestServer_Allocate_NotRecorded_StoreError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	rw := storetest.MustOpenPath(t, path, store.Options{})
	if _, err := rw.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0, NUMA: -1}}); err != nil {
		t.Fatal(err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	ro := storetest.MustOpenPath(t, path, store.Options{ReadOnly: true})
	_, storeErr := ro.RecordAllocation(store.Allocation{DeviceIDs: []string{"fake-0"}})
	if storeErr == nil {
		t.Fatal("a read-only store recorded")
	}
	client := dial(t, mustServer(t, plugin.ServerConfig{Catalog: plugin.Catalog{Devices: fakeDevices(1, false)}, Recorder: storeRecorder{ro}}))
	_, err := client.Allocate(context.Background(), allocReq([]string{"fake-0"}))
	want := "allocate fake-0: not recorded: " + storeErr.Error()
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != want {
		t.Errorf("Allocate = %v %q, want Unavailable %q", st.Code(), st.Message(), want)
	}
	if n := strings.Count(status.Convert(err).Message(), "record allocation"); n != 1 {
		t.Errorf("%q names the store's operation %d times, want once", status.Convert(err).Message(), n)
	}
}

// observation is one Observer call.
type observation struct {
	call   string
	ids    []string
	chosen []int
	result metrics.Result
	took   time.Duration
}

// recordingObserver keeps every call.
type recordingObserver struct {
	mu   sync.Mutex
	seen []observation
}

func (o *recordingObserver) add(ob observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, ob)
}

func (o *recordingObserver) Allocated(ids []string, r metrics.Result, took time.Duration) {
	o.add(observation{call: "Allocated", ids: ids, result: r, took: took})
}

func (o *recordingObserver) Preferred(chosen []int, r metrics.Result, took time.Duration) {
	o.add(observation{call: "Preferred", chosen: chosen, result: r, took: took})
}

func (o *recordingObserver) take() []observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.seen
	o.seen = nil
	return s
}

// slowRecorder takes at least d to record, as a disk commit does.
type slowRecorder struct{ d time.Duration }

func (r slowRecorder) RecordAllocation(_ context.Context, ids []string, envs map[string]string) (plugin.Record, error) {
	time.Sleep(r.d)
	return plugin.Record{IDs: ids, Envs: envs}, nil
}

func TestServer_Observer_Results(t *testing.T) {
	const commit = 20 * time.Millisecond
	bad := func(avail, must []gpuset.Device, size int) ([]string, error) { return []string{avail[0].ID}, nil }
	tests := []struct {
		name string
		cfg  plugin.ServerConfig
		call func(pluginapi.DevicePluginClient) error
		want []observation
	}{
		{"answered, the commit timed", plugin.ServerConfig{Recorder: slowRecorder{commit}},
			func(c pluginapi.DevicePluginClient) error {
				_, err := c.Allocate(context.Background(), allocReq([]string{"fake-2", "fake-1"}))
				return err
			}, []observation{{call: "Allocated", ids: []string{"fake-1", "fake-2"}, result: metrics.ResultOK, took: commit}}},
		{"unknown id rejected", plugin.ServerConfig{},
			func(c pluginapi.DevicePluginClient) error {
				_, err := c.Allocate(context.Background(), allocReq([]string{"fake-0"}, []string{"nope"}))
				return err
			}, []observation{{call: "Allocated", ids: []string{"nope"}, result: metrics.ResultRejected}}},
		{"not recorded failed", plugin.ServerConfig{Recorder: &flakyRecorder{failFor: "fake-3"}},
			func(c pluginapi.DevicePluginClient) error {
				_, err := c.Allocate(context.Background(), allocReq([]string{"fake-3"}))
				return err
			}, []observation{{call: "Allocated", ids: []string{"fake-3"}, result: metrics.ResultFailed}}},
		{"preferred", plugin.ServerConfig{},
			func(c pluginapi.DevicePluginClient) error {
				_, err := c.GetPreferredAllocation(context.Background(), prefReq([]string{"fake-3", "fake-2"}, nil, 1))
				return err
			}, []observation{{call: "Preferred", chosen: []int{2}, result: metrics.ResultOK}}},
		{"policy breaks its contract", plugin.ServerConfig{Catalog: plugin.Catalog{Prefer: bad}},
			func(c pluginapi.DevicePluginClient) error {
				_, err := c.GetPreferredAllocation(context.Background(), prefReq([]string{"fake-0", "fake-1"}, nil, 2))
				return err
			}, []observation{{call: "Preferred", result: metrics.ResultFailed}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := mustServer(t, tt.cfg)
			obs := &recordingObserver{}
			srv.SetObserver(obs)
			_ = tt.call(dial(t, srv))
			got := obs.take()
			if len(got) != len(tt.want) {
				t.Fatalf("observed %+v, want %+v", got, tt.want)
			}
			for i, g := range got {
				w := tt.want[i]
				if g.call != w.call || !slices.Equal(g.ids, w.ids) || !slices.Equal(g.chosen, w.chosen) || g.result != w.result || g.took < w.took {
					t.Errorf("observation %d = %+v, want %+v (took at least %v)", i, g, w, w.took)
				}
			}
		})
	}
}
