package plugintest

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources is a stand-in for the kubelet's PodResources API on a real
// unix socket: the generated gRPC server, answering List with the pods a
// test scripts. Safe for concurrent use; torn down by t.Cleanup.
type PodResources struct {
	t      testing.TB
	socket string

	mu    sync.Mutex
	pods  []*podresourcesapi.PodResources
	lists int
	srv   *grpc.Server
	done  chan struct{}
}

// StartPodResources serves a PodResources API on socket.
func StartPodResources(t testing.TB, socket string) *PodResources {
	t.Helper()
	p := &PodResources{t: t, socket: socket}
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// Start serves (again) on the socket, keeping the scripted pods.
func (p *PodResources) Start() {
	p.t.Helper()
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		p.t.Fatalf("pod resources stub: %v", err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, lister{p: p})
	done := make(chan struct{})
	p.mu.Lock()
	p.srv, p.done = srv, done
	p.mu.Unlock()
	go func() { defer close(done); _ = srv.Serve(lis) }()
}

// Stop stops serving and removes the socket, as a restarting kubelet does.
func (p *PodResources) Stop() {
	p.mu.Lock()
	srv, done := p.srv, p.done
	p.srv = nil
	p.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	<-done
	_ = os.Remove(p.socket)
}

// Lists is how many List calls were answered.
func (p *PodResources) Lists() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lists
}

// Container is one container of a scripted pod and the device ids it holds.
type Container struct {
	Name string
	IDs  []string
}

// SetPod adds or replaces a pod holding devices of resource.
func (p *PodResources) SetPod(namespace, name, resource string, containers ...Container) {
	pr := &podresourcesapi.PodResources{Namespace: namespace, Name: name}
	for _, c := range containers {
		pr.Containers = append(pr.Containers, &podresourcesapi.ContainerResources{
			Name:    c.Name,
			Devices: []*podresourcesapi.ContainerDevices{{ResourceName: resource, DeviceIds: c.IDs}},
		})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeLocked(namespace, name)
	p.pods = append(p.pods, pr)
}

// DeletePod removes a pod.
func (p *PodResources) DeletePod(namespace, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeLocked(namespace, name)
}

func (p *PodResources) removeLocked(namespace, name string) {
	for i, pr := range p.pods {
		if pr.Namespace == namespace && pr.Name == name {
			p.pods = append(p.pods[:i], p.pods[i+1:]...)
			return
		}
	}
}

type lister struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	p *PodResources
}

func (l lister) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	l.p.lists++
	resp := &podresourcesapi.ListPodResourcesResponse{}
	for _, pr := range l.p.pods {
		resp.PodResources = append(resp.PodResources, proto.Clone(pr).(*podresourcesapi.PodResources))
	}
	return resp, nil
}
