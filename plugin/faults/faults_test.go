package faults_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
)

func TestParse_Valid(t *testing.T) {
	tests := []struct {
		plan string
		want string // the plan as String prints it, faults joined by ;
	}{
		{"", ""},
		{"down:fake-1:after=30s", "down:fake-1:after=30s"},
		{"down:fake-1:after=0s:for=2m", "down:fake-1:after=0s:for=2m0s"},
		{" flap:fake-2:period=10s ; down:fake-0:after=1s ", "flap:fake-2:period=10s;down:fake-0:after=1s"},
		{"random:mtbf=1h:repair=5m", "random:mtbf=1h0m0s:repair=5m0s"},
		{"random:repair=5m:mtbf=1h:devices=fake-0|fake-3:seed=7", "random:mtbf=1h0m0s:repair=5m0s:devices=fake-0|fake-3:seed=7"},
	}
	for _, tt := range tests {
		t.Run(tt.plan, func(t *testing.T) {
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
	tests := []struct{ plan, want string }{
		{"explode:fake-0", `unknown kind "explode"`},
		{"down", "want down:<device>"},
		{"down:after=3s", "want down:<device>"},
		{"down:fake-0", "down needs after=<duration>"},
		{"down:fake-0:after=soon", `after "soon": want a positive duration`},
		{"down:fake-0:after=-1s", `after "-1s"`},
		{"down:fake-0:after=1s:for=0s", `for "0s"`},
		{"down:fake-0:after=1s:after=2s", "after given twice"},
		{"flap:fake-0:period=0s", `period "0s"`},
		{"flap:fake-0:after=1s", `unexpected "after=1s": flap takes period=`},
		{"random:mtbf=1h", "random needs repair=<duration>"},
		{"random:mtbf=1h:repair=1m:devices=a||b", "want ids separated by |"},
		{"random:mtbf=1h:repair=1m:seed=-3", `seed "-3"`},
		{"down:fake-0:after=1s;flap:x", "fault 2"},
	}
	for _, tt := range tests {
		t.Run(tt.plan, func(t *testing.T) {
			_, err := faults.Parse(tt.plan)
			if !errors.Is(err, faults.ErrBadPlan) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrBadPlan containing %q", err, tt.want)
			}
		})
	}
}

func TestCheck_UnknownDevice(t *testing.T) {
	plan, _ := faults.Parse("down:fake-0:after=1s;random:mtbf=1s:repair=1s:devices=fake-1|fake-9")
	err := faults.Check(plan, []string{"fake-0", "fake-1"})
	if !errors.Is(err, faults.ErrUnknownDevice) || !strings.Contains(err.Error(), `"fake-9"`) {
		t.Errorf("err = %v, want ErrUnknownDevice naming fake-9", err)
	}
	if err := faults.Check(plan[:1], []string{"fake-0"}); err != nil {
		t.Errorf("valid plan: %v", err)
	}
}

// change is one Setter call.
type change struct {
	id      string
	healthy bool
	reason  string
}

// record runs plan until n changes arrived (or the deadline) and returns them.
func record(t *testing.T, plan string, devices []string, n int) []change {
	t.Helper()
	p, err := faults.Parse(plan)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []change
	enough := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		faults.Run(ctx, p, devices, func(id string, healthy bool, reason string) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, change{id, healthy, reason})
			if len(got) == n {
				close(enough)
			}
			return nil
		}, nil)
	}()
	select {
	case <-enough:
	case <-time.After(10 * time.Second):
		t.Errorf("fewer than %d changes within 10s", n)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(got) < n {
		t.Fatalf("got %d changes, want %d: %+v", len(got), n, got)
	}
	return got
}

func TestRun_DownThenHeal(t *testing.T) {
	got := record(t, "down:fake-1:after=5ms:for=5ms", []string{"fake-0", "fake-1"}, 2)
	if len(got) != 2 || got[0].id != "fake-1" || got[0].healthy || !got[1].healthy {
		t.Fatalf("changes = %+v, want fake-1 down then up", got)
	}
	if !strings.Contains(got[0].reason, "fault injection: down:fake-1") {
		t.Errorf("reason = %q", got[0].reason)
	}
}

func TestRun_FlapAlternates(t *testing.T) {
	got := record(t, "flap:fake-0:period=2ms", []string{"fake-0"}, 5)
	for i, c := range got[:5] {
		if want := i%2 == 1; c.healthy != want || c.id != "fake-0" {
			t.Fatalf("change %d = %+v, want healthy=%v", i, c, want)
		}
	}
}

func TestRun_RandomFailsAndRepairsOnlyTargets(t *testing.T) {
	got := record(t, "random:mtbf=2ms:repair=2ms:devices=fake-2:seed=3", []string{"fake-0", "fake-1", "fake-2"}, 4)
	for i, c := range got[:4] {
		if c.id != "fake-2" || c.healthy != (i%2 == 1) {
			t.Fatalf("change %d = %+v, want fake-2 alternating down/up", i, c)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"down:fake-1:after=30s:for=1m", "flap:a:period=1s", "random:mtbf=1h:repair=5m:devices=a|b:seed=1", ";;", "down::after="} {
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
		for _, f := range p {
			again, err := faults.Parse(f.String())
			if err != nil || len(again) != 1 || again[0].String() != f.String() {
				t.Fatalf("%q does not round-trip: %v %v", f, again, err)
			}
		}
	})
}

// TestRun_HugeMTBF_NoStorm: a mean time between failures near Duration's
// limit must not overflow into a storm of 1 ms failures.
func TestRun_HugeMTBF_NoStorm(t *testing.T) {
	p, err := faults.Parse("random:mtbf=2000000h:repair=2000000h:seed=1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var calls int
	var mu sync.Mutex
	faults.Run(ctx, p, []string{"fake-0", "fake-1", "fake-2", "fake-3"}, func(string, bool, string) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return nil
	}, nil)
	if calls != 0 {
		t.Errorf("%d failures within 200ms with a mean of 2,000,000 h", calls)
	}
}
