package allocator

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// randomMachine returns a random machine of n GPUs. Some GPUs are clones of
// others (same NUMA node and links), so interchangeable classes occur.
func randomMachine(t testing.TB, rng *rand.Rand, n int) *topology.Machine {
	t.Helper()
	proto := make([]int, n) // the GPU each one copies, or itself
	for i := range n {
		proto[i] = i
		if i > 0 && rng.IntN(3) == 0 {
			proto[i] = proto[rng.IntN(i)]
		}
	}
	numa := make([]int, n)
	for i := range n {
		if proto[i] == i {
			numa[i] = rng.IntN(3) - 1
		} else {
			numa[i] = numa[proto[i]]
		}
	}
	base := make(map[[2]int]topology.Link)
	randLink := func() topology.Link {
		l := topology.Link{PCIe: topology.PCIe(rng.IntN(6))}
		if rng.IntN(3) == 0 {
			l.NVLinks = 1 + rng.IntN(topology.MaxNVLinks)
		}
		return l
	}
	m, err := topology.New("random", numa, func(i, j int) topology.Link {
		a, b := proto[i], proto[j]
		if a == b {
			// Twins of one prototype: one link value per prototype.
			a, b = -1, a
		}
		if a > b {
			a, b = b, a
		}
		k := [2]int{a, b}
		if _, ok := base[k]; !ok {
			base[k] = randLink()
		}
		return base[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// brute returns the best answer by enumerating every set: highest Score,
// then least connection to the rest of available, then lowest indices.
func brute(m *topology.Machine, available, must []int, size int) []int {
	var best []int
	bestScore, bestCross := -1, 0
	others := []int{}
	for _, a := range available {
		if !slices.Contains(must, a) {
			others = append(others, a)
		}
	}
	slices.Sort(others)
	need := size - len(must)
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		if len(cur) == need {
			set := append(slices.Clone(must), cur...)
			slices.Sort(set)
			sc := Score(m, set)
			cross := 0
			for _, a := range set {
				for _, b := range available {
					if !slices.Contains(set, b) {
						cross += PairScore(m, a, b)
					}
				}
			}
			if sc > bestScore || sc == bestScore && (cross < bestCross || cross == bestCross && slices.Compare(set, best) < 0) {
				best, bestScore, bestCross = set, sc, cross
			}
			return
		}
		for i := start; i < len(others); i++ {
			rec(i+1, append(cur, others[i]))
		}
	}
	rec(0, nil)
	return best
}

func checkValid(t *testing.T, got, available, must []int, size int) {
	t.Helper()
	if len(got) != size {
		t.Fatalf("got %v: %d devices, want %d", got, len(got), size)
	}
	if !slices.IsSorted(got) {
		t.Fatalf("got %v: not sorted", got)
	}
	for i, g := range got {
		if !slices.Contains(available, g) {
			t.Fatalf("got %v: %d not available in %v", got, g, available)
		}
		if i > 0 && got[i-1] == g {
			t.Fatalf("got %v: duplicate %d", got, g)
		}
	}
	for _, x := range must {
		if !slices.Contains(got, x) {
			t.Fatalf("got %v: misses must-include %d", got, x)
		}
	}
}

func TestAllocator_Preferred_MatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 600 {
		n := 1 + rng.IntN(12)
		m := randomMachine(t, rng, n)
		perm := rng.Perm(n)
		available := perm[:1+rng.IntN(n)]
		size := 1 + rng.IntN(len(available))
		nm := rng.IntN(size + 1)
		if nm > 0 {
			nm = rng.IntN(nm + 1)
		}
		must := slices.Clone(available[:nm])
		rng.Shuffle(len(must), func(i, j int) { must[i], must[j] = must[j], must[i] })
		got, err := Preferred(m, available, must, size)
		if err != nil {
			t.Fatalf("iter %d: Preferred: %v", iter, err)
		}
		checkValid(t, got, available, must, size)
		want := brute(m, available, must, size)
		if Score(m, got) != Score(m, want) {
			t.Fatalf("iter %d: n=%d avail=%v must=%v size=%d: got %v score %d, want %v score %d",
				iter, n, available, must, size, got, Score(m, got), want, Score(m, want))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("iter %d: n=%d avail=%v must=%v size=%d: got %v, want %v (same score %d)",
				iter, n, available, must, size, got, want, Score(m, got))
		}
	}
}
