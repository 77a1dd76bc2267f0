package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
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
	dir := plugintest.ShortTempDir(t)
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
func (n *node) dump(t *testing.T, args ...string) admin.Snapshot {
	t.Helper()
	out, errOut, code := cli(t, append([]string{"dump", "-o", "json", "-state=" + n.state}, args...)...)
	if code != 0 {
		t.Fatalf("dump: exit %d: %s", code, errOut)
	}
	var doc admin.Snapshot
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("dump json: %v\n%s", err, out)
	}
	return doc
}

// waitDump dumps until ok holds, failing the test after 10 s.
func (n *node) waitDump(t *testing.T, what string, ok func(admin.Snapshot) bool) admin.Snapshot {
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
	var snap admin.Snapshot
	dec := json.NewDecoder(strings.NewReader(list))
	dec.DisallowUnknownFields()
	if code != 0 || dec.Decode(&snap) != nil || snap.Kind != admin.KindSnapshot || snap.Allocations != nil {
		t.Fatalf("health list -o json (want a devices-only Snapshot): exit %d %s\n%s", code, errOut, list)
	}
	if devs := snap.Devices; len(devs) != 4 || devs[1].Healthy || devs[1].Reason != "XID 79" || !devs[0].Healthy {
		t.Errorf("health list -o json: devices %+v", devs)
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
		if doc.Source.Type != source || len(doc.Devices) != 4 || len(doc.Allocations) != 2 {
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
	t.Run("running", func(t *testing.T) { check(t, admin.SourcePlugin) })
	p.stop(t)
	t.Run("stopped", func(t *testing.T) { check(t, admin.SourceFile) })
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
		{"bad output", []string{"dump", "-state=" + n.state, "-o", "xml"}, 2, `invalid -o="xml": must be one of table, wide, json, yaml`},
		{"empty device", []string{"dump", "-state=" + n.state, "--device="}, 2, `invalid --device: empty: want a device id`},
		{"bad since", []string{"dump", "-state=" + n.state, "--since", "last week"}, 2, `invalid --since="last week"`},
		{"bad limit", []string{"dump", "-state=" + n.state, "--limit", "-1"}, 2, "invalid --limit=-1"},
		{"no plugin no file", []string{"dump", "-state=" + missing}, 1, "no plugin answers on " + filepath.Dir(missing) + "/admin.sock and there is no state file at " + missing},
		{"held by another process", []string{"dump", "-state=" + n.state, "-admin-socket=" + filepath.Join(n.dir, "other.sock")}, 1, "is held by another process"},
		{"health unknown device", []string{"health", "set", "fake-9", "unhealthy", "-state=" + n.state}, 1, `health set: unknown device "fake-9" (devices: fake-0, fake-1, fake-2, fake-3)`},
		{"health reason with healthy", []string{"health", "set", "fake-0", "healthy", "--reason", "x", "-state=" + n.state}, 2, "--reason is only for unhealthy"},
		{"health bad state", []string{"health", "set", "fake-0", "broken", "-state=" + n.state}, 2, `state "broken": want healthy or unhealthy`},
		{"health missing args", []string{"health", "set", "fake-0", "-state=" + n.state}, 2, "want <device> healthy|unhealthy"},
		{"health no plugin", []string{"health", "set", "fake-0", "unhealthy", "-state=" + missing}, 1, "health set needs the running plugin"},
		{"health unknown command", []string{"health", "reboot", "-state=" + n.state}, 2, `unknown command "reboot"`},
		{"health empty device", []string{"health", "set", "", "unhealthy", "-state=" + n.state}, 2, `health set: empty device id: want a device id`},
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
	_, errOut, code := cli(t, "-device-plugin-path="+other, "-state="+n.state, "-admin-socket="+filepath.Join(n.dir, "a.sock"))
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
	if len(doc.HealthEvents) == 0 || doc.HealthEvents[0].Cause != store.CauseFaultInjection || doc.HealthEvents[0].DeviceID != "fake-2" ||
		!strings.Contains(doc.HealthEvents[0].Reason, "down:fake-2") {
		t.Errorf("newest health event = %+v, want fake-2 down by fault-injection", doc.HealthEvents)
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

	doc := n.waitDump(t, "held and abandoned", func(d admin.Snapshot) bool {
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
	doc = n.waitDump(t, "released", func(d admin.Snapshot) bool { return d.Allocations[1].State == store.StateReleased })
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
	doc := n.waitDump(t, "at most 5 records", func(d admin.Snapshot) bool { return len(d.Allocations) <= 5 })
	if doc.Allocations[0].Seq != 40 {
		t.Errorf("newest kept record is #%d, want #40", doc.Allocations[0].Seq)
	}
}

// TestBinary_Dump_ReportedNUMANode: the NUMA column is what the kubelet was
// told (none, with -numa-report=never), the topology's node is in wide and
// in numaNode; with the plugin stopped the reported node is unknown.
func TestBinary_Dump_ReportedNUMANode(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t, "-numa-report=never")
	for _, d := range plugintest.NextList(t, reg, 10*time.Second).Devices {
		if d.Topology != nil {
			t.Fatalf("-numa-report=never, but the kubelet was told %v for %s", d.Topology, d.ID)
		}
	}
	doc := n.dump(t)
	for _, d := range doc.Devices {
		if d.ReportedNUMANode == nil || *d.ReportedNUMANode != -1 {
			t.Errorf("%s: reportedNUMANode = %v, want -1", d.ID, d.ReportedNUMANode)
		}
	}
	topo := doc.Devices[3].NUMANode
	if topo < 0 {
		t.Fatalf("fake-3 has no topology NUMA node: %+v", doc.Devices[3])
	}
	wide, errOut, code := cli(t, "health", "list", "-o", "wide", "--no-headers", "-state="+n.state)
	if code != 0 {
		t.Fatalf("health list -o wide: %s", errOut)
	}
	uuid := doc.Devices[3].UUID
	if uuid == "" {
		uuid = "-" // the table's empty cell, while none is stored
	}
	if got := plugintest.Fields(t, wide, "fake-3 "); got[2] != uuid || got[3] != "-" || got[4] != strconv.Itoa(topo) {
		t.Errorf("fake-3 wide = %v, want UUID %s, NUMA - and topology NUMA %d", got, uuid, topo)
	}
	p.stop(t)

	doc = n.dump(t)
	if doc.Source.Type != admin.SourceFile || doc.Devices[3].ReportedNUMANode != nil || doc.Devices[3].NUMANode != topo {
		t.Errorf("from the file: %+v, want the reported node unknown, the topology's kept", doc.Devices[3])
	}
	table, _, _ := cli(t, "health", "list", "-state="+n.state)
	if got := plugintest.Fields(t, table, "fake-3 "); got[1] != "unknown" {
		t.Errorf("fake-3 from the file = %v, want NUMA unknown", got)
	}
}

// TestBinary_AdminSocketHeldByAnotherProgram: the plugin refuses in one
// line, before it registers, and leaves the other program's socket alone.
func TestBinary_AdminSocketHeldByAnotherProgram(t *testing.T) {
	n := newNode(t)
	sock := filepath.Join(n.dir, "state", "admin.sock") // the default, next to the state file
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() { _ = http.Serve(lis, http.NotFoundHandler()) }()
	before, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, "-device-plugin-path="+n.dir, "-state="+n.state, "-pod-resources-socket="+n.podResources())
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	want := "virtual-gpu-device-plugin: admin API: socket " + sock + ": another process is listening on it"
	if code != 1 || lines[len(lines)-1] != want {
		t.Errorf("exit %d, stderr %q; want exit 1 and the last line %q", code, errOut, want)
	}
	if after, err := os.Lstat(sock); err != nil || !os.SameFile(before, after) {
		t.Errorf("the other program's socket was touched: %v", err)
	}
	if resp, err := (&http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}).Get("http://x/"); err != nil {
		t.Errorf("the other program no longer answers: %v", err)
	} else {
		resp.Body.Close()
	}
	if len(n.kubelet.Registrations()) != 0 {
		t.Error("the plugin registered with the kubelet before refusing")
	}
	if _, err := os.Stat(filepath.Join(n.dir, "virtual-gpu.sock")); !os.IsNotExist(err) {
		t.Errorf("plugin socket left behind: %v", err)
	}
}

// TestBinary_AdminSocketIsKubeletSock: refused at validation; the kubelet's
// socket stays and answers.
func TestBinary_AdminSocketIsKubeletSock(t *testing.T) {
	n := newNode(t)
	kubeletSock := filepath.Join(n.dir, "kubelet.sock")
	before, err := os.Lstat(kubeletSock)
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, "-device-plugin-path="+n.dir, "-state="+n.state, "-admin-socket="+kubeletSock)
	if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "must not be in -device-plugin-path") {
		t.Errorf("exit %d, stderr %q; want exit 2 and one line", code, errOut)
	}
	if after, err := os.Lstat(kubeletSock); err != nil || !os.SameFile(before, after) {
		t.Fatalf("kubelet.sock was touched: %v", err)
	}
	n.start(t) // the kubelet still takes registrations on it
}

