package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// The tests of this file run serve in the test process against a fake API
// server (fakeAPI: the one thing that cannot run here) and the real rest: a
// state file, a profiles directory, the stand-in kubelet and PodResources
// API on real sockets, the admin API.

const (
	testNode   = "node-a"
	renamedRes = "example.com/vgpu"
)

// The profiles every test starts with: small is the default.
var testProfiles = map[string]string{
	"small":   "version: v1\nflags:\n  topology: workstation-4gpu\n",
	"big":     "version: v1\nflags:\n  topology: dgx-a100\n",
	"renamed": "version: v1\nflags:\n  topology: workstation-4gpu\n  resourceName: " + renamedRes + "\n",
}

// fakeAPI is the API server as the plugin sees it (node.API), for one
// Node: WatchNode delivers its labels at start and on every change (the
// same labels again after fn failed, as the real watch does), and
// PatchNodeLabels applies a patch to them and records it. Safe for
// concurrent use.
type fakeAPI struct {
	mu        sync.Mutex
	labels    map[string]string
	changed   chan struct{} // closed and replaced on every change
	patches   []fakePatch
	delivered int   // calls of fn that returned
	watchErr  error // WatchNode fails with it at once
}

// fakePatch is one PatchNodeLabels call.
type fakePatch struct {
	set    map[string]string
	remove []string
}

var _ kube.API = (*fakeAPI)(nil)

func newFakeAPI(labels map[string]string) *fakeAPI {
	f := &fakeAPI{labels: map[string]string{}, changed: make(chan struct{})}
	maps.Copy(f.labels, labels)
	return f
}

func (f *fakeAPI) WatchNode(ctx context.Context, name string, fn func(map[string]string) error) error {
	if name != testNode {
		return fmt.Errorf("watch node %q: %w", name, kube.ErrNodeNotFound)
	}
	if f.watchErr != nil {
		return f.watchErr
	}
	var last map[string]string
	for first := true; ; first = false {
		f.mu.Lock()
		labels, changed := maps.Clone(f.labels), f.changed
		f.mu.Unlock()
		if first || !maps.Equal(labels, last) {
			for fn(maps.Clone(labels)) != nil {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(10 * time.Millisecond):
				}
			}
			last = labels
			f.mu.Lock()
			f.delivered++
			f.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

func (f *fakeAPI) PatchNodeLabels(_ context.Context, name string, set map[string]string, remove []string) error {
	if name != testNode {
		return fmt.Errorf("patch node %q: %w", name, kube.ErrNodeNotFound)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.patches = append(f.patches, fakePatch{set: maps.Clone(set), remove: slices.Clone(remove)})
	maps.Copy(f.labels, set)
	for _, k := range remove {
		delete(f.labels, k)
	}
	f.changedLocked()
	return nil
}

// setLabel sets (or, with value "", removes) a label of the Node.
func (f *fakeAPI) setLabel(key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if value == "" {
		delete(f.labels, key)
	} else {
		f.labels[key] = value
	}
	f.changedLocked()
}

func (f *fakeAPI) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// setLabelAndWait sets a label and waits until the plugin has taken the
// Node's labels with it.
func (f *fakeAPI) setLabelAndWait(t *testing.T, key, value string) {
	t.Helper()
	before := f.deliveries()
	f.setLabel(key, value)
	plugintest.WaitFor(t, 30*time.Second, "the plugin to take the node's labels", func() bool { return f.deliveries() > before })
}

func (f *fakeAPI) deliveries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delivered
}

func (f *fakeAPI) patchList() []fakePatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.patches)
}

func (f *fakeAPI) nodeLabels() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.labels)
}

// liveNode is serve running in the test with a stand-in kubelet, a
// profiles directory and a state file.
type liveNode struct {
	dir      string // device-plugin directory
	profiles string
	state    string
	kubelet  *plugintest.Kubelet
	pods     *plugintest.PodResources
	logs     *plugintest.LogBuffer
	admin    *admin.Client
	stopFn   func(t *testing.T) // ends the running serve, if any
}

