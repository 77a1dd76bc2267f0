package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestMachine_ContainerEnv(t *testing.T) {
	tests := []struct {
		preset  string
		indices []int
		want    map[string]string
	}{
		{"dgx1-volta", []int{4, 0, 1}, map[string]string{
			EnvTopology:  "dgx1-volta",
			EnvNUMANodes: "0,0,1",
			EnvLinks:     "SYS;NV1=0-1;NV2=0+2", // fake-0, fake-1, fake-4 at positions 0, 1, 2
		}},
		{"pcie-8gpu", []int{0, 1, 2}, map[string]string{
			EnvTopology:  "pcie-8gpu",
			EnvNUMANodes: "0,0,0",
			EnvLinks:     "NODE;PIX=0-1",
		}},
		{"dgx-a100", []int{7}, map[string]string{
			EnvTopology:  "dgx-a100",
			EnvNUMANodes: "5",
			EnvLinks:     "",
		}},
		// Duplicates and out-of-range indices are dropped.
		{"workstation-4gpu", []int{3, 2, 3, 9, -1}, map[string]string{
			EnvTopology:  "workstation-4gpu",
			EnvNUMANodes: "0,0",
			EnvLinks:     "NV4",
		}},
		{"workstation-4gpu", nil, map[string]string{
			EnvTopology:  "workstation-4gpu",
			EnvNUMANodes: "",
			EnvLinks:     "",
		}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.preset, tt.indices), func(t *testing.T) {
			got := MustPreset(t, tt.preset).ContainerEnv(tt.indices)
			if !maps.Equal(got, tt.want) {
				t.Errorf("ContainerEnv(%v) = %v, want %v", tt.indices, got, tt.want)
			}
		})
	}
}

func TestMachine_ContainerEnv_UnknownNUMA(t *testing.T) {
	m := MustParseFile(t, "pcie-8gpu-na.txt")
	if got := m.ContainerEnv([]int{0, 5})[EnvNUMANodes]; got != "-1,-1" {
		t.Errorf("NUMA nodes = %q, want -1,-1", got)
	}
}

func ExampleMachine_ContainerEnv() {
	m, err := Preset("dgx1-volta")
	if err != nil {
		fmt.Println(err)
		return
	}
	env := m.ContainerEnv([]int{0, 1, 4})
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Printf("%s=%s\n", k, env[k])
	}
	// Output:
	// VIRTUAL_GPU_LINKS=SYS;NV1=0-1;NV2=0+2
	// VIRTUAL_GPU_NUMA_NODES=0,0,1
	// VIRTUAL_GPU_TOPOLOGY=dgx1-volta
}

func ExampleParseLinks() {
	// VIRTUAL_GPU_IDS=fake-0,fake-1,fake-4 on dgx1-volta: three positions.
	links, err := ParseLinks("SYS;NV1=0-1;NV2=0+2", 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	for p := range links.Len() {
		row := make([]string, links.Len())
		for q := range row {
			row[q] = links.Label(p, q)
		}
		fmt.Println(strings.Join(row, " "))
	}
	// Output:
	// X NV1 NV2
	// NV1 X SYS
	// NV2 SYS X
}

func ExampleParse() {
	const text = `	GPU0	GPU1	NIC0	CPU Affinity	NUMA Affinity	GPU NUMA ID
GPU0	 X 	NV4	PIX	0-15	0		N/A
GPU1	NV4	 X 	PIX	0-15	0		N/A
NIC0	PIX	PIX	 X

Legend:

  X    = Self
`
	m, err := Parse("my-node.txt", strings.NewReader(text))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Name(), m.Len(), m.Link(0, 1), m.NUMA(1))
	// Output: my-node 2 NV4 0
}

func ExampleGeneric() {
	m, err := Generic(4)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m)
	fmt.Println(m.Link(0, 1), m.Link(1, 2))
	// Output:
	// generic-4: 4 GPUs, NUMA nodes [0 1], 0 NVLinked pairs
	// PIX SYS
}

func TestHostNUMANodes(t *testing.T) {
	tests := []struct {
		name string
		fs   fstest.MapFS
		want []int
	}{
		{"two nodes", fstest.MapFS{
			"devices/system/node/node0/cpulist": {Data: []byte("0-15\n")},
			"devices/system/node/node1/cpulist": {Data: []byte("16-31\n")},
			"devices/system/node/possible":      {Data: []byte("0-1\n")},
			"devices/system/node/has_cpu":       {Data: []byte("0-1\n")},
		}, []int{0, 1}},
		{"sorted numerically", fstest.MapFS{
			"devices/system/node/node10/cpulist": {},
			"devices/system/node/node2/cpulist":  {},
			"devices/system/node/node007":        {},
			"devices/system/node/nodeX":          {},
		}, []int{2, 10}},
		{"no node dir", fstest.MapFS{"devices/system/cpu/online": {Data: []byte("0-3")}}, nil},
		{"empty fs", fstest.MapFS{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HostNUMANodes(tt.fs)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("HostNUMANodes = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHostNUMANodes_NotADirectory(t *testing.T) {
	_, err := HostNUMANodes(fstest.MapFS{"devices/system/node": {Data: []byte("x")}})
	if err == nil {
		t.Error("want an error when the node path is a file")
	}
}
