package allocator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// MustMachine returns the preset or generic machine called name
// ("generic-<n>" for Generic(n)) or fails the test.
func MustMachine(t testing.TB, name string) *topology.Machine {
	t.Helper()
	var m *topology.Machine
	var err error
	if n, ok := strings.CutPrefix(name, "generic-"); ok {
		var k int
		fmt.Sscan(n, &k)
		m, err = topology.Generic(k)
	} else {
		m, err = topology.Preset(name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func all(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func without(n int, busy ...int) []int {
	var out []int
	for i := range n {
		if !slices.Contains(busy, i) {
			out = append(out, i)
		}
	}
	return out
}

type preferredCase struct {
	name      string
	machine   string
	available []int // nil: all GPUs
	must      []int
	size      int
	want      []int
}

func runPreferredCases(t *testing.T, tests []preferredCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := MustMachine(t, tt.machine)
			avail := tt.available
			if avail == nil {
				avail = all(m.Len())
			}
			got, err := Preferred(m, avail, tt.must, tt.size)
			if err != nil {
				t.Fatal(err)
			}
			checkValid(t, got, avail, tt.must, tt.size)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Preferred = %v (score %d), want %v (score %d)", got, Score(m, got), tt.want, Score(m, tt.want))
			}
			if b := brute(m, avail, tt.must, tt.size); !slices.Equal(got, b) {
				t.Errorf("Preferred = %v, brute force %v", got, b)
			}
		})
	}
}

