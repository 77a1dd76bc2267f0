// Package faults injects device failures into a running plugin, for test
// clusters: a device that goes down after a delay, a device that flaps, and
// devices that fail at random and get repaired.
//
// A fault plan is a list of faults separated by ";", each "kind:arg:key=value…":
//
//	down:fake-1:after=30s           fake-1 turns unhealthy 30 s after start, for good
//	down:fake-1:after=30s:for=2m    … and healthy again 2 minutes later
//	flap:fake-2:period=10s          fake-2 turns unhealthy, healthy, unhealthy … every 10 s
//	random:mtbf=1h:repair=5m        every device fails after an exponentially distributed
//	                                time with mean 1 h and is repaired after one with mean 5 m
//	random:mtbf=1h:repair=5m:devices=fake-0|fake-3:seed=7
//	                                only those devices, with a fixed seed (reproducible)
//
// Durations are Go durations (300ms, 10s, 1h30m) and must be positive. The
// reason recorded with each change names the fault, e.g. "fault injection:
// flap fake-2 every 10s". Every change goes through a Setter, which the plugin
// wires to its SetHealth with the cause "fault-injection", so the change is
// stored in the history and reaches the kubelet.
package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind is a fault kind.
type Kind string

// The fault kinds.
const (
	KindDown   Kind = "down"
	KindFlap   Kind = "flap"
	KindRandom Kind = "random"
)

// Fault is one parsed fault. The zero value is not a valid fault.
type Fault struct {
	Kind Kind
	// Device is the target of down and flap.
	Device string
	// After is when a down fault strikes, counted from Run.
	After time.Duration
	// For is how long a down fault lasts; zero means for good.
	For time.Duration
	// Period is a flap fault's time between changes.
	Period time.Duration
	// MTBF and Repair are a random fault's mean time between failures and
	// mean repair time, per device.
	MTBF, Repair time.Duration
	// Devices restricts a random fault; empty means every device.
	Devices []string
	// Seed makes a random fault reproducible; zero means a random seed.
	Seed uint64
}

// String is the fault in plan syntax.
func (f Fault) String() string {
	switch f.Kind {
	case KindDown:
		s := fmt.Sprintf("down:%s:after=%s", f.Device, f.After)
		if f.For > 0 {
			s += ":for=" + f.For.String()
		}
		return s
	case KindFlap:
		return fmt.Sprintf("flap:%s:period=%s", f.Device, f.Period)
	case KindRandom:
		s := fmt.Sprintf("random:mtbf=%s:repair=%s", f.MTBF, f.Repair)
		if len(f.Devices) > 0 {
			s += ":devices=" + strings.Join(f.Devices, "|")
		}
		if f.Seed != 0 {
			s += ":seed=" + strconv.FormatUint(f.Seed, 10)
		}
		return s
	}
	return string(f.Kind)
}

// Parse reads a fault plan. An empty plan is no faults.
func Parse(plan string) ([]Fault, error) {
	var out []Fault
	for i, item := range strings.Split(plan, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		f, err := parseOne(item)
		if err != nil {
			return nil, fmt.Errorf("%w: fault %d %q: %w", ErrBadPlan, i+1, item, err)
		}
		out = append(out, f)
	}
	return out, nil
}

func parseOne(item string) (Fault, error) {
	parts := strings.Split(item, ":")
	f := Fault{Kind: Kind(parts[0])}
	args := parts[1:]
	allowed := map[string]bool{}
	switch f.Kind {
	case KindDown, KindFlap:
		if len(args) == 0 || args[0] == "" || strings.Contains(args[0], "=") {
			return f, fmt.Errorf("want %s:<device>:…", f.Kind)
		}
		f.Device, args = args[0], args[1:]
		if f.Kind == KindDown {
			allowed["after"], allowed["for"] = true, true
		} else {
			allowed["period"] = true
		}
	case KindRandom:
		allowed["mtbf"], allowed["repair"], allowed["devices"], allowed["seed"] = true, true, true, true
	default:
		return f, fmt.Errorf("unknown kind %q: want down, flap or random", parts[0])
	}
	seen := map[string]bool{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !allowed[k] {
			return f, fmt.Errorf("unexpected %q: %s takes %s", a, f.Kind, keys(allowed))
		}
		if seen[k] {
			return f, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "after":
			f.After, err = duration(k, v, true)
		case "for":
			f.For, err = duration(k, v, false)
		case "period":
			f.Period, err = duration(k, v, false)
		case "mtbf":
			f.MTBF, err = duration(k, v, false)
		case "repair":
			f.Repair, err = duration(k, v, false)
		case "devices":
			f.Devices = strings.Split(v, "|")
			if slices.Contains(f.Devices, "") {
				return f, fmt.Errorf("devices %q: want ids separated by |", v)
			}
		case "seed":
			f.Seed, err = strconv.ParseUint(v, 10, 64)
			if err != nil {
				err = fmt.Errorf("seed %q: want a non-negative integer", v)
			}
		}
		if err != nil {
			return f, err
		}
	}
	for _, need := range map[Kind][]string{KindDown: {"after"}, KindFlap: {"period"}, KindRandom: {"mtbf", "repair"}}[f.Kind] {
		if !seen[need] {
			return f, fmt.Errorf("%s needs %s=<duration>", f.Kind, need)
		}
	}
	return f, nil
}

