package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// memRecorder keeps allocations in memory: the baseline for the durable store.
type memRecorder struct {
	mu   sync.Mutex
	recs [][]string
}

func (m *memRecorder) RecordAllocation(_ context.Context, ids []string, envs map[string]string) (plugin.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, ids)
	return plugin.Record{Seq: uint64(len(m.recs)), IDs: ids, Envs: envs}, nil
}

// storeRecorder stores allocations in the state file, as the agent does
// before Allocate answers (agent.Agent.RecordAllocation, less its load
// socket and its notes to the tracker and the pruner).
type storeRecorder struct{ st *store.Store }

func (r storeRecorder) RecordAllocation(_ context.Context, ids []string, envs map[string]string) (plugin.Record, error) {
	a, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: envs})
	return plugin.Record{Seq: a.Seq, IDs: a.DeviceIDs, Envs: a.Envs}, err
}

// BenchmarkAllocate_Store measures the Allocate round trip over a unix socket
// with the durable bbolt store (committed and fsynced before the answer)
// against the same server recording in memory, reporting p50 and p99, and
// the state file's size per 10,000 allocations.
func BenchmarkAllocate_Store(b *testing.B) {
	machine, err := topology.Generic(8)
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"memory", "durable"} {
		b.Run(mode, func(b *testing.B) {
			dir := b.TempDir()
			var rec plugin.Recorder = &memRecorder{}
			var st *store.Store
			if mode == "durable" {
				st, err = store.Open(filepath.Join(dir, "state.db"), store.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				var specs []store.DeviceSpec
				for i := range machine.Len() {
					specs = append(specs, store.DeviceSpec{ID: machine.ID(i), Index: i, NUMA: machine.NUMA(i)})
				}
				if _, err := st.Reconcile(specs); err != nil {
					b.Fatal(err)
				}
				rec = storeRecorder{st}
			}
			var devices []gpuset.Device
			for i := range machine.Len() {
				devices = append(devices, gpuset.Device{ID: machine.ID(i), Index: i, NUMA: -1, Healthy: true})
			}
			srv, err := plugin.NewServer(plugin.ServerConfig{
				Catalog: plugin.Catalog{
					Devices: devices, Env: plugin.EnvByIndex(machine.ContainerEnv),
					Prefer: plugin.PreferByIndex(func(a, m []int, n int) ([]int, error) { return allocator.Preferred(machine, a, m, n) }),
				},
				Recorder: rec,
			})
			if err != nil {
				b.Fatal(err)
			}
			client := serveForBench(b, srv)
			req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-0", "fake-1"}}}}
			ctx := context.Background()
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := client.Allocate(ctx, req); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
			if st != nil {
				fi, err := os.Stat(st.Path())
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(fi.Size())*10000/float64(len(took)), "file-bytes/10k-allocs")
			}
		})
	}
}

func serveForBench(b *testing.B, srv *plugin.Server) pluginapi.DevicePluginClient {
	b.Helper()
	dir := plugintest.ShortTempDir(b)
	sock := filepath.Join(dir, "p.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(); gs.Stop() })
	return pluginapi.NewDevicePluginClient(conn)
}

// BenchmarkHealthSet_ToListAndWatch measures an operator's health change
// through the whole plugin (serve, in this process): the admin socket, the
// agent's health path (the durable store, the status file, the device
// plugin) until the kubelet's ListAndWatch stream carries it (issue:
// within 100 ms).
func BenchmarkHealthSet_ToListAndWatch(b *testing.B) {
	dir := plugintest.ShortTempDir(b)
	k := plugintest.StartKubelet(b, dir)
	state := filepath.Join(dir, "state", "state.db")
	o, err := options.Parse([]string{"-devices=2", "-device-plugin-path=" + dir, "-state=" + state, "-numa-report=never",
		"-pod-resources-socket=" + filepath.Join(dir, "pr.sock"), "-node-name=node-a"}, func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	cfg, profiles, err := o.Load()
	if err != nil {
		b.Fatal(err)
	}
	env := defaultServeEnv()
	env.environ = nil
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, o, cfg, profiles, io.Discard, env) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	reg := k.WaitRegistration(30 * time.Second)
	plugintest.NextList(b, reg, 10*time.Second)
	ac := admin.NewClient(filepath.Join(dir, "state", "admin.sock"), 5*time.Second)
	healthy := true
	var took []time.Duration
	for b.Loop() {
		healthy = !healthy
		start := time.Now()
		if _, err := ac.SetHealth(ctx, "fake-1", healthy, map[bool]string{false: "bench"}[healthy]); err != nil {
			b.Fatal(err)
		}
		l := plugintest.NextList(b, reg, 10*time.Second)
		if got := l.Devices[1].Health == pluginapi.Healthy; got != healthy {
			b.Fatalf("stream says healthy=%v, want %v", got, healthy)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
}
