package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// node is a temp device-plugin dir with a stand-in kubelet, and a state dir.
type node struct {
	dir     string
	kubelet *plugintest.Kubelet
	state   string
}

func newNode(t *testing.T) *node {
	t.Helper()
	dir, err := os.MkdirTemp("", "vgpu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &node{dir: dir, kubelet: plugintest.StartKubelet(t, dir), state: filepath.Join(dir, "state", "state.db")}
}

// podResources is where the node's PodResources socket would be.
func (n *node) podResources() string { return filepath.Join(n.dir, "pod-resources.sock") }

// start runs the plugin on n with extra flags and returns it with its
// registration.
func (n *node) start(t *testing.T, extra ...string) (*process, *plugintest.Registration) {
	t.Helper()
	args := append([]string{"-device-plugin-path=" + n.dir, "-state=" + n.state,
		"-pod-resources-socket=" + n.podResources(), "-reconcile-interval=100ms", "-abandon-after=2s"}, extra...)
	p := startBinary(t, args...)
	return p, n.kubelet.WaitRegistration(10 * time.Second)
}

// cli runs a subcommand of the binary and returns stdout, stderr and the exit code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// dump runs `dump -o json` against n's plugin or state file and decodes it
// strictly: a field the documented shape lacks fails the test.
func (n *node) dump(t *testing.T, args ...string) dumpDoc {
	t.Helper()
	out, errOut, code := cli(t, append([]string{"dump", "-o", "json", "-state=" + n.state}, args...)...)
	if code != 0 {
		t.Fatalf("dump: exit %d: %s", code, errOut)
	}
	var doc dumpDoc
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("dump json: %v\n%s", err, out)
	}
	return doc
}

// waitDump dumps until ok holds, failing the test after 10 s.
func (n *node) waitDump(t *testing.T, what string, ok func(dumpDoc) bool) dumpDoc {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		doc := n.dump(t)
		if ok(doc) {
			return doc
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, doc.Allocations)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func allocate(t *testing.T, reg *plugintest.Registration, ids ...string) map[string]string {
	t.Helper()
	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		t.Fatalf("Allocate(%v): %v", ids, err)
	}
	return resp.ContainerResponses[0].Envs
}

func listHealth(l *pluginapi.ListAndWatchResponse) map[string]string {
	m := map[string]string{}
	for _, d := range l.Devices {
		m[d.ID] = d.Health
	}
	return m
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit 5s after SIGTERM")
	}
}

func TestBinary_HealthSurvivesRestart(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t)
	plugintest.NextList(t, reg, 10*time.Second)

	allocate(t, reg, "fake-1", "fake-2")
	set := time.Now()
	out, errOut, code := cli(t, "health", "set", "fake-1", "unhealthy", "--reason", "XID 79", "-state="+n.state)
	if code != 0 {
		t.Fatalf("health set: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "fake-1") || !strings.Contains(out, "Unhealthy") || !strings.Contains(out, "XID 79") || !strings.Contains(out, "#1 (allocated)") {
		t.Errorf("health set output (want the device, its health, reason and holder):\n%s", out)
	}
	l := plugintest.NextList(t, reg, 10*time.Second)
	t.Logf("health set to ListAndWatch: %v", time.Since(set))
	if h := listHealth(l); h["fake-1"] != pluginapi.Unhealthy || h["fake-0"] != pluginapi.Healthy {
		t.Fatalf("list after health set = %v", h)
	}
	if _, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-1"}}},
	}); err == nil || !strings.Contains(err.Error(), "unhealthy") {
		t.Errorf("Allocate of the unhealthy device: %v", err)
	}
	list, errOut, code := cli(t, "health", "list", "-o", "json", "-state="+n.state)
	var devs []dumpDevice
	if code != 0 || json.Unmarshal([]byte(list), &devs) != nil || len(devs) != 4 || devs[1].Healthy || devs[1].Reason != "XID 79" || !devs[0].Healthy {
		t.Errorf("health list -o json: exit %d %s\n%s", code, errOut, list)
	}
	p.stop(t)

	_, reg = n.start(t)
	if h := listHealth(plugintest.NextList(t, reg, 10*time.Second)); h["fake-1"] != pluginapi.Unhealthy {
		t.Fatalf("first list after restart = %v, want fake-1 still unhealthy", h)
	}
	if _, errOut, code := cli(t, "health", "set", "fake-1", "healthy", "-state="+n.state); code != 0 {
		t.Fatalf("health set healthy: %s", errOut)
	}
	if h := listHealth(plugintest.NextList(t, reg, 10*time.Second)); h["fake-1"] != pluginapi.Healthy {
		t.Errorf("after healing: %v", h)
	}
}

