package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

var _ store.Clock = (*storetest.Clock)(nil)

type pruneReport struct {
	at  time.Time
	r   store.PruneResult
	err error
}

// startPruner runs a pruner on s with a fake clock until the test ends and
// returns the clock and the reports.
func startPruner(t *testing.T, s *store.Store, o store.PruneOptions) (*storetest.Clock, *store.Pruner, chan pruneReport) {
	t.Helper()
	c := storetest.NewClock(t, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	reports := make(chan pruneReport, 100)
	p, err := store.NewPruner(s, o, store.PrunerConfig{Clock: c, Report: func(r store.PruneResult, err error) {
		reports <- pruneReport{c.Now(), r, err}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil at the end of its context", err)
		}
	})
	return c, p, reports
}

func nextReport(t *testing.T, reports chan pruneReport) pruneReport {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no prune within 10s")
		return pruneReport{}
	}
}

func noReport(t *testing.T, reports chan pruneReport, when string) {
	t.Helper()
	select {
	case r := <-reports:
		t.Fatalf("%s: unexpected prune %+v", when, r)
	default:
	}
}

func TestPruner_Schedule(t *testing.T) {
	s, _ := mustDevices(t, 1)
	over := func(n int) { // records n allocations over the limit of 5
		for range n {
			mustRecord(t, s, store.Allocation{DeviceIDs: []string{"fake-0"}})
		}
	}
	over(8)
	c, p, reports := startPruner(t, s, store.PruneOptions{MaxRecords: 5})
	gap, interval := store.DefaultPruneMinGap, store.DefaultPruneInterval
	t0 := c.Now()

	// At start.
	if r := nextReport(t, reports); r.err != nil || r.r.Allocations != 3 || !r.at.Equal(t0) {
		t.Fatalf("first prune = %+v, want 3 deleted at start", r)
	}
	c.WaitTimers(1) // the interval

	// A kick right after a prune waits for the gap.
	over(1)
	p.Kick()
	c.WaitTimers(2) // the interval and the gap
	noReport(t, reports, "kicked within the gap")
	for range 20 { // more kicks while the gap runs are coalesced
		p.Kick()
	}
	c.Advance(gap / 2)
	noReport(t, reports, "half the gap")
	c.Advance(gap / 2)
	if r := nextReport(t, reports); r.r.Allocations != 1 || !r.at.Equal(t0.Add(gap)) {
		t.Errorf("kicked prune = %+v, want 1 deleted at the end of the gap", r)
	}
	c.WaitTimers(1)
	c.Advance(5 * gap)
	noReport(t, reports, "the coalesced kicks were served by one prune")

	// A kick after a quiet gap prunes at once.
	over(2)
	p.Kick()
	if r := nextReport(t, reports); r.r.Allocations != 2 || !r.at.Equal(t0.Add(6*gap)) {
		t.Errorf("kick after a quiet gap: %+v, want 2 deleted at once", r)
	}

	// Every interval without kicks.
	over(1)
	c.WaitTimers(1)
	c.Advance(interval - 6*gap)
	if r := nextReport(t, reports); r.r.Allocations != 1 || !r.at.Equal(t0.Add(interval)) {
		t.Errorf("periodic prune = %+v, want 1 deleted after the interval", r)
	}
}

// TestPruner_AgeUsesClock: the age limit is measured on the pruner's clock.
func TestPruner_AgeUsesClock(t *testing.T) {
	s, _ := mustDevices(t, 1) // the store's own clock: 2026-03-01 12:00:01 on
	c, _, reports := startPruner(t, s, store.PruneOptions{MaxAge: time.Hour})
	if r := nextReport(t, reports); r.r.HealthEvents != 0 {
		t.Fatalf("first prune = %+v, want nothing old yet", r)
	}
	c.WaitTimers(1)
	c.Advance(store.DefaultPruneInterval * 70)
	if r := nextReport(t, reports); r.r.HealthEvents != 1 {
		t.Errorf("prune 70 minutes on = %+v, want the device-added event deleted", r)
	}
}

func TestPruner_ReportsErrors(t *testing.T) {
	s, _ := mustDevices(t, 1)
	path := s.Path()
	s.Close()
	ro, err := store.Open(path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	c, p, reports := startPruner(t, ro, store.PruneOptions{MaxRecords: 1})
	if r := nextReport(t, reports); !errors.Is(r.err, store.ErrReadOnly) {
		t.Errorf("prune of a read-only store reported %+v, want ErrReadOnly", r)
	}
	// Run goes on.
	c.WaitTimers(1)
	c.Advance(store.DefaultPruneMinGap)
	p.Kick()
	if r := nextReport(t, reports); !errors.Is(r.err, store.ErrReadOnly) {
		t.Errorf("second report %+v", r)
	}
}

func TestNewPruner_Invalid(t *testing.T) {
	s, _ := mustDevices(t, 1)
	for name, tc := range map[string]struct {
		o store.PruneOptions
		c store.PrunerConfig
	}{
		"negative records":  {store.PruneOptions{MaxRecords: -1}, store.PrunerConfig{}},
		"negative bytes":    {store.PruneOptions{MaxBytes: -1}, store.PrunerConfig{}},
		"negative interval": {store.PruneOptions{}, store.PrunerConfig{Interval: -time.Second}},
		"negative gap":      {store.PruneOptions{}, store.PrunerConfig{MinGap: -time.Second}},
	} {
		if _, err := store.NewPruner(s, tc.o, tc.c); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}
