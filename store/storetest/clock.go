package storetest

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// Clock is a fake clock for code with a clock seam (podresources.Clock,
// faults.Clock: Now and NewTimer; store.Clock: Now and After): time stands
// still until the test moves it with Advance, Set or Next, and timers fire
// only then. Build it with NewClock;
// safe for concurrent use.
//
// A test drives a goroutine that waits on the clock in steps: move the clock,
// then WaitTimers for the goroutine to have done what the firing caused and
// to wait again.
type Clock struct {
	t testing.TB

	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever timers change
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

// NewClock returns a Clock that reads start until it is moved.
func NewClock(t testing.TB, start time.Time) *Clock {
	return &Clock{t: t, now: start, changed: make(chan struct{})}
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a channel that receives the clock's time once the clock
// has been moved d past now (at once if d <= 0, without arming), and a stop
// function that disarms the timer and reports whether it was armed.
func (c *Clock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &fakeTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		ft.c <- c.now
		return ft.c, func() bool { return false }
	}
	c.timers = append(c.timers, ft)
	c.signalLocked()
	return ft.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.timers, ft)
		if i < 0 {
			return false
		}
		c.timers = slices.Delete(c.timers, i, i+1)
		c.signalLocked()
		return true
	}
}

// After is NewTimer without its stop function (store.Clock): a timer that
// stays armed until it fires.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	ch, _ := c.NewTimer(d)
	return ch
}

// Advance moves the clock forward by d and fires every timer due by then,
// earliest first. A timer armed after Advance returns never fires for time
// that has already passed.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
}

// Set moves the clock to t (forward; a t before now is ignored, time does
// not run back) and fires every timer due by then, as Advance does.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	c.fireLocked()
}

// Next moves the clock to the earliest armed timer, fires it (and any other
// due then) and returns how far the clock moved. It fails the test if no
// timer is armed.
func (c *Clock) Next() time.Duration {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		c.t.Fatal("fake clock: Next with no timer armed")
	}
	at := slices.MinFunc(c.timers, func(a, b *fakeTimer) int { return a.at.Compare(b.at) }).at
	moved := at.Sub(c.now)
	c.now = at
	c.fireLocked()
	return moved
}

// Timers is how many timers are armed.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Deadlines are the times the armed timers fire, earliest first.
func (c *Clock) Deadlines() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, len(c.timers))
	for i, ft := range c.timers {
		out[i] = ft.at
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// WaitTimers waits until exactly n timers are armed: the code under test has
// handled what the last move caused and waits on the clock again. It fails
// the test after 10 s of real time.
func (c *Clock) WaitTimers(n int) {
	c.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		got, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			c.t.Fatalf("fake clock: %d timers armed after 10s, want %d", got, n)
		}
	}
}

func (c *Clock) fireLocked() {
	slices.SortStableFunc(c.timers, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	n := 0
	for n < len(c.timers) && !c.timers[n].at.After(c.now) {
		c.timers[n].c <- c.now
		n++
	}
	if n > 0 {
		c.timers = slices.Delete(c.timers, 0, n)
		c.signalLocked()
	}
}

func (c *Clock) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}
