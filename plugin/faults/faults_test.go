package faults_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

var _ faults.Clock = (*storetest.Clock)(nil)

func TestParse_Valid(t *testing.T) {
	tests := []struct {
		name, plan string
		want       string // the plan as String prints it, faults joined by ;
	}{
		{"empty", "", ""},
		{"down", "down:fake-1:after=30s", "down:fake-1:after=30s"},
		{"ecc", "down:fake-1:xid=48:after=30s:cause=ecc", "down:fake-1:after=30s:cause=ecc:xid=48"},
		{"thermal flap", "flap:fake-2:cause=thermal:period=1m", "flap:fake-2:period=1m0s:cause=thermal"},
		{"random lost with an xid", "random:mtbf=1h:repair=5m:xid=79", "random:mtbf=1h0m0s:repair=5m0s:xid=79"},
		{"down at once for a while", "down:fake-1:after=0s:for=2m", "down:fake-1:after=0s:for=2m0s"},
		{"after has no floor", "down:fake-1:after=1ns", "down:fake-1:after=1ns"},
		{"floors are inclusive", "flap:a:period=1s;down:b:after=0s:for=1s;random:mtbf=1s:repair=1s", "flap:a:period=1s;down:b:after=0s:for=1s;random:mtbf=1s:repair=1s"},
		{"spaces around faults", " flap:fake-2:period=10s ; down:fake-0:after=1s ", "flap:fake-2:period=10s;down:fake-0:after=1s"},
		{"random", "random:mtbf=1h:repair=5m", "random:mtbf=1h0m0s:repair=5m0s"},
		{"random with devices and seed", "random:repair=5m:mtbf=1h:devices=fake-0|fake-3:seed=7", "random:mtbf=1h0m0s:repair=5m0s:devices=fake-0|fake-3:seed=7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := faults.Parse(tt.plan)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range plan {
				got = append(got, f.String())
			}
			if strings.Join(got, ";") != tt.want {
				t.Errorf("got %q, want %q", strings.Join(got, ";"), tt.want)
			}
		})
	}
}

func TestParse_BadPlan(t *testing.T) {
	tests := []struct{ name, plan, want string }{
		{"unknown kind", "explode:fake-0", `fault 1 "explode:fake-0": unknown kind "explode"`},
		{"no device", "down", "want down:<device>"},
		{"key for device", "down:after=3s", "want down:<device>"},
		{"no after", "down:fake-0", "down needs after=<duration>"},
		{"not a duration", "down:fake-0:after=soon", `after "soon": want a duration such as 30s`},
		{"negative after", "down:fake-0:after=-1s", "after -1s: must be 0 or positive"},
		{"for below the floor", "down:fake-0:after=1s:for=999ms", "for 999ms: must be at least 1s (the floor of for, period, mtbf and repair)"},
		{"for zero", "down:fake-0:after=1s:for=0s", "for 0s: must be at least 1s"},
		{"twice", "down:fake-0:after=1s:after=2s", "after given twice"},
		{"flap 1ns", "flap:fake-0:period=1ns", `fault 1 "flap:fake-0:period=1ns": period 1ns: must be at least 1s`},
		{"flap negative", "flap:fake-0:period=-10s", "period -10s: must be at least 1s"},
		{"flap takes period", "flap:fake-0:after=1s", `unexpected "after=1s": flap takes cause=, period=, xid=`},
		{"mtbf below the floor", "random:mtbf=10ms:repair=1s", "mtbf 10ms: must be at least 1s"},
		{"repair below the floor", "random:mtbf=1h:repair=500ms", "repair 500ms: must be at least 1s"},
		{"no repair", "random:mtbf=1h", "random needs repair=<duration>"},
		{"empty device", "random:mtbf=1h:repair=1m:devices=a||b", `devices: device "": want a non-empty id`},
		{"device twice", "random:mtbf=1h:repair=1m:devices=a|b|a", `devices: "a" named twice`},
		{"space in device", "random:devices=a|b :mtbf=1h:repair=1m", `device "b ": want a non-empty id without spaces`},
		{"control character", "flap:a\x00b:period=1s", `device "a\x00b"`},
		{"negative seed", "random:mtbf=1h:repair=1m:seed=-3", `seed "-3": want a positive integer`},
		{"zero seed", "random:mtbf=1h:repair=1m:seed=0", `seed "0": want a positive integer (leave seed out for a random one)`},
		{"second fault", "down:fake-0:after=1s;flap:x", `fault 2 "flap:x": flap needs period=<duration>`},
		{"unknown cause", "down:fake-0:after=1s:cause=fire", `cause "fire": want lost, ecc or thermal`},
		{"xid not a number", "down:fake-0:after=1s:xid=4x", `xid "4x": want an XID number, 1 to 999999`},
		{"xid zero", "down:fake-0:after=1s:xid=0", `xid "0": want an XID number`},
		{"ecc with a lost xid", "down:fake-0:after=1s:cause=ecc:xid=79", "xid 79 with cause ecc: not a memory error's XID"},
		{"lost with an ecc xid", "down:fake-0:after=1s:cause=lost:xid=48", "xid 48 with cause lost: a memory error's XID"},
		{"thermal with an xid", "down:fake-0:after=1s:cause=thermal:xid=79", "a thermal slowdown reports no XID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := faults.Parse(tt.plan)
			if !errors.Is(err, faults.ErrBadPlan) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrBadPlan containing %q", err, tt.want)
			}
		})
	}
}

