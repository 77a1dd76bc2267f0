package plugin_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

// probeTimeout keeps the tests of silent sockets short.
const probeTimeout = 200 * time.Millisecond

// helperEnv makes the test binary, run again by a test, serve HTTP on the
// socket it names and print "ready" (see TestMain).
const helperEnv = "VGPU_TEST_HOLD_SOCKET"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		holdSocket(path)
		return
	}
	os.Exit(m.Run())
}

// holdSocket serves HTTP on path until killed: another program's socket.
func holdSocket(path string) {
	lis, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_ = http.Serve(lis, http.NotFoundHandler())
}

// startHolder runs a separate process that holds an HTTP socket at path.
func startHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("holder process: %q, %v", line, err)
	}
	return cmd
}

// staleSocket leaves a socket file nobody listens on, as a killed process does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
}

func TestClaimSocket(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, path string)
		wantErr error // nil: claimed (path free afterwards)
	}{
		{"nothing there", func(*testing.T, string) {}, nil},
		{"stale socket", staleSocket, nil},
		{"listener that never accepts (a stopped process)", func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			lis.(*net.UnixListener).SetUnlinkOnClose(false)
			t.Cleanup(func() { lis.Close() })
		}, nil},
		{"live HTTP server in this process", func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.NotFoundHandler()}
			go srv.Serve(lis)
			t.Cleanup(func() { srv.Close() })
		}, plugin.ErrSocketInUse},
		{"live gRPC server (a kubelet or another plugin)", func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer()
			go g.Serve(lis)
			t.Cleanup(g.Stop)
		}, plugin.ErrSocketInUse},
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
		}, plugin.ErrSocketInUse},
		{"another process serving", func(t *testing.T, path string) { startHolder(t, path) }, plugin.ErrSocketInUse},
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, plugin.ErrNotSocket},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, plugin.ErrNotSocket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(plugintest.ShortTempDir(t), "x.sock")
			tc.setup(t, path)
			err := plugin.ClaimSocket(path, probeTimeout)
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("ClaimSocket = %v, want %v", err, tc.wantErr)
			}
			_, statErr := os.Lstat(path)
			if tc.wantErr == nil && !errors.Is(statErr, os.ErrNotExist) {
				t.Errorf("claimed path still exists: %v", statErr)
			}
			if tc.wantErr != nil && statErr != nil {
				t.Errorf("refused path was removed: %v", statErr)
			}
		})
	}
}

// A process that is stopped (SIGSTOP) still has its socket accept
// connections, but nothing answers: the socket is taken for stale.
func TestClaimSocket_StoppedProcess(t *testing.T) {
	path := filepath.Join(plugintest.ShortTempDir(t), "x.sock")
	holder := startHolder(t, path)
	if err := plugin.ClaimSocket(path, probeTimeout); !errors.Is(err, plugin.ErrSocketInUse) {
		t.Fatalf("running holder: ClaimSocket = %v, want ErrSocketInUse", err)
	}
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is delivered asynchronously: a thread still running could
	// answer the probe.
	plugintest.WaitFor(t, 10*time.Second, "every thread of the holder stopped", func() bool { return stopped(t, holder.Process.Pid) })
	if err := plugin.ClaimSocket(path, probeTimeout); err != nil {
		t.Fatalf("stopped holder: ClaimSocket = %v, want the socket claimed", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket of the stopped process still exists: %v", err)
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
