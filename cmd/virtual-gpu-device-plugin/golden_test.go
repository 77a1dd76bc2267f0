package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// The golden tests pin what the plugin answers and shows, byte for byte, so
// that moving code between packages changes none of it: the Allocate
// answers and the CDI spec with every container option on, the dump's JSON
// of a scripted history, and the telemetry's scrape at a fixed clock. Run
// with -update-golden to write testdata/golden/ anew (and read the diff).

var updateGolden = flag.Bool("update-golden", false, "write testdata/golden/* from what the plugin does now")

// checkGolden compares got with testdata/golden/<name>, or writes it there
// with -update-golden.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-golden to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (-update-golden rewrites it):\n%s", name, lineDiff(string(want), string(got)))
	}
}

// lineDiff lists the lines of want missing from got (-) and of got missing
// from want (+), in order, at most 40 of them.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	n := 0
	for i := 0; i < max(len(w), len(g)) && n < 40; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n- %s\n+ %s\n", i+1, wl, gl)
			n++
		}
	}
	return b.String()
}

// rfc3339 matches the timestamps the outputs carry.
var rfc3339 = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)

// normalize makes out independent of the test's run: dir is $DIR, every
// timestamp <time>.
func normalize(out []byte, dir string) []byte {
	out = bytes.ReplaceAll(out, []byte(dir), []byte("$DIR"))
	return rfc3339.ReplaceAll(out, []byte("<time>"))
}