func TestAllocator_Preferred_Presets(t *testing.T) {
	runPreferredCases(t, []preferredCase{
		{name: "dgx1-volta pair takes NV2 on one switch", machine: "dgx1-volta", size: 2, want: []int{2, 3}},
		{name: "dgx1-volta triple", machine: "dgx1-volta", size: 3, want: []int{0, 2, 3}},
		{name: "dgx1-volta quad", machine: "dgx1-volta", size: 4, want: []int{0, 1, 2, 3}},
		{name: "dgx1-volta quad, first quad broken", machine: "dgx1-volta", available: without(8, 0), size: 4, want: []int{4, 5, 6, 7}},
		{name: "dgx1-volta whole machine", machine: "dgx1-volta", size: 8, want: all(8)},
		{name: "dgx1-pascal quad", machine: "dgx1-pascal", size: 4, want: []int{0, 1, 2, 3}},
		{name: "dgx1-pascal pair on a switch", machine: "dgx1-pascal", size: 2, want: []int{0, 1}},
		{name: "dgx-a100 pair on one NUMA node", machine: "dgx-a100", size: 2, want: []int{0, 1}},
		{name: "dgx-a100 pair, fragmented", machine: "dgx-a100", available: []int{1, 2, 4, 5, 6}, size: 2, want: []int{4, 5}},
		{name: "dgx-a100 quad is two NUMA pairs", machine: "dgx-a100", available: []int{0, 2, 3, 4, 6, 7}, size: 4, want: []int{2, 3, 6, 7}},
		{name: "hgx-h100 quad on one socket", machine: "hgx-h100", size: 4, want: []int{0, 1, 2, 3}},
		{name: "hgx-h100 quad avoids the broken socket", machine: "hgx-h100", available: without(8, 1), size: 4, want: []int{4, 5, 6, 7}},
		{name: "dgx2 eight on one socket", machine: "dgx2", size: 8, want: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{name: "dgx2 quad under one switch", machine: "dgx2", available: without(16, 0, 9), size: 4, want: []int{4, 5, 6, 7}},
		{name: "pcie-8gpu pair on a switch", machine: "pcie-8gpu", available: []int{0, 2, 4, 5}, size: 2, want: []int{4, 5}},
		{name: "pcie-8gpu triple stays on a socket", machine: "pcie-8gpu", available: []int{0, 1, 4, 6, 7}, size: 3, want: []int{4, 6, 7}},
		{name: "workstation pair takes the bridge", machine: "workstation-4gpu", available: []int{0, 2, 3}, size: 2, want: []int{2, 3}},
		{name: "generic-4 pair under a switch", machine: "generic-4", size: 2, want: []int{0, 1}},
		{name: "generic-4 pair, fake-0 busy", machine: "generic-4", available: []int{1, 2, 3}, size: 2, want: []int{2, 3}},
	})
}

func TestAllocator_Preferred_MustInclude(t *testing.T) {
	runPreferredCases(t, []preferredCase{
		{name: "dgx1-volta partner of 0 over NV2 and PCIe", machine: "dgx1-volta", must: []int{0}, size: 2, want: []int{0, 3}},
		{name: "dgx1-volta must across quads", machine: "dgx1-volta", must: []int{4, 0}, size: 3, want: []int{0, 3, 4}},
		{name: "hgx-h100 completes the socket", machine: "hgx-h100", must: []int{5}, size: 2, want: []int{4, 5}},
		{name: "all must", machine: "dgx2", must: []int{3, 12}, size: 2, want: []int{3, 12}},
		{name: "must fills the rest of the machine", machine: "generic-4", available: []int{0, 2, 3}, must: []int{3}, size: 3, want: []int{0, 2, 3}},
		{name: "must with the partner busy", machine: "workstation-4gpu", available: []int{0, 2, 3}, must: []int{0}, size: 2, want: []int{0, 2}},
	})
}

func TestAllocator_Preferred_LeavesPairsIntact(t *testing.T) {
	runPreferredCases(t, []preferredCase{
		{name: "workstation: partner of a busy GPU", machine: "workstation-4gpu", available: []int{0, 2, 3}, size: 1, want: []int{0}},
		{name: "workstation: partner of busy 2", machine: "workstation-4gpu", available: []int{0, 1, 3}, size: 1, want: []int{3}},
		{name: "hgx-h100: the broken socket", machine: "hgx-h100", available: without(8, 0, 1, 2), size: 1, want: []int{3}},
		{name: "dgx2: switch partner of busy 0", machine: "dgx2", available: without(16, 0), size: 1, want: []int{1}},
		{name: "dgx2: pair next to a busy pair", machine: "dgx2", available: without(16, 0, 1), size: 2, want: []int{2, 3}},
		{name: "generic-8: partner of busy 5", machine: "generic-8", available: without(8, 5), size: 1, want: []int{4}},
		{name: "dgx1-volta: from the broken quad", machine: "dgx1-volta", available: without(8, 1), size: 1, want: []int{2}},
		{name: "dgx-a100: the lone GPU", machine: "dgx-a100", available: []int{0, 1, 3, 4, 5}, size: 1, want: []int{3}},
	})
}

func TestAllocator_Preferred_Errors(t *testing.T) {
	m := MustMachine(t, "hgx-h100")
	tests := []struct {
		name      string
		m         *topology.Machine
		available []int
		must      []int
		size      int
		want      error
		mention   string
	}{
		{"nil machine", nil, []int{0}, nil, 1, ErrNilMachine, ""},
		{"size zero", m, all(8), nil, 0, ErrInvalidSize, "0"},
		{"size negative", m, all(8), nil, -2, ErrInvalidSize, "-2"},
		{"size above available", m, []int{0, 1}, nil, 3, ErrNotEnoughDevices, "3"},
		{"must not available", m, []int{0, 1, 2}, []int{5}, 2, ErrNotAvailable, "fake-5"},
		{"too many must", m, all(8), []int{0, 1, 2}, 2, ErrTooManyMustInclude, "3"},
		{"available out of range", m, []int{0, 8}, nil, 1, ErrIndexOutOfRange, "8"},
		{"available negative", m, []int{-1, 0}, nil, 1, ErrIndexOutOfRange, "-1"},
		{"must out of range", m, all(8), []int{9}, 1, ErrIndexOutOfRange, "9"},
		{"available duplicate", m, []int{0, 1, 1}, nil, 1, ErrDuplicate, "fake-1"},
		{"must duplicate", m, all(8), []int{2, 2}, 3, ErrDuplicate, "fake-2"},
		{"nothing available", m, nil, nil, 1, ErrNotEnoughDevices, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, policy := range Policies {
				got, err := policy(tt.m, tt.available, tt.must, tt.size)
				if !errors.Is(err, tt.want) || got != nil {
					t.Errorf("%s: got %v, %v; want error %v", name, got, err, tt.want)
				}
				if err != nil && !strings.Contains(err.Error(), tt.mention) {
					t.Errorf("%s: error %q should mention %q", name, err, tt.mention)
				}
			}
		})
	}
}

