package kube_test

import (
	"fmt"
	"maps"
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func ExampleGPULabels() {
	m, err := topology.Preset("dgx-a100")
	if err != nil {
		fmt.Println(err)
		return
	}
	labels, err := kube.GPULabels(kube.LabelSpec{Machine: m, Topology: "dgx-a100", Replicas: 4, Profile: "a100-shared"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Printf("%s=%s\n", k, labels[k])
	}
	// Output:
	// unicore.mcyou.cc/gpu.compute.major=8
	// unicore.mcyou.cc/gpu.compute.minor=0
	// unicore.mcyou.cc/gpu.count=8
	// unicore.mcyou.cc/gpu.family=ampere
	// unicore.mcyou.cc/gpu.machine=DGX-A100
	// unicore.mcyou.cc/gpu.memory=40960
	// unicore.mcyou.cc/gpu.nvlink=true
	// unicore.mcyou.cc/gpu.product=NVIDIA-A100-SXM4-40GB-SHARED
	// unicore.mcyou.cc/gpu.profile=a100-shared
	// unicore.mcyou.cc/gpu.replicas=4
	// unicore.mcyou.cc/gpu.sharing-strategy=time-slicing
	// unicore.mcyou.cc/gpu.topology=dgx-a100
}

func ExampleSelectedProfile() {
	for _, labels := range []map[string]string{
		{kube.ConfigLabel: "a100-shared"},
		{kube.ConfigLabel: ""},
		{},
	} {
		name, ok := kube.SelectedProfile(labels)
		fmt.Printf("%q %v\n", name, ok)
	}
	// Output:
	// "a100-shared" true
	// "" false
	// "" false
}
