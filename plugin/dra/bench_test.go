package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra/endpoint"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// storeRecorder records allocations in the state file before Allocate
// answers, as the agent does.
type storeRecorder struct{ st *store.Store }

func (r storeRecorder) RecordAllocation(_ context.Context, ids []string, envs map[string]string) (plugin.Record, error) {
	a, err := r.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: envs})
	return plugin.Record{Seq: a.Seq, IDs: a.DeviceIDs, Envs: a.Envs}, err
}

// percentile returns the p-th percentile (0-100) of took, sorted.
func percentile(took []time.Duration, p int) float64 {
	return float64(took[len(took)*p/100].Nanoseconds())
}

// BenchmarkPrepare_8GPUs measures, over the kubelet's gRPC on unix
// sockets, the DRA driver's NodePrepareResources of a claim of all 8 GPUs
// of a DGX A100 (the claim read from the API, its record committed and
// fsynced, its CDI spec written) against the device plugin's Allocate of
// the same 8 GPUs with its durable record, the baseline of issue #22's
// goal (Prepare at most 2x Allocate). Each iteration does one of each, so
// both see the same load of a shared machine; it reports both p50 and p99
// and their ratios. Each claim is new, and unprepared outside the timings.
func BenchmarkPrepare_8GPUs(b *testing.B) {
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = topology.GPUID(i)
	}
	allocate := allocateClient(b)
	r := newRig(b, "dgx-a100")
	ctx := r.run(b)
	dra := drapbv1.NewDRAPluginClient(dial(b, r.d.cfg.Socket()))
	alloc := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
	var tookA, tookP []time.Duration
	n := 0
	for b.Loop() {
		n++
		uid, name := fmt.Sprintf("0b0d5b3e-8f57-4c39-9a8c-%012d", n), fmt.Sprintf("claim-%d", n)
		claim := claimOf(uid, name)
		for _, id := range ids {
			claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, result("gpus", id))
		}
		if _, err := r.client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		ref := []*drapbv1.Claim{{Namespace: "default", Name: name, Uid: uid}}

		start := time.Now()
		if _, err := allocate.Allocate(ctx, alloc); err != nil {
			b.Fatal(err)
		}
		tookA = append(tookA, time.Since(start))
		start = time.Now()
		resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: ref})
		tookP = append(tookP, time.Since(start))
		if err != nil || resp.Claims[uid].GetError() != "" || len(resp.Claims[uid].GetDevices()) != 8 {
			b.Fatalf("NodePrepareResources: %v, %v", resp, err)
		}
		if resp, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: ref}); err != nil || resp.Claims[uid].GetError() != "" {
			b.Fatalf("NodeUnprepareResources: %v, %v", resp, err)
		}
	}
	slices.Sort(tookA)
	slices.Sort(tookP)
	b.ReportMetric(percentile(tookA, 50), "allocate-p50-ns")
	b.ReportMetric(percentile(tookA, 99), "allocate-p99-ns")
	b.ReportMetric(percentile(tookP, 50), "prepare-p50-ns")
	b.ReportMetric(percentile(tookP, 99), "prepare-p99-ns")
	b.ReportMetric(percentile(tookP, 50)/percentile(tookA, 50), "p50-ratio")
	b.ReportMetric(percentile(tookP, 99)/percentile(tookA, 99), "p99-ratio")
}

