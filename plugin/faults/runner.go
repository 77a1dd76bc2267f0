package faults

import (
	"context"
	"sync"

	"github.com/rs/zerolog"
)

// Runner runs the fault plan of the configuration in force, and a new one
// from the start whenever a new configuration is applied. Run owns the
// plan's goroutine; Restart may be called from any goroutine, before and
// during Run. Build it with NewRunner.
type Runner struct {
	set Setter
	log zerolog.Logger

	mu     sync.Mutex
	ctx    context.Context // Run's; nil before Run starts and after it ends
	text   string          // the plan as given, for the log
	plan   []Fault
	ids    []string
	stop   context.CancelFunc
	done   chan struct{}
	ended  bool
	starts int // plans started, for the log
}

// NewRunner returns a Runner that applies the plans' health changes with
// set and logs what it does to log.
func NewRunner(set Setter, log zerolog.Logger) *Runner {
	return &Runner{set: set, log: log}
}

// Restart stops the plan running, if any, and runs plan over the devices
// ids from its start; an empty plan runs nothing. Before Run starts it only
// remembers the plan.
func (f *Runner) Restart(plan Plan, ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopLocked()
	f.text, f.plan, f.ids = plan.Text, plan.Faults, ids
	if f.ctx != nil {
		f.startLocked()
	}
}

// Run runs the plan until ctx ends, and every plan Restart gives it; it
// stops the last one and returns nil when ctx ends.
func (f *Runner) Run(ctx context.Context) error {
	f.mu.Lock()
	if f.ended {
		f.mu.Unlock()
		return nil
	}
	f.ctx = ctx
	f.startLocked()
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctx, f.ended = nil, true
	f.stopLocked()
	return nil
}

// startLocked runs the current plan, if it has faults. The caller holds
// mu.
func (f *Runner) startLocked() {
	if len(f.plan) == 0 {
		return
	}
	f.starts++
	if f.starts == 1 {
		f.log.Info().Str("plan", f.text).Msg("fault injection on")
	} else {
		f.log.Info().Str("plan", f.text).Msg("fault injection restarted with the new configuration")
	}
	ctx, stop := context.WithCancel(f.ctx)
	done := make(chan struct{})
	f.stop, f.done = stop, done
	plan, ids, set, log := f.plan, f.ids, f.set, f.log
	go func() {
		defer close(done)
		Run(ctx, plan, ids, set, Options{OnError: func(err error) { log.Error().Err(err).Msg("fault injection") }})
	}()
}

// stopLocked ends the running plan, if any, and waits for it. The caller
// holds mu.
func (f *Runner) stopLocked() {
	if f.stop == nil {
		return
	}
	f.stop()
	<-f.done
	f.stop, f.done = nil, nil
}
