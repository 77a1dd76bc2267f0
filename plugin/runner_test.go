package plugin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/unixsock"
)

const (
	resource = "unicore.mcyou.cc/gpu"
	sockName = "virtual-gpu.sock"
	wait     = 30 * time.Second
)

// runner is a started Runner with its device-plugin dir.
type runner struct {
	*plugin.Runner
	srv  *plugin.Server
	dir  string
	done chan error
	stop context.CancelFunc
}

// startRunner runs a Runner for a 4-device Server in dir until the test ends.
// A long poll interval makes the tests prove the directory watch works.
func startRunner(t *testing.T, dir string, tweak func(*plugin.RunnerConfig)) *runner {
	t.Helper()
	srv := mustServer(t, plugin.ServerConfig{Catalog: plugin.Catalog{Devices: fakeDevices(4, false)}})
	cfg := plugin.RunnerConfig{
		Dir: dir, SocketName: sockName, ResourceName: resource, Server: srv,
		PollInterval: time.Hour, Logger: zerolog.New(zerolog.NewTestWriter(t)),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	r, err := plugin.NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runner{Runner: r, srv: srv, dir: dir, done: make(chan error, 1), stop: cancel}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rr.done:
		case <-time.After(wait):
			t.Error("runner did not stop")
		}
	})
	return rr
}

func TestRunner_RegistersAndLists(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	startRunner(t, dir, nil)

	reg := k.WaitRegistration(wait)
	if reg.Request.Version != pluginapi.Version || reg.Request.Endpoint != sockName || reg.Request.ResourceName != resource {
		t.Errorf("register request = %v", reg.Request)
	}
	if reg.Request.Options.String() != reg.Options.String() || !reg.Options.GetPreferredAllocationAvailable {
		t.Errorf("register options %v differ from GetDevicePluginOptions %v", reg.Request.Options, reg.Options)
	}
	if got := health(plugintest.NextList(t, reg, wait)); got != "fake-0=Healthy fake-1=Healthy fake-2=Healthy fake-3=Healthy " {
		t.Errorf("first list = %s", got)
	}
	resp, err := reg.Client.Allocate(context.Background(), allocReq([]string{"fake-3", "fake-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs[plugin.EnvIDs]; got != "fake-1,fake-3" {
		t.Errorf("VIRTUAL_GPU_IDS = %q, want fake-1,fake-3", got)
	}
}

func TestRunner_KubeletRestart_RegistersAgain(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	r := startRunner(t, dir, nil)
	k.WaitRegistration(wait)
	for i := range 20 { // restarts race with our own re-serve: Run must survive every one
		k.Restart()
		reg := k.WaitRegistration(wait)
		if got := health(plugintest.NextList(t, reg, wait)); !strings.Contains(got, "fake-3=Healthy") {
			t.Errorf("restart %d: list = %s", i, got)
		}
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("restart %d: Run returned %v", i, err)
		default:
		}
	}
}

func TestRunner_OwnSocketDeleted_RegistersAgain(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	r := startRunner(t, dir, nil)
	k.WaitRegistration(wait)
	if err := os.Remove(r.SocketPath()); err != nil {
		t.Fatal(err)
	}
	reg := k.WaitRegistration(wait)
	plugintest.NextList(t, reg, wait)
}

func TestRunner_StartedBeforeKubelet(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	startRunner(t, dir, nil)
	plugintest.WaitFor(t, wait, "plugin socket", func() bool { _, err := os.Stat(filepath.Join(dir, sockName)); return err == nil })
	k := plugintest.StartKubelet(t, dir)
	reg := k.WaitRegistration(wait)
	plugintest.NextList(t, reg, wait)
}

func TestRunner_DirCreatedLater(t *testing.T) {
	dir := filepath.Join(plugintest.ShortTempDir(t), "dp")
	startRunner(t, dir, func(c *plugin.RunnerConfig) { c.PollInterval = 20 * time.Millisecond })
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k := plugintest.StartKubelet(t, dir)
	k.WaitRegistration(wait)
}

func TestRunner_StreamDropped_RegistersAgain(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	r := startRunner(t, dir, nil)
	reg := k.WaitRegistration(wait)
	plugintest.NextList(t, reg, wait)
	k.DropStreams() // the kubelet disconnects us but keeps running
	reg = k.WaitRegistration(wait)
	plugintest.NextList(t, reg, wait)
	plugintest.WaitFor(t, wait, "Registrations() = 2", func() bool { return r.Registrations() == 2 })
}

func TestRunner_RegisterRejected_Retries(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	k.Reject(errors.New("kubelet says no"))
	r := startRunner(t, dir, func(c *plugin.RunnerConfig) {
		c.BackoffInitial, c.BackoffMax = 10*time.Millisecond, 40*time.Millisecond
	})
	plugintest.WaitFor(t, wait, "plugin socket", func() bool { _, err := os.Stat(r.SocketPath()); return err == nil })
	if r.Registered() {
		t.Fatal("registered while the kubelet rejects")
	}
	k.Reject(nil)
	k.WaitRegistration(wait)
	plugintest.WaitFor(t, wait, "Registered() after acceptance", r.Registered)
}

func TestRunner_StopRemovesSocket(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	r := startRunner(t, dir, nil)
	reg := k.WaitRegistration(wait)
	plugintest.NextList(t, reg, wait)
	r.stop()
	err := <-r.done
	r.done <- err // for the cleanup
	if err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	if _, err := os.Stat(r.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after stop: err = %v, want removed", err)
	}
	endOfStream(t, reg)
}

func TestRunner_RemovesStaleSocket(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	plugintest.StaleSocket(t, filepath.Join(dir, sockName)) // left by a killed plugin
	k := plugintest.StartKubelet(t, dir)
	startRunner(t, dir, nil)
	plugintest.NextList(t, k.WaitRegistration(wait), wait)
}

// endOfStream waits for the kubelet's ListAndWatch stream of reg to end.
func endOfStream(t *testing.T, reg *plugintest.Registration) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-reg.Lists:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("the kubelet's ListAndWatch stream still open %v after the plugin stopped", wait)
		}
	}
}