func TestBinary_Dump_RunningAndStopped(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t)
	allocate(t, reg, "fake-2", "fake-0")
	allocate(t, reg, "fake-3")

	check := func(t *testing.T, source string) {
		t.Helper()
		doc := n.dump(t)
		if !strings.HasPrefix(doc.Source, source) || len(doc.Devices) != 4 || len(doc.Allocations) != 2 {
			t.Fatalf("dump = %+v", doc)
		}
		if got := doc.Allocations[0].DeviceIDs; !slices.Equal(got, []string{"fake-3"}) {
			t.Errorf("newest allocation = %v, want [fake-3]", got)
		}
		if doc.Allocations[1].Envs["VIRTUAL_GPU_IDS"] != "fake-0,fake-2" {
			t.Errorf("stored response = %v", doc.Allocations[1].Envs)
		}
		if doc.Devices[3].Holder == nil || doc.Devices[3].Holder.Seq != doc.Allocations[0].Seq {
			t.Errorf("fake-3 holder = %+v", doc.Devices[3].Holder)
		}
		table, _, _ := cli(t, "dump", "-state="+n.state, "--device", "fake-0")
		if !strings.Contains(table, "fake-0,fake-2") || strings.Contains(table, "\nfake-3 ") && strings.Contains(table, "  fake-3  ") {
			t.Errorf("table dump --device fake-0:\n%s", table)
		}
		for _, h := range []string{"DEVICE", "NUMA", "HEALTH", "SEQ", "STATE", "EVENT"} {
			if !strings.Contains(table, h) {
				t.Errorf("table lacks %s:\n%s", h, table)
			}
		}
	}
	t.Run("running", func(t *testing.T) { check(t, "plugin ") })
	p.stop(t)
	t.Run("stopped", func(t *testing.T) { check(t, "file ") })
	storetest.CheckFile(t, n.state)
}

