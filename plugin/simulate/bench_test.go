package simulate_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkSimulator_Nodes measures what a simulated device-plugin node
// costs the Simulator: the time from Run to every node's GPUs published,
// and the live heap per node after a GC (fake API server; DRA nodes are
// left out: the fake client ignores field selectors, so each node's
// slice informer would cache every node's slices). The baseline is the
// same run with one node.
func BenchmarkSimulator_Nodes(b *testing.B) {
	for _, n := range []int{1, 100, 400} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				var before runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				objs := make([]any, n)
				for i := range objs {
					node := kwokNode(fmt.Sprintf("kwok-%d", i), nil)
					node.UID = types.UID(fmt.Sprintf("uid-%d", i))
					objs[i] = node
				}
				r := startRig(b, objs...)
				start := time.Now()
				deadline := start.Add(5 * time.Minute)
				for {
					list, err := r.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
					if err != nil {
						b.Fatal(err)
					}
					done := 0
					for _, nd := range list.Items {
						if q, ok := nd.Status.Allocatable[corev1.ResourceName(gpu)]; ok && q.Value() == 8 {
							done++
						}
					}
					if done == n {
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("%d of %d nodes published", done, n)
					}
					time.Sleep(20 * time.Millisecond)
				}
				b.ReportMetric(float64(time.Since(start).Microseconds())/float64(n), "µs/node")
				var after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n)/1024, "KiB/node")
				r.stop()
			}
		})
	}
}
