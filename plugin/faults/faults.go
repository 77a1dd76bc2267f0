// Package faults injects device failures into a running plugin, for test
// clusters: a device that goes down after a delay, a device that flaps, and
// devices that fail at random and get repaired.
//
// A fault plan is a list of faults separated by ";", each "kind:arg:key=value…":
//
//	down:fake-1:after=30s           fake-1 turns unhealthy 30 s after start, for good
//	down:fake-1:after=30s:for=2m    … and healthy again 2 minutes later
//	flap:fake-2:period=10s          fake-2 turns unhealthy, healthy, unhealthy … every 10 s
//	random:mtbf=1h:repair=5m        every device fails after a random time with mean 1 h
//	                                and is repaired after one with mean 5 m
//	random:mtbf=1h:repair=5m:devices=fake-0|fake-3:seed=7
//	                                only those devices, with a fixed seed (reproducible)
//	down:fake-1:after=30s:cause=ecc:xid=48
//	                                a double-bit ECC error: fake-1 is unhealthy but its GPU
//	                                still answers, with its ECC counts and a remapped row
//	flap:fake-2:period=1m:cause=thermal
//	                                fake-2 overheats (slowdown temperature, clocks halved)
//
// Every kind takes cause=lost|ecc|thermal (default lost: the GPU fell off
// the bus and answers nothing) and xid=N (the XID it reports; with cause
// ecc one of a memory error's, 48, 63, 64, 92, 94 or 95; none with cause
// thermal). They are words of the recorded reason, which the telemetry and
// nvidia-smi read the failure from (topology.ParseFault).
//
// Durations are Go durations (300ms, 10s, 1h30m). after may be 0 or any
// positive duration; for, period, mtbf and repair must be at least MinPeriod
// (1 s): a shorter one would flood the log, the history and the kubelet.
// A random wait is MinWait (100 ms) plus an exponentially distributed time,
// so its mean is the given mean and no two changes of a device come closer
// than MinWait. A seed is a positive integer; without one each start draws
// its own. Device ids are non-empty and contain no spaces, control
// characters or any of ";:|="; a random fault names each device once. Check
// refuses a plan naming a device the plugin lacks.
//
// The reason recorded with each change names the fault, e.g. "fault
// injection: flap:fake-2:period=10s". Every change goes through a Setter,
// which the plugin wires to its SetHealth with the cause "fault-injection",
// so the change is stored in the history and reaches the kubelet.
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
	"unicode"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Limits of a plan.
const (
	// MinPeriod is the floor of for, period, mtbf and repair.
	MinPeriod = time.Second
	// MinWait is the shortest random wait; random waits keep their mean.
	MinWait = 100 * time.Millisecond
	// maxWait caps one random wait (Duration's limit is about 292 years).
	maxWait = 100 * 365 * 24 * time.Hour
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
	// Cause is what the failed device shows (topology.ParseFault): ""
	// or CauseLost, a GPU off the bus; CauseECC, a memory error (the GPU
	// answers with its ECC counts and remapped rows); CauseThermal, a GPU
	// held at its slowdown temperature.
	Cause Cause
	// XID is the XID the failure reports, 0 for none.
	XID int
}

// Cause is what a fault's devices show while they are down.
type Cause string

// The causes.
const (
	CauseLost    Cause = "lost"
	CauseECC     Cause = "ecc"
	CauseThermal Cause = "thermal"
)

// String is the fault in plan syntax. It is the reason recorded with each
// change: its cause and XID words ("cause=ecc", "xid=48") are what the
// telemetry and nvidia-smi read the failure from (topology.ParseFault).
func (f Fault) String() string {
	s := f.base()
	if f.Cause != "" {
		s += ":cause=" + string(f.Cause)
	}
	if f.XID != 0 {
		s += ":xid=" + strconv.Itoa(f.XID)
	}
	return s
}

