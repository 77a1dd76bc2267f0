package allocator_test

import (
	"fmt"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// replicas lists every replica of GPUs 0..n-1 with perGPU replicas each,
// except, per GPU, the inUse highest ones.
func replicas(n, perGPU int, inUse map[int]int) []allocator.Replica {
	var out []allocator.Replica
	for g := range n {
		for j := range perGPU - inUse[g] {
			out = append(out, allocator.Replica{GPU: g, Index: j})
		}
	}
	return out
}

func ExampleDistributed() {
	m, _ := topology.Preset("dgx1-volta")
	// An empty machine, 4 replicas per GPU: two GPUs joined by two NVLinks
	// under one PCIe switch.
	got, err := allocator.Distributed(m, 4, replicas(8, 4, nil), nil, 2)
	fmt.Println(got, err)
	// GPUs 0-5 have a replica in use: the two least used GPUs, 6 and 7.
	got, _ = allocator.Distributed(m, 4, replicas(8, 4, map[int]int{0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}), nil, 2)
	fmt.Println(got)
	// Output:
	// [fake-2::0 fake-3::0] <nil>
	// [fake-6::0 fake-7::0]
}

func ExamplePacked() {
	m, _ := topology.Preset("workstation-4gpu") // NVLink bridges 0-1 and 2-3
	// GPUs 0-2 have 3 of 4 replicas in use. Five replicas need one idle
	// GPU (3) and one more replica: from 3's NVLink partner, 2.
	got, _ := allocator.Packed(m, 4, replicas(4, 4, map[int]int{0: 3, 1: 3, 2: 3}), nil, 5)
	fmt.Println(got)
	// Output: [fake-2::0 fake-3::0 fake-3::1 fake-3::2 fake-3::3]
}

func ExampleSharedPolicies() {
	m, _ := topology.Generic(4) // fake-0+1 on node 0, fake-2+3 on node 1
	// GPU 0 has one of its 2 replicas in use. Packed must touch one idle
	// GPU either way, and takes both of its replicas rather than two GPUs.
	avail := replicas(4, 2, map[int]int{0: 1})
	for _, name := range allocator.SharedPolicyNames() {
		got, _ := allocator.SharedPolicies[name](m, 2, avail, nil, 2)
		fmt.Println(name, got)
	}
	// Output:
	// distributed [fake-2::0 fake-3::0]
	// lowest-index [fake-0::0 fake-1::0]
	// packed [fake-1::0 fake-1::1]
}
