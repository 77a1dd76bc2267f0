package telemetry

import (
	"fmt"
	"math"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Time to live of an override.
const (
	// DefaultOverrideTTL is how long an override with TTL 0 lasts.
	DefaultOverrideTTL = time.Minute
	// MaxOverrideTTL is the longest TTL: a workload that drives its own load
	// renews it, so a dead one loses its hold on the values soon.
	MaxOverrideTTL = time.Hour
)

// Override is what a workload sets for one GPU it holds: its own share of
// the GPU's utilization and memory in place of the load model's. At least
// one of the two is set. The GPU still sums its holders (capped at 100 %
// and at its memory), and derives power, temperature and clocks from the
// sum as usual.
type Override struct {
	// UtilizationPercent is the holder's utilization, 0..100; nil keeps the
	// model's.
	UtilizationPercent *float64 `json:"utilization_gpu,omitempty"`
	// MemoryUsedMiB is the holder's memory used, 0..the GPU's memory; nil
	// keeps the model's.
	MemoryUsedMiB *int `json:"memory_used_mib,omitempty"`
	// TTL is how long the override lasts, from SetOverride; 0 means
	// DefaultOverrideTTL, at most MaxOverrideTTL.
	TTL time.Duration `json:"ttl,omitempty"`
}

type overrideKey struct {
	pos int
	Holder
}

type override struct {
	setUtil, setMem bool
	util            float64
	memMiB          int
	until           time.Time
}

// SetOverride makes holder h drive its share of GPU index gpu with o until
// o's TTL has passed on the exporter's clock, replacing any override h had
// on that GPU. The GPU must be one of the exporter's (else an error wrapping
// store.ErrUnknownDevice), o must be valid (ErrInvalidOverride) and h must
// hold the GPU now (ErrNotHolder; an error reading the holders is returned
// wrapped). An override outlives nothing: it is ignored once h no longer
// holds the GPU, and forgotten once expired. It is safe for concurrent use.
func (e *Exporter) SetOverride(gpu int, h Holder, o Override) error {
	pos, ok := e.byIndex[gpu]
	if !ok {
		return fmt.Errorf("telemetry override: GPU %d: %w", gpu, store.ErrUnknownDevice)
	}
	ov, err := e.checkOverride(o)
	if err != nil {
		return fmt.Errorf("telemetry override: GPU %d, %s: %w", gpu, h.name(), err)
	}
	holders, err := e.holdersByGPU()
	if err != nil {
		return fmt.Errorf("telemetry override: GPU %d: %w", gpu, err)
	}
	held := false
	for _, g := range holders[pos] {
		held = held || g.Holder == h
	}
	if !held {
		return fmt.Errorf("telemetry override: GPU %d, %s: %w", gpu, h.name(), ErrNotHolder)
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = DefaultOverrideTTL
	}
	now := e.clock.Now()
	ov.until = now.Add(ttl)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pruneOverrides(now)
	e.overrides[overrideKey{pos, h}] = ov
	return nil
}

// ClearOverride removes holder h's override of GPU index gpu, and reports
// whether there was one in force.
func (e *Exporter) ClearOverride(gpu int, h Holder) bool {
	pos, ok := e.byIndex[gpu]
	if !ok {
		return false
	}
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pruneOverrides(now)
	k := overrideKey{pos, h}
	_, had := e.overrides[k]
	delete(e.overrides, k)
	return had
}

// checkOverride validates o (not its holder) and converts it.
func (e *Exporter) checkOverride(o Override) (override, error) {
	var ov override
	switch {
	case o.UtilizationPercent == nil && o.MemoryUsedMiB == nil:
		return ov, fmt.Errorf("neither utilization nor memory set: %w", ErrInvalidOverride)
	case o.TTL < 0 || o.TTL > MaxOverrideTTL:
		return ov, fmt.Errorf("ttl %s: want 0 (default %s) up to %s: %w", o.TTL, DefaultOverrideTTL, MaxOverrideTTL, ErrInvalidOverride)
	}
	if p := o.UtilizationPercent; p != nil {
		if math.IsNaN(*p) || *p < 0 || *p > 100 {
			return ov, fmt.Errorf("utilization %v %%: want 0..100: %w", *p, ErrInvalidOverride)
		}
		ov.setUtil, ov.util = true, *p
	}
	if m := o.MemoryUsedMiB; m != nil {
		if *m < 0 || *m > e.gm.MemoryMiB {
			return ov, fmt.Errorf("memory used %d MiB: want 0..%d (the GPU's memory): %w", *m, e.gm.MemoryMiB, ErrInvalidOverride)
		}
		ov.setMem, ov.memMiB = true, *m
	}
	return ov, nil
}

// pruneOverrides forgets the overrides expired at now. e.mu must be held.
func (e *Exporter) pruneOverrides(now time.Time) {
	for k, o := range e.overrides {
		if !o.until.After(now) {
			delete(e.overrides, k)
		}
	}
}

// activeOverrides returns a copy of the overrides in force at t (nil if
// none). e.mu must be held. Expired ones are forgotten by SetOverride and
// ClearOverride, not here: ReadingsAt may look at any time.
func (e *Exporter) activeOverrides(t time.Time) map[overrideKey]override {
	if len(e.overrides) == 0 {
		return nil
	}
	out := make(map[overrideKey]override, len(e.overrides))
	for k, o := range e.overrides {
		if o.until.After(t) {
			out[k] = o
		}
	}
	return out
}
