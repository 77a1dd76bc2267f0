package plugin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// targetSet is the agent's set of an 8-GPU H100 node with layout (none
// when ""), advertised by strategy.
func targetSet(t *testing.T, layout string, strategy gpuset.MIGStrategy) *agent.Set {
	t.Helper()
	c := plugintest.GPUConfig(t, "hgx-h100", gpuset.Sharing{})
	if layout != "" {
		c = plugintest.WithMIG(t, c, nil, gpuset.MIG{Strategy: strategy, Layout: layout})
	}
	set, err := agent.NewSet(agent.Config{GPUs: c, View: plugintest.ViewConfig(t.TempDir())}, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// storeOf stores set's devices in st and returns them, as the agent's
// commit does.
func storeOf(t *testing.T, st *store.Store, set *agent.Set) []store.Device {
	t.Helper()
	if _, err := st.Reconcile(set.GPUs.Specs()); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	return stored
}

func listIDs(l *pluginapi.ListAndWatchResponse) []string {
	var ids []string
	for _, d := range l.Devices {
		ids = append(ids, d.ID)
	}
	return ids
}

// TestTarget_MixedLive: a Target of the mixed strategy registers every
// resource with devices on its own socket (all-balanced partitions every
// GPU: no whole GPU, no GPUs' resource); a change to whole GPUs ends the
// MIG resources (their sockets go) and registers the GPUs', and a change
// back registers them again;
// the health of a GPU's MIG devices reaches every resource that holds
// them; commit runs once per change.
func TestTarget_MixedLive(t *testing.T) {
	dir := plugintest.ShortTempDir(t)
	k := plugintest.StartKubelet(t, dir)
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mixed := targetSet(t, "all-balanced", gpuset.MIGStrategyMixed)
	record := func(context.Context, []string, map[string]string) (store.Allocation, error) {
		return store.Allocation{}, errors.New("not in this test")
	}
	tg, err := plugin.NewTarget(plugin.TargetConfig{Set: mixed, Stored: storeOf(t, st, mixed), Record: record, Dir: dir, SocketName: "virtual-gpu.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tg.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	wait := func(n int) map[string]*plugintest.Registration {
		t.Helper()
		out := map[string]*plugintest.Registration{}
		for len(out) < n {
			r := k.WaitRegistration(10 * time.Second)
			out[r.Request.ResourceName] = r
		}
		return out
	}
	regs := wait(3)
	counts := map[string]int{"unicore.mcyou.cc/mig-1g.10gb": 16, "unicore.mcyou.cc/mig-2g.20gb": 8, "unicore.mcyou.cc/mig-3g.40gb": 8}
	for name, n := range counts {
		r := regs[name]
		if r == nil {
			t.Fatalf("%s not registered", name)
		}
		if want := plugin.SocketFor("virtual-gpu.sock", name); r.Request.Endpoint != want {
			t.Errorf("%s on %s, want %s", name, r.Request.Endpoint, want)
		}
		if got := plugintest.NextList(t, r, 10*time.Second); len(got.Devices) != n {
			t.Errorf("%s lists %d devices, want %d", name, len(got.Devices), n)
		}
	}
	plugintest.WaitFor(t, 10*time.Second, "every resource registered", tg.Registered)

	// fake-3's MIG devices are of three resources: one health change each.
	ids, err := mixed.GPUs.Members("fake-3")
	if err != nil || len(ids) != 4 {
		t.Fatalf("members of fake-3: %v, %v", ids, err)
	}
	if err := tg.SetHealth("fake-3", ids, false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"unicore.mcyou.cc/mig-1g.10gb", "unicore.mcyou.cc/mig-2g.20gb", "unicore.mcyou.cc/mig-3g.40gb"} {
		l := plugintest.NextList(t, regs[name], 10*time.Second)
		for _, d := range l.Devices {
			if want := map[bool]string{true: pluginapi.Unhealthy, false: pluginapi.Healthy}[slices.Contains(ids, d.ID)]; d.Health != want {
				t.Errorf("%s: %s is %s, want %s", name, d.ID, d.Health, want)
			}
		}
	}
	if err := tg.SetHealth("fake-3", []string{"fake-9"}, false, "x"); !errors.Is(err, store.ErrUnknownDevice) {
		t.Errorf("SetHealth of a device nobody advertises: %v", err)
	}

	whole := targetSet(t, "", gpuset.MIGStrategyNone)
	commits := 0
	if err := tg.Apply(whole, func() ([]store.Device, error) { commits++; return storeOf(t, st, whole), nil }); err != nil {
		t.Fatal(err)
	}
	if commits != 1 {
		t.Errorf("commit ran %d times", commits)
	}
	gpu := k.WaitRegistration(10 * time.Second)
	if gpu.Request.ResourceName != "unicore.mcyou.cc/gpu" || gpu.Request.Endpoint != "virtual-gpu.sock" {
		t.Errorf("registered %s on %s after the change to whole GPUs", gpu.Request.ResourceName, gpu.Request.Endpoint)
	}
	if got := listIDs(plugintest.NextList(t, gpu, 10*time.Second)); len(got) != 8 || got[0] != "fake-0" {
		t.Errorf("the GPUs' resource lists %v after the change to whole GPUs", got)
	}
	for name := range counts {
		if _, err := os.Stat(filepath.Join(dir, plugin.SocketFor("virtual-gpu.sock", name))); !os.IsNotExist(err) {
			t.Errorf("%s's socket still there: %v", name, err)
		}
	}
	if got := tg.Resources(); len(got) != 1 || got["virtual-gpu.sock"] != "unicore.mcyou.cc/gpu" {
		t.Errorf("served %v, want the GPUs' resource alone", got)
	}

	// A failing commit leaves everything as it was, and nothing starts.
	if err := tg.Apply(mixed, func() ([]store.Device, error) { return nil, errors.New("disk full") }); err == nil {
		t.Error("Apply with a failing commit succeeded")
	}
	if got := tg.Resources(); len(got) != 1 {
		t.Errorf("after a failed change served %v", got)
	}
	before := tg.Registrations()
	if err := tg.Apply(mixed, func() ([]store.Device, error) { return storeOf(t, st, mixed), nil }); err != nil {
		t.Fatal(err)
	}
	again := wait(3)
	for name := range counts {
		if again[name] == nil {
			t.Errorf("%s not registered again", name)
		}
	}
	plugintest.WaitFor(t, 10*time.Second, "the new registrations counted", func() bool { return tg.Registrations() >= before+3 })
}

// everyProfile gives each of the first seven GPUs of an H100 node one MIG
// device of another profile and leaves the last whole: eight resources
// under the mixed strategy.
const everyProfile = `version: v1
mig-configs:
  every-profile:
    - {devices: [0], mig-enabled: true, mig-devices: {1g.10gb: 1}}
    - {devices: [1], mig-enabled: true, mig-devices: {1g.10gb+me: 1}}
    - {devices: [2], mig-enabled: true, mig-devices: {1g.20gb: 1}}
    - {devices: [3], mig-enabled: true, mig-devices: {2g.20gb: 1}}
    - {devices: [4], mig-enabled: true, mig-devices: {3g.40gb: 1}}
    - {devices: [5], mig-enabled: true, mig-devices: {4g.40gb: 1}}
    - {devices: [6], mig-enabled: true, mig-devices: {7g.80gb: 1}}
    - {devices: [7], mig-enabled: false}
`

// BenchmarkTarget_ReRegister measures how long after a kubelet restart
// every resource of a Target is registered again: the whole GPUs (one
// resource, the baseline), the mixed strategy's all-balanced (three) and
// every H100 profile (eight), over real sockets and gRPC with the
// stand-in kubelet.
func BenchmarkTarget_ReRegister(b *testing.B) {
	user, err := mig.ParseConfig("every-profile.yaml", strings.NewReader(everyProfile))
	if err != nil {
		b.Fatal(err)
	}
	builtin, err := mig.BuiltinConfig()
	if err != nil {
		b.Fatal(err)
	}
	layouts := mig.Merge(builtin, user)
	for _, bc := range []struct {
		name, layout string
		resources    int
	}{{"whole-1", "", 1}, {"all-balanced-3", "all-balanced", 3}, {"every-profile-8", "every-profile", 8}} {
		b.Run(bc.name, func(b *testing.B) {
			c := plugintest.GPUConfig(b, "hgx-h100", gpuset.Sharing{})
			if bc.layout != "" {
				c = plugintest.WithMIG(b, c, layouts, gpuset.MIG{Strategy: gpuset.MIGStrategyMixed, Layout: bc.layout})
			}
			set, err := agent.NewSet(agent.Config{GPUs: c, View: plugintest.ViewConfig(b.TempDir())}, "node-a")
			if err != nil {
				b.Fatal(err)
			}
			if got := len(set.GPUs.Resources()); got != bc.resources {
				b.Fatalf("%d resources, want %d", got, bc.resources)
			}
			st, err := store.Open(filepath.Join(b.TempDir(), "state.db"), store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			if _, err := st.Reconcile(set.GPUs.Specs()); err != nil {
				b.Fatal(err)
			}
			stored, err := st.Devices()
			if err != nil {
				b.Fatal(err)
			}
			dir := plugintest.ShortTempDir(b)
			k := plugintest.StartKubelet(b, dir)
			record := func(context.Context, []string, map[string]string) (store.Allocation, error) {
				return store.Allocation{}, nil
			}
			tg, err := plugin.NewTarget(plugin.TargetConfig{Set: set, Stored: stored, Record: record, Dir: dir, SocketName: "virtual-gpu.sock"})
			if err != nil {
				b.Fatal(err)
			}
			defer tg.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- tg.Run(ctx) }()
			defer func() { cancel(); <-done }()
			for range bc.resources {
				k.WaitRegistration(10 * time.Second)
			}
			b.ResetTimer()
			for b.Loop() {
				k.Restart()
				for range bc.resources {
					k.WaitRegistration(10 * time.Second)
				}
			}
			b.ReportMetric(float64(bc.resources), "resources")
		})
	}
}
