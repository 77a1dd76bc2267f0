package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

// testRevision is the commit the test binary is stamped with.
const testRevision = "0123456789abcdef0123456789abcdef01234567"

// binary is the plugin built once for the tests that run it as a process.
var binary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "vgpu-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Others may run it too (TestBinary_PermissionDenied runs it as nobody).
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binary = filepath.Join(dir, "virtual-gpu-device-plugin")
	// Stamped as make build stamps it, with a revision the tests recognise.
	out, err := exec.Command("go", "build", "-ldflags=-X main.revision="+testRevision, "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build the plugin: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// process is the plugin running as a child process.
type process struct {
	cmd  *exec.Cmd
	logs *logLines
	done chan error
}

// startBinary runs the built plugin with args; the test's end kills it.
func startBinary(t *testing.T, args ...string) *process {
	t.Helper()
	return startBinaryEnv(t, nil, args...)
}

// startBinaryEnv runs the built plugin with args in the environment env
// alone (NAME=value); the test's end kills it.
func startBinaryEnv(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{}, env...) // no VGPU_* from the test's environment
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, logs: newLogLines(t, stderr), done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.logs.closed
	})
	return p
}

// logLines collects a process's log lines and lets tests wait for one.
type logLines struct {
	lines  chan string
	closed chan struct{}
}

func newLogLines(t *testing.T, r io.Reader) *logLines {
	l := &logLines{lines: make(chan string, 1024), closed: make(chan struct{})}
	go func() {
		defer close(l.closed)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			t.Log(sc.Text())
			select {
			case l.lines <- sc.Text():
			default:
			}
		}
	}()
	return l
}

// processWait bounds the waits on a process of the binary: its log lines
// and its exit. Generous: under CI's parallel race-detector runs on two
// cores, a process took 10 s to print its first line (a wait returns as
// soon as the line is there).
const processWait = 30 * time.Second

// waitLine waits for a log line containing s.
func (l *logLines) waitLine(t *testing.T, s string) string {
	t.Helper()
	deadline := time.After(processWait)
	for {
		select {
		case line := <-l.lines:
			if strings.Contains(line, s) {
				return line
			}
		case <-deadline:
			t.Fatalf("no log line with %q within %v", s, processWait)
		}
	}
}

func TestBinary_RegistersAndStopsOnSIGTERM(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	p := startBinary(t, "-devices=4", "-device-plugin-path="+dir, "-state="+dir+"/state/state.db", "-pod-resources-socket="+dir+"/pr.sock")

	reg := k.WaitRegistration(10 * time.Second)
	if reg.Request.ResourceName != "unicore.mcyou.cc/gpu" || reg.Request.Endpoint != "virtual-gpu.sock" {
		t.Errorf("registered %v", reg.Request)
	}
	list := plugintest.NextList(t, reg, 10*time.Second)
	if len(list.Devices) != 4 || list.Devices[3].ID != "fake-3" || list.Devices[3].Health != pluginapi.Healthy {
		t.Errorf("first list = %v", list.Devices)
	}
	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-2"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs["VIRTUAL_GPU_IDS"]; got != "fake-2" {
		t.Errorf("VIRTUAL_GPU_IDS = %q, want fake-2", got)
	}
	p.logs.waitLine(t, `"message":"allocated"`)

	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("still running 2s after SIGTERM")
	}
	t.Logf("exited %v after SIGTERM", time.Since(sent))
	if _, err := os.Stat(filepath.Join(dir, "virtual-gpu.sock")); !os.IsNotExist(err) {
		t.Errorf("socket after exit: %v, want removed", err)
	}
}

func TestBinary_BadFlag_OneLineExit2(t *testing.T) {
	cmd := exec.Command(binary, "-devices=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit = %v, want status 2", err)
	}
	if got := stderr.String(); got != "virtual-gpu-device-plugin: invalid -devices=0: must be between 1 and 1024\n" {
		t.Errorf("stderr = %q", got)
	}
}

// TestBinary_Version: -version and version print the version, the commit
// and the Go version, whatever VGPU_* variables say.
func TestBinary_Version(t *testing.T) {
	// The commit is "unknown", or the VCS revision when the build stamped one.
	want := regexp.MustCompile(fmt.Sprintf(`^version: %s\ncommit: `+testRevision+`\ngo: %s %s/%s\n$`,
		regexp.QuoteMeta(version), regexp.QuoteMeta(runtime.Version()), runtime.GOOS, runtime.GOARCH))
	for _, tc := range []struct {
		name string
		args []string
		env  []string
	}{
		{"flag", []string{"-version"}, nil},
		{"double-dash flag", []string{"--version"}, nil},
		{"command", []string{"version"}, nil},
		{"serve flag", []string{"serve", "-version"}, nil},
		{"bad environment", []string{"-version"}, []string{"VGPU_DEVICES=x", "VGPU_LOG_LEVEL=loud", "VGPU_METRICS_ADDRESS=:99999"}},
		{"bad environment, command", []string{"version"}, []string{"VGPU_DEVICES=x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, tc.args...)
			cmd.Env = tc.env
			out, err := cmd.Output()
			if err != nil || !want.Match(out) {
				t.Errorf("%v = %q, %v; want %s", tc.args, out, err, want)
			}
		})
	}
}

