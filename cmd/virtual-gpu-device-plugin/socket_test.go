package main

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

// waitExit waits for p to exit and returns its exit code.
func (p *process) waitExit(t *testing.T) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for anyone else waiting
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(processWait):
		t.Fatalf("still running after %v", processWait)
		return -1
	}
}

// Two plugins on one device-plugin dir and socket name used to delete each
// other's socket about five times a second. The second must exit 1 with one
// line that names the socket, and leave the first serving and registered.
func TestBinary_SocketInUse_SecondExits1(t *testing.T) {
	n := newNode(t)
	_, reg := n.start(t)
	plugintest.NextList(t, reg, 10*time.Second)
	sock := filepath.Join(n.dir, "virtual-gpu.sock")
	before, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}

	second := startBinary(t, "-device-plugin-path="+n.dir, "-state="+filepath.Join(n.dir, "second", "state.db"),
		"-pod-resources-socket="+n.podResources())
	line := second.logs.waitLine(t, "virtual-gpu-device-plugin: ")
	if code := second.waitExit(t); code != 1 {
		t.Errorf("second plugin exit code = %d, want 1", code)
	}
	if !strings.Contains(line, sock) || !strings.Contains(line, "another process is listening on it") || !strings.Contains(line, "another socket name") {
		t.Errorf("exit line = %q, want the socket path, the cause and what to do", line)
	}

	after, err := os.Lstat(sock)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the first plugin's socket was removed or replaced (%v)", err)
	}
	select {
	case r := <-n.kubelet.Registrations():
		t.Fatalf("a registration arrived after the refusal: %v", r.Request)
	default:
	}
	if got := allocate(t, reg, "fake-1")["VIRTUAL_GPU_IDS"]; got != "fake-1" {
		t.Errorf("the first plugin answers VIRTUAL_GPU_IDS=%q, want fake-1", got)
	}
	select {
	case _, ok := <-reg.Lists:
		if !ok {
			t.Error("the kubelet's stream of the first plugin ended")
		}
	default:
	}
}

// The socket of a SIGKILLed plugin is stale: the next plugin replaces it.
func TestBinary_StaleSocketAfterSIGKILL_Replaced(t *testing.T) {
	n := newNode(t)
	first, _ := n.start(t)
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	if _, err := os.Lstat(filepath.Join(n.dir, "virtual-gpu.sock")); err != nil {
		t.Fatalf("the killed plugin left no socket: %v", err)
	}
	_, reg := n.start(t)
	plugintest.NextList(t, reg, 10*time.Second)
}

// A program that listens on one of our socket paths and never answers (it
// accepts nothing, writes nothing) used to lose its socket to ours after a
// 3 s probe. A listener, answering or not, is never removed: the plugin
// exits 1 with one line naming the path, and the socket stays.
func TestBinary_SilentListener_Exits1(t *testing.T) {
	for _, tc := range []struct {
		name string
		sock func(n *node) string
	}{
		{"admin socket", func(n *node) string { return filepath.Join(filepath.Dir(n.state), "admin.sock") }},
		{"device-plugin socket", func(n *node) string { return filepath.Join(n.dir, "virtual-gpu.sock") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			sock := tc.sock(n)
			if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
				t.Fatal(err)
			}
			lis, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lis.Close() })
			before, err := os.Lstat(sock)
			if err != nil {
				t.Fatal(err)
			}
			p := startBinary(t, "-device-plugin-path="+n.dir, "-state="+n.state, "-pod-resources-socket="+n.podResources())
			line := p.logs.waitLine(t, "virtual-gpu-device-plugin: ")
			if code := p.waitExit(t); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
			if !strings.Contains(line, sock) || !strings.Contains(line, "another process is listening on it") {
				t.Errorf("exit line %q; want it naming %s and the cause", line, sock)
			}
			if after, err := os.Lstat(sock); err != nil || !os.SameFile(before, after) {
				t.Fatalf("the listener's socket was removed or replaced (%v)", err)
			}
			select {
			case r := <-n.kubelet.Registrations():
				t.Fatalf("a registration arrived: %v", r.Request)
			default:
			}
		})
	}
}
