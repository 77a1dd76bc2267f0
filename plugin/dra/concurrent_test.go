package dra

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestConcurrentHealthAndPrepare: health changes (the agent's path) while
// claims are prepared and unprepared (the kubelet's) share no memory
// unguarded: run with -race.
func TestConcurrentHealthAndPrepare(t *testing.T) {
	r := newRig(t, "dgx-a100")
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 50 {
			if err := r.d.SetHealth("fake-1", []string{"fake-1"}, i%2 == 1, "XID 79"); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 20 {
		uid := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		mustPrepare(t, r.d, claimOf(uid, fmt.Sprintf("c%d", i), result("gpus", "fake-0"), result("gpus", "fake-1")))
		if err := r.d.Unprepare(ctx, uid, fmt.Sprintf("default/c%d", i), "test"); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}