func TestCheck_UnknownDevice(t *testing.T) {
	plan, err := faults.Parse("down:fake-0:after=1s;random:mtbf=1s:repair=1s:devices=fake-1|fake-9")
	if err != nil {
		t.Fatal(err)
	}
	err = faults.Check(plan, []string{"fake-0", "fake-1", "fake-2", "fake-3"})
	want := `fault 2 "random:mtbf=1s:repair=1s:devices=fake-1|fake-9": unknown device "fake-9": a fault must name devices of the plugin (fake-0 … fake-3)`
	if !errors.Is(err, store.ErrUnknownDevice) || err.Error() != want {
		t.Errorf("err = %v, want store.ErrUnknownDevice: %s", err, want)
	}
	if err := faults.Check(plan[:1], []string{"fake-0"}); err != nil {
		t.Errorf("valid plan: %v", err)
	}
}

// change is one Setter call, at the fake clock's time.
type change struct {
	at      time.Duration // since the start
	id      string
	healthy bool
	reason  string
}

// player runs a plan on a fake clock and records the changes.
type player struct {
	clock  *storetest.Clock
	start  time.Time
	mu     sync.Mutex
	got    []change
	errs   []error
	cancel context.CancelFunc
	done   chan struct{}
}

// play starts plan against devices; setErr, if set, is what the Setter
// returns. The player stops with the test.
func play(t *testing.T, plan string, devices []string, setErr error) *player {
	t.Helper()
	p, err := faults.Parse(plan)
	if err != nil {
		t.Fatal(err)
	}
	return playFaults(t, p, devices, setErr)
}