// stop ends the running serve and checks that it returned nil.
func (n *liveNode) stop(t *testing.T) {
	t.Helper()
	if n.stopFn != nil {
		n.stopFn(t)
		n.stopFn = nil
	}
}

// newLiveNode writes the test profiles and starts the stand-in kubelet and
// PodResources API.
func newLiveNode(t *testing.T) *liveNode {
	t.Helper()
	dir := plugintest.ShortTempDir(t)
	n := &liveNode{dir: dir, profiles: filepath.Join(dir, "profiles"), state: filepath.Join(dir, "state", "state.db"), logs: &plugintest.LogBuffer{}}
	if err := os.Mkdir(n.profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range testProfiles {
		n.writeProfile(t, name, body)
	}
	n.kubelet = plugintest.StartKubelet(t, dir)
	n.pods = plugintest.StartPodResources(t, filepath.Join(dir, "pr.sock"))
	n.admin = admin.NewClient(filepath.Join(dir, "state", "admin.sock"), 5*time.Second)
	return n
}

// writeProfile writes a profile as one rename, as a ConfigMap update
// swaps its files whole.
func (n *liveNode) writeProfile(t *testing.T, name, body string) {
	t.Helper()
	tmp := filepath.Join(n.profiles, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.profiles, name+".yaml")); err != nil {
		t.Fatal(err)
	}
}

// start runs serve with the node's paths, -config=<profiles>
// -config-default=small and extra flags; api nil means no API access. It
// returns the first registration. The test's end stops serve, which must
// return nil.
func (n *liveNode) start(t *testing.T, api *fakeAPI, extra ...string) *plugintest.Registration {
	t.Helper()
	args := append([]string{"-device-plugin-path=" + n.dir, "-state=" + n.state, "-pod-resources-socket=" + filepath.Join(n.dir, "pr.sock"),
		"-reconcile-interval=100ms", "-abandon-after=1m", "-numa-report=never",
		"-config=" + n.profiles, "-config-default=small", "-node-name=" + testNode}, extra...)
	o, err := options.Parse(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg, profiles, err := o.Load()
	if err != nil {
		t.Fatal(err)
	}
	machineID := filepath.Join(t.TempDir(), "machine-id")
	if err := os.WriteFile(machineID, []byte("0123456789abcdef0123456789abcdef\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	env := serveEnv{
		newAPI: func(kube.Options) (kube.API, error) {
			if api == nil {
				return nil, fmt.Errorf("test: %w", kube.ErrNoAPIAccess)
			}
			return api, nil
		},
		machineIDPath: machineID,
		profilePoll:   100 * time.Millisecond,
		labelWait:     30 * time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, o, cfg, profiles, n.logs, env) }()
	n.stopFn = func(t *testing.T) {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve still running 10s after its context ended")
		}
	}
	t.Cleanup(func() {
		n.stop(t)
		if t.Failed() || os.Getenv("VGPU_TEST_LOG") != "" {
			t.Logf("plugin log:\n%s", n.logs)
		}
	})
	return n.kubelet.WaitRegistration(30 * time.Second)
}

