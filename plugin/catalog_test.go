package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// devicesNamed returns healthy devices with these ids, indices 0, 1, ….
func devicesNamed(ids ...string) []gpuset.Device {
	devs := make([]gpuset.Device, len(ids))
	for i, id := range ids {
		devs[i] = gpuset.Device{ID: id, Index: i, NUMA: -1, Healthy: true}
	}
	return devs
}

// taggedCatalog is a catalog over devs whose Env and Respond both name tag,
// so an answer shows which catalog built each part of it.
func taggedCatalog(t testing.TB, tag string, devs []gpuset.Device) plugin.Catalog {
	return plugin.Catalog{
		Devices: devs,
		Prefer:  lowestIndex(t, 64),
		Env:     func([]gpuset.Device) map[string]string { return map[string]string{"CATALOG": tag} },
		Respond: func(plugin.Record, []gpuset.Device) (plugin.ContainerSpec, error) {
			return plugin.ContainerSpec{Annotations: map[string]string{"catalog": tag}}, nil
		},
	}
}

func TestServer_SetCatalog_StreamsGetTheNewList(t *testing.T) {
	srv := mustServer(t, plugin.ServerConfig{})
	client := dial(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []pluginapi.DevicePlugin_ListAndWatchClient
	for range 2 {
		s, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		recv(t, s)
		streams = append(streams, s)
	}
	next := devicesNamed("fake-0", "fake-1", "fake-4")
	next[1].Healthy, next[1].Reason = false, "XID 79"
	next[2].NUMA = 1
	if err := srv.SetCatalog(plugin.Catalog{Devices: next, Prefer: lowestIndex(t, 8)}); err != nil {
		t.Fatal(err)
	}
	for i, s := range streams {
		l := recv(t, s)
		if got := health(l); got != "fake-0=Healthy fake-1=Unhealthy fake-4=Healthy " {
			t.Errorf("stream %d after SetCatalog: %s", i, got)
		}
		if n := l.Devices[2].GetTopology().GetNodes(); len(n) != 1 || n[0].ID != 1 {
			t.Errorf("stream %d: fake-4 topology %v, want NUMA node 1", i, n)
		}
	}
	if got := srv.Devices(); len(got) != 3 || got[1].Reason != "XID 79" {
		t.Errorf("Devices() = %+v", got)
	}

	// Removed ids are unknown everywhere; new ones are served.
	_, err := client.Allocate(ctx, allocReq([]string{"fake-2"}))
	assertStatus(t, err, codes.InvalidArgument, `unknown device "fake-2"`)
	_, err = client.GetPreferredAllocation(ctx, prefReq([]string{"fake-0", "fake-3"}, nil, 1))
	assertStatus(t, err, codes.InvalidArgument, `unknown device "fake-3"`)
	_, err = client.Allocate(ctx, allocReq([]string{"fake-1"}))
	assertStatus(t, err, codes.FailedPrecondition, `device "fake-1" is unhealthy: XID 79`)
	if _, err := srv.SetHealth("fake-3", false, "x"); !errors.Is(err, store.ErrUnknownDevice) {
		t.Errorf("SetHealth of a removed device: %v, want store.ErrUnknownDevice", err)
	}
	resp, err := client.Allocate(ctx, allocReq([]string{"fake-4", "fake-0"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs[plugin.EnvIDs]; got != "fake-0,fake-4" {
		t.Errorf("VIRTUAL_GPU_IDS = %q", got)
	}
	// SetHealth acts on the new catalog and reaches the streams.
	if _, err := srv.SetHealth("fake-4", false, "hot"); err != nil {
		t.Fatal(err)
	}
	if got := health(recv(t, streams[0])); got != "fake-0=Healthy fake-1=Unhealthy fake-4=Unhealthy " {
		t.Errorf("after SetHealth: %s", got)
	}
}

func TestServer_SetCatalog_Invalid_KeepsCurrent(t *testing.T) {
	prefer := lowestIndex(t, 4)
	tests := []struct {
		name string
		c    plugin.Catalog
		want error
	}{
		{"no devices", plugin.Catalog{Prefer: prefer}, plugin.ErrNoDevices},
		{"no policy", plugin.Catalog{Devices: fakeDevices(2, false)}, plugin.ErrNoPreferFunc},
		{"empty id", plugin.Catalog{Devices: devicesNamed("a", ""), Prefer: prefer}, plugin.ErrEmptyID},
		{"duplicate id", plugin.Catalog{Devices: devicesNamed("a", "a"), Prefer: prefer}, plugin.ErrDuplicateDevice},
		{"duplicate index", plugin.Catalog{Devices: []gpuset.Device{{ID: "a", Index: 3}, {ID: "b", Index: 3}}, Prefer: prefer}, plugin.ErrDuplicateDevice},
		{"negative limit", plugin.Catalog{Devices: devicesNamed("a"), Prefer: prefer, Limit: plugin.Limit{Max: -1}}, plugin.ErrInvalidLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := mustServer(t, plugin.ServerConfig{})
			if err := srv.SetCatalog(tt.c); !errors.Is(err, tt.want) || !strings.HasPrefix(err.Error(), "set catalog: ") {
				t.Errorf("SetCatalog = %v, want %v", err, tt.want)
			}
			if got := srv.Devices(); len(got) != 4 {
				t.Errorf("devices after a refused catalog: %+v", got)
			}
			if _, err := plugin.NewServer(plugin.ServerConfig{Catalog: tt.c}); !errors.Is(err, tt.want) {
				t.Errorf("NewServer = %v, want %v", err, tt.want)
			}
		})
	}
}

// UpdateCatalog hands the builder the current health, and no health change
// slips between the build and the swap: a catalog built from the store
// after a reconcile keeps the health of the devices present before and
// after, as the store keeps their history.
func TestServer_UpdateCatalog_HealthFromStore(t *testing.T) {
	st := storetest.MustOpen(t, store.Options{})
	specs := func(ids ...string) []store.DeviceSpec {
		out := make([]store.DeviceSpec, len(ids))
		for i, id := range ids {
			out[i] = store.DeviceSpec{ID: id, Index: i, NUMA: -1}
		}
		return out
	}
	fromStore := func(ids ...string) (plugin.Catalog, error) {
		if _, err := st.Reconcile(specs(ids...)); err != nil {
			return plugin.Catalog{}, err
		}
		stored, err := st.Devices()
		if err != nil {
			return plugin.Catalog{}, err
		}
		c := plugin.Catalog{Prefer: lowestIndex(t, 8)}
		for _, d := range stored {
			if !d.Removed {
				c.Devices = append(c.Devices, gpuset.Device{ID: d.ID, Index: d.Index, NUMA: d.NUMA, Healthy: d.Healthy, Reason: d.Reason})
			}
		}
		return c, nil
	}
	first, err := fromStore("fake-0", "fake-1", "fake-2")
	if err != nil {
		t.Fatal(err)
	}
	srv := mustServer(t, plugin.ServerConfig{Catalog: first})
	if _, _, err := st.SetHealth("fake-1", false, "XID 48", "test"); err != nil { // stored first, as the agent does
		t.Fatal(err)
	}
	if _, err := srv.SetHealth("fake-1", false, "XID 48"); err != nil {
		t.Fatal(err)
	}
	var seen []gpuset.Device
	err = srv.UpdateCatalog(func(cur plugin.Catalog) (plugin.Catalog, error) {
		seen = cur.Devices
		return fromStore("fake-0", "fake-1", "fake-3")
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen[1].Healthy || seen[1].Reason != "XID 48" {
		t.Errorf("the builder saw %+v, want fake-1 unhealthy", seen)
	}
	got := srv.Devices()
	want := []gpuset.Device{
		{ID: "fake-0", Index: 0, NUMA: -1, Healthy: true},
		{ID: "fake-1", Index: 1, NUMA: -1, Reason: "XID 48"},
		{ID: "fake-3", Index: 2, NUMA: -1, Healthy: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("devices = %+v, want %+v", got, want)
	}

	// A failing build changes nothing and says what failed.
	boom := errors.New("profile unreadable")
	if err := srv.UpdateCatalog(func(plugin.Catalog) (plugin.Catalog, error) { return plugin.Catalog{}, boom }); !errors.Is(err, boom) {
		t.Errorf("UpdateCatalog = %v, want %v", err, boom)
	}
	if !slices.Equal(srv.Devices(), want) {
		t.Errorf("a failed update changed the devices: %+v", srv.Devices())
	}
}

// gateRecorder blocks every record until release is closed, after telling
// entered.
type gateRecorder struct {
	entered chan struct{}
	release chan struct{}
}

func (g gateRecorder) RecordAllocation(ctx context.Context, ids []string, envs map[string]string) (plugin.Record, error) {
	g.entered <- struct{}{}
	<-g.release
	return plugin.Record{Seq: 1, IDs: ids, Envs: envs}, nil
}

// An RPC in flight finishes with the catalog it began with; the next one
// sees the new catalog only.
func TestServer_SetCatalog_InFlightUsesOneCatalog(t *testing.T) {
	t.Run("Allocate", func(t *testing.T) {
		gate := gateRecorder{entered: make(chan struct{}, 1), release: make(chan struct{})}
		srv := mustServer(t, plugin.ServerConfig{Catalog: taggedCatalog(t, "old", fakeDevices(4, false)), Recorder: gate})
		client := dial(t, srv)
		type result struct {
			resp *pluginapi.AllocateResponse
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := client.Allocate(context.Background(), allocReq([]string{"fake-1"}))
			done <- result{resp, err}
		}()
		<-gate.entered
		if err := srv.SetCatalog(taggedCatalog(t, "new", devicesNamed("fake-0", "fake-9"))); err != nil {
			t.Fatal(err)
		}
		close(gate.release)
		r := <-done
		if r.err != nil {
			t.Fatalf("Allocate in flight: %v", r.err)
		}
		cr := r.resp.ContainerResponses[0]
		if cr.Envs["CATALOG"] != "old" || cr.Annotations["catalog"] != "old" {
			t.Errorf("in-flight answer mixes catalogs: envs %v, annotations %v", cr.Envs, cr.Annotations)
		}
		_, err := client.Allocate(context.Background(), allocReq([]string{"fake-1"}))
		assertStatus(t, err, codes.InvalidArgument, `unknown device "fake-1"`)
	})
	t.Run("GetPreferredAllocation", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		c := taggedCatalog(t, "old", fakeDevices(4, false))
		inner := c.Prefer
		c.Prefer = func(a, m []gpuset.Device, n int) ([]string, error) {
			entered <- struct{}{}
			<-release
			return inner(a, m, n)
		}
		srv := mustServer(t, plugin.ServerConfig{Catalog: c})
		client := dial(t, srv)
		done := make(chan error, 1)
		var got []string
		go func() {
			resp, err := client.GetPreferredAllocation(context.Background(), prefReq([]string{"fake-3", "fake-2"}, nil, 1))
			if err == nil {
				got = resp.ContainerResponses[0].DeviceIDs
			}
			done <- err
		}()
		<-entered
		if err := srv.SetCatalog(taggedCatalog(t, "new", devicesNamed("fake-0"))); err != nil {
			t.Fatal(err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("GetPreferredAllocation in flight: %v", err)
		}
		if !slices.Equal(got, []string{"fake-2"}) {
			t.Errorf("in-flight answer %v, want [fake-2] of the old catalog", got)
		}
	})
}

// Catalog swaps, health changes, allocations and streams at once: every
// answer comes from one catalog, and -race finds no unguarded access.
func TestServer_SetCatalog_Concurrent(t *testing.T) {
	srv := mustServer(t, plugin.ServerConfig{Catalog: taggedCatalog(t, "0", fakeDevices(4, false))})
	client := dial(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	var reader, writers sync.WaitGroup
	reader.Go(func() { // the kubelet reads every list
		for {
			l, err := stream.Recv()
			if err != nil {
				return
			}
			if n := len(l.Devices); n != 4 && n != 5 {
				t.Errorf("a list of %d devices, want 4 or 5", n)
			}
		}
	})
	const swaps = 50
	writers.Go(func() {
		for i := 1; i <= swaps; i++ {
			if err := srv.SetCatalog(taggedCatalog(t, strconv.Itoa(i), fakeDevices(4+i%2, false))); err != nil {
				t.Error(err)
				return
			}
		}
	})
	writers.Go(func() {
		for i := range swaps {
			if _, err := srv.SetHealth("fake-3", i%2 == 0, "flapping"); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 4 {
		writers.Go(func() {
			for range swaps {
				resp, err := client.Allocate(ctx, allocReq([]string{"fake-0", "fake-1"}))
				if err != nil {
					t.Error(err)
					return
				}
				cr := resp.ContainerResponses[0]
				if cr.Envs["CATALOG"] != cr.Annotations["catalog"] {
					t.Errorf("answer mixes catalogs: env %s, annotation %s", cr.Envs["CATALOG"], cr.Annotations["catalog"])
				}
			}
		})
	}
	writers.Wait()
	cancel()
	reader.Wait()
	if got := srv.Catalog(); len(got.Devices) != 4 {
		t.Errorf("after the last swap: %d devices, want 4", len(got.Devices))
	}
}

// respondFixture builds what a container sees from the stored record:
// the fake nvidia-smi, the status directory, a per-allocation socket named
// by the record's sequence number, one device node per device, CDI names
// and more variables.
func respondFixture(rec plugin.Record, devs []gpuset.Device) (plugin.ContainerSpec, error) {
	spec := plugin.ContainerSpec{
		Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": rec.Envs[plugin.EnvIDs]},
		Mounts: []plugin.Mount{
			{ContainerPath: "/usr/bin/nvidia-smi", HostPath: "/opt/vgpu/nvidia-smi", ReadOnly: true},
			{ContainerPath: "/run/virtual-gpu", HostPath: "/var/run/vgpu/status", ReadOnly: true},
			{ContainerPath: "/run/virtual-gpu-telemetry.sock", HostPath: fmt.Sprintf("/var/run/vgpu/alloc-%d.sock", rec.Seq)},
		},
		DeviceNodes: []plugin.DeviceNode{{ContainerPath: "/dev/nvidiactl", HostPath: "/dev/null"}},
		Annotations: map[string]string{"vgpu.unicore.mcyou.cc/seq": strconv.FormatUint(rec.Seq, 10)},
	}
	for _, d := range devs {
		spec.DeviceNodes = append(spec.DeviceNodes, plugin.DeviceNode{ContainerPath: fmt.Sprintf("/dev/nvidia%d", d.Index), HostPath: "/dev/null", Permissions: "rw"})
		spec.CDIDevices = append(spec.CDIDevices, "unicore.mcyou.cc/gpu="+d.ID)
	}
	return spec, nil
}

// The answer is built from the stored record: rebuilding it from the record
// read back from the store gives the same answer, and a second allocation
// of the same ids gets its own sequence number.
func TestServer_Allocate_Respond_FromStoredRecord(t *testing.T) {
	st := storetest.MustOpenPath(t, filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if _, err := st.Reconcile([]store.DeviceSpec{{ID: "fake-0", Index: 0}, {ID: "fake-1", Index: 1}, {ID: "fake-2", Index: 2}}); err != nil {
		t.Fatal(err)
	}
	c := plugin.Catalog{
		Devices: fakeDevices(3, false),
		Prefer:  lowestIndex(t, 3),
		Env: func(devs []gpuset.Device) map[string]string {
			return map[string]string{"VIRTUAL_GPU_COUNT": strconv.Itoa(len(devs))}
		},
		Respond: respondFixture,
	}
	srv := mustServer(t, plugin.ServerConfig{Catalog: c, Recorder: storeRecorder{st}})
	client := dial(t, srv)
	var seqs []string
	for i := range 2 {
		resp, err := client.Allocate(context.Background(), allocReq([]string{"fake-2", "fake-0"}))
		if err != nil {
			t.Fatal(err)
		}
		got := resp.ContainerResponses[0]
		seq, err := strconv.ParseUint(got.Annotations["vgpu.unicore.mcyou.cc/seq"], 10, 64)
		if err != nil {
			t.Fatalf("allocation %d: annotations %v", i, got.Annotations)
		}
		seqs = append(seqs, got.Annotations["vgpu.unicore.mcyou.cc/seq"])
		stored, err := st.Allocation(seq)
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := respondFixture(plugin.Record{Seq: stored.Seq, IDs: stored.DeviceIDs, Envs: stored.Envs}, []gpuset.Device{c.Devices[0], c.Devices[2]})
		want := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"VIRTUAL_GPU_IDS": "fake-0,fake-2", "VIRTUAL_GPU_COUNT": "2", "NVIDIA_VISIBLE_DEVICES": "fake-0,fake-2"},
			Mounts: []*pluginapi.Mount{
				{ContainerPath: "/usr/bin/nvidia-smi", HostPath: "/opt/vgpu/nvidia-smi", ReadOnly: true},
				{ContainerPath: "/run/virtual-gpu", HostPath: "/var/run/vgpu/status", ReadOnly: true},
				{ContainerPath: "/run/virtual-gpu-telemetry.sock", HostPath: fmt.Sprintf("/var/run/vgpu/alloc-%d.sock", seq)},
			},
			Devices: []*pluginapi.DeviceSpec{
				{ContainerPath: "/dev/nvidiactl", HostPath: "/dev/null", Permissions: "rw"},
				{ContainerPath: "/dev/nvidia0", HostPath: "/dev/null", Permissions: "rw"},
				{ContainerPath: "/dev/nvidia2", HostPath: "/dev/null", Permissions: "rw"},
			},
			Annotations: spec.Annotations,
			CdiDevices:  []*pluginapi.CDIDevice{{Name: "unicore.mcyou.cc/gpu=fake-0"}, {Name: "unicore.mcyou.cc/gpu=fake-2"}},
		}
		if !proto.Equal(got, want) {
			t.Errorf("allocation %d:\n got %v\nwant %v", i, got, want)
		}
		if len(stored.Envs) != 2 || stored.Envs["NVIDIA_VISIBLE_DEVICES"] != "" {
			t.Errorf("stored envs %v: want Env's and VIRTUAL_GPU_IDS only", stored.Envs)
		}
	}
	if seqs[0] == seqs[1] {
		t.Errorf("two allocations share sequence number %s", seqs[0])
	}
}

// A Respond that fails or breaks the rules fails the call with Internal,
// naming what was wrong; the record stays.
func TestServer_Allocate_Respond_Invalid(t *testing.T) {
	tests := []struct {
		name string
		spec plugin.ContainerSpec
		err  error
		msg  string
	}{
		{"hook error", plugin.ContainerSpec{}, errors.New("no telemetry socket"), "container response: no telemetry socket"},
		{"relative container path", plugin.ContainerSpec{Mounts: []plugin.Mount{{ContainerPath: "usr/bin/x", HostPath: "/x"}}}, nil, `mount 0: path "usr/bin/x" is not absolute`},
		{"relative host path", plugin.ContainerSpec{DeviceNodes: []plugin.DeviceNode{{ContainerPath: "/dev/x", HostPath: "dev/null"}}}, nil, `device node 0: path "dev/null" is not absolute`},
		{"path twice", plugin.ContainerSpec{
			Mounts:      []plugin.Mount{{ContainerPath: "/dev/nvidia0", HostPath: "/x"}},
			DeviceNodes: []plugin.DeviceNode{{ContainerPath: "/dev//nvidia0", HostPath: "/dev/null"}},
		}, nil, "device node 0: container path /dev//nvidia0 used twice"},
		{"bad permissions", plugin.ContainerSpec{DeviceNodes: []plugin.DeviceNode{{ContainerPath: "/dev/x", HostPath: "/dev/null", Permissions: "rwx"}}}, nil, `device node 0: permissions "rwx", want one or more of r, w, m`},
		{"repeated permission", plugin.ContainerSpec{DeviceNodes: []plugin.DeviceNode{{ContainerPath: "/dev/x", HostPath: "/dev/null", Permissions: "rr"}}}, nil, `device node 0: permissions "rr"`},
		{"bad CDI name", plugin.ContainerSpec{CDIDevices: []string{"gpu0"}}, nil, `CDI device name "gpu0"`},
		{"CDI name without class", plugin.ContainerSpec{CDIDevices: []string{"vendor.com/=x"}}, nil, `CDI device name "vendor.com/=x"`},
		{"env contradicts the record", plugin.ContainerSpec{Envs: map[string]string{plugin.EnvIDs: "fake-3"}}, nil, `variable VIRTUAL_GPU_IDS="fake-3" differs from the stored "fake-0"`},
		{"empty env name", plugin.ContainerSpec{Envs: map[string]string{"": "x"}}, nil, `variable name ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &flakyRecorder{}
			c := plugin.Catalog{Devices: fakeDevices(4, false), Prefer: lowestIndex(t, 4),
				Respond: func(plugin.Record, []gpuset.Device) (plugin.ContainerSpec, error) { return tt.spec, tt.err }}
			srv := mustServer(t, plugin.ServerConfig{Catalog: c, Recorder: rec})
			obs := &recordingObserver{}
			srv.SetObserver(obs)
			_, err := dial(t, srv).Allocate(context.Background(), allocReq([]string{"fake-0"}))
			assertStatus(t, err, codes.Internal, "allocate fake-0: container response: "+strings.TrimPrefix(tt.msg, "container response: "))
			if got := obs.take(); len(got) != 1 || got[0].result != metrics.ResultFailed {
				t.Errorf("observed %+v, want one failed allocation", got)
			}
			if got := rec.recorded(); len(got) != 1 {
				t.Errorf("recorded %v, want the one record", got)
			}
		})
	}
}

// An env the hook repeats with the stored value is fine.
func TestServer_Allocate_Respond_SameEnvValue(t *testing.T) {
	c := plugin.Catalog{Devices: fakeDevices(2, false), Prefer: lowestIndex(t, 2),
		Respond: func(rec plugin.Record, _ []gpuset.Device) (plugin.ContainerSpec, error) {
			return plugin.ContainerSpec{Envs: map[string]string{plugin.EnvIDs: rec.Envs[plugin.EnvIDs], "MORE": "1"}}, nil
		}}
	resp, err := dial(t, mustServer(t, plugin.ServerConfig{Catalog: c})).Allocate(context.Background(), allocReq([]string{"fake-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs; len(got) != 2 || got["MORE"] != "1" || got[plugin.EnvIDs] != "fake-1" {
		t.Errorf("envs = %v", got)
	}
}

// A catalog's Limit refuses larger container requests with a message
// naming the rule, before anything is recorded, in both RPCs.
func TestServer_Limit(t *testing.T) {
	const rule = "sharing.timeSlicing.failRequestsGreaterThanOne"
	rec := &flakyRecorder{}
	c := plugin.Catalog{Devices: fakeDevices(4, false), Prefer: lowestIndex(t, 4), Limit: plugin.Limit{Max: 1, Rule: rule}}
	srv := mustServer(t, plugin.ServerConfig{Catalog: c, Recorder: rec})
	obs := &recordingObserver{}
	srv.SetObserver(obs)
	client := dial(t, srv)
	ctx := context.Background()
	want := "2 devices requested, more than the 1 per container that " + rule + " allows"

	_, err := client.Allocate(ctx, allocReq([]string{"fake-0"}, []string{"fake-1", "fake-2"}))
	assertStatus(t, err, codes.InvalidArgument, "allocate: container request 1: "+want)
	if got := rec.recorded(); len(got) != 0 {
		t.Errorf("recorded %v for a refused request", got)
	}
	if got := obs.take(); len(got) != 1 || got[0].result != metrics.ResultRejected {
		t.Errorf("observed %+v, want one rejected request", got)
	}
	_, err = client.GetPreferredAllocation(ctx, prefReq([]string{"fake-0", "fake-1", "fake-2"}, nil, 2))
	assertStatus(t, err, codes.InvalidArgument, "preferred allocation: container request 0: "+want)

	if _, err := client.Allocate(ctx, allocReq([]string{"fake-0"}, []string{"fake-1"})); err != nil {
		t.Errorf("one device per container: %v", err)
	}
	if _, err := client.GetPreferredAllocation(ctx, prefReq([]string{"fake-0", "fake-1"}, nil, 1)); err != nil {
		t.Errorf("preferred allocation of one: %v", err)
	}

	// Without a rule the message still says who limits; a new catalog lifts it.
	c.Limit.Rule = ""
	if err := srv.SetCatalog(c); err != nil {
		t.Fatal(err)
	}
	_, err = client.Allocate(ctx, allocReq([]string{"fake-0", "fake-1"}))
	assertStatus(t, err, codes.InvalidArgument, "more than the 1 per container that the device plugin's limit allows")
	c.Limit = plugin.Limit{}
	if err := srv.SetCatalog(c); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Allocate(ctx, allocReq([]string{"fake-0", "fake-1"})); err != nil {
		t.Errorf("no limit: %v", err)
	}
}

// A shared-GPU catalog: replicas fake-<i>::<j> of a machine's GPUs, placed
// by a shared policy, described by their physical GPUs, one per container.
// This is how the command wires time-slicing.
func TestServer_SharedCatalog(t *testing.T) {
	m, err := topology.Generic(4) // pairs under PCIe switches: 0-1, 2-3
	if err != nil {
		t.Fatal(err)
	}
	const perGPU = 2
	var devs []gpuset.Device
	for i, id := range m.ReplicaIDs(perGPU) {
		devs = append(devs, gpuset.Device{ID: id, Index: i, NUMA: m.NUMA(i / perGPU), Healthy: true})
	}
	gpuOf := func(d gpuset.Device) int { return d.Index / perGPU }
	replicas := func(ds []gpuset.Device) []allocator.Replica {
		out := make([]allocator.Replica, len(ds))
		for i, d := range ds {
			out[i] = allocator.Replica{GPU: gpuOf(d), Index: d.Index % perGPU}
		}
		return out
	}
	c := plugin.Catalog{
		Devices: devs,
		Prefer: func(available, mustInclude []gpuset.Device, size int) ([]string, error) {
			chosen, err := allocator.Distributed(m, perGPU, replicas(available), replicas(mustInclude), size)
			if err != nil {
				return nil, err
			}
			ids := make([]string, len(chosen))
			for i, r := range chosen {
				ids[i] = r.String()
			}
			return ids, nil
		},
		Env: func(ds []gpuset.Device) map[string]string {
			gpus := make([]int, len(ds))
			for i, d := range ds {
				gpus[i] = gpuOf(d)
			}
			return m.ContainerEnv(gpus)
		},
		Limit: plugin.Limit{Max: 1, Rule: "failRequestsGreaterThanOne"},
	}
	client := dial(t, mustServer(t, plugin.ServerConfig{Catalog: c}))
	ctx := context.Background()

	// GPU 0 has one replica in use: the least used GPU with the lowest id wins.
	avail := []string{"fake-0::1", "fake-1::0", "fake-1::1", "fake-2::0", "fake-2::1"}
	resp, err := client.GetPreferredAllocation(ctx, prefReq(avail, nil, 1))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, []string{"fake-1::0"}) {
		t.Errorf("preferred %v, want [fake-1::0]", got)
	}
	ar, err := client.Allocate(ctx, allocReq([]string{"fake-3::1"}))
	if err != nil {
		t.Fatal(err)
	}
	envs := ar.ContainerResponses[0].Envs
	if envs[plugin.EnvIDs] != "fake-3::1" || envs[topology.EnvNUMANodes] != strconv.Itoa(m.NUMA(3)) || envs[topology.EnvTopology] != m.Name() {
		t.Errorf("envs = %v, want the replica id and GPU 3's NUMA node", envs)
	}
	_, err = client.Allocate(ctx, allocReq([]string{"fake-0::0", "fake-0::1"}))
	assertStatus(t, err, codes.InvalidArgument, "2 devices requested, more than the 1 per container that failRequestsGreaterThanOne allows")
}

// PreferByIndex maps indices to ids; an index outside available breaks the
// contract (Internal), a policy error is the request's (InvalidArgument).
func TestPreferByIndex(t *testing.T) {
	tests := []struct {
		name   string
		policy func(a, m []int, n int) ([]int, error)
		code   codes.Code
		msg    string
		want   []string
	}{
		{"mapped", func(a, m []int, n int) ([]int, error) { return []int{a[len(a)-1]}, nil }, codes.OK, "", []string{"fake-3"}},
		{"unavailable index", func(a, m []int, n int) ([]int, error) { return []int{0}, nil }, codes.Internal, "preference policy: index 0 is not an available device", nil},
		{"policy error", func(a, m []int, n int) ([]int, error) { return nil, errors.New("no luck") }, codes.InvalidArgument, "no luck", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := dial(t, mustServer(t, plugin.ServerConfig{Catalog: plugin.Catalog{Prefer: plugin.PreferByIndex(tt.policy)}}))
			resp, err := client.GetPreferredAllocation(context.Background(), prefReq([]string{"fake-3", "fake-1"}, nil, 1))
			if tt.code != codes.OK {
				assertStatus(t, err, tt.code, tt.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// BenchmarkAllocate_Respond measures Allocate of 4 devices over a unix
// socket with the Respond hook building mounts, device nodes and CDI names
// against the same catalog without it (the baseline, in the same run).
func BenchmarkAllocate_Respond(b *testing.B) {
	for _, mode := range []string{"env-only", "respond"} {
		b.Run(mode, func(b *testing.B) {
			c := plugin.Catalog{Devices: fakeDevices(8, false), Prefer: lowestIndex(b, 8)}
			if mode == "respond" {
				c.Respond = respondFixture
			}
			client := dial(b, mustServer(b, plugin.ServerConfig{Catalog: c}))
			req := allocReq([]string{"fake-0", "fake-1", "fake-2", "fake-3"})
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

// SetHealthOf changes the replicas of one GPU as one change: one
// ListAndWatch message; an unknown id changes nothing.
func TestServer_SetHealthOf_OneChange(t *testing.T) {
	devs := devicesNamed("fake-0::0", "fake-0::1", "fake-1::0", "fake-1::1")
	srv := mustServer(t, plugin.ServerConfig{Catalog: plugin.Catalog{Devices: devs}})
	client := dial(t, srv)
	stream, err := client.ListAndWatch(t.Context(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, stream)

	if _, err := srv.SetHealthOf([]string{"fake-1::0", "fake-9::0"}, false, "XID 79"); !errors.Is(err, store.ErrUnknownDevice) {
		t.Errorf("unknown replica: err = %v, want store.ErrUnknownDevice", err)
	}
	if _, err := srv.SetHealthOf(nil, false, "XID 79"); !errors.Is(err, store.ErrUnknownDevice) {
		t.Errorf("no devices: err = %v, want store.ErrUnknownDevice", err)
	}
	if changed, err := srv.SetHealthOf([]string{"fake-1::0", "fake-1::1"}, false, "XID 79"); err != nil || !changed {
		t.Fatalf("SetHealthOf = %v, %v", changed, err)
	}
	if got := health(recv(t, stream)); got != "fake-0::0=Healthy fake-0::1=Healthy fake-1::0=Unhealthy fake-1::1=Unhealthy " {
		t.Errorf("after SetHealthOf: %s", got)
	}
	if changed, _ := srv.SetHealthOf([]string{"fake-1::0", "fake-1::1"}, false, "XID 79"); changed {
		t.Error("the same health again reported a change")
	}
	if _, err := srv.SetHealthOf([]string{"fake-1::0", "fake-1::1"}, true, "ignored when healthy"); err != nil {
		t.Fatal(err)
	}
	if got := health(recv(t, stream)); got != "fake-0::0=Healthy fake-0::1=Healthy fake-1::0=Healthy fake-1::1=Healthy " {
		t.Errorf("after healing: %s", got)
	}
	if d := srv.Devices(); d[2].Reason != "" || !d[2].Healthy {
		t.Errorf("fake-1::0 = %+v, want healthy without a reason", d[2])
	}
}

// An Env that sets VIRTUAL_GPU_IDS replaces the device ids there (a
// catalog of replicas lists their GPUs); the record keeps the device ids.
func TestServer_Allocate_EnvSetsIDs(t *testing.T) {
	devs := devicesNamed("fake-0::0", "fake-0::1", "fake-1::0")
	srv := mustServer(t, plugin.ServerConfig{Catalog: plugin.Catalog{Devices: devs, Env: func(ds []gpuset.Device) map[string]string {
		return map[string]string{plugin.EnvIDs: "fake-0,fake-1"}
	}}})
	resp, err := dial(t, srv).Allocate(t.Context(), allocReq([]string{"fake-1::0", "fake-0::1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs[plugin.EnvIDs]; got != "fake-0,fake-1" {
		t.Errorf("%s = %q, want the Env's fake-0,fake-1", plugin.EnvIDs, got)
	}
}
