package allocator

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// The brute force below reads the objectives straight from the doc comments
// of Distributed and Packed: it enumerates every valid answer and keeps the
// one with the smallest objective vector, then the smallest sorted answer.
// It shares no code with the policies but Score.

// usage returns the available replica count of every GPU of m.
func usage(m *topology.Machine, available []Replica) []int {
	avail := make([]int, m.Len())
	for _, r := range available {
		avail[r.GPU]++
	}
	return avail
}

// chosenGPUs returns k(g) per GPU and the sorted distinct GPUs of ans.
func chosenGPUs(m *topology.Machine, ans []Replica) ([]int, []int) {
	k := make([]int, m.Len())
	var gs []int
	for _, r := range ans {
		if k[r.GPU] == 0 {
			gs = append(gs, r.GPU)
		}
		k[r.GPU]++
	}
	slices.Sort(gs)
	return k, gs
}

// distributedKey is the objective vector of Distributed, smaller is better.
func distributedKey(m *topology.Machine, perGPU int, avail []int, ans []Replica) []int {
	k, gs := chosenGPUs(m, ans)
	after := make([]int, len(gs))
	for i, g := range gs {
		after[i] = perGPU - avail[g] + k[g]
	}
	slices.SortFunc(after, func(a, b int) int { return b - a })
	// One entry per GPU of the machine: len(gs) is equal among candidates
	// that tie on the first entry, so the padding never decides.
	key := []int{-len(gs)}
	key = append(key, after...)
	key = append(key, make([]int, m.Len()-len(gs))...)
	return append(key, -Score(m, gs))
}

// packedKey is the objective vector of Packed, smaller is better.
func packedKey(m *topology.Machine, perGPU int, avail []int, ans []Replica) []int {
	_, gs := chosenGPUs(m, ans)
	idle, inUse := 0, 0
	for _, g := range gs {
		if avail[g] == perGPU {
			idle++
		}
		inUse += perGPU - avail[g]
	}
	return []int{idle, len(gs), -inUse, -Score(m, gs)}
}

// lowestKey makes every answer tie, so only the lowest ids decide.
func lowestKey(*topology.Machine, int, []int, []Replica) []int { return nil }

type sharedKey func(m *topology.Machine, perGPU int, avail []int, ans []Replica) []int

// bruteShared enumerates every valid answer and returns the best by key,
// then the lowest ids.
func bruteShared(m *topology.Machine, perGPU int, available, must []Replica, size int, key sharedKey) []Replica {
	avail := usage(m, available)
	var others []Replica
	for _, r := range available {
		if !slices.Contains(must, r) {
			others = append(others, r)
		}
	}
	slices.SortFunc(others, CompareReplicas)
	var bestKey []int
	var bestAns []Replica
	cur := slices.Clone(must)
	var rec func(start int)
	rec = func(start int) {
		if len(cur) == size {
			ans := slices.Clone(cur)
			slices.SortFunc(ans, CompareReplicas)
			k := key(m, perGPU, avail, ans)
			if bestAns == nil || slices.Compare(k, bestKey) < 0 ||
				slices.Compare(k, bestKey) == 0 && slices.CompareFunc(ans, bestAns, CompareReplicas) < 0 {
				bestAns, bestKey = ans, k
			}
			return
		}
		for i := start; i < len(others); i++ {
			cur = append(cur, others[i])
			rec(i + 1)
			cur = cur[:len(cur)-1]
		}
	}
	rec(0)
	return bestAns
}

func checkSharedValid(t *testing.T, got, available, must []Replica, size int) {
	t.Helper()
	if len(got) != size {
		t.Fatalf("got %v: %d replicas, want %d", got, len(got), size)
	}
	for i, r := range got {
		if !slices.Contains(available, r) {
			t.Fatalf("got %v: %v not available in %v", got, r, available)
		}
		if i > 0 && CompareReplicas(got[i-1], r) >= 0 {
			t.Fatalf("got %v: not sorted or duplicate at %v", got, r)
		}
	}
	for _, r := range must {
		if !slices.Contains(got, r) {
			t.Fatalf("got %v: misses must-include %v", got, r)
		}
	}
}

