package allocator_test

import (
	"fmt"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func ExamplePreferred() {
	m, err := topology.Preset("dgx1-volta")
	if err != nil {
		fmt.Println(err)
		return
	}
	// GPU 1 is busy; a 4-GPU request gets the intact quad of NUMA node 1.
	set, err := allocator.Preferred(m, []int{0, 2, 3, 4, 5, 6, 7}, nil, 4)
	fmt.Println(set, err)
	// GPU 0 must be included (an init container had it): its NV2 partner on
	// the same socket joins it.
	set, err = allocator.Preferred(m, []int{0, 2, 3, 4, 5, 6, 7}, []int{0}, 2)
	fmt.Println(set, err)
	// Output:
	// [4 5 6 7] <nil>
	// [0 3] <nil>
}

func ExamplePreferred_leavesPairsIntact() {
	m, err := topology.Preset("workstation-4gpu") // NVLink bridges 0-1 and 2-3
	if err != nil {
		fmt.Println(err)
		return
	}
	// GPU 2 is busy: a 1-GPU request takes its partner 3, keeping 0-1 intact.
	set, _ := allocator.Preferred(m, []int{0, 1, 3}, nil, 1)
	fmt.Println(set)
	// Output: [3]
}

func ExamplePreferred_invalid() {
	m, _ := topology.Generic(4)
	_, err := allocator.Preferred(m, []int{0, 1}, []int{2}, 2)
	fmt.Println(err)
	// Output: must-include device fake-2: must-include device not available
}

func ExampleScore() {
	m, _ := topology.Preset("dgx1-volta")
	fmt.Println(allocator.Score(m, []int{2, 3}), allocator.Score(m, []int{0, 5}))
	// Output: 255 10
}

func ExamplePolicies() {
	m, _ := topology.Generic(4) // fake-0+1 on node 0, fake-2+3 on node 1
	for _, name := range allocator.PolicyNames() {
		set, _ := allocator.Policies[name](m, []int{1, 2, 3}, nil, 2)
		fmt.Println(name, set)
	}
	// Output:
	// best-connected [2 3]
	// lowest-index [1 2]
}
