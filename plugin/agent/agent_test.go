package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// journal records, in order, what the parts of an agent were told.
type journal struct {
	mu    sync.Mutex
	lines []string
	st    *store.Store
}

func (j *journal) add(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, s)
}

func (j *journal) take() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := j.lines
	j.lines = nil
	return out
}

// target is an agent.Target that journals what it publishes, and what the
// store says at that moment (the change must be stored first).
type target struct {
	j       *journal
	applied []*agent.Set
	refuse  error
}

func (t *target) Apply(set *agent.Set, commit func() ([]store.Device, error)) error {
	if t.refuse != nil {
		return t.refuse
	}
	if _, err := commit(); err != nil {
		return err
	}
	t.applied = append(t.applied, set)
	t.j.add("apply " + set.Config.Profile)
	return nil
}

func (t *target) SetHealth(gpu string, ids []string, healthy bool, reason string) error {
	d, err := t.j.st.Device(gpu)
	if err != nil {
		return err
	}
	t.j.add("target " + gpu + " " + strings.Join(ids, ",") + " stored-healthy=" + map[bool]string{true: "yes", false: "no"}[d.Healthy])
	return nil
}

// observer journals the health changes the metrics are told.
type observer struct{ j *journal }

func (o observer) HealthChanged(id string, healthy bool, cause string) {
	o.j.add("observed " + id + " " + cause)
}

// tracker does nothing: no PodResources API here.
type tracker struct{}

func (tracker) FollowResourceName(string) {}
func (tracker) Notify()                   {}

// source serves the configuration of the profile its label names, from a
// map the test edits.
type source struct {
	profiles map[string]agent.Config
	fallback string
}

func (s *source) Fallback() agent.Choice {
	return agent.Choice{Config: s.profiles[s.fallback], Why: store.WhyDefault, Detail: "-config-default=" + s.fallback}
}
func (s *source) Profiles() bool { return true }
func (s *source) Select(sel agent.Selection) (agent.Choice, error) {
	label := sel.Profile
	if label == "" {
		return s.Fallback(), nil
	}
	c, ok := s.profiles[label]
	if !ok {
		return agent.Choice{}, errors.New("no profile " + label)
	}
	return agent.Choice{Config: c, Why: store.WhyNodeLabel, Detail: "label=" + label}, nil
}
func (s *source) Reload() error { return nil }
func (s *source) Dir() string   { return "profiles" }

// config is a profile of n generic GPUs (shared replicas ways), with the
// view's files under dir.
func config(t *testing.T, dir, profile string, n, replicas int) agent.Config {
	t.Helper()
	cfg := agent.Config{Profile: profile, GPUs: plugintest.GPUConfig(t, "generic-"+strconv.Itoa(n), gpuset.Sharing{Replicas: replicas}),
		View: plugintest.ViewConfig(dir)}
	cfg.View.NvidiaSMI = false
	return cfg
}

// started is an agent begun and started on a real state file and status
// directory, with a journaling target.
type started struct {
	ag     *agent.Agent
	src    *source
	st     *store.Store
	target *target
	j      *journal
	dir    string
	logs   *plugintest.LogBuffer
}

