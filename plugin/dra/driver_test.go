package dra

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra/endpoint"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/unixsock"
)

// dial connects to the unix socket path.
func dial(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// run starts the rig's driver until the test ends, with a Node for its
// slices' owner, and returns when the kubelet could reach it: its
// registration socket answers.
func (r *rig) run(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-uid"}}
	if _, err := r.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	reg := registerapi.NewRegistrationClient(dial(t, r.d.cfg.RegistrationSocket()))
	plugintest.WaitFor(t, 10*time.Second, "the registration socket answers", func() bool {
		_, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
		return err == nil
	})
	return ctx
}

// slices lists the driver's published slices.
func (r *rig) slices(ctx context.Context) []resourceapi.ResourceSlice {
	r.t.Helper()
	list, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return list.Items
}

// TestRun: the kubelet's view of a running driver, over its real sockets:
// registration (GetInfo names the driver and its DRA socket, a
// registration is counted), the node's slices published (owned by its
// Node), a claim prepared through NodePrepareResources, the health stream,
// and a health change as a taint and a report.
func TestRun(t *testing.T) {
	r := newRig(t, "dgx-a100")
	ctx := r.run(t)

	reg := registerapi.NewRegistrationClient(dial(t, r.d.cfg.RegistrationSocket()))
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != endpoint.DefaultDriverName || info.Endpoint != r.d.cfg.Socket() {
		t.Errorf("GetInfo: %+v", info)
	}
	if r.d.Registered() {
		t.Error("registered before the kubelet said so")
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if !r.d.Registered() || r.d.Registrations() != 1 {
		t.Errorf("registered %v, %d registrations; want true, 1", r.d.Registered(), r.d.Registrations())
	}

	plugintest.WaitFor(t, 10*time.Second, "the node's slice", func() bool { return len(r.slices(ctx)) == 1 })
	s := r.slices(ctx)[0]
	if s.Spec.Driver != endpoint.DefaultDriverName || s.Spec.Pool.Name != testNode || s.Spec.NodeName == nil || *s.Spec.NodeName != testNode ||
		len(s.Spec.Devices) != 8 || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("slice %+v", s)
	}

	claim := claimOf(uidA, "pair", result("gpus", "fake-0"), result("gpus", "fake-1"))
	if _, err := r.client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dra := drapbv1.NewDRAPluginClient(dial(t, r.d.cfg.Socket()))
	resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{{Namespace: "default", Name: "pair", Uid: uidA}}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Claims[uidA]
	if got == nil || got.Error != "" || len(got.Devices) != 2 || got.Devices[0].DeviceName != "fake-0" || len(got.Devices[0].CdiDeviceIds) != 1 {
		t.Fatalf("NodePrepareResources: %v", resp)
	}

	health := drahealthv1.NewDRAResourceHealthClient(dial(t, r.d.cfg.Socket()))
	stream, err := health.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Devices) != 8 || first.Devices[0].Health != drahealthv1.HealthStatus_HEALTHY || first.Devices[0].Device.PoolName != testNode {
		t.Errorf("first health report: %v", first)
	}

	if err := r.d.SetHealth("fake-1", []string{"fake-1"}, false, "XID 79: GPU has fallen off the bus"); err != nil {
		t.Fatal(err)
	}
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(next.Devices, func(d *drahealthv1.DeviceHealth) bool { return d.Device.DeviceName == "fake-1" })
	if i < 0 || next.Devices[i].Health != drahealthv1.HealthStatus_UNHEALTHY || next.Devices[i].Message != "XID 79: GPU has fallen off the bus" {
		t.Errorf("report after the change: %v", next)
	}
	taint := func() *resourceapi.DeviceTaint {
		for _, s := range r.slices(ctx) {
			for _, d := range s.Spec.Devices {
				if d.Name == "fake-1" && len(d.Taints) == 1 {
					return &d.Taints[0]
				}
			}
		}
		return nil
	}
	plugintest.WaitFor(t, 10*time.Second, "fake-1 tainted in the slice", func() bool { return taint() != nil })
	if tt := taint(); tt.Key != endpoint.DefaultDriverName+"/xid" || tt.Value != "79" || tt.Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("taint %+v", tt)
	}
	if err := r.d.SetHealth("fake-1", []string{"fake-1"}, true, ""); err != nil {
		t.Fatal(err)
	}
	plugintest.WaitFor(t, 10*time.Second, "fake-1's taint gone", func() bool { return taint() == nil })

	unprep, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{{Namespace: "default", Name: "pair", Uid: uidA}}})
	if err != nil || unprep.Claims[uidA] == nil || unprep.Claims[uidA].Error != "" {
		t.Fatalf("NodeUnprepareResources: %v, %v", unprep, err)
	}
	if rec, err := r.st.Claim(uidA); err != nil || rec.Prepared() {
		t.Errorf("record after NodeUnprepareResources: %+v, %v", rec, err)
	}
}

// TestRun_SecondDriver: a second driver of the same name on the node is
// refused before it writes anything, naming the socket in use.
func TestRun_SecondDriver(t *testing.T) {
	r := newRig(t, "dgx-a100")
	r.run(t)
	err := r.d.cfg.Check()
	if err == nil {
		t.Fatal("Check with a driver serving: nil")
	}
	if !errors.Is(err, unixsock.ErrInUse) {
		t.Errorf("Check: %v", err)
	}
}

// TestHandleError: a recoverable error of the libraries is logged, any
// other ends Run with it.
func TestHandleError(t *testing.T) {
	r := newRig(t, "dgx-a100")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}
	if _, err := r.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.d.Run(ctx) }()
	r.d.HandleError(ctx, errors.Join(errors.New("slice dropped a field"), kubeletplugin.ErrRecoverable), "publishing")
	boom := errors.New("gRPC server failed")
	r.d.HandleError(ctx, boom, "DRA gRPC server failed")
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Errorf("Run: %v, want %v", err, boom)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end on a fatal error")
	}
}

// TestHandleError_DroppedFields: the API server dropping the slices'
// taints (DRADeviceTaints off there), which the library reports at every
// publish, is said once, with what it means, and does not end Run.
func TestHandleError_DroppedFields(t *testing.T) {
	r := newRig(t, "dgx-a100")
	logs := &plugintest.LogBuffer{}
	r.d.log = zerolog.New(logs)
	desired := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{
		{Name: "fake-1", Taints: []resourceapi.DeviceTaint{Taint(endpoint.DefaultDriverName, "XID 79", metav1.Now())}}}}}
	actual := desired.DeepCopy()
	actual.Spec.Devices[0].Taints = nil
	dropped := &resourceslice.DroppedFieldsError{PoolName: testNode, DesiredSlice: desired, ActualSlice: actual}
	for range 3 {
		r.d.HandleError(context.Background(), errors.Join(dropped, kubeletplugin.ErrRecoverable), "publish ResourceSlices")
	}
	if n := logs.Count(`"features":"DRADeviceTaints"`); n != 1 {
		t.Errorf("%d lines about the dropped taints, want 1:\n%s", n, logs)
	}
	if n := logs.Count("unhealthy GPUs are not tainted"); n != 1 {
		t.Errorf("the line does not say what it means:\n%s", logs)
	}
	select {
	case err := <-r.d.fatal:
		t.Errorf("dropped fields ended Run: %v", err)
	default:
	}
}
