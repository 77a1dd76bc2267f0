package main

import (
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// TestBinary_Lifecycle_AllocateStartsFastPolling: with a slow poll of an hour,
// the holder of a new allocation is still recorded at once: Allocate tells
// the tracker to look now.
func TestBinary_Lifecycle_AllocateStartsFastPolling(t *testing.T) {
	n := newNode(t)
	pr := plugintest.StartPodResources(t, n.podResources())
	p, reg := n.start(t, "-reconcile-interval=1h", "-abandon-after=1h")
	p.logs.waitLine(t, "lifecycle tracking is on") // the first poll is done; the next slow one is an hour away
	allocate(t, reg, "fake-0")
	pr.SetPod("default", "short", "unicore.mcyou.cc/gpu", plugintest.Container{Name: "c", IDs: []string{"fake-0"}})
	doc := n.waitDump(t, "held", func(d admin.Snapshot) bool {
		return len(d.Allocations) == 1 && d.Allocations[0].State == store.StateHeld
	})
	if a := doc.Allocations[0]; a.Pod != "short" {
		t.Errorf("held record = %+v", a)
	}
}
