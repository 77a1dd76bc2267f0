package faults_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

// changes records the health changes a Runner makes.
type changes struct {
	mu  sync.Mutex
	ids []string
}

func (c *changes) set(id string, healthy bool, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !healthy {
		c.ids = append(c.ids, id)
	}
	return nil
}

func (c *changes) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.ids {
		if x == id {
			return true
		}
	}
	return false
}

func mustPlan(t *testing.T, text string) faults.Plan {
	t.Helper()
	f, err := faults.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return faults.Plan{Text: text, Faults: f}
}

// TestRunner: a plan given before Run runs when Run starts; a new plan
// replaces it from its own start; Run returns when its context ends, and a
// Restart after that starts nothing.
func TestRunner(t *testing.T) {
	var c changes
	r := faults.NewRunner(c.set, zerolog.Nop())
	ids := []string{"fake-0", "fake-1"}
	r.Restart(mustPlan(t, "down:fake-0:after=0s"), ids)
	if c.has("fake-0") {
		t.Fatal("the plan ran before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	plugintest.WaitFor(t, 10*time.Second, "fake-0 down", func() bool { return c.has("fake-0") })
	r.Restart(mustPlan(t, "down:fake-1:after=0s"), ids)
	plugintest.WaitFor(t, 10*time.Second, "fake-1 down by the new plan", func() bool { return c.has("fake-1") })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10 s after its context ended")
	}
	r.Restart(mustPlan(t, "down:fake-1:after=0s"), ids) // after Run: nothing runs, nothing blocks
}