func start(t *testing.T) *started {
	t.Helper()
	dir := plugintest.ShortTempDir(t)
	st := storetest.MustOpenPath(t, filepath.Join(dir, "state.db"), store.Options{})
	src := &source{fallback: "four", profiles: map[string]agent.Config{
		"four":   config(t, dir, "four", 4, 1),
		"shared": config(t, dir, "shared", 2, 2),
	}}
	logs := &plugintest.LogBuffer{}
	log := zerolog.New(logs)
	ag := agent.New(agent.Options{Store: st, Source: src, Identity: "node-a", Logger: log})
	set, stored, err := ag.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if set.Config.Profile != "four" || len(stored) != 4 {
		t.Fatalf("Begin: profile %q, %d stored devices", set.Config.Profile, len(stored))
	}
	j := &journal{st: st}
	files, err := view.NewFiles(src.profiles["four"].View, st, "", "node-a", log)
	if err != nil {
		t.Fatal(err)
	}
	loads, err := loadsock.NewServer(loadsock.Config{Dir: filepath.Join(dir, "load"), MaxSockets: ag.MaxLoadSockets, Logger: log,
		Handler: loadsock.HandlerFunc(func(context.Context, uint64, loadsock.Request) (int, error) { return 0, nil })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loads.Close() })
	tg := &target{j: j}
	err = ag.Start(context.Background(), agent.Parts{Files: files, Faults: faults.NewRunner(ag.HealthSetter(store.CauseFaultInjection), log),
		Tracker: tracker{}, Loads: loads, Targets: []agent.Target{tg}, Observer: observer{j}})
	if err != nil {
		t.Fatal(err)
	}
	j.take() // the start's observations
	return &started{ag: ag, src: src, st: st, target: tg, j: j, dir: dir, logs: logs}
}

// statusHealthy reads GPU id's status file.
func (s *started) statusHealthy(t *testing.T, id string) bool {
	t.Helper()
	d, err := s.st.Device(id)
	if err != nil {
		t.Fatal(err)
	}
	g, err := status.Read(os.DirFS(filepath.Join(s.dir, "status")), d.UUID)
	if err != nil {
		t.Fatal(err)
	}
	return g.Health.Healthy
}

// TestAgent_SetHealth_OnePath: a health change is stored, written to the
// GPU's status file, published by every target (with the store already
// saying so) and counted, in that order, once; the same change again does
// nothing; a replica or an unknown id is refused before anything changes.
func TestAgent_SetHealth_OnePath(t *testing.T) {
	s := start(t)
	if err := s.ag.SetHealth("fake-2", false, "XID 79", store.CauseAdmin); err != nil {
		t.Fatal(err)
	}
	want := []string{"target fake-2 fake-2 stored-healthy=no", "observed fake-2 admin"}
	if got := s.j.take(); !slices.Equal(got, want) {
		t.Errorf("journal %q, want %q", got, want)
	}
	if s.statusHealthy(t, "fake-2") {
		t.Error("the status file still says healthy")
	}
	if d := s.ag.Devices(); d[2].Healthy || d[2].Reason != "XID 79" {
		t.Errorf("the agent's devices: %+v", d[2])
	}
	if n := s.logs.Count(`"device":"fake-2","healthy":false,"reason":"XID 79","cause":"admin","message":"device health changed"`); n != 1 {
		t.Errorf("%d health change lines, want 1:\n%s", n, s.logs)
	}
	if err := s.ag.SetHealth("fake-2", false, "XID 79", store.CauseAdmin); err != nil {
		t.Fatal(err)
	}
	if got := s.j.take(); len(got) != 0 {
		t.Errorf("the same health again: %q, want nothing", got)
	}
	for _, id := range []string{"fake-9", "fake-1::0"} {
		if err := s.ag.SetHealth(id, false, "x", store.CauseAdmin); err == nil {
			t.Errorf("SetHealth(%s) = nil, want a refusal", id)
		}
	}
	if err := s.ag.SetHealth("fake-9", false, "x", store.CauseAdmin); !errors.Is(err, store.ErrUnknownDevice) {
		t.Errorf("SetHealth(fake-9) = %v, want store.ErrUnknownDevice", err)
	}
	if got := s.j.take(); len(got) != 0 {
		t.Errorf("refused changes reached %q", got)
	}
}

