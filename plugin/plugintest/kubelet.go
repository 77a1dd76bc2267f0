// Package plugintest provides a stand-in kubelet for tests of device
// plugins: a real Registration server on a real unix socket that behaves like
// the kubelet's device manager. On Register it dials the plugin back, calls
// GetDevicePluginOptions, and then opens ListAndWatch, recording every list.
//
// A Kubelet is safe for concurrent use. It is torn down by t.Cleanup.
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Registration is one Register call the Kubelet accepted, with the plugin
// connection it opened for it.
type Registration struct {
	Request *pluginapi.RegisterRequest
	// Options is what the plugin's GetDevicePluginOptions answered.
	Options *pluginapi.DevicePluginOptions
	// At is when the Register call arrived.
	At time.Time
	// Client talks to the registered plugin.
	Client pluginapi.DevicePluginClient
	// Lists receives every ListAndWatch message of the kubelet's stream;
	// it is closed when the stream ends.
	Lists <-chan *pluginapi.ListAndWatchResponse
}

// Kubelet is a stand-in kubelet device manager serving Registration on
// <dir>/kubelet.sock.
type Kubelet struct {
	t   testing.TB
	dir string

	registrations chan *Registration

	mu     sync.Mutex
	srv    *grpc.Server
	conns  []*grpc.ClientConn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	reject error // Register answers this error when set
}

// StartKubelet serves a Kubelet in dir (which must exist) and stops it at the
// end of the test.
func StartKubelet(t testing.TB, dir string) *Kubelet {
	t.Helper()
	k := &Kubelet{t: t, dir: dir, registrations: make(chan *Registration, 64)}
	k.start()
	t.Cleanup(k.Stop)
	return k
}

// Dir is the device-plugin directory.
func (k *Kubelet) Dir() string { return k.dir }

// Reject makes later Register calls fail with err (nil accepts again).
func (k *Kubelet) Reject(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reject = err
}

func (k *Kubelet) start() {
	k.t.Helper()
	sock := filepath.Join(k.dir, "kubelet.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		k.t.Fatalf("kubelet stub: listen: %v", err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false) // a dead kubelet leaves its socket
	ctx, cancel := context.WithCancel(context.Background())
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, &registration{k: k, ctx: ctx})
	k.mu.Lock()
	k.srv, k.cancel = srv, cancel
	k.mu.Unlock()
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		_ = srv.Serve(lis)
	}()
}

// Stop stops serving, ends every ListAndWatch stream and closes the plugin
// connections, like a kubelet that exits. Its socket file stays, as a dead
// kubelet's does. Stop is idempotent.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	srv, cancel, conns := k.srv, k.cancel, k.conns
	k.srv, k.cancel, k.conns = nil, nil, nil
	k.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop() // first the socket stops accepting, then the streams end
	cancel()
	for _, c := range conns {
		_ = c.Close()
	}
	k.wg.Wait()
}

// Restart does what a restarting kubelet does to the directory: it stops,
// deletes every unix socket in the directory (the plugin's too), and serves
// a new kubelet.sock. It returns when the new socket exists.
func (k *Kubelet) Restart() {
	k.t.Helper()
	k.Stop()
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		k.t.Fatalf("kubelet stub: restart: %v", err)
	}
	for _, e := range entries {
		if e.Type() == fs.ModeSocket {
			if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				k.t.Fatalf("kubelet stub: restart: %v", err)
			}
		}
	}
	k.start()
}

// DropStreams ends every ListAndWatch stream and closes the plugin
// connections while the kubelet keeps running, as the kubelet does when it
// disconnects a plugin.
func (k *Kubelet) DropStreams() {
	k.mu.Lock()
	conns := k.conns
	k.conns = nil
	k.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// WaitRegistration returns the next accepted registration, failing the test
// after timeout.
func (k *Kubelet) WaitRegistration(timeout time.Duration) *Registration {
	k.t.Helper()
	select {
	case r := <-k.registrations:
		return r
	case <-time.After(timeout):
		k.t.Fatalf("kubelet stub: no registration within %v", timeout)
		return nil
	}
}

// Registrations is the channel of accepted registrations, for select.
func (k *Kubelet) Registrations() <-chan *Registration { return k.registrations }

// NextList returns the next ListAndWatch message of r, failing the test
// after timeout or if the stream ended.
func NextList(t testing.TB, r *Registration, timeout time.Duration) *pluginapi.ListAndWatchResponse {
	t.Helper()
	select {
	case l, ok := <-r.Lists:
		if !ok {
			t.Fatalf("kubelet stub: ListAndWatch stream ended")
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("kubelet stub: no ListAndWatch message within %v", timeout)
		return nil
	}
}

type registration struct {
	pluginapi.UnimplementedRegistrationServer
	k   *Kubelet
	ctx context.Context
}

// Register mirrors the kubelet: check the request, dial the plugin back,
// GetDevicePluginOptions within the call, then ListAndWatch afterwards.
func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	at := time.Now()
	k := r.k
	k.mu.Lock()
	reject := k.reject
	k.mu.Unlock()
	if reject != nil {
		return nil, reject
	}
	if req.GetVersion() != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", req.GetVersion())
	}
	if req.GetEndpoint() == "" || filepath.Base(req.GetEndpoint()) != req.GetEndpoint() {
		return nil, fmt.Errorf("bad endpoint %q", req.GetEndpoint())
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, req.GetEndpoint()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	client := pluginapi.NewDevicePluginClient(conn)
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts, err := client.GetDevicePluginOptions(octx, &pluginapi.Empty{})
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("dial back plugin: %w", err)
	}
	k.mu.Lock()
	if k.srv == nil {
		k.mu.Unlock()
		_ = conn.Close()
		return nil, errors.New("kubelet stopping")
	}
	k.conns = append(k.conns, conn)
	k.wg.Add(1)
	k.mu.Unlock()
	lists := make(chan *pluginapi.ListAndWatchResponse, 64)
	go func() {
		defer k.wg.Done()
		defer close(lists)
		stream, err := client.ListAndWatch(r.ctx, &pluginapi.Empty{})
		if err != nil {
			return
		}
		for {
			l, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case lists <- l:
			default: // a test that does not read lists must not block the stream
			}
		}
	}()
	reg := &Registration{Request: req, Options: opts, At: at, Client: client, Lists: lists}
	select {
	case k.registrations <- reg:
	default:
		k.t.Errorf("kubelet stub: more than %d unread registrations", cap(k.registrations))
	}
	return &pluginapi.Empty{}, nil
}