// snapshot reads the running plugin's dump.
func (n *liveNode) snapshot(t *testing.T) admin.Snapshot {
	t.Helper()
	s, err := n.admin.Snapshot(context.Background(), admin.Query{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitLog waits until the log has want lines containing sub.
func (n *liveNode) waitLog(t *testing.T, sub string, want int) {
	t.Helper()
	plugintest.WaitFor(t, 30*time.Second, fmt.Sprintf("%d log lines with %q", want, sub), func() bool { return n.logs.Count(sub) >= want })
}

// ids returns the device ids of a list with their health.
func ids(l *pluginapi.ListAndWatchResponse) []string {
	out := make([]string, len(l.Devices))
	for i, d := range l.Devices {
		out[i] = d.ID
		if d.Health != pluginapi.Healthy {
			out[i] += "(" + d.Health + ")"
		}
	}
	return out
}

// fakeIDs returns fake-0 … fake-<n-1>.
func fakeIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("fake-%d", i)
	}
	return out
}

// noMoreRegistrations fails the test if the kubelet got another Register.
func (n *liveNode) noMoreRegistrations(t *testing.T) {
	t.Helper()
	select {
	case r := <-n.kubelet.Registrations():
		t.Errorf("registered again: %v", r.Request)
	default:
	}
}

// waitEvents waits until the plugin has stored want configuration events
// (the kubelet gets the new list before the event is stored) and returns
// the snapshot.
func (n *liveNode) waitEvents(t *testing.T, want int) admin.Snapshot {
	t.Helper()
	var s admin.Snapshot
	plugintest.WaitFor(t, 30*time.Second, fmt.Sprintf("%d configuration events", want), func() bool {
		s = n.snapshot(t)
		return len(s.ConfigEvents) >= want
	})
	return s
}

// configEvents returns the why and profile of each stored configuration
// event, oldest first.
func configEvents(s admin.Snapshot) []string {
	var out []string
	for _, e := range s.ConfigEvents {
		out = append(out, e.Why+":"+e.Profile)
	}
	slices.Reverse(out)
	return out
}

func TestServe_Label_AppliesProfileLive(t *testing.T) {
	n := newLiveNode(t)
	api := newFakeAPI(map[string]string{"kubernetes.io/hostname": testNode})
	reg := n.start(t, api)
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(4)) {
		t.Fatalf("first list = %v, want the default profile's 4 GPUs", got)
	}

	api.setLabel(kube.ConfigLabel, "big")
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(8)) {
		t.Fatalf("after the label: list = %v, want big's 8 GPUs on the same stream", got)
	}
	n.noMoreRegistrations(t)

	api.setLabel(kube.ConfigLabel, "")
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(4)) {
		t.Fatalf("label removed: list = %v, want the default's 4 GPUs", got)
	}
	n.noMoreRegistrations(t)

	s := n.waitEvents(t, 3)
	if got, want := configEvents(s), []string{"default:small", "node-label:big", "default:small"}; !slices.Equal(got, want) {
		t.Errorf("config events = %v, want %v", got, want)
	}
	if e := s.ConfigEvents[1]; e.Detail != kube.ConfigLabel+"=big" || e.PreviousProfile != "small" || e.Devices != 8 ||
		!slices.Equal(e.Added, fakeIDs(8)[4:]) {
		t.Errorf("the label's event = %+v", e)
	}
	if e := s.ConfigEvents[0]; !slices.Equal(e.Removed, fakeIDs(8)[4:]) {
		t.Errorf("back to small: removed %v, want fake-4…fake-7", e.Removed)
	}
	for _, d := range s.Devices {
		if want := topology.DeriveUUID(testNode, d.ID); d.UUID != want {
			t.Errorf("device %s: UUID %q, want %q (derived from the node name)", d.ID, d.UUID, want)
		}
	}
	n.waitLog(t, `"message":"configuration applied"`, 2) // logged once the change, stored with its event, is in force
	if n.logs.Count(`"message":"configuration applied"`) != 2 {
		t.Errorf("want 2 \"configuration applied\" lines:\n%s", n.logs)
	}
}

// TestServe_LabelAtStart: a node labelled before the plugin starts gets its
// profile from the first registration on; the default is never served.
func TestServe_LabelAtStart(t *testing.T) {
	n := newLiveNode(t)
	api := newFakeAPI(map[string]string{kube.ConfigLabel: "big"})
	reg := n.start(t, api)
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(8)) {
		t.Fatalf("first list = %v, want big's 8 GPUs", got)
	}
	if got := configEvents(n.snapshot(t)); !slices.Equal(got, []string{"node-label:big"}) {
		t.Errorf("config events = %v, want only the label's", got)
	}
}

