package store

import (
	"context"
	"fmt"
	"time"
)

// Defaults of PrunerConfig.
const (
	// DefaultPruneInterval is how often a Pruner prunes without being
	// kicked.
	DefaultPruneInterval = time.Minute
	// DefaultPruneMinGap is the least time between two prunes a Kick
	// starts.
	DefaultPruneMinGap = time.Second
)

// Clock is the time source of a Pruner: the wall clock in production, a
// fake one in tests. Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// PrunerConfig configures NewPruner. The zero value prunes every minute and
// at most once a second after kicks, on the wall clock, reporting nothing.
type PrunerConfig struct {
	// Interval is how often Run prunes without being kicked. Zero means
	// DefaultPruneInterval (1m).
	Interval time.Duration
	// MinGap is the least time from the start of one prune to the start of
	// a prune a Kick asks for: kicks within it are coalesced into one prune
	// at its end. Zero means DefaultPruneMinGap (1s).
	MinGap time.Duration
	// Clock is the time source, also the reference time for
	// PruneOptions.MaxAge. Nil means the wall clock.
	Clock Clock
	// Report, if set, is called after every prune with its result, on Run's
	// goroutine (it should not block for long). Errors from a prune cut
	// short by the end of Run's context are not reported. The store logs
	// nothing: this is where the caller logs.
	Report func(PruneResult, error)
}

// Pruner keeps a Store's history bounded off the caller's path: it prunes
// when Run starts, every Interval, and after Kick, at most once per MinGap.
// Kick is safe to call from any goroutine at any time; Run must be called
// once. The zero Pruner is not usable; get one from NewPruner.
type Pruner struct {
	st   *Store
	opts PruneOptions
	cfg  PrunerConfig
	kick chan struct{}
}

// NewPruner returns a Pruner pruning st with o (o.Now is ignored: each prune
// uses the Clock's time). Negative limits or durations are ErrInvalid.
func NewPruner(st *Store, o PruneOptions, c PrunerConfig) (*Pruner, error) {
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("new pruner: %w", err)
	}
	if c.Interval < 0 || c.MinGap < 0 {
		return nil, fmt.Errorf("new pruner: negative interval %s or gap %s: %w", c.Interval, c.MinGap, ErrInvalid)
	}
	if c.Interval == 0 {
		c.Interval = DefaultPruneInterval
	}
	if c.MinGap == 0 {
		c.MinGap = DefaultPruneMinGap
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	return &Pruner{st: st, opts: o, cfg: c, kick: make(chan struct{}, 1)}, nil
}

// Kick asks for a prune soon, e.g. after an allocation was recorded. It
// never blocks; kicks before Run starts or while a prune is due are
// coalesced.
func (p *Pruner) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run prunes until ctx ends, then returns nil. A failed prune is reported
// and retried at the next occasion; it does not end Run.
func (p *Pruner) Run(ctx context.Context) error {
	var last time.Time // start of the last prune
	prune := func() {
		select { // a kick that came before this prune is served by it
		case <-p.kick:
		default:
		}
		last = p.cfg.Clock.Now()
		o := p.opts
		o.Now = last
		r, err := p.st.Prune(ctx, o)
		if err != nil && ctx.Err() != nil {
			return
		}
		if p.cfg.Report != nil {
			p.cfg.Report(r, err)
		}
	}
	prune()
	tick := p.cfg.Clock.After(p.cfg.Interval)
	var gap <-chan time.Time // set while a kicked prune waits for MinGap
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			prune()
			gap = nil
			tick = p.cfg.Clock.After(p.cfg.Interval)
		case <-gap:
			prune()
			gap = nil
		case <-p.kick:
			if gap != nil {
				continue
			}
			if wait := last.Add(p.cfg.MinGap).Sub(p.cfg.Clock.Now()); wait > 0 {
				gap = p.cfg.Clock.After(wait)
				continue
			}
			prune()
		}
	}
}