// TestBinary_PermissionDenied: a user who may not open the admin socket is
// told so, not that no plugin runs.
func TestBinary_PermissionDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the client as nobody")
	}
	n := newNode(t)
	n.start(t)
	for _, d := range []string{n.dir, filepath.Dir(n.state)} { // reachable; the socket itself is 0600
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"health", "set", "fake-0", "unhealthy"},
		{"health", "list"},
		{"dump"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cmd := exec.Command(binary, append(args, "-state="+n.state)...)
			cmd.Env = []string{}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit = %v, want status 1; stderr %s", err, stderr.String())
			}
			got := stderr.String()
			if !strings.Contains(got, "permission denied on the admin socket") || !strings.Contains(got, "run as root or as the socket's owner") ||
				strings.Contains(got, "needs the running plugin") || strings.Contains(got, "no plugin answers") {
				t.Errorf("stderr = %q", got)
			}
		})
	}
}

// TestBinary_InterruptedDump: SIGINT ends a dump waiting on a plugin that
// does not answer, at once rather than at the timeout.
func TestBinary_InterruptedDump(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	sock := filepath.Join(dir, "admin.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := lis.Accept(); err == nil {
			accepted <- conn // held open, never answered
		}
	}()
	cmd := exec.Command(binary, "dump", "-state="+filepath.Join(dir, "state.db"), "-admin-socket="+sock)
	cmd.Env = []string{}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case conn := <-accepted:
		defer conn.Close()
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("dump never connected")
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("exit = %v, want status 1", err)
	}
	if got := stderr.String(); !strings.Contains(got, "interrupted") || strings.Contains(got, "deadline exceeded") {
		t.Errorf("stderr = %q, want an interruption, not a timeout", got)
	}
}