func TestServe_Label_OtherResourceName_RegistersAgain(t *testing.T) {
	n := newLiveNode(t)
	api := newFakeAPI(nil)
	reg := n.start(t, api, "-metrics-address=127.0.0.1:0")
	if reg.Request.ResourceName != options.DefaultResourceName {
		t.Fatalf("registered %q", reg.Request.ResourceName)
	}
	plugintest.NextList(t, reg, 30*time.Second)

	api.setLabel(kube.ConfigLabel, "renamed")
	again := n.kubelet.WaitRegistration(30 * time.Second)
	if again.Request.ResourceName != renamedRes || again.Request.Endpoint != options.DefaultSocketName {
		t.Fatalf("registered again with %v, want %s on the same socket", again.Request, renamedRes)
	}
	if got := ids(plugintest.NextList(t, again, 30*time.Second)); !slices.Equal(got, fakeIDs(4)) {
		t.Errorf("the new name's list = %v", got)
	}
	// The old name's stream ended (the kubelet marks its devices unhealthy).
	plugintest.WaitFor(t, 30*time.Second, "the old name's stream to end", func() bool {
		select {
		case _, ok := <-reg.Lists:
			return !ok
		default:
			return false
		}
	})
	s := n.waitEvents(t, 2)
	if e := s.ConfigEvents[0]; e.ResourceName != renamedRes || e.Profile != "renamed" || len(e.Added)+len(e.Removed) != 0 {
		t.Errorf("the rename's event = %+v", e)
	}

	api.setLabel(kube.ConfigLabel, "")
	back := n.kubelet.WaitRegistration(30 * time.Second)
	if back.Request.ResourceName != options.DefaultResourceName {
		t.Errorf("back to the default: registered %q", back.Request.ResourceName)
	}
	plugintest.NextList(t, back, 30*time.Second)
}

func TestServe_UnknownProfileLabel_OneErrorProfileKept(t *testing.T) {
	n := newLiveNode(t)
	api := newFakeAPI(nil)
	reg := n.start(t, api)
	plugintest.NextList(t, reg, 30*time.Second)
	api.setLabelAndWait(t, kube.ConfigLabel, "big")
	plugintest.NextList(t, reg, 30*time.Second)

	api.setLabelAndWait(t, kube.ConfigLabel, "nope")
	const notApplied = `"message":"configuration not applied: the configuration in force stays"`
	n.waitLog(t, notApplied, 1)
	api.setLabelAndWait(t, "example.com/unrelated", "x") // the Node changes again; the label still names no profile
	if c := n.logs.Count(notApplied); c != 1 {
		t.Errorf("%d error lines, want 1:\n%s", c, n.logs)
	}
	for _, want := range []string{`node label unicore.mcyou.cc/device-plugin.config=nope`, `"profile_in_force":"big"`, `profiles: big, renamed, small`} {
		if !strings.Contains(n.logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
	select {
	case l := <-reg.Lists:
		t.Errorf("a new device list for an unknown profile: %v", ids(l))
	default:
	}
	if got := configEvents(n.snapshot(t)); !slices.Equal(got, []string{"default:small", "node-label:big"}) {
		t.Errorf("config events = %v", got)
	}

	// The profile appears in the ConfigMap: the label now names it.
	n.writeProfile(t, "nope", "version: v1\nflags:\n  topology: dgx1-volta\n  allocationPolicy: lowest-index\n")
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(8)) {
		t.Errorf("after the profile appeared: %v", got)
	}
	if e := n.waitEvents(t, 3).ConfigEvents[0]; e.Why != store.WhyFileChanged || e.Profile != "nope" || e.Machine != "dgx1-volta" {
		t.Errorf("event = %+v", e)
	}
}

func TestServe_ProfileFileEdited(t *testing.T) {
	n := newLiveNode(t)
	reg := n.start(t, newFakeAPI(nil))
	plugintest.NextList(t, reg, 30*time.Second)

	n.writeProfile(t, "small", "version: v1\nflags:\n  devices: many\n")
	const notApplied = `"message":"configuration not applied: the configuration in force stays"`
	n.waitLog(t, notApplied, 1)
	if !strings.Contains(n.logs.String(), `small.yaml:3: flags.devices`) {
		t.Errorf("the error does not name the file, line and field:\n%s", n.logs)
	}
	// Another change of the directory reads it again: the same error is not
	// logged again.
	n.writeProfile(t, "unrelated", "version: v1\n")
	const reread = `"message":"profiles directory changed; reading the profiles again"`
	n.waitLog(t, reread, 2)
	if c := n.logs.Count(notApplied); c != 1 {
		t.Errorf("%d error lines, want 1", c)
	}
	select {
	case l := <-reg.Lists:
		t.Errorf("a new device list from an invalid profile: %v", ids(l))
	default:
	}

	n.writeProfile(t, "small", "version: v1\nflags:\n  topology: workstation-4gpu\n  devices: 4\n") // the same GPUs: nothing to do
	n.waitLog(t, reread, 3)
	n.writeProfile(t, "small", "version: v1\nflags:\n  devices: 2\n")
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(2)) {
		t.Fatalf("after a valid edit: %v", got)
	}
	n.noMoreRegistrations(t)
	s := n.waitEvents(t, 2)
	if got := configEvents(s); !slices.Equal(got, []string{"default:small", "file-changed:small"}) {
		t.Errorf("config events = %v", got)
	}
	if e := s.ConfigEvents[0]; !slices.Equal(e.Removed, []string{"fake-2", "fake-3"}) || !strings.Contains(e.Detail, n.profiles) {
		t.Errorf("event = %+v", e)
	}
}

