package allocator

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// sharedBenchAvailable returns the available replicas of a machine of n
// GPUs with perGPU replicas each: all of them ("empty"), or ("half") a
// seeded mix where every GPU has a random number of replicas in use, so
// about half are in use, some GPUs idle and some full.
func sharedBenchAvailable(n, perGPU int, load string) []Replica {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(perGPU)))
	var out []Replica
	for g := range n {
		inUse := 0
		if load == "half" {
			inUse = rng.IntN(perGPU + 1)
		}
		for j := inUse; j < perGPU; j++ {
			out = append(out, Replica{g, j})
		}
	}
	return out
}

// BenchmarkShared measures the shared policies on 1,024 replica devices:
// 8 GPUs × 128 replicas and 128 GPUs × 8 replicas (DGX-1V blocks). Compare
// with BenchmarkPreferred/gpus=128 in the same run.
func BenchmarkShared(b *testing.B) {
	for _, shape := range []struct{ gpus, perGPU int }{{8, 128}, {128, 8}} {
		m := meshMachine(b, shape.gpus)
		for _, load := range []string{"empty", "half"} {
			avail := sharedBenchAvailable(shape.gpus, shape.perGPU, load)
			for _, name := range []string{SharedPolicyDistributed, SharedPolicyPacked} {
				p := SharedPolicies[name]
				for _, size := range []int{1, 2, 4, 8, 16} {
					b.Run(fmt.Sprintf("%dx%d/%s/%s/size=%d", shape.gpus, shape.perGPU, load, name, size), func(b *testing.B) {
						for b.Loop() {
							if _, err := p(m, shape.perGPU, avail, nil, size); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
			}
		}
	}
}
