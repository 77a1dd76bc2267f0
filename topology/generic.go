package topology

import (
	"fmt"
	"strconv"
)

// Generic returns the generic layout of n GPUs used when -topology is not
// given. It is a PCIe-only server in which packing still matters:
//
//   - n < 4: one NUMA node (0), one host bridge;
//   - n >= 4: two NUMA nodes; GPUs 0 … ceil(n/2)-1 on node 0, the rest on
//     node 1, each node with one host bridge;
//   - on each node, consecutive GPUs are paired under a PCIe switch (an odd
//     GPU out has a switch of its own).
//
// So two GPUs of a pair are PIX, two GPUs of the same node are PHB, and GPUs
// of different nodes are SYS. With the default -devices=4: fake-0 and fake-1
// share a switch on node 0, fake-2 and fake-3 share one on node 1. There are
// no NVLinks. The GPUs are DefaultGPUModel. The machine is named
// "generic-<n>". Generic returns an error
// wrapping ErrInvalidDeviceCount if n is not in 1..MaxGPUs.
func Generic(n int) (*Machine, error) {
	if n < 1 || n > MaxGPUs {
		return nil, fmt.Errorf("generic topology of %d GPUs, want 1..%d: %w", n, MaxGPUs, ErrInvalidDeviceCount)
	}
	nodes := 1
	if n >= 4 {
		nodes = 2
	}
	perNode := (n + nodes - 1) / nodes
	paths := make([]gpuPath, n)
	numa := make([]int, n)
	cpus := make([]string, n)
	sw := 0
	for i := range n {
		node := i / perNode
		first := i - (i-node*perNode)%2 // first GPU of the pair
		if i == first {
			sw++
		}
		paths[i] = gpuPath{numa: node, bridge: node, switches: []int{sw}, board: -1}
		numa[i] = node
		cpus[i] = strconv.Itoa(node*16) + "-" + strconv.Itoa(node*16+15)
	}
	declared := make([]int, nodes)
	for k := range declared {
		declared[k] = k
	}
	return newMachine("generic-"+strconv.Itoa(n), false, numa, cpus, declared, fromTree(paths, nil), DefaultGPUModel())
}