// TestServe_ConfigMapSwap: a mounted ConfigMap's update swaps the ..data
// symbolic link to a new directory; the profiles (links through ..data)
// change with it.
func TestServe_ConfigMapSwap(t *testing.T) {
	n := newLiveNode(t)
	cm := filepath.Join(n.dir, "cm")
	writeVersion := func(version string, profiles map[string]string) {
		t.Helper()
		d := filepath.Join(cm, version)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range profiles {
			if err := os.WriteFile(filepath.Join(d, name+".yaml"), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(version, filepath.Join(cm, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(cm, "..data_tmp"), filepath.Join(cm, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	writeVersion("..v1", testProfiles)
	for name := range testProfiles {
		if err := os.Symlink(filepath.Join("..data", name+".yaml"), filepath.Join(cm, name+".yaml")); err != nil {
			t.Fatal(err)
		}
	}
	n.profiles = cm
	reg := n.start(t, newFakeAPI(nil))
	plugintest.NextList(t, reg, 30*time.Second)

	next := maps.Clone(testProfiles)
	next["small"] = "version: v1\nflags:\n  topology: dgx-a100\n"
	writeVersion("..v2", next)
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(8)) {
		t.Fatalf("after the ConfigMap update: %v", got)
	}
}

func TestServe_GPULabels_PatchedOnlyOnChange(t *testing.T) {
	n := newLiveNode(t)
	foreign := map[string]string{"kubernetes.io/hostname": testNode, "example.com/team": "ml"}
	start := maps.Clone(foreign)
	start[kube.LabelPrefix+"stale"] = "x" // ours, from an older version: removed
	api := newFakeAPI(start)
	reg := n.start(t, api, "-label-node")
	plugintest.NextList(t, reg, 30*time.Second)
	plugintest.WaitFor(t, 30*time.Second, "the first label patch", func() bool { return len(api.patchList()) == 1 })
	want, err := kube.GPULabels(kube.LabelSpec{Machine: mustPreset(t, "workstation-4gpu"), Topology: "workstation-4gpu", Profile: "small"})
	if err != nil {
		t.Fatal(err)
	}
	checkLabels := func(what string, want map[string]string) {
		t.Helper()
		plugintest.WaitFor(t, 30*time.Second, what, func() bool {
			got := api.nodeLabels()
			for k, v := range foreign {
				if got[k] != v {
					return false
				}
			}
			for k, v := range got {
				if _, f := foreign[k]; !f && want[k] != v {
					return false
				}
			}
			return len(got) == len(foreign)+len(want)
		})
	}
	checkLabels("the GPU labels of small", want)
	if p := api.patchList()[0]; !slices.Equal(p.remove, []string{kube.LabelPrefix + "stale"}) || !maps.Equal(p.set, want) {
		t.Errorf("first patch = %+v", p)
	}

	// A label of someone else changes: nothing to patch.
	api.setLabelAndWait(t, "example.com/team", "infra")
	foreign["example.com/team"] = "infra"
	// Someone edits one of ours: it is put back, alone.
	api.setLabelAndWait(t, kube.LabelProduct, "edited")
	checkLabels("the product label put back", want)
	patches := api.patchList()
	if len(patches) != 2 || !maps.Equal(patches[1].set, map[string]string{kube.LabelProduct: want[kube.LabelProduct]}) || len(patches[1].remove) != 0 {
		t.Fatalf("patches = %+v, want the first and one putting the product back", patches)
	}

	// Another profile: its labels.
	api.setLabel(kube.ConfigLabel, "big")
	plugintest.NextList(t, reg, 30*time.Second)
	big, err := kube.GPULabels(kube.LabelSpec{Machine: mustPreset(t, "dgx-a100"), Topology: "dgx-a100", Profile: "big", MIG: kube.MIGSpec{Capable: true}})
	if err != nil {
		t.Fatal(err)
	}
	foreign[kube.ConfigLabel] = "big"
	checkLabels("the GPU labels of big", big)
	for _, p := range api.patchList() {
		for k := range p.set {
			if !kube.Owned(k) {
				t.Errorf("patched %s, not one of ours", k)
			}
		}
		for _, k := range p.remove {
			if !kube.Owned(k) {
				t.Errorf("removed %s, not one of ours", k)
			}
		}
	}
	if len(api.patchList()) != 3 {
		t.Errorf("%d patches, want 3", len(api.patchList()))
	}
}

func TestServe_NoAPIAccess_DefaultSaidOnce(t *testing.T) {
	n := newLiveNode(t)
	reg := n.start(t, nil, "-label-node")
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(4)) {
		t.Fatalf("list = %v, want the default's", got)
	}
	if c := n.logs.Count(`"message":"no API access`); c != 1 {
		t.Errorf("%d lines about no API access, want 1:\n%s", c, n.logs)
	}
	if got := configEvents(n.snapshot(t)); !slices.Equal(got, []string{"default:small"}) {
		t.Errorf("config events = %v", got)
	}
}

// TestServe_NodeNotFound: a watch the API server refuses at start (a wrong
// node name) is one error; the default is served.
func TestServe_NodeNotFound(t *testing.T) {
	n := newLiveNode(t)
	api := newFakeAPI(nil)
	api.watchErr = fmt.Errorf("watch node: %w", kube.ErrNodeNotFound)
	reg := n.start(t, api)
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(4)) {
		t.Fatalf("list = %v, want the default's", got)
	}
	if c := n.logs.Count("cannot read this node's labels"); c != 1 {
		t.Errorf("%d lines, want 1", c)
	}
}

// TestServe_HealthAndHistoryKept: a device unhealthy before a change stays
// unhealthy after it; devices the new profile lacks are removed, not
// forgotten, and come back with their health; the held allocation of a
// device that went away, or is now under another resource name, keeps its
// holder.
func TestServe_HealthAndHistoryKept(t *testing.T) {
	n := newLiveNode(t)
	api := newFakeAPI(map[string]string{kube.ConfigLabel: "big"})
	reg := n.start(t, api)
	plugintest.NextList(t, reg, 30*time.Second)
	if _, err := n.admin.SetHealth(context.Background(), "fake-1", false, "ECC errors"); err != nil {
		t.Fatal(err)
	}
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); got[1] != "fake-1(Unhealthy)" {
		t.Fatalf("after health set: %v", got)
	}
	allocate(t, reg, "fake-6")
	n.pods.SetPod("ml", "trainer", options.DefaultResourceName, plugintest.Container{Name: "main", IDs: []string{"fake-6"}})
	held := func(s admin.Snapshot) bool {
		return len(s.Allocations) == 1 && s.Allocations[0].State == store.StateHeld && s.Allocations[0].Pod == "trainer"
	}
	plugintest.WaitFor(t, 30*time.Second, "the allocation held", func() bool { return held(n.snapshot(t)) })

	// To 4 GPUs under another resource name: fake-6 goes, its pod keeps it.
	api.setLabel(kube.ConfigLabel, "renamed")
	renamed := n.kubelet.WaitRegistration(30 * time.Second)
	if got := ids(plugintest.NextList(t, renamed, 30*time.Second)); !slices.Equal(got, []string{"fake-0", "fake-1(Unhealthy)", "fake-2", "fake-3"}) {
		t.Fatalf("after the change: %v", got)
	}
	n.waitEvents(t, 2)
	polls := n.pods.Lists()
	plugintest.WaitFor(t, 30*time.Second, "the tracker to poll twice", func() bool { return n.pods.Lists() >= polls+2 })
	s := n.snapshot(t)
	if !held(s) {
		t.Errorf("the allocation of fake-6 after the change: %+v", s.Allocations)
	}
	for _, d := range s.Devices {
		if removed := d.Index >= 4; d.Removed != removed {
			t.Errorf("device %s removed=%v", d.ID, d.Removed)
		}
	}

	// Back: the removed devices return, fake-1 still unhealthy.
	api.setLabel(kube.ConfigLabel, "big")
	back := n.kubelet.WaitRegistration(30 * time.Second)
	got := ids(plugintest.NextList(t, back, 30*time.Second))
	if len(got) != 8 || got[1] != "fake-1(Unhealthy)" || got[6] != "fake-6" {
		t.Fatalf("back to big: %v", got)
	}
	s = n.waitEvents(t, 3)
	if e := s.ConfigEvents[0]; !slices.Equal(e.Restored, fakeIDs(8)[4:]) {
		t.Errorf("restored = %v", e.Restored)
	}
	var ecc int
	for _, e := range s.HealthEvents {
		if e.DeviceID == "fake-1" && e.Reason == "ECC errors" {
			ecc++
		}
	}
	if ecc != 1 || !held(s) {
		t.Errorf("history after two changes: %d ECC events, allocations %+v", ecc, s.Allocations)
	}
}

// TestServe_StartAgain_SameConfigNotRecorded: a restart with the
// configuration of the newest stored event adds no event; one with
// another configuration records it, with the previous profile.
func TestServe_StartAgain_SameConfigNotRecorded(t *testing.T) {
	n := newLiveNode(t)
	api := newFakeAPI(map[string]string{kube.ConfigLabel: "big"})
	plugintest.NextList(t, n.start(t, api), 30*time.Second)
	n.stop(t)
	plugintest.NextList(t, n.start(t, api), 30*time.Second)
	if got := configEvents(n.snapshot(t)); !slices.Equal(got, []string{"node-label:big"}) {
		t.Fatalf("after a restart: config events = %v", got)
	}
	n.stop(t)
	api.setLabel(kube.ConfigLabel, "")
	plugintest.NextList(t, n.start(t, api), 30*time.Second)
	s := n.snapshot(t)
	if got := configEvents(s); !slices.Equal(got, []string{"node-label:big", "default:small"}) || s.ConfigEvents[0].PreviousProfile != "big" {
		t.Fatalf("after a restart without the label: config events = %v, newest %+v", got, s.ConfigEvents[0])
	}
}

func mustPreset(t *testing.T, name string) *topology.Machine {
	t.Helper()
	m, err := topology.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBinary_Profiles_NoAPI: the real binary with a directory of profiles
// and no -node-name serves the -config-default profile, says once that it
// does not read the label, and applies an edit of that profile without a
// restart, on the same ListAndWatch stream.
func TestBinary_Profiles_NoAPI(t *testing.T) {
	n := newNode(t)
	dir := filepath.Join(n.dir, "profiles")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, ".tmp"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, ".tmp"), filepath.Join(dir, name+".yaml")); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range testProfiles {
		write(name, body)
	}
	p, reg := n.start(t, "-config="+dir, "-config-default=big")
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); !slices.Equal(got, fakeIDs(8)) {
		t.Fatalf("first list = %v, want big's 8 GPUs", got)
	}
	p.logs.waitLine(t, "no -node-name (nor NODE_NAME)")

	write("big", "version: v1\nflags:\n  topology: dgx1-volta\n  devices: 8\n  faults: down:fake-7:after=0s\n")
	got := ids(plugintest.NextList(t, reg, 30*time.Second))
	if !slices.Equal(got, fakeIDs(8)) {
		t.Fatalf("after the edit: %v", got)
	}
	// The new profile's fault plan runs.
	plugintest.WaitFor(t, 30*time.Second, "fake-7 down by the new profile's fault plan", func() bool {
		select {
		case l := <-reg.Lists:
			return listHealth(l)["fake-7"] == pluginapi.Unhealthy
		default:
			return false
		}
	})
	doc := n.waitDump(t, "the file-changed event", func(d admin.Snapshot) bool { return len(d.ConfigEvents) == 2 })
	if e := doc.ConfigEvents[0]; e.Why != store.WhyFileChanged || e.Profile != "big" || e.PreviousProfile != "big" || e.Machine != "dgx1-volta" {
		t.Errorf("event = %+v", e)
	}
	if e := doc.ConfigEvents[1]; e.Why != store.WhyDefault || e.Machine != "dgx-a100" {
		t.Errorf("first event = %+v", e)
	}
	select {
	case r := <-n.kubelet.Registrations():
		t.Errorf("registered again: %v", r.Request)
	default:
	}
	p.stop(t)
}