func (f Fault) base() string {
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

// Parse reads a fault plan and checks its rules (see the package doc). An
// empty plan is no faults. Errors wrap ErrBadPlan and name the fault.
func Parse(plan string) ([]Fault, error) {
	var out []Fault
	for i, item := range strings.Split(plan, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		f, err := parseOne(item)
		if err == nil {
			err = f.Validate()
		}
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
	allowed["cause"], allowed["xid"] = true, true
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
			f.After, err = duration(k, v)
		case "for":
			f.For, err = duration(k, v)
			if err == nil && f.For == 0 {
				err = fmt.Errorf("for %s: must be at least %s (leave for out to stay down for good)", f.For, MinPeriod)
			}
		case "period":
			f.Period, err = duration(k, v)
		case "mtbf":
			f.MTBF, err = duration(k, v)
		case "repair":
			f.Repair, err = duration(k, v)
		case "devices":
			f.Devices = strings.Split(v, "|")
		case "cause":
			f.Cause = Cause(v)
			if f.Cause != CauseLost && f.Cause != CauseECC && f.Cause != CauseThermal {
				err = fmt.Errorf("cause %q: want lost, ecc or thermal", v)
			}
		case "xid":
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 1 || n > 999999 || strconv.Itoa(n) != v {
				err = fmt.Errorf("xid %q: want an XID number, 1 to 999999", v)
			}
			f.XID = n
		case "seed":
			f.Seed, err = strconv.ParseUint(v, 10, 64)
			if err != nil || f.Seed == 0 {
				err = fmt.Errorf("seed %q: want a positive integer (leave seed out for a random one)", v)
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

func duration(k, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a duration such as 30s", k, v)
	}
	return d, nil
}

// validateCause checks that the cause and the XID agree: what the reason
// says (topology.ParseFault) is the cause given.
func (f Fault) validateCause() error {
	switch {
	case f.Cause != "" && f.Cause != CauseLost && f.Cause != CauseECC && f.Cause != CauseThermal:
		return fmt.Errorf("cause %q: want lost, ecc or thermal", f.Cause)
	case f.XID < 0 || f.XID > 999999:
		return fmt.Errorf("xid %d: want an XID number, 1 to 999999", f.XID)
	case f.XID == 0:
		return nil
	case f.Cause == CauseThermal:
		return fmt.Errorf("xid %d with cause thermal: a thermal slowdown reports no XID", f.XID)
	}
	ecc := topology.ParseFault("xid="+strconv.Itoa(f.XID)).Kind == topology.FaultECC
	switch {
	case f.Cause == CauseECC && !ecc:
		return fmt.Errorf("xid %d with cause ecc: not a memory error's XID (48, 63, 64, 92, 94, 95)", f.XID)
	case f.Cause == CauseLost && ecc:
		return fmt.Errorf("xid %d with cause lost: a memory error's XID, whose GPU still answers (cause ecc)", f.XID)
	}
	return nil
}

// Validate checks f against the rules of the package doc: a known kind, valid
// device ids, after not negative, for (if set), period, mtbf and repair at
// least MinPeriod, a random fault's devices named once. The error names the
// value and the rule.
func (f Fault) Validate() error {
	if err := f.validateCause(); err != nil {
		return err
	}
	floor := func(k string, d time.Duration) error {
		if d < MinPeriod {
			return fmt.Errorf("%s %s: must be at least %s (the floor of for, period, mtbf and repair)", k, d, MinPeriod)
		}
		return nil
	}
	switch f.Kind {
	case KindDown:
		switch {
		case f.After < 0:
			return fmt.Errorf("after %s: must be 0 or positive", f.After)
		case f.For != 0:
			if err := floor("for", f.For); err != nil {
				return err
			}
		}
		return validID(f.Device)
	case KindFlap:
		if err := floor("period", f.Period); err != nil {
			return err
		}
		return validID(f.Device)
	case KindRandom:
		if err := floor("mtbf", f.MTBF); err != nil {
			return err
		}
		if err := floor("repair", f.Repair); err != nil {
			return err
		}
		for i, id := range f.Devices {
			if err := validID(id); err != nil {
				return fmt.Errorf("devices: %w", err)
			}
			if slices.Contains(f.Devices[:i], id) {
				return fmt.Errorf("devices: %q named twice", id)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown kind %q: want down, flap or random", f.Kind)
}

// validID checks a device id of a plan.
func validID(id string) error {
	if id == "" || strings.ContainsAny(id, ";:|=") || strings.ContainsFunc(id, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return fmt.Errorf("device %q: want a non-empty id without spaces, control characters or any of ;:|=", id)
	}
	return nil
}

// targets are the devices f names; empty for a random fault on every device.
func (f Fault) targets() []string {
	if f.Kind == KindRandom {
		return f.Devices
	}
	return []string{f.Device}
}

// Check verifies that every device plan names is among known. The error
// names the fault and the device and wraps store.ErrUnknownDevice.
func Check(plan []Fault, known []string) error {
	for i, f := range plan {
		for _, id := range f.targets() {
			if !slices.Contains(known, id) {
				return fmt.Errorf("fault %d %q: %w %q: a fault must name devices of the plugin (%s)", i+1, f, store.ErrUnknownDevice, id, span(known))
			}
		}
	}
	return nil
}

// span names a list of ids briefly: "a, b, c" or "a … z".
func span(ids []string) string {
	switch {
	case len(ids) == 0:
		return "none"
	case len(ids) <= 3:
		return strings.Join(ids, ", ")
	}
	return ids[0] + " … " + ids[len(ids)-1]
}

// Setter applies one injected health change.
type Setter func(id string, healthy bool, reason string) error

// Clock is where Run waits. Implementations must be safe for concurrent use.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// NewTimer starts a timer: c receives once d has passed; stop disarms
	// it and reports whether it was still armed.
	NewTimer(d time.Duration) (c <-chan time.Time, stop func() bool)
}

// systemClock is the wall clock.
type systemClock struct{}

var _ Clock = systemClock{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Options are the optional parts of Run; the zero value drops errors and
// uses the system clock.
type Options struct {
	// OnError receives every failed Setter call and every fault Run
	// refuses; nil drops them.
	OnError func(error)
	// Clock times the faults; nil means the system clock.
	Clock Clock
}

// Run plays the plan against devices (the targets of a random fault without
// devices=) until ctx ends, calling set for every change. Failed calls are
// passed to opts.OnError and the plan goes on; a fault that breaks the rules
// (see Fault.Validate; Parse never returns one) is passed to opts.OnError
// and not played. Run returns when ctx ends and every fault's goroutine is
// done.
func Run(ctx context.Context, plan []Fault, devices []string, set Setter, opts Options) {
	onError, clock := opts.OnError, opts.Clock
	if onError == nil {
		onError = func(error) {}
	}
	if clock == nil {
		clock = systemClock{}
	}
	sleep := func(d time.Duration) bool {
		c, stop := clock.NewTimer(d)
		defer stop()
		select {
		case <-c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var wg sync.WaitGroup
	for i, f := range plan {
		if err := f.Validate(); err != nil {
			onError(fmt.Errorf("%w: fault %d %q: %w", ErrBadPlan, i+1, f, err))
			continue
		}
		reason := "fault injection: " + f.String()
		apply := func(id string, healthy bool, reason string) {
			if err := set(id, healthy, reason); err != nil {
				onError(fmt.Errorf("fault %d %q: set %s healthy=%t: %w", i+1, f, id, healthy, err))
			}
		}
		switch f.Kind {
		case KindDown:
			wg.Go(func() {
				if !sleep(f.After) {
					return
				}
				apply(f.Device, false, reason)
				if f.For > 0 && sleep(f.For) {
					apply(f.Device, true, "")
				}
			})
		case KindFlap:
			wg.Go(func() {
				for healthy := true; sleep(f.Period); {
					healthy = !healthy
					apply(f.Device, healthy, reason)
				}
			})
		case KindRandom:
			targets := f.Devices
			if len(targets) == 0 {
				targets = devices
			}
			seed := f.Seed
			if seed == 0 {
				seed = rand.Uint64()
			}
			for j, id := range targets {
				rng := rand.New(rand.NewPCG(seed, uint64(j)))
				wg.Go(func() {
					for sleep(draw(rng, f.MTBF)) {
						apply(id, false, reason)
						if !sleep(draw(rng, f.Repair)) {
							return
						}
						apply(id, true, "")
					}
				})
			}
		}
	}
	wg.Wait()
}

// draw is a random wait of the given mean: MinWait plus an exponential time
// of mean mean-MinWait (mean is at least MinPeriod), capped at maxWait.
func draw(rng *rand.Rand, mean time.Duration) time.Duration {
	d := float64(MinWait) + rng.ExpFloat64()*float64(mean-MinWait)
	return time.Duration(min(d, float64(maxWait))) // no Duration overflow
}