func keys(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, k+"=")
	}
	slices.Sort(ks)
	return strings.Join(ks, ", ")
}

func duration(k, v string, zeroOK bool) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || (d == 0 && !zeroOK) {
		return 0, fmt.Errorf("%s %q: want a positive duration such as 30s", k, v)
	}
	return d, nil
}

// Check verifies that every device a plan names is among known.
func Check(plan []Fault, known []string) error {
	for _, f := range plan {
		names := f.Devices
		if f.Device != "" {
			names = []string{f.Device}
		}
		for _, id := range names {
			if !slices.Contains(known, id) {
				return fmt.Errorf("fault %q: %w %q", f, ErrUnknownDevice, id)
			}
		}
	}
	return nil
}

// maxWait caps one random wait (about 292 years is Duration's limit).
const maxWait = 100 * 365 * 24 * time.Hour

// Setter applies one injected health change.
type Setter func(id string, healthy bool, reason string) error

// Run plays the plan against devices until ctx ends, calling set for every
// change. Failed calls are passed to onError (which may be nil) and the plan
// goes on. Run returns when ctx ends and every fault's goroutine is done.
func Run(ctx context.Context, plan []Fault, devices []string, set Setter, onError func(error)) {
	if onError == nil {
		onError = func(error) {}
	}
	apply := func(id string, healthy bool, reason string) {
		if err := set(id, healthy, reason); err != nil {
			onError(fmt.Errorf("inject %s into %s: %w", reason, id, err))
		}
	}
	var wg sync.WaitGroup
	for _, f := range plan {
		switch f.Kind {
		case KindDown:
			wg.Go(func() { runDown(ctx, f, apply) })
		case KindFlap:
			wg.Go(func() { runFlap(ctx, f, apply) })
		case KindRandom:
			targets := f.Devices
			if len(targets) == 0 {
				targets = devices
			}
			seed := f.Seed
			if seed == 0 {
				seed = rand.Uint64()
			}
			for i, id := range targets {
				rng := rand.New(rand.NewPCG(seed, uint64(i)))
				wg.Go(func() { runRandom(ctx, f, id, rng, apply) })
			}
		}
	}
	wg.Wait()
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func runDown(ctx context.Context, f Fault, apply func(string, bool, string)) {
	reason := "fault injection: " + f.String()
	if !sleep(ctx, f.After) {
		return
	}
	apply(f.Device, false, reason)
	if f.For > 0 && sleep(ctx, f.For) {
		apply(f.Device, true, "")
	}
}

func runFlap(ctx context.Context, f Fault, apply func(string, bool, string)) {
	reason := "fault injection: " + f.String()
	healthy := true
	for sleep(ctx, f.Period) {
		healthy = !healthy
		apply(f.Device, healthy, reason)
	}
}

func runRandom(ctx context.Context, f Fault, id string, rng *rand.Rand, apply func(string, bool, string)) {
	reason := "fault injection: " + f.String()
	exp := func(mean time.Duration) time.Duration {
		d := min(rng.ExpFloat64()*float64(mean), float64(maxWait)) // no Duration overflow
		return max(time.Duration(d), time.Millisecond)
	}
	for {
		if !sleep(ctx, exp(f.MTBF)) {
			return
		}
		apply(id, false, reason)
		if !sleep(ctx, exp(f.Repair)) {
			return
		}
		apply(id, true, "")
	}
}