func TestRunner_RefusesNonSocketPath(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	path := filepath.Join(dir, sockName)
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRunner(t, dir, nil)
	select {
	case err := <-r.done:
		if !errors.Is(err, unixsock.ErrNotSocket) || !strings.Contains(err.Error(), path) {
			t.Errorf("Run = %v, want unixsock.ErrNotSocket naming %s", err, path)
		}
		r.done <- err
	case <-time.After(wait):
		t.Fatal("Run did not fail")
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Error("the non-socket file was touched")
	}
}

func TestNewRunner_BadConfig(t *testing.T) {
	srv := mustServer(t, plugin.ServerConfig{})
	tests := []struct {
		name string
		cfg  plugin.RunnerConfig
		want string
	}{
		{"no server", plugin.RunnerConfig{Dir: "/x", SocketName: "a.sock", ResourceName: resource}, "no server"},
		{"relative dir", plugin.RunnerConfig{Dir: "x", SocketName: "a.sock", ResourceName: resource, Server: srv}, "not absolute"},
		{"socket with slash", plugin.RunnerConfig{Dir: "/x", SocketName: "a/b.sock", ResourceName: resource, Server: srv}, "plain file name"},
		{"kubelet socket", plugin.RunnerConfig{Dir: "/x", SocketName: "kubelet.sock", ResourceName: resource, Server: srv}, "plain file name other than kubelet.sock"},
		{"no resource", plugin.RunnerConfig{Dir: "/x", SocketName: "a.sock", Server: srv}, "no resource name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := plugin.NewRunner(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// BenchmarkReregister measures the time from a new kubelet.sock to the
// plugin's Register call arriving (metric reregister-ns).
func BenchmarkReregister(b *testing.B) {
	dir := plugintest.ShortTempDir(b)
	k := plugintest.StartKubelet(b, dir)
	srv := mustServer(b, plugin.ServerConfig{})
	r, err := plugin.NewRunner(plugin.RunnerConfig{Dir: dir, SocketName: sockName, ResourceName: resource, Server: srv, PollInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	k.WaitRegistration(wait)
	var total time.Duration
	for b.Loop() {
		k.Restart()
		created := time.Now() // Restart returns right after the new kubelet.sock exists
		reg := k.WaitRegistration(wait)
		total += reg.At.Sub(created)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "reregister-ns")
}

// TestRunner_KubeletDown_WaitsQuietly: while the kubelet is down (its socket
// file left behind), the plugin waits for a new kubelet.sock instead of
// warning about failed registrations, and registers at once when it comes.
func TestRunner_KubeletDown_WaitsQuietly(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	var logs plugintest.LogBuffer
	r := startRunner(t, dir, func(c *plugin.RunnerConfig) {
		c.Logger = zerolog.New(&logs)
		c.BackoffInitial, c.BackoffMax = 5*time.Millisecond, 20*time.Millisecond
	})
	plugintest.NextList(t, k.WaitRegistration(wait), wait)
	plugintest.WaitFor(t, wait, "the Register call to return", r.Registered)
	k.Stop()
	plugintest.WaitFor(t, wait, "the waiting message", func() bool { return logs.Count("waiting for the kubelet: its socket does not accept connections") > 0 })
	k.Restart()
	k.WaitRegistration(wait)
	if n := logs.Count("register with kubelet failed"); n != 0 {
		t.Errorf("%d register warnings while the kubelet was down, want none:\n%s", n, logs.String())
	}
}

// runErr waits for r's Run to return and hands back its error.
func runErr(t *testing.T, r *runner) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(wait):
		t.Fatal("Run did not return")
		return nil
	}
}

// Two plugins with the same directory and socket name used to delete each
// other's socket in a loop. The second must refuse at once and leave the
// first serving and registered.
func TestRunner_SocketInUse_SecondRunnerRefuses(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	first := startRunner(t, dir, nil)
	reg := k.WaitRegistration(wait)
	plugintest.NextList(t, reg, wait)
	plugintest.WaitFor(t, wait, "the first plugin registered", first.Registered)
	before, err := os.Lstat(first.SocketPath())
	if err != nil {
		t.Fatal(err)
	}

	second := startRunner(t, dir, nil)
	err = runErr(t, second)
	if !errors.Is(err, unixsock.ErrInUse) || !strings.Contains(err.Error(), first.SocketPath()) || !strings.Contains(err.Error(), "stop that process") {
		t.Fatalf("second Run = %v, want unixsock.ErrInUse naming %s and what to do", err, first.SocketPath())
	}

	after, err := os.Lstat(first.SocketPath())
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the first plugin's socket was replaced or removed (%v)", err)
	}
	select {
	case r := <-k.Registrations():
		t.Fatalf("a registration arrived after the refusal: %v", r.Request)
	default:
	}
	if !first.Registered() || first.Registrations() != 1 {
		t.Errorf("first plugin: Registered() = %v, Registrations() = %d, want true, 1", first.Registered(), first.Registrations())
	}
	if _, err := reg.Client.Allocate(context.Background(), allocReq([]string{"fake-0"})); err != nil {
		t.Errorf("the first plugin no longer answers: %v", err)
	}
	select {
	case _, ok := <-reg.Lists:
		if !ok {
			t.Error("the kubelet's stream of the first plugin ended")
		}
	default:
	}
}

// A socket another program answers on (here a separate process) is never
// removed.
func TestRunner_SocketInUse_OtherProcess(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	plugintest.StartHolder(t, filepath.Join(dir, sockName))
	r := startRunner(t, dir, nil)
	if err := runErr(t, r); !errors.Is(err, unixsock.ErrInUse) {
		t.Fatalf("Run = %v, want unixsock.ErrInUse", err)
	}
	if _, err := os.Lstat(r.SocketPath()); err != nil {
		t.Errorf("the other process's socket was removed: %v", err)
	}
}

// Another process replaces our socket while we serve (it took our path
// while we were stopped): we notice, find a live process answering there,
// stop with unixsock.ErrInUse, and leave its socket alone: closing our old
// listener must not unlink the path.
func TestRunner_SocketTakenOver_LeftAlone(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	r := startRunner(t, dir, nil)
	plugintest.NextList(t, k.WaitRegistration(wait), wait)
	// A live process's socket renamed over ours, in one step.
	elsewhere := filepath.Join(dir, "other.sock")
	plugintest.StartHolder(t, elsewhere)
	if err := os.Rename(elsewhere, r.SocketPath()); err != nil {
		t.Fatal(err)
	}
	theirs, err := os.Lstat(r.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := runErr(t, r); !errors.Is(err, unixsock.ErrInUse) {
		t.Fatalf("Run = %v, want unixsock.ErrInUse", err)
	}
	now, err := os.Lstat(r.SocketPath())
	if err != nil || !os.SameFile(theirs, now) {
		t.Fatalf("the other process's socket was removed or replaced (%v)", err)
	}
}

// The socket a SIGKILLed process leaves behind is stale: it is replaced.
func TestRunner_StaleSocketOfKilledProcess_Replaced(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	holder := plugintest.StartHolder(t, filepath.Join(dir, sockName))
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	if _, err := os.Lstat(filepath.Join(dir, sockName)); err != nil {
		t.Fatalf("the killed process left no socket: %v", err)
	}
	k := plugintest.StartKubelet(t, dir)
	startRunner(t, dir, nil)
	plugintest.NextList(t, k.WaitRegistration(wait), wait)
}

// A refused or failed call is logged once, at warn, by the Runner, with
// typed fields and short ids; an answered one keeps its info line.
func TestRunner_FailedCallsLoggedOnce(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	var logs plugintest.LogBuffer
	startRunner(t, dir, func(c *plugin.RunnerConfig) {
		log := zerolog.New(&logs)
		c.Logger = log
		c.Server = mustServerLogging(t, plugin.ServerConfig{Recorder: &flakyRecorder{failFor: "fake-2"}, Logger: log})
	})
	reg := k.WaitRegistration(wait)
	long := strings.Repeat("x", 5000)
	ctx := context.Background()
	if _, err := reg.Client.Allocate(ctx, allocReq([]string{"fake-0", long})); err == nil {
		t.Fatal("Allocate of an unknown id succeeded")
	}
	if _, err := reg.Client.Allocate(ctx, allocReq([]string{"fake-2"})); err == nil {
		t.Fatal("Allocate with a failing record succeeded")
	}
	if _, err := reg.Client.GetPreferredAllocation(ctx, prefReq([]string{"fake-0"}, nil, 2)); err == nil {
		t.Fatal("GetPreferredAllocation of too many succeeded")
	}
	if _, err := reg.Client.Allocate(ctx, allocReq([]string{"fake-1"})); err != nil {
		t.Fatal(err)
	}

	type line struct {
		Level, Message, RPC, Code, Reason string
		IDs                               []string
	}
	var got []line
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var e line
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if e.RPC != "" || e.Level == "error" || e.Message == "allocated" {
			got = append(got, e)
		}
	}
	want := []line{
		{Level: "warn", Message: "request refused", RPC: "Allocate", Code: "InvalidArgument",
			Reason: `allocate: container request 0: unknown device "` + strings.Repeat("x", 64) + `…"`},
		{Level: "warn", Message: "request failed", RPC: "Allocate", Code: "Unavailable",
			Reason: "allocate fake-2: not recorded: record allocation: disk full"},
		{Level: "warn", Message: "request refused", RPC: "GetPreferredAllocation", Code: "InvalidArgument",
			Reason: "preferred allocation: container request 0: allocation size 2 is more than the 1 available devices"},
		{Level: "info", Message: "allocated", IDs: []string{"fake-1"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("log lines about calls:\n got %v\nwant %v\nall logs:\n%s", got, want, logs.String())
	}
	if strings.Contains(logs.String(), long[:65]) {
		t.Error("the log carries the long id whole")
	}
}

// The owner changes the resource name: it stops the Runner of A and runs a
// Runner of B on the same Server and socket name. The kubelet sees A's
// stream end, B registered and B's first list, with the catalog swapped in
// between; the Server is not closed by A's Runner.
func TestRunner_ResourceNameChange_NewRunnerSameServer(t *testing.T) {
	const resourceB = "unicore.mcyou.cc/gpu.shared"
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	a := startRunner(t, dir, nil)
	regA := k.WaitRegistration(wait)
	if got := health(plugintest.NextList(t, regA, wait)); got != "fake-0=Healthy fake-1=Healthy fake-2=Healthy fake-3=Healthy " {
		t.Fatalf("A's first list = %s", got)
	}

	a.stop()
	if err := runErr(t, a); err != nil {
		t.Fatalf("A's Run = %v", err)
	}
	endOfStream(t, regA)
	if _, err := os.Lstat(a.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("A's socket after its Run returned: %v, want removed", err)
	}
	shared := devicesNamed("fake-0::0", "fake-0::1", "fake-1::0", "fake-1::1")
	if err := a.srv.SetCatalog(plugin.Catalog{Devices: shared, Prefer: lowestIndex(t, 4), Limit: plugin.Limit{Max: 1}}); err != nil {
		t.Fatal(err)
	}
	b := startRunner(t, dir, func(c *plugin.RunnerConfig) {
		c.ResourceName = resourceB
		c.Server = a.srv
	})
	regB := k.WaitRegistration(wait)
	if regB.Request.ResourceName != resourceB || regB.Request.Endpoint != sockName {
		t.Errorf("B registered %q at %q, want %q at %q", regB.Request.ResourceName, regB.Request.Endpoint, resourceB, sockName)
	}
	if got := health(plugintest.NextList(t, regB, wait)); got != "fake-0::0=Healthy fake-0::1=Healthy fake-1::0=Healthy fake-1::1=Healthy " {
		t.Errorf("B's first list = %s", got)
	}
	if b.ResourceName() != resourceB || a.ResourceName() != resource {
		t.Errorf("ResourceName() = %q and %q", a.ResourceName(), b.ResourceName())
	}
	if _, err := regB.Client.Allocate(context.Background(), allocReq([]string{"fake-1::0"})); err != nil {
		t.Errorf("B's Allocate: %v", err)
	}
	plugintest.WaitFor(t, wait, "B registered", b.Registered)
	if a.Registered() {
		t.Error("A still says it is registered")
	}
}

// A catalog swap without a resource change is one more ListAndWatch
// message on the registered stream: no new Register, the new devices, and
// the health of the devices present before and after kept.
func TestRunner_CatalogSwap_NoReregister(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	r := startRunner(t, dir, nil)
	reg := k.WaitRegistration(wait)
	plugintest.NextList(t, reg, wait)
	plugintest.WaitFor(t, wait, "the Register call to return", r.Registered)
	if _, err := r.srv.SetHealth("fake-1", false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	if got := health(plugintest.NextList(t, reg, wait)); got != "fake-0=Healthy fake-1=Unhealthy fake-2=Healthy fake-3=Healthy " {
		t.Fatalf("list after SetHealth = %s", got)
	}
	err := r.srv.UpdateCatalog(func(cur plugin.Catalog) (plugin.Catalog, error) {
		cur.Devices = append(cur.Devices[:2], gpuset.Device{ID: "fake-5", Index: 5, NUMA: -1, Healthy: true})
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := health(plugintest.NextList(t, reg, wait)); got != "fake-0=Healthy fake-1=Unhealthy fake-5=Healthy " {
		t.Errorf("list after the swap = %s", got)
	}
	// A round trip after the swap: the session has seen whatever the swap
	// caused by now.
	if _, err := reg.Client.Allocate(context.Background(), allocReq([]string{"fake-5"})); err != nil {
		t.Fatal(err)
	}
	select {
	case again := <-k.Registrations():
		t.Errorf("registered again after a catalog swap: %v", again.Request)
	default:
	}
	if n := r.Registrations(); n != 1 || !r.Registered() {
		t.Errorf("Registrations() = %d, Registered() = %v, want 1, true", n, r.Registered())
	}
	select {
	case _, ok := <-reg.Lists:
		if !ok {
			t.Error("the stream ended after a catalog swap")
		}
	default:
	}
}

// TestRunner_KubeletSockNotASocket_SaysWhy: a regular file at kubelet.sock
// is said as such, once, however often the directory changes; a kubelet
// that then comes is registered with.
func TestRunner_KubeletSockNotASocket_SaysWhy(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	sock := filepath.Join(dir, plugin.KubeletSocketName)
	if err := os.WriteFile(sock, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs plugintest.LogBuffer
	r := startRunner(t, dir, func(c *plugin.RunnerConfig) { c.Logger = zerolog.New(&logs) })
	const why = `"reason":"its socket is a regular file, not a socket","message":"waiting for the kubelet"`
	plugintest.WaitFor(t, wait, "the reason logged", func() bool { return logs.Count(why) > 0 })
	for i := range 20 { // each a directory event about kubelet.sock
		if err := os.WriteFile(sock, []byte(fmt.Sprint(i)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	k := plugintest.StartKubelet(t, dir)
	k.WaitRegistration(wait)
	plugintest.WaitFor(t, wait, "the Register call to return", r.Registered)
	if n := logs.Count(why); n != 1 {
		t.Errorf("the reason logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestRunner_StopBeforeRegistering_SaysSo: a Runner stopped while it
// waits (for the directory, for the kubelet) says it stopped before it
// registered, and what it waited for; a registered one says it stopped.
func TestRunner_StopBeforeRegistering_SaysSo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir string) string // the directory to run in
		waitFor string                                // a log line before the stop
		want    string
	}{
		{"no directory", func(t *testing.T, dir string) string { return filepath.Join(dir, "later") },
			"waiting for the device-plugin directory",
			`"message":"stopped before registering with the kubelet: the device-plugin directory does not exist"`},
		{"no kubelet", func(t *testing.T, dir string) string { return dir },
			`"reason":"its socket does not exist yet","message":"waiting for the kubelet"`,
			`"waiting_for":"the kubelet: its socket does not exist yet","message":"stopped before registering with the kubelet"`},
		{"kubelet.sock a directory", func(t *testing.T, dir string) string {
			if err := os.Mkdir(filepath.Join(dir, plugin.KubeletSocketName), 0o700); err != nil {
				t.Fatal(err)
			}
			return dir
		}, `"reason":"its socket is a directory, not a socket"`,
			`"waiting_for":"the kubelet: its socket is a directory, not a socket","message":"stopped before registering with the kubelet"`},
		{"registered", func(t *testing.T, dir string) string { plugintest.StartKubelet(t, dir); return dir },
			"registered with kubelet", `"message":"stopped"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.setup(t, plugintest.ShortTempDir(t))
			var logs plugintest.LogBuffer
			r := startRunner(t, dir, func(c *plugin.RunnerConfig) { c.Logger = zerolog.New(&logs) })
			plugintest.WaitFor(t, wait, tc.waitFor, func() bool { return logs.Count(tc.waitFor) > 0 })
			r.stop()
			if err := runErr(t, r); err != nil {
				t.Fatal(err)
			}
			if logs.Count(tc.want) != 1 || logs.Count(`"message":"stopped`) != 1 {
				t.Errorf("want one line with %s:\n%s", tc.want, logs.String())
			}
		})
	}
}

func TestMain(m *testing.M) {
	plugintest.HoldSocketIfAsked()
	os.Exit(m.Run())
}