// randomShared returns a random request on m: every GPU with a random
// number of its replicas available (some none, some all), at most maxAvail
// replicas available in all, a random size and a few must-include ones.
func randomShared(rng *rand.Rand, m *topology.Machine, perGPU, maxAvail int) (available, must []Replica, size int) {
	for g := range m.Len() {
		var n int
		switch rng.IntN(4) {
		case 0:
			n = 0
		case 1:
			n = perGPU
		default:
			n = rng.IntN(perGPU + 1)
		}
		for _, j := range rng.Perm(perGPU)[:n] {
			available = append(available, Replica{g, j})
		}
	}
	rng.Shuffle(len(available), func(i, j int) { available[i], available[j] = available[j], available[i] })
	if len(available) > maxAvail {
		available = available[:maxAvail]
	}
	if len(available) == 0 {
		available = []Replica{{rng.IntN(m.Len()), rng.IntN(perGPU)}}
	}
	size = 1 + rng.IntN(len(available))
	nm := 0
	if rng.IntN(3) == 0 {
		nm = rng.IntN(min(size, 3) + 1)
	}
	must = slices.Clone(available[:nm])
	rng.Shuffle(len(available), func(i, j int) { available[i], available[j] = available[j], available[i] })
	return available, must, size
}

var sharedKeys = map[string]sharedKey{
	SharedPolicyDistributed: distributedKey,
	SharedPolicyPacked:      packedKey,
	SharedPolicyLowestIndex: lowestKey,
}

func TestAllocator_SharedPolicies_MatchBruteForce(t *testing.T) {
	presets := []string{"dgx1-volta", "workstation-4gpu", "dgx-a100", "dgx2", "generic-8"}
	for _, name := range SharedPolicyNames() {
		t.Run(name, func(t *testing.T) {
			policy, key := SharedPolicies[name], sharedKeys[name]
			rng := rand.New(rand.NewPCG(11, uint64(len(name))))
			for iter := range 1500 {
				var m *topology.Machine
				if iter%3 == 0 {
					m = MustMachine(t, presets[rng.IntN(len(presets))])
				} else {
					m = randomMachine(t, rng, 1+rng.IntN(6))
				}
				perGPU := 1 + rng.IntN(5)
				available, must, size := randomShared(rng, m, perGPU, 12)
				got, err := policy(m, perGPU, available, must, size)
				if err != nil {
					t.Fatalf("iter %d: %v", iter, err)
				}
				checkSharedValid(t, got, available, must, size)
				want := bruteShared(m, perGPU, available, must, size, key)
				if !slices.Equal(got, want) {
					avail := usage(m, available)
					t.Fatalf("iter %d on %s, %d per GPU, available %v, must %v, size %d:\ngot  %v key %v\nwant %v key %v",
						iter, m.Name(), perGPU, available, must, size,
						got, key(m, perGPU, avail, got), want, key(m, perGPU, avail, want))
				}
			}
		})
	}
}

// sharedCase is a hand-checked placement.
type sharedCase struct {
	name     string
	machine  string
	perGPU   int
	inUse    map[int]int // replicas in use per GPU (the highest indices)
	must     []Replica
	size     int
	want     []Replica
	wantGPUs []int // alternatively, only the GPUs of the answer
}

// sharedAvailable returns every replica of m except, per GPU, the inUse
// highest ones.
func sharedAvailable(m *topology.Machine, perGPU int, inUse map[int]int) []Replica {
	var out []Replica
	for g := range m.Len() {
		for j := range perGPU - inUse[g] {
			out = append(out, Replica{g, j})
		}
	}
	return out
}

func runSharedCases(t *testing.T, policy SharedPolicy, tests []sharedCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := MustMachine(t, tt.machine)
			avail := sharedAvailable(m, tt.perGPU, tt.inUse)
			got, err := policy(m, tt.perGPU, avail, tt.must, tt.size)
			if err != nil {
				t.Fatal(err)
			}
			checkSharedValid(t, got, avail, tt.must, tt.size)
			if tt.want != nil && !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if tt.wantGPUs != nil {
				if _, gs := chosenGPUs(m, got); !slices.Equal(gs, tt.wantGPUs) {
					t.Errorf("got %v on GPUs %v, want GPUs %v", got, gs, tt.wantGPUs)
				}
			}
		})
	}
}