func TestAllocator_LowestIndex(t *testing.T) {
	m := MustMachine(t, "dgx1-volta")
	got, err := LowestIndex(m, []int{7, 5, 3, 1}, []int{7}, 3)
	if err != nil || !slices.Equal(got, []int{1, 3, 7}) {
		t.Errorf("LowestIndex = %v, %v", got, err)
	}
}

func TestAllocator_Policies(t *testing.T) {
	if !slices.Equal(PolicyNames(), []string{PolicyBestConnected, PolicyLowestIndex}) {
		t.Errorf("PolicyNames() = %v", PolicyNames())
	}
}

// TestAllocator_Preferred_LargeValid checks the bounded search beyond
// MaxExactGPUs: always a valid answer, never worse than the greedy start or
// lowest-index, and equal to the exact optimum on the regular machines.
func TestAllocator_Preferred_LargeValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 60 {
		n := 17 + rng.IntN(48)
		m := randomMachine(t, rng, n)
		avail := rng.Perm(n)[:17+rng.IntN(n-16)]
		size := 1 + rng.IntN(min(len(avail), 12))
		must := slices.Clone(avail[:rng.IntN(min(size, 3)+1)])
		got, err := Preferred(m, avail, must, size)
		if err != nil {
			t.Fatal(err)
		}
		checkValid(t, got, avail, must, size)
		low, _ := LowestIndex(m, avail, must, size)
		if Score(m, got) < Score(m, low) {
			t.Errorf("iter %d: score %d below lowest-index %d", iter, Score(m, got), Score(m, low))
		}
	}
	for _, n := range []int{32, 64, 128} {
		m := meshMachine(t, n)
		avail := benchAvailable(n)
		for _, size := range []int{1, 2, 3, 4, 8} {
			got, err := Preferred(m, avail, nil, size)
			if err != nil {
				t.Fatal(err)
			}
			checkValid(t, got, avail, nil, size)
			exact := preferred(m, avail, nil, size, 0)
			if Score(m, got) != Score(m, exact) {
				t.Errorf("mesh-%d size %d: score %d, exact %d", n, size, Score(m, got), Score(m, exact))
			}
		}
	}
}

func TestAllocator_Score(t *testing.T) {
	m := MustMachine(t, "dgx1-volta")
	tests := []struct {
		set  []int
		want int
	}{
		{nil, 0},
		{[]int{3}, 0},
		{[]int{2, 3}, 2*NVLinkWeight + 50 + SameNUMAWeight},
		{[]int{0, 4}, 2*NVLinkWeight + 10},
		{[]int{0, 5}, 10},
		{[]int{3, 2, 3, 99, -1}, 255},
		{[]int{0, 1, 2, 3}, 155 + 135 + 235 + 235 + 135 + 255},
	}
	for _, tt := range tests {
		if got := Score(m, tt.set); got != tt.want {
			t.Errorf("Score(%v) = %d, want %d", tt.set, got, tt.want)
		}
	}
	// NVSwitch pairs get NVLink credit, unlike go-gpuallocator.
	h := MustMachine(t, "hgx-h100")
	if got := PairScore(h, 0, 1); got != 18*NVLinkWeight+20+5 {
		t.Errorf("hgx-h100 PairScore(0,1) = %d", got)
	}
	if PairScore(h, 0, 0) != 0 || PairScore(h, 0, 8) != 0 || PairScore(nil, 0, 1) != 0 {
		t.Error("PairScore of a GPU with itself, out of range or nil machine must be 0")
	}
}

func TestAllocator_NVLinkConnected(t *testing.T) {
	m := MustMachine(t, "dgx1-volta")
	tests := []struct {
		set  []int
		want bool
	}{
		{nil, true}, {[]int{5}, true}, {[]int{0, 1, 2, 3}, true}, {[]int{0, 4}, true},
		{[]int{0, 5}, false}, {[]int{0, 1, 4}, false}, {[]int{0, 0}, false}, {[]int{0, 8}, false},
	}
	for _, tt := range tests {
		if got := NVLinkConnected(m, tt.set); got != tt.want {
			t.Errorf("NVLinkConnected(%v) = %v", tt.set, got)
		}
	}
}
