package plugin

import (
	"context"
	"errors"
	"sync"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
)

// Registrar keeps a Server registered with the kubelet under the current
// resource name: one Runner at a time, all on the same Server and
// socket name. A new profile that changes the resource name ends the
// current Runner (its gRPC server stops and its socket goes: the kubelet
// marks the old resource's devices unhealthy) and starts one for the new
// name; Run, which owns the Runners' goroutines, keeps going. Build it with
// NewRegistrar; call Run once. Its methods are safe for concurrent use.
type Registrar struct {
	base RunnerConfig // every field but ResourceName

	// mu serializes Run's start and end with Switch, for the whole of a
	// switch.
	mu    sync.Mutex
	ctx   context.Context // Run's; nil before Run starts and after it ends
	stop  context.CancelFunc
	done  chan struct{} // closed when the current Runner's Run returned
	errc  chan error    // a Runner's error ends Run
	name  string        // the resource name registered, or to register
	ended bool          // Run has ended: nothing starts again

	// statMu guards cur and past together, for the metrics.
	statMu sync.Mutex
	cur    *Runner // nil between Runners
	past   uint64  // registrations of the Runners before cur
}

var _ metrics.Registration = (*Registrar)(nil)

// NewRegistrar returns a Registrar for base (its ResourceName is ignored)
// that registers name first.
func NewRegistrar(base RunnerConfig, name string) *Registrar {
	return &Registrar{base: base, name: name, errc: make(chan error, 1)}
}

// Run starts a Runner for the current resource name and keeps one running
// until ctx ends; then it ends the current Runner and returns nil. A
// Runner's error (its socket path is taken, see Runner.Run) ends Run
// with that error.
func (r *Registrar) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return errors.New("registrar: run twice")
	}
	r.ctx = ctx
	err := r.startLocked()
	r.mu.Unlock()
	if err == nil {
		select {
		case <-ctx.Done():
		case err = <-r.errc:
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctx, r.ended = nil, true
	r.stopLocked()
	return err
}

// ResourceName returns the resource name registered (or to be registered).
func (r *Registrar) ResourceName() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.name
}

// Switch changes the resource name to name: it ends the current Runner
// (waiting until its socket is gone), calls between (which swaps the
// catalog), and starts a Runner for name, or, if between fails, for the
// old name again, and returns between's error. Before Run starts it only
// calls between and sets the name Run registers; after Run ended it calls
// between only. The same name is between alone.
func (r *Registrar) Switch(name string, between func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == r.name {
		return between()
	}
	r.stopLocked()
	err := between()
	if err == nil {
		r.name = name
	}
	if r.ctx == nil {
		return err
	}
	if serr := r.startLocked(); serr != nil {
		return serr
	}
	return err
}

// startLocked starts a Runner for r.name under r.ctx. The caller holds mu.
func (r *Registrar) startLocked() error {
	cfg := r.base
	cfg.ResourceName = r.name
	runner, err := NewRunner(cfg)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(r.ctx)
	done := make(chan struct{})
	r.stop, r.done = stop, done
	r.statMu.Lock()
	r.cur = runner
	r.statMu.Unlock()
	go func() {
		defer close(done)
		if err := runner.Run(ctx); err != nil {
			select {
			case r.errc <- err:
			default: // one error ends Run; another is moot
			}
		}
	}()
	return nil
}

// stopLocked ends the current Runner, if any, and waits for it. The
// caller holds mu.
func (r *Registrar) stopLocked() {
	if r.stop == nil {
		return
	}
	r.stop()
	<-r.done
	r.stop, r.done = nil, nil
	r.statMu.Lock()
	r.past += r.cur.Registrations()
	r.cur = nil
	r.statMu.Unlock()
}

// Registered reports whether the current Runner is registered with the
// kubelet right now; false between two Runners.
func (r *Registrar) Registered() bool {
	r.statMu.Lock()
	defer r.statMu.Unlock()
	return r.cur != nil && r.cur.Registered()
}

// Registrations counts the successful Register calls of every Runner so
// far, under every resource name.
func (r *Registrar) Registrations() uint64 {
	r.statMu.Lock()
	defer r.statMu.Unlock()
	n := r.past
	if r.cur != nil {
		n += r.cur.Registrations()
	}
	return n
}
