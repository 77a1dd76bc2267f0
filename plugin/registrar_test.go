package plugin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

// TestRegistrar_Switch: a new name ends the old name's stream and
// registers the new one on the same socket; a failed swap registers the
// old name again; Registrations counts every Runner's.
func TestRegistrar_Switch(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	srv, err := plugin.NewServer(plugin.ServerConfig{Catalog: plugin.Catalog{
		Devices: []gpuset.Device{{ID: "fake-0", Healthy: true}},
		Prefer:  func([]gpuset.Device, []gpuset.Device, int) ([]string, error) { return []string{"fake-0"}, nil },
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	r := plugin.NewRegistrar(plugin.RunnerConfig{Dir: dir, SocketName: "vgpu.sock", Server: srv}, "example.com/a")
	if err := r.Switch("example.com/b", func() error { return nil }); err != nil { // before Run: the name Run registers
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if r.Registered() {
			t.Error("registered after Run ended")
		}
	}()
	first := k.WaitRegistration(10 * time.Second)
	if first.Request.ResourceName != "example.com/b" {
		t.Fatalf("registered %q", first.Request.ResourceName)
	}
	plugintest.WaitFor(t, 10*time.Second, "registered", r.Registered)

	called := false
	if err := r.Switch("example.com/c", func() error { called = true; return nil }); err != nil || !called {
		t.Fatalf("Switch = %v, between called %v", err, called)
	}
	second := k.WaitRegistration(10 * time.Second)
	if second.Request.ResourceName != "example.com/c" || second.Request.Endpoint != "vgpu.sock" {
		t.Fatalf("registered %v", second.Request)
	}
	// The kubelet has the request; the Runner counts it once Register has
	// answered. A Switch before that cancels the call and it is not counted
	// (under load CI saw 2 registrations, not 3).
	plugintest.WaitFor(t, 10*time.Second, "registered as example.com/c", r.Registered)
	plugintest.WaitFor(t, 10*time.Second, "the first stream to end", func() bool {
		select {
		case _, ok := <-first.Lists:
			return !ok
		default:
			return false
		}
	})

	failed := errors.New("swap failed")
	if err := r.Switch("example.com/d", func() error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("Switch = %v, want the swap's error", err)
	}
	if again := k.WaitRegistration(10 * time.Second); again.Request.ResourceName != "example.com/c" {
		t.Fatalf("after a failed swap registered %q, want the old name again", again.Request.ResourceName)
	}
	if r.ResourceName() != "example.com/c" {
		t.Errorf("ResourceName = %q", r.ResourceName())
	}
	plugintest.WaitFor(t, 10*time.Second, "3 registrations counted", func() bool { return r.Registrations() == 3 })
}