// answerJSON renders an Allocate answer and the device list as indented
// JSON with sorted keys (protojson's output is not stable by design).
func answerJSON(t *testing.T, list *pluginapi.ListAndWatchResponse, resp *pluginapi.AllocateResponse) []byte {
	t.Helper()
	type mount struct {
		ContainerPath, HostPath string
		ReadOnly                bool
	}
	type device struct{ ContainerPath, HostPath, Permissions string }
	type container struct {
		Envs        map[string]string
		Mounts      []mount
		Devices     []device
		CDIDevices  []string
		Annotations map[string]string
	}
	type listed struct {
		ID, Health string
		NUMA       []int64
	}
	var doc struct {
		Devices    []listed
		Containers []container
	}
	for _, d := range list.Devices {
		l := listed{ID: d.ID, Health: d.Health}
		for _, n := range d.GetTopology().GetNodes() {
			l.NUMA = append(l.NUMA, n.ID)
		}
		doc.Devices = append(doc.Devices, l)
	}
	for _, c := range resp.ContainerResponses {
		var out container
		out.Envs, out.Annotations = c.Envs, c.Annotations
		for _, m := range c.Mounts {
			out.Mounts = append(out.Mounts, mount{m.ContainerPath, m.HostPath, m.ReadOnly})
		}
		for _, d := range c.Devices {
			out.Devices = append(out.Devices, device{d.ContainerPath, d.HostPath, d.Permissions})
		}
		for _, d := range c.CdiDevices {
			out.CDIDevices = append(out.CDIDevices, d.Name)
		}
		doc.Containers = append(doc.Containers, out)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// TestGolden_AllocateEveryOption: the device list, the Allocate answers of
// two containers and the CDI spec with every container option on, whole
// GPUs and shared ones, on an 8-GPU NVLink machine.
func TestGolden_AllocateEveryOption(t *testing.T) {
	every := []string{"-node-name=node-a", "-topology=dgx-a100", "-numa-report=always",
		"-device-nodes", "-visible-devices-env", "-device-list-strategy=envvar,cdi-cri",
		"-telemetry-address=127.0.0.1:0", "-telemetry-writable"}
	for _, tc := range []struct {
		name     string
		extra    []string
		requests [][]string
	}{
		{"whole", nil, [][]string{{"fake-0", "fake-1", "fake-2", "fake-3"}, {"fake-6"}}},
		{"shared", []string{"-replicas=2"}, [][]string{{"fake-0::0", "fake-0::1", "fake-5::1"}, {"fake-7::0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			cdiDir := filepath.Join(n.dir, "cdi")
			_, reg := n.start(t, append(append(slices.Clone(every), "-cdi-spec-dir="+cdiDir), tc.extra...)...)
			list := plugintest.NextList(t, reg, 10*time.Second)
			req := &pluginapi.AllocateRequest{}
			for _, ids := range tc.requests {
				req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: ids})
			}
			resp, err := reg.Client.Allocate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "allocate-"+tc.name+".json", normalize(answerJSON(t, list, resp), n.dir))
			spec, err := os.ReadFile(filepath.Join(cdiDir, "unicore.mcyou.cc-gpu.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "cdi-"+tc.name+".yaml", normalize(spec, n.dir))
		})
	}
}

// TestGolden_DumpJSON: dump -o json of a scripted history: an allocation a
// pod holds, one no pod claims (abandoned), one released, a GPU set
// unhealthy and healthy again, another left unhealthy.
func TestGolden_DumpJSON(t *testing.T) {
	n := newNode(t)
	pr := plugintest.StartPodResources(t, n.podResources())
	_, reg := n.start(t, "-node-name=node-a", "-topology=workstation-4gpu", "-numa-report=always")
	allocate(t, reg, "fake-1", "fake-2")
	pr.SetPod("default", "trainer", "unicore.mcyou.cc/gpu", plugintest.Container{Name: "main", IDs: []string{"fake-1", "fake-2"}})
	n.waitDump(t, "held", func(d admin.Snapshot) bool {
		return len(d.Allocations) == 1 && d.Allocations[0].State == store.StateHeld
	})
	allocate(t, reg, "fake-0")
	pr.SetPod("batch", "job-1", "unicore.mcyou.cc/gpu", plugintest.Container{Name: "work", IDs: []string{"fake-0"}})
	n.waitDump(t, "second held", func(d admin.Snapshot) bool {
		return len(d.Allocations) == 2 && d.Allocations[0].State == store.StateHeld
	})
	pr.DeletePod("batch", "job-1")
	n.waitDump(t, "released", func(d admin.Snapshot) bool { return d.Allocations[0].State == store.StateReleased })
	allocate(t, reg, "fake-3") // no pod ever claims it: abandoned after -abandon-after
	for _, args := range [][]string{
		{"fake-0", "unhealthy", "--reason", "XID 79: GPU has fallen off the bus"},
		{"fake-0", "healthy"},
		{"fake-2", "unhealthy", "--reason", "XID 48: double-bit ECC error"},
	} {
		if _, errOut, code := cli(t, append([]string{"health", "set", "-state=" + n.state}, args...)...); code != 0 {
			t.Fatalf("health set %v: exit %d: %s", args, code, errOut)
		}
	}
	n.waitDump(t, "abandoned", func(d admin.Snapshot) bool {
		return len(d.Allocations) == 3 && d.Allocations[0].State == store.StateAbandoned
	})
	out, errOut, code := cli(t, "dump", "-o", "json", "-state="+n.state)
	if code != 0 {
		t.Fatalf("dump: exit %d: %s", code, errOut)
	}
	checkGolden(t, "dump.json", normalize([]byte(out), n.dir))
}

// TestGolden_TelemetryScrape: the telemetry's scrape at a fixed clock and
// seed, with a pod on two GPUs, per-pod series and an unhealthy GPU.
func TestGolden_TelemetryScrape(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	pr := plugintest.StartPodResources(t, filepath.Join(dir, "pr.sock"))
	state := filepath.Join(dir, "state", "state.db")
	args := []string{"-device-plugin-path=" + dir, "-state=" + state, "-pod-resources-socket=" + filepath.Join(dir, "pr.sock"),
		"-reconcile-interval=100ms", "-node-name=node-a", "-topology=hgx-h100", "-numa-report=always",
		"-telemetry-address=127.0.0.1:0", "-telemetry-model=wave", "-telemetry-seed=7", "-telemetry-per-pod"}
	o, err := options.Parse(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg, profiles, err := o.Load()
	if err != nil {
		t.Fatal(err)
	}
	logs := &plugintest.LogBuffer{}
	env := defaultServeEnv()
	env.newAPI = func(kube.Options) (kube.API, error) { return nil, fmt.Errorf("test: %w", kube.ErrNoAPIAccess) }
	env.environ = nil
	env.clock = storetest.NewClock(t, time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, o, cfg, profiles, logs, env) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve still running 30s after its context ended")
		}
		if t.Failed() {
			t.Logf("plugin log:\n%s", logs)
		}
	})
	reg := k.WaitRegistration(30 * time.Second)
	allocate(t, reg, "fake-2", "fake-3")
	pr.SetPod("default", "trainer", "unicore.mcyou.cc/gpu", plugintest.Container{Name: "main", IDs: []string{"fake-2", "fake-3"}})
	url := "http://" + listenAddress(t, logs, "serving GPU telemetry") + "/metrics"
	scrape := func() []byte { return []byte(httpGet(t, url)) }
	if _, errOut, code := cli(t, "health", "set", "-state="+state, "fake-5", "unhealthy", "--reason", "XID 79: GPU has fallen off the bus"); code != 0 {
		t.Fatalf("health set: exit %d: %s", code, errOut)
	}
	var got []byte
	plugintest.WaitFor(t, 30*time.Second, "the pod's and the XID's series", func() bool {
		got = scrape()
		return bytes.Contains(got, []byte(`pod="trainer"`)) && bytes.Contains(got, []byte(`DCGM_FI_DEV_XID_ERRORS{gpu="5"`))
	})
	checkGolden(t, "telemetry.prom", normalize(got, dir))
}