// TestServe_UUIDs_StoredOnceKept: without a node name the UUIDs come from
// the machine id; a later start with a node name (as if renamed) keeps the
// stored UUIDs and says so once per device, not again at the next change.
func TestServe_UUIDs_StoredOnceKept(t *testing.T) {
	n := newLiveNode(t)
	plugintest.NextList(t, n.start(t, nil, "-node-name="), 30*time.Second)
	const machineID = "0123456789abcdef0123456789abcdef" // as start writes it
	for _, d := range n.snapshot(t).Devices {
		if want := topology.DeriveUUID(machineID, d.ID); d.UUID != want {
			t.Fatalf("device %s: UUID %q, want %q (from the machine id)", d.ID, d.UUID, want)
		}
	}
	n.stop(t)

	reg := n.start(t, nil)
	plugintest.NextList(t, reg, 30*time.Second)
	const kept = `"message":"device keeps its stored UUID`
	n.waitLog(t, kept, 4)
	// Another policy: applied (reconciled again), not stored (the same
	// devices under the same profile).
	n.writeProfile(t, "small", "version: v1\nflags:\n  topology: workstation-4gpu\n  allocationPolicy: lowest-index\n")
	n.waitLog(t, `"message":"configuration applied"`, 1)
	if c := n.logs.Count(kept); c != 4 {
		t.Errorf("%d lines about kept UUIDs, want one per device (4)", c)
	}
	for _, d := range n.snapshot(t).Devices {
		if want := topology.DeriveUUID(machineID, d.ID); d.UUID != want {
			t.Errorf("after the rename: device %s UUID %q, want the stored %q", d.ID, d.UUID, want)
		}
	}
}
