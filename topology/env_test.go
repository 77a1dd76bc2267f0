package topology

import (
	"errors"
	"fmt"
	"io/fs"
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

func TestParseNUMAReport(t *testing.T) {
	for _, want := range []NUMAReport{NUMAReportAuto, NUMAReportAlways, NUMAReportNever} {
		got, err := ParseNUMAReport(want.String())
		if err != nil || got != want {
			t.Errorf("ParseNUMAReport(%q) = %v, %v; want %v", want.String(), got, err, want)
		}
	}
	for _, bad := range []string{"", "Auto", "sometimes", " auto"} {
		_, err := ParseNUMAReport(bad)
		if !errors.Is(err, ErrInvalidNUMAReport) || !strings.Contains(err.Error(), fmt.Sprintf("%q: want auto, always or never", bad)) {
			t.Errorf("ParseNUMAReport(%q) error = %v", bad, err)
		}
	}
	if s := NUMAReport(9).String(); s != "NUMAReport(9)" {
		t.Errorf("String() of an unknown mode = %q", s)
	}
}

// sysfsNodes is a sysfs with the given NUMA node directories.
func sysfsNodes(nodes ...int) fstest.MapFS {
	fs := fstest.MapFS{"devices/system/cpu/online": {Data: []byte("0-7\n")}}
	for _, n := range nodes {
		fs[fmt.Sprintf("devices/system/node/node%d/cpulist", n)] = &fstest.MapFile{Data: []byte("0-7\n")}
	}
	return fs
}

func TestMachine_ReportNUMA(t *testing.T) {
	generic4, err := Generic(4) // fake-0,1 on node 0; fake-2,3 on node 1
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		machine *Machine
		mode    NUMAReport
		sysfs   fstest.MapFS
		want    []int
		host    []int
		dropped []int
		hostErr bool
	}{
		{"auto, host has every node", generic4, NUMAReportAuto, sysfsNodes(0, 1), []int{0, 0, 1, 1}, []int{0, 1}, nil, false},
		{"auto, host lacks node 1", generic4, NUMAReportAuto, sysfsNodes(0), []int{0, 0, -1, -1}, []int{0}, []int{1}, false},
		{"auto, host has other nodes", generic4, NUMAReportAuto, sysfsNodes(1, 2), []int{-1, -1, 1, 1}, []int{1, 2}, []int{0}, false},
		{"auto, no NUMA in sysfs", generic4, NUMAReportAuto, sysfsNodes(), []int{-1, -1, -1, -1}, nil, []int{0, 1}, false},
		{"auto, unreadable node dir", generic4, NUMAReportAuto,
			fstest.MapFS{"devices/system/node": {Data: []byte("not a directory")}}, []int{-1, -1, -1, -1}, nil, []int{0, 1}, true},
		{"always ignores the host", generic4, NUMAReportAlways, nil, []int{0, 0, 1, 1}, nil, nil, false},
		{"never", generic4, NUMAReportNever, nil, []int{-1, -1, -1, -1}, nil, nil, false},
		{"unknown mode reports none", generic4, NUMAReport(7), nil, []int{-1, -1, -1, -1}, nil, nil, false},
		{"dgx-a100 NPS4 on a two-node host", MustPreset(t, "dgx-a100"), NUMAReportAuto, sysfsNodes(0, 1),
			[]int{-1, -1, 1, 1, -1, -1, -1, -1}, []int{0, 1}, []int{3, 5, 7}, false},
		{"dgx-a100 on an NPS4 host", MustPreset(t, "dgx-a100"), NUMAReportAuto, sysfsNodes(0, 1, 2, 3, 4, 5, 6, 7),
			[]int{3, 3, 1, 1, 7, 7, 5, 5}, []int{0, 1, 2, 3, 4, 5, 6, 7}, nil, false},
		{"unknown nodes are not dropped", MustParseFile(t, "pcie-8gpu-na.txt"), NUMAReportAuto, sysfsNodes(0),
			[]int{-1, -1, -1, -1, -1, -1, -1, -1}, []int{0}, nil, false},
		{"unknown nodes stay unknown with always", MustParseFile(t, "pcie-8gpu-na.txt"), NUMAReportAlways, nil,
			[]int{-1, -1, -1, -1, -1, -1, -1, -1}, nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sysfs fs.FS
			if tt.sysfs != nil {
				sysfs = tt.sysfs
			}
			got := tt.machine.ReportNUMA(tt.mode, sysfs)
			if !slices.Equal(got.Nodes, tt.want) || !slices.Equal(got.Host, tt.host) || !slices.Equal(got.Dropped, tt.dropped) {
				t.Errorf("ReportNUMA = nodes %v host %v dropped %v; want %v, %v, %v", got.Nodes, got.Host, got.Dropped, tt.want, tt.host, tt.dropped)
			}
			if (got.HostErr != nil) != tt.hostErr {
				t.Errorf("HostErr = %v, want an error: %v", got.HostErr, tt.hostErr)
			}
			for i, n := range tt.want {
				if got.Node(i) != n {
					t.Errorf("Node(%d) = %d, want %d", i, got.Node(i), n)
				}
			}
			if got.Node(-1) != -1 || got.Node(len(tt.want)) != -1 {
				t.Error("Node out of range is not -1")
			}
		})
	}
}

// A custom machine whose point-to-point NVLinks follow no pattern the
// encoding can group (each of 1024 GPUs linked to the GPUs 1, 3, 5, … 17
// places on) has links too long for a variable: they are omitted, said so,
// and every value stays under the bound.
func TestMachine_ContainerEnv_LinksOmittedWhenTooLong(t *testing.T) {
	const n = 1024
	m, err := New("irregular", make([]int, n), func(i, j int) Link {
		if d := j - i; d%2 == 1 && d <= 17 {
			return Link{NVLinks: 1, PCIe: PHB}
		}
		return Link{PCIe: PHB}
	})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	env := m.ContainerEnv(all)
	if env[EnvLinks] != "" || !strings.HasSuffix(env[EnvLinksOmitted], " bytes") {
		t.Fatalf("links %d bytes, omitted %q: want the links omitted and said so", len(env[EnvLinks]), env[EnvLinksOmitted])
	}
	for k, v := range env {
		if len(v) > MaxEnvLinksBytes {
			t.Errorf("%s is %d bytes, want at most %d", k, len(v), MaxEnvLinksBytes)
		}
	}
	// A few of them still fit and are given.
	few := m.ContainerEnv([]int{0, 1, 2, 3})
	if few[EnvLinks] == "" || few[EnvLinksOmitted] != "" {
		t.Errorf("4 GPUs: links %q, omitted %q", few[EnvLinks], few[EnvLinksOmitted])
	}
}