// TestAgent_LiveChange: a new label's profile is stored with its event and
// applied to the target; a change to an equal configuration applies
// nothing; a target that refuses leaves the set in force, in the store
// too; a shared GPU's health reaches all its replicas.
func TestAgent_LiveChange(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	events := func() int {
		e, err := s.st.ConfigEvents(store.ConfigFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(e)
	}
	before := events()
	s.ag.Reload(ctx, agent.CauseSIGHUP) // the same configuration: nothing applied, nothing stored
	if got := s.j.take(); len(got) != 0 || events() != before {
		t.Errorf("an unchanged reload applied %q, %d events (was %d)", got, events(), before)
	}
	// A label selects the shared profile: applied, stored.
	s.src.fallback = "shared"
	s.ag.Reload(ctx, agent.CauseSIGHUP)
	if got := s.j.take(); !slices.Equal(got, []string{"apply shared"}) {
		t.Errorf("journal %q, want the shared profile applied", got)
	}
	if set := s.ag.Current(); set.Config.Profile != "shared" || set.GPUs.Len() != 4 || events() != before+1 {
		t.Errorf("in force %q with %d devices, %d events; want shared, 4, %d", set.Config.Profile, set.GPUs.Len(), events(), before+1)
	}
	if err := s.ag.SetHealth("fake-1", false, "XID 48", store.CauseFaultInjection); err != nil {
		t.Fatal(err)
	}
	if got := s.j.take(); len(got) != 2 || got[0] != "target fake-1 fake-1::0,fake-1::1 stored-healthy=no" {
		t.Errorf("journal %q, want both replicas of fake-1 published", got)
	}
	// A target that refuses: the set in force stays, and so does the store.
	s.target.refuse = errors.New("kubelet gone")
	s.src.fallback = "four"
	s.ag.Reload(ctx, agent.CauseSIGHUP)
	if set := s.ag.Current(); set.Config.Profile != "shared" {
		t.Errorf("in force %q after a refused change, want shared", set.Config.Profile)
	}
	stored, err := s.st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range stored {
		if d.ID == "fake-3" && !d.Removed {
			t.Errorf("fake-3 of the refused profile is stored present")
		}
	}
	if !strings.Contains(s.logs.String(), "kubelet gone") {
		t.Errorf("the refusal is not logged:\n%s", s.logs)
	}
}

// TestAgent_LiveChangeToAnotherKubeletAPI: a profile that serves the GPUs
// through another kubelet API than the one the plugin started with is
// refused, logged at each SIGHUP naming the profile and both APIs; nothing
// is applied or stored, and the set in force stays.
func TestAgent_LiveChangeToAnotherKubeletAPI(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	dra := config(t, s.dir, "dra", 4, 1)
	dra.KubeletAPI = agent.KubeletAPIDRA
	s.src.profiles["dra"] = dra
	events, err := s.st.ConfigEvents(store.ConfigFilter{})
	if err != nil {
		t.Fatal(err)
	}
	s.src.fallback = "dra"
	for range 2 {
		s.ag.Reload(ctx, agent.CauseSIGHUP)
	}
	if got := s.j.take(); len(got) != 0 {
		t.Errorf("journal %q, want nothing applied", got)
	}
	if set := s.ag.Current(); set.Config.Profile != "four" {
		t.Errorf("in force %q, want four", set.Config.Profile)
	}
	after, err := s.st.ConfigEvents(store.ConfigFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(events) {
		t.Errorf("%d configuration events, want %d: the refused change is stored", len(after), len(events))
	}
	want := `profile \"dra\" serves the GPUs through the kubelet API \"dra\", but the plugin started with \"device-plugin\": the kubelet API is chosen at start; restart the plugin (delete its pod) to switch`
	if n := s.logs.Count(want); n != 2 {
		t.Errorf("%d refusal lines, want one per SIGHUP:\n%s", n, s.logs)
	}
	// A profile on the same API applies again.
	s.src.fallback = "shared"
	s.ag.Reload(ctx, agent.CauseSIGHUP)
	if got := s.j.take(); !slices.Equal(got, []string{"apply shared"}) {
		t.Errorf("journal %q, want the shared profile applied", got)
	}
}