func TestAllocator_Distributed_Cases(t *testing.T) {
	runSharedCases(t, Distributed, []sharedCase{
		{name: "empty machine takes an NV2 pair on one switch", machine: "dgx1-volta", perGPU: 4, size: 2,
			want: []Replica{{2, 0}, {3, 0}}},
		{name: "four replicas take a quad", machine: "dgx1-volta", perGPU: 4, size: 4,
			wantGPUs: []int{0, 1, 2, 3}},
		{name: "least used GPUs first", machine: "dgx1-volta", perGPU: 4,
			inUse: map[int]int{0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}, size: 2,
			wantGPUs: []int{6, 7}},
		{name: "must-include GPU gets no more", machine: "workstation-4gpu", perGPU: 2,
			must: []Replica{{1, 1}}, size: 2, want: []Replica{{0, 0}, {1, 1}}},
		{name: "more replicas than GPUs fill evenly", machine: "workstation-4gpu", perGPU: 4,
			inUse: map[int]int{0: 2}, size: 7,
			want: []Replica{{0, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 1}, {3, 0}, {3, 1}}},
		{name: "unhealthy GPU is never chosen", machine: "workstation-4gpu", perGPU: 2,
			inUse: map[int]int{2: 2}, size: 2, wantGPUs: []int{0, 1}},
	})
}

func TestAllocator_Packed_Cases(t *testing.T) {
	runSharedCases(t, Packed, []sharedCase{
		{name: "empty machine: one GPU", machine: "dgx1-volta", perGPU: 4, size: 3,
			want: []Replica{{0, 0}, {0, 1}, {0, 2}}},
		{name: "fills the busiest GPU", machine: "dgx1-volta", perGPU: 4,
			inUse: map[int]int{2: 1, 5: 3}, size: 1, want: []Replica{{5, 0}}},
		{name: "partly used GPUs before an idle one", machine: "workstation-4gpu", perGPU: 4,
			inUse: map[int]int{0: 3, 3: 3}, size: 2, want: []Replica{{0, 0}, {3, 0}}},
		{name: "one idle GPU rather than two partly used", machine: "workstation-4gpu", perGPU: 4,
			inUse: map[int]int{0: 3, 1: 3, 2: 3}, size: 4, wantGPUs: []int{3}},
		{name: "one idle GPU and its NVLink partner", machine: "workstation-4gpu", perGPU: 4,
			inUse: map[int]int{0: 3, 1: 3, 2: 3}, size: 5, wantGPUs: []int{2, 3}},
		{name: "spills to the NVLink partner", machine: "workstation-4gpu", perGPU: 2,
			inUse: map[int]int{0: 1, 2: 1}, must: []Replica{{2, 0}}, size: 3,
			want: []Replica{{2, 0}, {3, 0}, {3, 1}}},
		{name: "two idle GPUs: the NVLinked pair", machine: "dgx1-volta", perGPU: 2,
			inUse: map[int]int{0: 2, 1: 2, 2: 2, 4: 2}, size: 4, wantGPUs: []int{6, 7}},
	})
}

func TestAllocator_LowestReplicas(t *testing.T) {
	runSharedCases(t, LowestReplicas, []sharedCase{
		{name: "lowest ids", machine: "workstation-4gpu", perGPU: 2, inUse: map[int]int{0: 1}, size: 3,
			want: []Replica{{0, 0}, {1, 0}, {1, 1}}},
		{name: "must-include first", machine: "workstation-4gpu", perGPU: 2, must: []Replica{{3, 1}}, size: 2,
			want: []Replica{{0, 0}, {3, 1}}},
	})
}

