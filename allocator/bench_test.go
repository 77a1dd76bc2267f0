package allocator

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// meshMachine returns n/8 DGX-1V blocks (hybrid cube mesh of NV1/NV2 pairs,
// two NUMA nodes of two PCIe switches each per block), written in the YAML
// format with repeated blocks. The irregular mesh is the hardest case for
// the search.
func meshMachine(tb testing.TB, n int) *topology.Machine {
	tb.Helper()
	yml := fmt.Sprintf(`apiVersion: virtual-gpu.unicore.mcyou.cc/v1
kind: Topology
name: mesh-%d
numaNodes:
  - count: %d
    hostBridges:
      - switches:
          - count: 2
            gpus: 2
nvlinks:
  - pairs: [[0, 1], [0, 2], [1, 3], [2, 6], [3, 7], [4, 5], [4, 6], [5, 7]]
    links: 1
    repeat: %d
    stride: 8
  - pairs: [[0, 3], [0, 4], [1, 2], [1, 5], [2, 3], [4, 7], [5, 6], [6, 7]]
    links: 2
    repeat: %d
    stride: 8
`, n, n/4, n/8, n/8)
	m, err := topology.Parse(fmt.Sprintf("mesh-%d.yaml", n), strings.NewReader(yml))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// benchAvailable returns the whole machine up to 16 GPUs (the exact search's
// worst case), else a seeded random half of it.
func benchAvailable(n int) []int {
	if n <= MaxExactGPUs {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all
	}
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	return rng.Perm(n)[:n/2]
}

func BenchmarkPreferred(b *testing.B) {
	for _, n := range []int{8, 16, 32, 64, 128} {
		m := meshMachine(b, n)
		avail := benchAvailable(n)
		for _, size := range []int{1, 2, 3, 4, 8} {
			b.Run(fmt.Sprintf("gpus=%d/size=%d", n, size), func(b *testing.B) {
				for b.Loop() {
					if _, err := Preferred(m, avail, nil, size); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkPreferred_Generic(b *testing.B) {
	for _, n := range []int{8, 16, 32, 64, 128} {
		m, err := topology.Generic(n)
		if err != nil {
			b.Fatal(err)
		}
		avail := benchAvailable(n)
		for _, size := range []int{1, 2, 3, 4, 8} {
			b.Run(fmt.Sprintf("gpus=%d/size=%d", n, size), func(b *testing.B) {
				for b.Loop() {
					if _, err := Preferred(m, avail, nil, size); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkPreferred_Preset(b *testing.B) {
	for _, name := range []string{"dgx-a100", "dgx2", "hgx-h100"} {
		m, err := topology.Preset(name)
		if err != nil {
			b.Fatal(err)
		}
		avail := benchAvailable(m.Len())
		for _, size := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("%s/size=%d", name, size), func(b *testing.B) {
				for b.Loop() {
					if _, err := Preferred(m, avail, nil, size); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