func TestBinary_Dump_BadInput(t *testing.T) {
	n := newNode(t)
	_, reg := n.start(t)
	allocate(t, reg, "fake-0")
	missing := filepath.Join(n.dir, "nothing", "state.db")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown device", []string{"dump", "-state=" + n.state, "--device", "fake-9"}, 1, `unknown device "fake-9" (devices: fake-0, fake-1, fake-2, fake-3)`},
		{"bad output", []string{"dump", "-state=" + n.state, "-o", "yaml"}, 2, `invalid -o="yaml"`},
		{"bad since", []string{"dump", "-state=" + n.state, "--since", "last week"}, 2, `invalid --since="last week"`},
		{"bad limit", []string{"dump", "-state=" + n.state, "--limit", "-1"}, 2, "invalid --limit=-1"},
		{"no plugin no file", []string{"dump", "-state=" + missing}, 1, "no plugin answers on " + filepath.Dir(missing) + "/admin.sock and there is no state file at " + missing},
		{"held by another process", []string{"dump", "-state=" + n.state, "-admin-socket=" + filepath.Join(n.dir, "other.sock")}, 1, "is held by another process"},
		{"health unknown device", []string{"health", "set", "fake-9", "unhealthy", "-state=" + n.state}, 1, `unknown device "fake-9"`},
		{"health bad state", []string{"health", "set", "fake-0", "broken", "-state=" + n.state}, 2, `state "broken": want healthy or unhealthy`},
		{"health missing args", []string{"health", "set", "fake-0", "-state=" + n.state}, 2, "want <device> healthy|unhealthy"},
		{"health no plugin", []string{"health", "set", "fake-0", "unhealthy", "-state=" + missing}, 1, "health set needs the running plugin"},
		{"health unknown command", []string{"health", "reboot", "-state=" + n.state}, 2, `unknown command "reboot"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, errOut, code := cli(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want exit %d and one line containing %q", code, errOut, tt.code, tt.want)
			}
			if d := time.Since(start); d > 8*time.Second {
				t.Errorf("took %v: dump must never block for long", d)
			}
		})
	}
}

func TestBinary_StateLocked(t *testing.T) {
	n := newNode(t)
	n.start(t)
	other := filepath.Join(n.dir, "dp2")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, "-device-plugin-path="+other, "-state="+n.state, "-admin-socket="+filepath.Join(other, "a.sock"))
	if code != 1 || !strings.Contains(errOut, n.state) || !strings.Contains(errOut, "held by another process") {
		t.Errorf("second plugin on the same file: exit %d, %q", code, errOut)
	}
}

func TestBinary_StateCorrupt_MoveAside(t *testing.T) {
	n := newNode(t)
	if err := os.MkdirAll(filepath.Dir(n.state), 0o700); err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte("not a bbolt file "), 1000)
	if err := os.WriteFile(n.state, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, "-device-plugin-path="+n.dir, "-state="+n.state)
	if code != 1 || !strings.Contains(errOut, n.state) || !strings.Contains(errOut, "-state-move-aside") {
		t.Fatalf("corrupt file: exit %d, %q; want the file and the way out named", code, errOut)
	}
	_, reg := n.start(t, "-state-move-aside")
	plugintest.NextList(t, reg, 10*time.Second)
	moved, _ := filepath.Glob(n.state + ".corrupt-*")
	if len(moved) != 1 {
		t.Fatalf("moved-aside files = %v, want one", moved)
	}
	if b, _ := os.ReadFile(moved[0]); !bytes.Equal(b, garbage) {
		t.Error("the damaged file was not kept as it was")
	}
}

func TestBinary_FaultInjection_Recorded(t *testing.T) {
	n := newNode(t)
	_, reg := n.start(t, "-faults=down:fake-2:after=50ms")
	// The fault may strike before or after the kubelet's first list.
	deadline := time.Now().Add(10 * time.Second)
	for h := listHealth(plugintest.NextList(t, reg, 10*time.Second)); h["fake-2"] != pluginapi.Unhealthy; h = listHealth(plugintest.NextList(t, reg, 10*time.Second)) {
		if time.Now().After(deadline) {
			t.Fatalf("no list with fake-2 unhealthy; last %v", h)
		}
	}
	doc := n.dump(t)
	if len(doc.Events) == 0 || doc.Events[0].Cause != store.CauseFaultInjection || doc.Events[0].DeviceID != "fake-2" ||
		!strings.Contains(doc.Events[0].Reason, "down:fake-2") {
		t.Errorf("newest health event = %+v, want fake-2 down by fault-injection", doc.Events)
	}
}

func TestBinary_BadFaultPlan(t *testing.T) {
	_, errOut, code := cli(t, "-faults=down:fake-7:after=1s", "-state=/nonexistent/x.db")
	if code != 2 || !strings.Contains(errOut, `unknown device "fake-7"`) {
		t.Errorf("exit %d, %q", code, errOut)
	}
}

// TestBinary_CrashSafety kills the plugin at random moments while a client
// allocates, and checks that every answered allocation is in the history and
// that the file opens cleanly.
func TestBinary_CrashSafety(t *testing.T) {
	n := newNode(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var answered []string // VIRTUAL_GPU_IDS of every answered Allocate, in order
	for round := range 20 {
		p, reg := n.start(t)
		ctx, cancel := context.WithCancel(context.Background())
		results := make(chan string, 1024)
		go func() {
			defer close(results)
			for i := 0; ctx.Err() == nil; i++ {
				ids := []string{fmt.Sprintf("fake-%d", i%4)}
				resp, err := reg.Client.Allocate(ctx, &pluginapi.AllocateRequest{
					ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
				})
				if err != nil {
					return
				}
				results <- resp.ContainerResponses[0].Envs["VIRTUAL_GPU_IDS"]
			}
		}()
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond) // a random moment to crash at
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		for r := range results {
			answered = append(answered, r)
		}
		cancel()
		st, err := store.Open(n.state, store.Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("round %d: open after SIGKILL: %v", round, err)
		}
		recs, err := st.Allocations(store.AllocationFilter{})
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if missing := notRecorded(answered, recs); missing >= 0 {
			t.Fatalf("round %d: answered allocation #%d (%s) is not in the history of %d records", round, missing, answered[missing], len(recs))
		}
		storetest.CheckFile(t, n.state)
	}
	if len(answered) == 0 {
		t.Fatal("no allocation was answered in 20 rounds")
	}
	t.Logf("%d allocations answered across 20 SIGKILLs, all recorded", len(answered))
}

// notRecorded returns the index of the first answered allocation that is not
// in recs (newest first) in order, or -1 if answered is a subsequence of the
// history: a record may exist without an answer (killed after the commit),
// never an answer without a record.
func notRecorded(answered []string, recs []store.Allocation) int {
	i := 0
	for j := len(recs) - 1; j >= 0 && i < len(answered); j-- {
		if recs[j].Envs["VIRTUAL_GPU_IDS"] == answered[i] {
			i++
		}
	}
	if i == len(answered) {
		return -1
	}
	return i
}

func TestBinary_Lifecycle_HolderAndRelease(t *testing.T) {
	n := newNode(t)
	pr := plugintest.StartPodResources(t, n.podResources())
	_, reg := n.start(t)
	allocate(t, reg, "fake-1", "fake-2")
	allocate(t, reg, "fake-3") // admission fails after Allocate: no pod ever claims it
	pr.SetPod("default", "vgpu-demo", "unicore.mcyou.cc/gpu", plugintest.Container{Name: "demo", IDs: []string{"fake-2", "fake-1"}})

	doc := n.waitDump(t, "held and abandoned", func(d dumpDoc) bool {
		return len(d.Allocations) == 2 && d.Allocations[1].State == store.StateHeld && d.Allocations[0].State == store.StateAbandoned
	})
	if a := doc.Allocations[1]; a.Namespace != "default" || a.Pod != "vgpu-demo" || a.Container != "demo" {
		t.Errorf("held record = %+v", a)
	}
	if h := doc.Devices[1].Holder; h == nil || h.Pod != "vgpu-demo" {
		t.Errorf("fake-1 holder = %+v", h)
	}
	if active := n.dump(t, "--active").Allocations; len(active) != 1 || active[0].Pod != "vgpu-demo" {
		t.Errorf("dump --active = %+v", active)
	}
	pr.DeletePod("default", "vgpu-demo")
	doc = n.waitDump(t, "released", func(d dumpDoc) bool { return d.Allocations[1].State == store.StateReleased })
	if doc.Allocations[1].ReleasedAt.IsZero() || doc.Devices[1].Holder != nil {
		t.Errorf("after release: %+v, holder %+v", doc.Allocations[1], doc.Devices[1].Holder)
	}
}

func TestBinary_Metrics(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t, "-metrics-address=127.0.0.1:0")
	var line struct{ Address string }
	if err := json.Unmarshal([]byte(p.logs.waitLine(t, "serving /metrics")), &line); err != nil || line.Address == "" {
		t.Fatalf("metrics address from the log: %v", err)
	}
	scrape := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + line.Address + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("/readyz 200", func() bool { code, _ := scrape("/readyz"); return code == 200 })
	if code, _ := scrape("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	allocate(t, reg, "fake-0", "fake-1")
	if _, err := reg.Client.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{"fake-0", "fake-1", "fake-2", "fake-3"}, AllocationSize: 2}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := cli(t, "health", "set", "fake-3", "unhealthy", "-state="+n.state); code != 0 {
		t.Fatal(errOut)
	}
	_, body := scrape("/metrics")
	for _, want := range []string{
		`virtual_gpu_allocations_total{result="ok"} 1`,
		`virtual_gpu_allocated_devices_total 2`,
		`virtual_gpu_preferred_allocations_total{result="ok"} 1`,
		`virtual_gpu_devices{health="unhealthy"} 1`,
		`virtual_gpu_health_changes_total{cause="admin"} 1`,
		`virtual_gpu_registrations_total 1`,
		`virtual_gpu_registered 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	n.kubelet.Stop() // the kubelet goes away: not ready, still alive
	waitFor("/readyz 503", func() bool { code, _ := scrape("/readyz"); return code == 503 })
	if code, _ := scrape("/healthz"); code != 200 {
		t.Errorf("/healthz without a kubelet = %d, want 200 (liveness must not restart the plugin for the kubelet's sake)", code)
	}
}

func TestBinary_HistoryPruned(t *testing.T) {
	n := newNode(t)
	_, reg := n.start(t, "-history-max-records=5")
	for i := range 40 {
		allocate(t, reg, fmt.Sprintf("fake-%d", i%4))
	}
	doc := n.waitDump(t, "at most 5 records", func(d dumpDoc) bool { return len(d.Allocations) <= 5 })
	if doc.Allocations[0].Seq != 40 {
		t.Errorf("newest kept record is #%d, want #40", doc.Allocations[0].Seq)
	}
}
