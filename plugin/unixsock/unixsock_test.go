package unixsock_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/unixsock"
)

// probeTimeout keeps the tests of silent sockets short.
const probeTimeout = 200 * time.Millisecond

func TestMain(m *testing.M) {
	plugintest.HoldSocketIfAsked()
	os.Exit(m.Run())
}

func TestClaim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, path string)
		wantErr error // nil: claimed (path free afterwards)
	}{
		{"nothing there", func(*testing.T, string) {}, nil},
		{"stale socket", plugintest.StaleSocket, nil},
		{"listener that never accepts", func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lis.Close() })
		}, unixsock.ErrInUse},
		{"listener that accepts and never writes", func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			var conns []net.Conn
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					c, err := lis.Accept()
					if err != nil {
						return
					}
					conns = append(conns, c) // held open, never written to
				}
			}()
			t.Cleanup(func() {
				lis.Close()
				<-done
				for _, c := range conns {
					c.Close()
				}
			})
		}, unixsock.ErrInUse},
		{"listener with a full backlog", func(t *testing.T, path string) {
			fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Close(fd) })
			if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Listen(fd, 0); err != nil {
				t.Fatal(err)
			}
			// Fill the backlog until a connect is refused for it.
			for i := 0; ; i++ {
				c, err := net.Dial("unix", path)
				if err != nil {
					if !errors.Is(err, syscall.EAGAIN) {
						t.Fatalf("filling the backlog: %v", err)
					}
					break
				}
				t.Cleanup(func() { c.Close() })
				if i == 100 {
					t.Fatal("the backlog never filled")
				}
			}
		}, unixsock.ErrInUse},
		{"another process listening silently", func(t *testing.T, path string) { plugintest.StartSilentHolder(t, path) }, unixsock.ErrInUse},
		{"live HTTP server in this process", func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.NotFoundHandler()}
			go srv.Serve(lis)
			t.Cleanup(func() { srv.Close() })
		}, unixsock.ErrInUse},
		{"live gRPC server (a kubelet or another plugin)", func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer()
			go g.Serve(lis)
			t.Cleanup(g.Stop)
		}, unixsock.ErrInUse},
		{"server that closes every connection", func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for {
					c, err := lis.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			t.Cleanup(func() { lis.Close() })
		}, unixsock.ErrInUse},
		{"another process serving", func(t *testing.T, path string) { plugintest.StartHolder(t, path) }, unixsock.ErrInUse},
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, unixsock.ErrNotSocket},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, unixsock.ErrNotSocket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(plugintest.ShortTempDir(t), "x.sock")
			tc.setup(t, path)
			err := unixsock.Claim(path, probeTimeout)
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("ClaimSocket = %v, want %v", err, tc.wantErr)
			}
			_, statErr := os.Lstat(path)
			if tc.wantErr == nil && !errors.Is(statErr, os.ErrNotExist) {
				t.Errorf("claimed path still exists: %v", statErr)
			}
			if tc.wantErr != nil && !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if tc.wantErr != nil && statErr != nil {
				t.Errorf("refused path was removed: %v", statErr)
			}
		})
	}
}

// A process that is stopped (SIGSTOP) still has its socket accept
// connections, though nothing answers: it is in use all the same, since
// only its owner knows whether it will answer again.
func TestClaim_StoppedProcess(t *testing.T) {
	path := filepath.Join(plugintest.ShortTempDir(t), "x.sock")
	holder := plugintest.StartHolder(t, path)
	if err := unixsock.Claim(path, probeTimeout); !errors.Is(err, unixsock.ErrInUse) {
		t.Fatalf("running holder: ClaimSocket = %v, want ErrSocketInUse", err)
	}
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is delivered asynchronously: a thread still running could
	// accept the probe.
	plugintest.WaitFor(t, 10*time.Second, "every thread of the holder stopped", func() bool { return stopped(t, holder.Process.Pid) })
	err := unixsock.Claim(path, probeTimeout)
	if !errors.Is(err, unixsock.ErrInUse) || !strings.Contains(err.Error(), path) {
		t.Fatalf("stopped holder: ClaimSocket = %v, want ErrSocketInUse naming %s", err, path)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("socket of the stopped process was removed: %v", err)
	}
}

// The socket a SIGKILLed process leaves behind is stale: nobody listens,
// the connect is refused, the file is removed.
func TestClaim_KilledProcess(t *testing.T) {
	path := filepath.Join(plugintest.ShortTempDir(t), "x.sock")
	holder := plugintest.StartSilentHolder(t, path)
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the killed process left no socket: %v", err)
	}
	if err := unixsock.Claim(path, probeTimeout); err != nil {
		t.Fatalf("ClaimSocket = %v, want the stale socket claimed", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale socket still exists: %v", err)
	}
}

// stopped reports whether every thread of process pid is stopped (state T
// in /proc/<pid>/task/<tid>/stat).
func stopped(t *testing.T, pid int) bool {
	t.Helper()
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			return false // a thread just ended
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		if fields := strings.Fields(rest); len(fields) == 0 || fields[0] != "T" {
			return false
		}
	}
	return true
}