// TestBinary_SIGHUPRereadsProfiles: SIGHUP once ended the plugin (the
// default action) with no log line and its sockets left behind. Now it
// reads a profiles directory again, or says there is nothing to read, and
// the plugin serves on.
func TestBinary_SIGHUPRereadsProfiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile bool
		want    string
	}{
		{"profiles directory", true, `"message":"SIGHUP; reading the profiles again"`},
		{"flags alone", false, `"message":"SIGHUP: nothing to read again`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := plugintest.ShortTempDir(t)
			args := []string{"-device-plugin-path=" + dir, "-state=" + dir + "/state/state.db", "-pod-resources-socket=" + dir + "/pr.sock"}
			if tc.profile {
				if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("version: v1\nflags:\n  devices: 2\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "-config="+dir, "-config-default=a")
			}
			p := startBinary(t, args...)
			p.logs.waitLine(t, `"message":"starting"`)
			for range 2 {
				if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
				p.logs.waitLine(t, tc.want)
			}
			p.stop(t)
		})
	}
}

// TestBinary_SIGTERMBeforeRegistering: a plugin stopped while it waits for
// the kubelet says it stopped before registering, and why it waited.
func TestBinary_SIGTERMBeforeRegistering(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	if err := os.WriteFile(filepath.Join(dir, "kubelet.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "-device-plugin-path="+dir, "-state="+dir+"/state/state.db", "-pod-resources-socket="+dir+"/pr.sock")
	p.logs.waitLine(t, `"reason":"its socket is a regular file, not a socket"`)
	p.stop(t)
	if line := p.logs.waitLine(t, `"waiting_for":"the kubelet: its socket is a regular file, not a socket"`); !strings.Contains(line, `"message":"stopped before registering with the kubelet"`) {
		t.Errorf("stop line %s", line)
	}
}

// TestBinary_UnknownVariable: a VGPU_* variable no flag reads is warned
// about, with the one meant, and the plugin serves on.
func TestBinary_UnknownVariable(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	p := startBinaryEnv(t, []string{"VGPU_DEVICE=2", "VGPU_DEVICES=3"},
		"-device-plugin-path="+dir, "-state="+dir+"/state/state.db", "-pod-resources-socket="+dir+"/pr.sock")
	p.logs.waitLine(t, `"variables":["VGPU_DEVICE (did you mean VGPU_DEVICES?)"],`)
	if list := plugintest.NextList(t, k.WaitRegistration(10*time.Second), 10*time.Second); len(list.Devices) != 3 {
		t.Errorf("%d devices, want VGPU_DEVICES' 3", len(list.Devices))
	}
	p.stop(t)
}

// TestBinary_SIGHUPSaysOutcome: after each SIGHUP one line says what came
// of it: unchanged, applied (and what changed), or not applied (the error,
// every time); a directory change says its outcome too.
func TestBinary_SIGHUPSaysOutcome(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	profiles, topo := filepath.Join(dir, "profiles"), filepath.Join(dir, "topo", "machine.txt")
	for _, d := range []string{profiles, filepath.Dir(topo)} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeTopo := func(src string) { // outside the profiles directory: only a SIGHUP reads it again
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "..", "topology", "testdata", src))
		if src == "" {
			b, err = []byte("GPU0 what\n"), nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(topo, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeTopo("dgx-a100.txt")
	profile := "version: v1\nflags:\n  topology: " + topo + "\n"
	if err := os.WriteFile(filepath.Join(profiles, "a.yaml"), []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "-device-plugin-path="+dir, "-state="+dir+"/state/state.db", "-pod-resources-socket="+dir+"/pr.sock",
		"-config="+profiles, "-config-default=a")
	p.logs.waitLine(t, `"message":"starting"`)
	hup := func(want string) string {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		p.logs.waitLine(t, `"message":"SIGHUP; reading the profiles again"`)
		return p.logs.waitLine(t, want)
	}
	hup(`"message":"SIGHUP: configuration unchanged"`)

	writeTopo("h100x4-nv6-interleaved-cpu-affinity-nps4.txt")
	if line := hup(`"message":"SIGHUP: configuration applied"`); !strings.Contains(line, `devices 8 -> 4`) || !strings.Contains(line, `"profile":"a"`) {
		t.Errorf("applied line: %s", line)
	}

	writeTopo("") // not a topology: refused, and said at every SIGHUP
	for range 2 {
		if line := hup(`"message":"SIGHUP: configuration not applied: the configuration in force stays"`); !strings.Contains(line, topo) || !strings.Contains(line, `"profile_in_force":"a"`) {
			t.Errorf("refused line: %s", line)
		}
	}
	writeTopo("h100x4-nv6-interleaved-cpu-affinity-nps4.txt")
	hup(`"message":"SIGHUP: configuration unchanged"`)

	// A directory change says its outcome too.
	if err := os.WriteFile(filepath.Join(profiles, "a.yaml"), []byte(profile+"  allocationPolicy: lowest-index\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if line := p.logs.waitLine(t, `"message":"profiles directory changed: configuration applied"`); !strings.Contains(line, `"changed":["other settings (the same devices)"]`) {
		t.Errorf("applied line: %s", line)
	}
	p.stop(t)
}