// TestBinary_HealthSet_NoAnswer: a plugin that took the request and never
// answered may have made the change; health set says so instead of
// claiming failure.
func TestBinary_HealthSet_NoAnswer(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	sock := filepath.Join(dir, "admin.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		if conn, err := lis.Accept(); err == nil {
			defer conn.Close()
			_, _ = io.Copy(io.Discard, conn) // reads the request, never answers
		}
	}()
	_, errOut, code := cli(t, "health", "set", "fake-0", "unhealthy", "-state="+filepath.Join(dir, "state.db"), "-admin-socket="+sock)
	if code != 1 || !strings.Contains(errOut, "the plugin may have made the change: see health list") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestBinary_Dump_PluginGone: a plugin that goes away while it answers
// (stopped or crashed) is said so, not as the transport's bare EOF.
func TestBinary_Dump_PluginGone(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	sock := filepath.Join(dir, "admin.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			_, _ = http.ReadRequest(bufio.NewReader(conn)) // the request read, then gone
			conn.Close()
		}
	}()
	_, errOut, code := cli(t, "dump", "-state="+filepath.Join(dir, "state.db"), "-admin-socket="+sock)
	if code != 1 || !strings.Contains(errOut, "the plugin went away without answering (it stopped or crashed)") || strings.Contains(errOut, "http://") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
