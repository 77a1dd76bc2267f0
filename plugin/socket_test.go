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

// helperEnv makes the test binary, run again by a test, listen on the
// socket it names and print "ready" (see TestMain); silentEnv=1 makes it
// accept nothing and never write, as a hung program does.
const (
	helperEnv = "VGPU_TEST_HOLD_SOCKET"
	silentEnv = "VGPU_TEST_HOLD_SILENT"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		holdSocket(path, os.Getenv(silentEnv) == "1")
		return
	}
	os.Exit(m.Run())
}

// holdSocket listens on path until killed: another program's socket. It
// serves HTTP, or with silent accepts nothing and writes nothing.
func holdSocket(path string, silent bool) {
	lis, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	if silent {
		select {}
	}
	_ = http.Serve(lis, http.NotFoundHandler())
}

// startHolder runs a separate process that holds an HTTP socket at path.
func startHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	return startHolderMode(t, path, false)
}

// startSilentHolder runs a separate process that listens at path and never
// accepts or answers.
func startSilentHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	return startHolderMode(t, path, true)
}

func startHolderMode(t *testing.T, path string, silent bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	if silent {
		cmd.Env = append(cmd.Env, silentEnv+"=1")
	}
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
		{"listener that never accepts", func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lis.Close() })
		}, plugin.ErrSocketInUse},
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
		}, plugin.ErrSocketInUse},
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
		}, plugin.ErrSocketInUse},
		{"another process listening silently", func(t *testing.T, path string) { startSilentHolder(t, path) }, plugin.ErrSocketInUse},
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
	// accept the probe.
	plugintest.WaitFor(t, 10*time.Second, "every thread of the holder stopped", func() bool { return stopped(t, holder.Process.Pid) })
	err := plugin.ClaimSocket(path, probeTimeout)
	if !errors.Is(err, plugin.ErrSocketInUse) || !strings.Contains(err.Error(), path) {
		t.Fatalf("stopped holder: ClaimSocket = %v, want ErrSocketInUse naming %s", err, path)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("socket of the stopped process was removed: %v", err)
	}
}

// The socket a SIGKILLed process leaves behind is stale: nobody listens,
// the connect is refused, the file is removed.
func TestClaimSocket_KilledProcess(t *testing.T) {
	path := filepath.Join(plugintest.ShortTempDir(t), "x.sock")
	holder := startSilentHolder(t, path)
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the killed process left no socket: %v", err)
	}
	if err := plugin.ClaimSocket(path, probeTimeout); err != nil {
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