func TestAllocator_SharedPolicies_Invalid(t *testing.T) {
	m := MustMachine(t, "workstation-4gpu")
	a := []Replica{{0, 0}, {0, 1}, {1, 0}}
	tests := []struct {
		name      string
		m         *topology.Machine
		perGPU    int
		available []Replica
		must      []Replica
		size      int
		want      error
		msg       string
	}{
		{"nil machine", nil, 2, a, nil, 1, ErrNilMachine, "no machine"},
		{"zero replicas per GPU", m, 0, a, nil, 1, ErrInvalidReplicas, "0 replicas per GPU, want 1..1024"},
		{"too many replicas per GPU", m, topology.MaxReplicas + 1, a, nil, 1, ErrInvalidReplicas, "1025 replicas per GPU"},
		{"zero size", m, 2, a, nil, 0, ErrInvalidSize, "allocation size 0"},
		{"GPU out of range", m, 2, []Replica{{4, 0}}, nil, 1, ErrIndexOutOfRange, "available replica fake-4::0: GPU index 4, machine workstation-4gpu has GPUs 0..3"},
		{"negative GPU", m, 2, []Replica{{-1, 0}}, nil, 1, ErrIndexOutOfRange, "GPU index -1"},
		{"replica out of range", m, 2, []Replica{{1, 2}}, nil, 1, ErrIndexOutOfRange, "available replica fake-1::2: replica index 2, GPUs have replicas 0..1"},
		{"must out of range", m, 2, a, []Replica{{0, 5}}, 1, ErrIndexOutOfRange, "must-include replica fake-0::5"},
		{"duplicate available", m, 2, []Replica{{1, 0}, {0, 1}, {1, 0}}, nil, 1, ErrDuplicate, "available replica fake-1::0 listed twice"},
		{"duplicate must", m, 2, a, []Replica{{0, 1}, {0, 1}}, 2, ErrDuplicate, "must-include replica fake-0::1 listed twice"},
		{"must not available", m, 2, a, []Replica{{1, 1}}, 1, ErrNotAvailable, "must-include replica fake-1::1"},
		{"too many must", m, 2, a, []Replica{{0, 0}, {1, 0}}, 1, ErrTooManyMustInclude, "2 must-include replicas for an allocation of 1"},
		{"not enough", m, 2, a, nil, 4, ErrNotEnoughDevices, "allocation size 4 but 3 replicas available"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ValidateShared(tt.m, tt.perGPU, tt.available, tt.must, tt.size); !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("ValidateShared: %v, want %v saying %q", err, tt.want, tt.msg)
			}
			for _, name := range SharedPolicyNames() {
				got, err := SharedPolicies[name](tt.m, tt.perGPU, tt.available, tt.must, tt.size)
				if !errors.Is(err, tt.want) || got != nil {
					t.Errorf("%s: %v, %v; want %v", name, got, err, tt.want)
				}
			}
		})
	}
}

// TestAllocator_SharedPolicies_ValidOnLargeMachines checks validity and the
// objectives that are always exact (Distributed 1-2, Packed 1-2) where the
// brute force cannot go: beyond MaxExactGPUs competing GPUs.
func TestAllocator_SharedPolicies_ValidOnLargeMachines(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 60 {
		n := []int{24, 64, 128}[iter%3]
		m := meshMachine(t, n)
		perGPU := 1 + rng.IntN(8)
		available, must, _ := randomShared(rng, m, perGPU, n*perGPU)
		size := 1 + rng.IntN(min(len(available), 3*n/2))
		if len(must) > size {
			must = must[:size]
		}
		for _, name := range SharedPolicyNames() {
			got, err := SharedPolicies[name](m, perGPU, available, must, size)
			if err != nil {
				t.Fatalf("iter %d %s: %v", iter, name, err)
			}
			checkSharedValid(t, got, available, must, size)
		}
		avail := usage(m, available)
		d, _ := Distributed(m, perGPU, available, must, size)
		p, _ := Packed(m, perGPU, available, must, size)
		// Objectives 1-2 have closed forms; check them against simple
		// alternatives: the lowest-index answer must not beat either.
		low, _ := LowestReplicas(m, perGPU, available, must, size)
		if dk, lk := distributedKey(m, perGPU, avail, d), distributedKey(m, perGPU, avail, low); slices.Compare(dk[:3], lk[:3]) > 0 {
			t.Errorf("iter %d: distributed %v worse than lowest-index %v", iter, dk, lk)
		}
		if pk, lk := packedKey(m, perGPU, avail, p), packedKey(m, perGPU, avail, low); slices.Compare(pk[:3], lk[:3]) > 0 {
			t.Errorf("iter %d: packed %v worse than lowest-index %v", iter, pk, lk)
		}
	}
}

func TestAllocator_minSumAtLeast_MatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 3000 {
		vals := make([]int, 1+rng.IntN(10))
		for i := range vals {
			vals[i] = 1 + rng.IntN(9)
		}
		slices.SortFunc(vals, func(a, b int) int { return b - a })
		total := 0
		for _, v := range vals {
			total += v
		}
		floor := 1 + rng.IntN(total)
		x, top := 0, 0
		for top < floor {
			top += vals[x]
			x++
		}
		want := -1
		for mask := range 1 << len(vals) {
			s, c := 0, 0
			for i, v := range vals {
				if mask&(1<<i) != 0 {
					s += v
					c++
				}
			}
			if c == x && s >= floor && (want < 0 || s < want) {
				want = s
			}
		}
		for _, f := range []func([]int, int, int) (int, map[int]int){minSumAtLeast, minSumGreedy} {
			got, take := f(vals, x, floor)
			n, s := 0, 0
			for v, c := range take {
				n += c
				s += v * c
			}
			if n != x || s != got || got < floor {
				t.Fatalf("iter %d: vals %v x %d floor %d: sum %d take %v", iter, vals, x, floor, got, take)
			}
			for v, c := range take {
				have := 0
				for _, u := range vals {
					if u == v {
						have++
					}
				}
				if c > have {
					t.Fatalf("iter %d: take %v uses %d of %d (only %d)", iter, take, c, v, have)
				}
			}
		}
		if got, _ := minSumAtLeast(vals, x, floor); got != want {
			t.Fatalf("iter %d: vals %v x %d floor %d: minSumAtLeast %d, want %d", iter, vals, x, floor, got, want)
		}
	}
}

