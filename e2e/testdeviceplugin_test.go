package e2e_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// testDevicePlugin is a minimal device plugin served by the test process itself on a node's
// device-plugin dir: it advertises fixed healthy devices of one resource and answers Allocate with
// what its allocate function returns. It exists for answers the plugin under test does not give yet
// (CdiDevices): the kubelet hands a runtime CDI device names only from a device plugin's Allocate
// answer. Its server stops at the test's cleanup.
type testDevicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	ids      []string
	allocate func(ids []string) (*pluginapi.ContainerAllocateResponse, error)
	stop     chan struct{}

	mu     sync.Mutex
	allocs [][]string // the ids of each container request, in call order
}

var _ pluginapi.DevicePluginServer = (*testDevicePlugin)(nil)

// startTestDevicePlugin serves resource with devices ids on node's device-plugin dir (socket
// <name>.sock) and registers it with the node's kubelet.
func startTestDevicePlugin(t *testing.T, node *cluster.Node, name, resource string, ids []string, allocate func([]string) (*pluginapi.ContainerAllocateResponse, error)) *testDevicePlugin {
	t.Helper()
	p := &testDevicePlugin{ids: ids, allocate: allocate, stop: make(chan struct{})}
	endpoint := name + ".sock"
	sock := filepath.Join(node.DevicePluginDir, endpoint)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		close(p.stop) // ends ListAndWatch, so GracefulStop does not wait for it
		srv.GracefulStop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("test device plugin %s: %v", name, err)
		}
		_ = os.Remove(sock)
	})
	conn, err := grpc.NewClient("unix://"+filepath.Join(node.DevicePluginDir, cluster.KubeletSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource,
	}); err != nil {
		t.Fatalf("register test device plugin %s: %v", resource, err)
	}
	return p
}

// Allocations returns the ids of each Allocate container request so far.
func (p *testDevicePlugin) Allocations() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.allocs)
}

// GetDevicePluginOptions implements pluginapi.DevicePluginServer: no optional calls.
func (p *testDevicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch implements pluginapi.DevicePluginServer: the devices once, then nothing until the
// kubelet or the test ends the stream.
func (p *testDevicePlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, id := range p.ids {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := s.Send(resp); err != nil {
		return err
	}
	select {
	case <-s.Context().Done():
	case <-p.stop:
	}
	return nil
}

// Allocate implements pluginapi.DevicePluginServer with p.allocate for each container request.
func (p *testDevicePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		p.mu.Lock()
		p.allocs = append(p.allocs, slices.Clone(cr.DevicesIds))
		p.mu.Unlock()
		r, err := p.allocate(cr.DevicesIds)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "allocate %v: %v", cr.DevicesIds, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}