func playFaults(t *testing.T, plan []faults.Fault, devices []string, setErr error) *player {
	t.Helper()
	start := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	pl := &player{clock: storetest.NewClock(t, start), start: start, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	pl.cancel = cancel
	go func() {
		defer close(pl.done)
		faults.Run(ctx, plan, devices, func(id string, healthy bool, reason string) error {
			pl.mu.Lock()
			defer pl.mu.Unlock()
			pl.got = append(pl.got, change{pl.clock.Now().Sub(start), id, healthy, reason})
			return setErr
		}, faults.Options{Clock: pl.clock, OnError: func(err error) {
			pl.mu.Lock()
			defer pl.mu.Unlock()
			pl.errs = append(pl.errs, err)
		}})
	}()
	t.Cleanup(pl.stop)
	return pl
}

// steps waits until timers timers are armed and moves the clock to the
// next one, n times, then waits until timers are armed again.
func (pl *player) steps(n, timers int) {
	for range n {
		pl.clock.WaitTimers(timers)
		pl.clock.Next()
	}
	pl.clock.WaitTimers(timers)
}

// stop ends Run and waits for it.
func (pl *player) stop() {
	pl.cancel()
	<-pl.done
}

func (pl *player) changes() []change {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return append([]change(nil), pl.got...)
}

func TestRun_Down(t *testing.T) {
	const reason = "fault injection: down:fake-1:after=30s:for=2m0s"
	tests := []struct {
		name, plan string
		steps      int // clock moves to the next timer
		want       []change
	}{
		{"for good", "down:fake-1:after=30s", 1, []change{{30 * time.Second, "fake-1", false, "fault injection: down:fake-1:after=30s"}}},
		{"then heal", "down:fake-1:after=30s:for=2m", 2, []change{{30 * time.Second, "fake-1", false, reason}, {150 * time.Second, "fake-1", true, ""}}},
		{"at once", "down:fake-1:after=0s:for=1s", 1, []change{{0, "fake-1", false, "fault injection: down:fake-1:after=0s:for=1s"}, {time.Second, "fake-1", true, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl := play(t, tt.plan, []string{"fake-0", "fake-1"}, nil)
			for range tt.steps {
				pl.clock.WaitTimers(1)
				pl.clock.Next()
			}
			pl.clock.WaitTimers(0) // the fault is over
			// The last timer fired; its change may not be applied yet.
			plugintest.WaitFor(t, 10*time.Second, "every change applied", func() bool { return len(pl.changes()) >= len(tt.want) })
			pl.stop()
			if got := pl.changes(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changes = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRun_FlapAlternates(t *testing.T) {
	pl := play(t, "flap:fake-0:period=10s", []string{"fake-0"}, nil)
	pl.steps(5, 1)
	got := pl.changes()
	if len(got) != 5 {
		t.Fatalf("%d changes after 5 periods: %+v", len(got), got)
	}
	for i, c := range got {
		want := change{time.Duration(i+1) * 10 * time.Second, "fake-0", i%2 == 1, "fault injection: flap:fake-0:period=10s"}
		if c != want {
			t.Errorf("change %d = %+v, want %+v", i, c, want)
		}
	}
}

func TestRun_Random_OnlyTargets_Reproducible(t *testing.T) {
	const plan = "random:mtbf=1h:repair=5m:devices=fake-2:seed=3"
	var runs [2][]change
	for i := range runs {
		pl := play(t, plan, []string{"fake-0", "fake-1", "fake-2"}, nil)
		pl.steps(6, 1)
		pl.stop()
		runs[i] = pl.changes()
	}
	for i, c := range runs[0] {
		if c.id != "fake-2" || c.healthy != (i%2 == 1) {
			t.Fatalf("change %d = %+v, want fake-2 alternating down/up", i, c)
		}
	}
	if len(runs[0]) != 6 || !reflect.DeepEqual(runs[0], runs[1]) {
		t.Errorf("two runs with seed 3 differ:\n%+v\n%+v", runs[0], runs[1])
	}
}

// TestRun_Random_KeepsTheMean: random waits are at least MinWait and still
// average the given mean.
func TestRun_Random_KeepsTheMean(t *testing.T) {
	const n = 2000 // changes: 1000 failures, 1000 repairs
	pl := play(t, "random:mtbf=1s:repair=3s:seed=11", []string{"fake-0"}, nil)
	pl.steps(n, 1)
	pl.stop()
	got := pl.changes()
	var up, down, shortest time.Duration = 0, 0, time.Hour
	var last time.Duration
	for i, c := range got[:n] {
		wait := c.at - last
		last = c.at
		shortest = min(shortest, wait)
		if i%2 == 0 {
			up += wait
		} else {
			down += wait
		}
	}
	meanUp, meanDown := up/(n/2), down/(n/2)
	t.Logf("mean time to failure %s (want 1s), to repair %s (want 3s), shortest wait %s", meanUp, meanDown, shortest)
	if shortest < faults.MinWait {
		t.Errorf("shortest wait %s, want at least %s", shortest, faults.MinWait)
	}
	if meanUp < 950*time.Millisecond || meanUp > 1050*time.Millisecond {
		t.Errorf("mean time to failure %s, want 1s ± 5%%", meanUp)
	}
	if meanDown < 2850*time.Millisecond || meanDown > 3150*time.Millisecond {
		t.Errorf("mean time to repair %s, want 3s ± 5%%", meanDown)
	}
}

// TestRun_HugeMTBF_NoStorm: a mean time between failures near Duration's
// limit must not overflow into a storm of short waits.
func TestRun_HugeMTBF_NoStorm(t *testing.T) {
	pl := play(t, "random:mtbf=2000000h:repair=2000000h:seed=1", []string{"fake-0", "fake-1", "fake-2", "fake-3"}, nil)
	pl.clock.WaitTimers(4)
	pl.clock.Advance(24 * time.Hour)
	pl.clock.WaitTimers(4)
	for _, d := range pl.clock.Deadlines() {
		if wait := d.Sub(pl.start); wait < 1000*time.Hour {
			t.Errorf("a failure due after %s with a mean of 2,000,000 h", wait)
		}
	}
	pl.stop()
	if got := pl.changes(); len(got) != 0 {
		t.Errorf("%d failures within a day: %+v", len(got), got)
	}
}

// TestRun_Errors: a failing Setter and a fault that breaks the rules reach
// OnError naming the fault; the plan goes on.
func TestRun_Errors(t *testing.T) {
	plan := []faults.Fault{
		{Kind: faults.KindFlap, Device: "fake-0", Period: time.Nanosecond}, // not from Parse
		{Kind: faults.KindFlap, Device: "fake-1", Period: time.Second},
	}
	pl := playFaults(t, plan, []string{"fake-0", "fake-1"}, errors.New("device busy"))
	pl.steps(2, 1)
	pl.stop()
	if got := pl.changes(); len(got) != 2 || got[0].id != "fake-1" || got[1].id != "fake-1" {
		t.Errorf("changes = %+v, want two of fake-1 only", got)
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if len(pl.errs) != 3 {
		t.Fatalf("errors = %v, want the refused fault and two failed changes", pl.errs)
	}
	if err := pl.errs[0]; !errors.Is(err, faults.ErrBadPlan) || !strings.Contains(err.Error(), `fault 1 "flap:fake-0:period=1ns": period 1ns: must be at least 1s`) {
		t.Errorf("refused fault: %v", err)
	}
	if err := pl.errs[1].Error(); err != `fault 2 "flap:fake-1:period=1s": set fake-1 healthy=false: device busy` {
		t.Errorf("failed change: %s", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"down:fake-1:after=30s:for=1m", "flap:a:period=1s", "random:mtbf=1h:repair=5m:devices=a|b:seed=1",
		";;", "down::after=", "random:devices=a|b :mtbf=1h:repair=1m", "down:x:after=+1s", "random:seed=007:mtbf=1s:repair=1s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, plan string) {
		p, err := faults.Parse(plan)
		if err != nil {
			if !errors.Is(err, faults.ErrBadPlan) {
				t.Fatalf("error %v does not wrap ErrBadPlan", err)
			}
			return
		}
		var parts []string
		for _, f := range p {
			if err := f.Validate(); err != nil {
				t.Fatalf("Parse accepted %q, Validate refuses it: %v", f, err)
			}
			parts = append(parts, f.String())
		}
		again, err := faults.Parse(strings.Join(parts, ";"))
		if err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("%q does not round-trip through %q: %+v, %v; want %+v", plan, strings.Join(parts, ";"), again, err, p)
		}
	})
}

// The reason each change records says the cause as the telemetry and
// nvidia-smi read it.
func TestFault_ReasonNamesTheCause(t *testing.T) {
	for plan, want := range map[string]topology.Fault{
		"down:fake-1:after=1s":                   {Kind: topology.FaultLost},
		"down:fake-1:after=1s:xid=79":            {Kind: topology.FaultLost, XID: 79},
		"down:fake-1:after=1s:cause=ecc":         {Kind: topology.FaultECC},
		"down:fake-1:after=1s:cause=ecc:xid=64":  {Kind: topology.FaultECC, XID: 64},
		"down:fake-1:after=1s:xid=48":            {Kind: topology.FaultECC, XID: 48},
		"flap:fake-1:period=1s:cause=thermal":    {Kind: topology.FaultThermal},
		"random:mtbf=1h:repair=1m:cause=lost":    {Kind: topology.FaultLost},
		"random:mtbf=1h:repair=1m:cause=thermal": {Kind: topology.FaultThermal},
	} {
		fs, err := faults.Parse(plan)
		if err != nil {
			t.Fatal(err)
		}
		if got := topology.ParseFault("fault injection: " + fs[0].String()); got != want {
			t.Errorf("%s: the reason reads as %+v, want %+v", plan, got, want)
		}
	}
}