func TestAllocator_SharedPolicyNames(t *testing.T) {
	want := []string{"distributed", "lowest-index", "packed"}
	if got := SharedPolicyNames(); !slices.Equal(got, want) {
		t.Errorf("SharedPolicyNames() = %v, want %v", got, want)
	}
	if got := (Replica{GPU: 3, Index: 1}).String(); got != "fake-3::1" {
		t.Errorf("String() = %q", got)
	}
}

// TestAllocator_SharedPolicies_DoNotModifyInput checks that the policies
// leave their argument slices alone.
func TestAllocator_SharedPolicies_DoNotModifyInput(t *testing.T) {
	m := MustMachine(t, "dgx1-volta")
	avail := []Replica{{7, 1}, {0, 0}, {3, 1}, {3, 0}, {5, 0}}
	must := []Replica{{3, 1}, {0, 0}}
	for _, name := range SharedPolicyNames() {
		a, mu := slices.Clone(avail), slices.Clone(must)
		if _, err := SharedPolicies[name](m, 2, a, mu, 4); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a, avail) || !slices.Equal(mu, must) {
			t.Errorf("%s modified its input: %v %v", name, a, mu)
		}
	}
}

// FuzzSharedPolicies feeds arbitrary requests to every shared policy on a
// 16-GPU and a 40-GPU machine: each must return an error or a valid answer,
// never panic.
func FuzzSharedPolicies(f *testing.F) {
	dgx2 := MustMachine(f, "dgx2")
	mesh := meshMachine(f, 40)
	f.Add([]byte{0, 0, 0, 1, 1, 0, 3, 1}, []byte{1, 0}, 3, 2, false)
	f.Add([]byte{15, 3, 3, 3, 3, 3}, []byte{}, 1, 4, false)
	f.Add([]byte{0, 0, 8, 0, 9, 1, 30, 2, 31, 0, 39, 7}, []byte{30, 2}, 4, 8, true)
	f.Fuzz(func(t *testing.T, avail, must []byte, size, perGPU int, big bool) {
		m := dgx2
		if big {
			m = mesh
		}
		pairs := func(b []byte) []Replica {
			out := make([]Replica, len(b)/2)
			for i := range out {
				out[i] = Replica{int(int8(b[2*i])), int(int8(b[2*i+1]))}
			}
			return out
		}
		a, mi := pairs(avail), pairs(must)
		verr := ValidateShared(m, perGPU, a, mi, size)
		for _, name := range SharedPolicyNames() {
			got, err := SharedPolicies[name](m, perGPU, a, mi, size)
			if (err == nil) != (verr == nil) {
				t.Fatalf("%s: error %v, ValidateShared %v", name, err, verr)
			}
			if err != nil {
				if got != nil {
					t.Fatalf("%s: error %v with a result %v", name, err, got)
				}
				continue
			}
			checkSharedValid(t, got, a, mi, size)
		}
	})
}

// TestAllocator_Distributed_LargeMachineQuality checks the bounded search
// beyond MaxExactGPUs: on an empty 128-GPU machine of DGX-1V blocks, the
// GPUs chosen score at least the exact optimum within two blocks.
func TestAllocator_Distributed_LargeMachineQuality(t *testing.T) {
	m, m16 := meshMachine(t, 128), meshMachine(t, 16)
	avail := sharedBenchAvailable(128, 8, "empty")
	for _, size := range []int{2, 3, 4, 6, 8, 12, 16} {
		got, err := Distributed(m, 8, avail, nil, size)
		if err != nil {
			t.Fatal(err)
		}
		checkSharedValid(t, got, avail, nil, size)
		_, gs := chosenGPUs(m, got)
		ref, _ := Preferred(m16, all(16), nil, size)
		if Score(m, gs) < Score(m16, ref) {
			t.Errorf("size %d: GPUs %v score %d, below %d of %v", size, gs, Score(m, gs), Score(m16, ref), ref)
		}
	}
}