// allocateClient serves the device plugin's Allocate of a DGX A100 with a
// durable state file on a unix socket, and returns its client.
func allocateClient(b *testing.B) pluginapi.DevicePluginClient {
	b.Helper()
	machine, err := topology.Preset("dgx-a100")
	if err != nil {
		b.Fatal(err)
	}
	st, err := store.Open(filepath.Join(b.TempDir(), "state.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	var specs []store.DeviceSpec
	var devices []gpuset.Device
	for i := range machine.Len() {
		specs = append(specs, store.DeviceSpec{ID: machine.ID(i), Index: i, NUMA: machine.NUMA(i)})
		devices = append(devices, gpuset.Device{ID: machine.ID(i), Index: i, NUMA: machine.NUMA(i), Healthy: true})
	}
	if _, err := st.Reconcile(specs); err != nil {
		b.Fatal(err)
	}
	srv, err := plugin.NewServer(plugin.ServerConfig{
		Catalog: plugin.Catalog{Devices: devices, Env: plugin.EnvByIndex(machine.ContainerEnv),
			Prefer: plugin.PreferByIndex(func(a, m []int, n int) ([]int, error) { return allocator.Preferred(machine, a, m, n) })},
		Recorder: storeRecorder{st},
	})
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(plugintest.ShortTempDir(b), "p.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	b.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// BenchmarkHoldings measures the telemetry's holders of 2 prepared claims
// among 2,000 claim records: from the driver's memory (what serve uses)
// against a scan of the store's claims, in one run.
func BenchmarkHoldings(b *testing.B) {
	r := newRig(b, "dgx-a100")
	ctx := context.Background()
	for i := range 2000 {
		uid := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		if _, err := r.d.Prepare(ctx, claimOf(uid, fmt.Sprintf("c%d", i), result("gpus", "fake-0"))); err != nil {
			b.Fatal(err)
		}
		if err := r.d.Unprepare(ctx, uid, "default/c", "bench"); err != nil {
			b.Fatal(err)
		}
	}
	for i, id := range []string{"fake-1", "fake-2"} {
		if _, err := r.d.Prepare(ctx, claimOf(fmt.Sprintf("00000000-0000-0000-0001-%012d", i), "held", result("gpus", id))); err != nil {
			b.Fatal(err)
		}
	}
	for _, src := range []struct {
		name string
		h    Holders
	}{{"driver", Holders{Store: r.d}}, {"store-scan", Holders{Store: r.st}}} {
		b.Run(src.name, func(b *testing.B) {
			for b.Loop() {
				if hs, err := src.h.Holdings(); err != nil || len(hs) != 2 {
					b.Fatalf("%v, %v", hs, err)
				}
			}
		})
	}
}

// BenchmarkResources_MIG builds the pool of an 8-GPU HGX H100 with every
// GPU MIG-enabled (every placement of every profile published, as DRA's
// partitionable devices) and, for comparison, without MIG; it reports the
// devices, the slices and the bytes of all slices as the resourceslice
// controller would create them (ResourceSlice objects, protobuf as the
// API server stores them, and JSON), and fails if a slice is over the
// API's limits.
func BenchmarkResources_MIG(b *testing.B) {
	for _, bc := range []struct {
		name string
		r    func() *rig
	}{
		{"whole", func() *rig { return newRig(b, "hgx-h100") }},
		{"every-placement", func() *rig { return newMIGRig(b, plugintest.Machine(b, "hgx-h100"), "all-enabled") }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := bc.r()
			stored := r.stored()
			devs, err := r.set.GPUs.Devices(stored)
			if err != nil {
				b.Fatal(err)
			}
			var res resourceslice.DriverResources
			for b.Loop() {
				if res, err = Resources(endpoint.DefaultDriverName, testNode, r.set.GPUs, devs, stored); err != nil {
					b.Fatal(err)
				}
			}
			pool := res.Pools[testNode]
			var devices, protoBytes, jsonBytes int
			for i, s := range pool.Slices {
				if len(s.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures || len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets ||
					len(s.Devices) > 0 && len(s.SharedCounters) > 0 {
					b.Fatalf("slice %d: %d devices, %d counter sets: over the API's limits", i, len(s.Devices), len(s.SharedCounters))
				}
				devices += len(s.Devices)
				obj := &resourceapi.ResourceSlice{
					TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%05d", testNode, endpoint.DefaultDriverName, i)},
					Spec: resourceapi.ResourceSliceSpec{Driver: endpoint.DefaultDriverName, NodeName: ptr(testNode),
						Pool:    resourceapi.ResourcePool{Name: testNode, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
						Devices: s.Devices, SharedCounters: s.SharedCounters},
				}
				pb, err := obj.Marshal()
				if err != nil {
					b.Fatal(err)
				}
				js, err := json.Marshal(obj)
				if err != nil {
					b.Fatal(err)
				}
				protoBytes += len(pb)
				jsonBytes += len(js)
			}
			b.ReportMetric(float64(devices), "devices")
			b.ReportMetric(float64(len(pool.Slices)), "slices")
			b.ReportMetric(float64(protoBytes), "proto-bytes")
			b.ReportMetric(float64(jsonBytes), "json-bytes")
		})
	}
}
