package allocator

import (
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// MaxExactGPUs is the largest number of available GPUs for which Preferred
// always searches exhaustively (with exact pruning) and so always returns
// the optimum of its ordering.
const MaxExactGPUs = 16

// searchBudget bounds the branch-and-bound work, in candidate visits, when
// more than MaxExactGPUs GPUs are available. About 1–3 ns per visit.
const searchBudget = 1 << 18

// incumbentBudget bounds the work, in pair-score updates, of the greedy
// starts and of the local search, so that very large requests on very large
// machines stay fast. At least one greedy start always runs.
const incumbentBudget = 1 << 23

// Preferred is the best-connected policy. It returns the set of size GPUs
// from available, including every mustInclude, that is best by, in order:
//
//  1. the highest Score;
//  2. among those, the one that leaves the other available GPUs best
//     connected: the lowest sum of PairScore between the chosen and the
//     remaining available GPUs (equivalently, the highest Score of the
//     remainder), so a 1-GPU request takes a GPU whose partner is already
//     busy rather than break an intact NVLink pair or quad;
//  3. among those, the lowest indices (lexicographically smallest sorted set).
//
// The search is exact when at most MaxExactGPUs GPUs are available. Beyond
// that it starts from a greedy solution from every seed GPU improved by
// swaps, then runs the same branch and bound within a fixed work budget, and
// returns the best set it found; the answer is always valid. The result is
// sorted by index. Invalid requests get an error from Validate.
func Preferred(m *topology.Machine, available, mustInclude []int, size int) ([]int, error) {
	if err := Validate(m, available, mustInclude, size); err != nil {
		return nil, err
	}
	budget := 0
	if len(available) > MaxExactGPUs {
		budget = searchBudget
	}
	return preferred(m, available, mustInclude, size, budget), nil
}

// searcher holds one search. Candidates are the available GPUs that are not
// must-include, in ascending index order, addressed by local index 0..nc-1.
type searcher struct {
	nc    int
	need  int     // candidates to choose
	cand  []int   // machine index of each candidate
	pair  []int32 // nc*nc pair scores among candidates
	base  []int   // score of each candidate with the must-include set
	row   []int   // sum of pair scores of each candidate with all available GPUs
	topK  []int   // topK[c*need+j]: sum of the j largest pair scores of candidate c
	class []int   // local class id: the first candidate interchangeable with c

	gain   []int  // base + pair scores with the chosen candidates
	closed []bool // by local class id: an earlier member was excluded
	chosen []int

	found       bool
	best        []int
	bestScore   int
	bestSec     int
	bestFromDFS bool

	work, budget int
}

func preferred(m *topology.Machine, available, mustInclude []int, size, budget int) []int {
	must := slices.Clone(mustInclude)
	slices.Sort(must)
	need := size - len(must)
	if need == 0 {
		return must
	}
	isMust := make(map[int]bool, len(must))
	for _, i := range must {
		isMust[i] = true
	}
	cand := make([]int, 0, len(available))
	for _, i := range available {
		if !isMust[i] {
			cand = append(cand, i)
		}
	}
	slices.Sort(cand)
	if need == len(cand) {
		return sortedUnion(must, cand)
	}
	s := newSearcher(m, must, cand, need, budget)
	s.incumbent()
	s.branchAndBound()
	out := make([]int, 0, size)
	out = append(out, must...)
	for _, c := range s.best {
		out = append(out, cand[c])
	}
	slices.Sort(out)
	return out
}

func sortedUnion(a, b []int) []int {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return out
}

func newSearcher(m *topology.Machine, must, cand []int, need, budget int) *searcher {
	nc := len(cand)
	s := &searcher{
		nc: nc, need: need, cand: cand, budget: budget,
		pair:   make([]int32, nc*nc),
		base:   make([]int, nc),
		row:    make([]int, nc),
		topK:   make([]int, nc*need),
		class:  make([]int, nc),
		gain:   make([]int, nc),
		closed: make([]bool, nc),
	}
	for a := range nc {
		for b := a + 1; b < nc; b++ {
			p := int32(PairScore(m, cand[a], cand[b]))
			s.pair[a*nc+b], s.pair[b*nc+a] = p, p
		}
	}
	firstOfClass := make(map[int]int)
	sorted := make([]int32, nc)
	for c := range nc {
		for _, x := range must {
			p := PairScore(m, cand[c], x)
			s.base[c] += p
			s.row[c] += p
		}
		row := s.pair[c*nc : (c+1)*nc]
		for _, p := range row {
			s.row[c] += int(p)
		}
		copy(sorted, row)
		slices.Sort(sorted)
		sum := 0
		for j := range need {
			s.topK[c*need+j] = sum
			if j < nc {
				sum += int(sorted[nc-1-j])
			}
		}
		mc := m.Class(cand[c])
		if f, ok := firstOfClass[mc]; ok {
			s.class[c] = f
		} else {
			firstOfClass[mc] = c
			s.class[c] = c
		}
	}
	return s
}

// better reports whether a set with this score, secondary and (sorted local)
// members beats the best so far.
func (s *searcher) better(score, sec int, set []int) bool {
	switch {
	case !s.found || score > s.bestScore:
		return true
	case score < s.bestScore:
		return false
	case sec != s.bestSec:
		return sec < s.bestSec
	}
	return slices.Compare(set, s.best) < 0
}

func (s *searcher) record(score, sec int, set []int, fromDFS bool) {
	if s.better(score, sec, set) {
		s.found, s.bestScore, s.bestSec, s.bestFromDFS = true, score, sec, fromDFS
		s.best = append(s.best[:0], set...)
	}
}

// incumbent finds a good first solution: a greedy build from every seed
// (one per class of interchangeable GPUs); the best few are then improved by
// best-swap local search.
func (s *searcher) incumbent() {
	nc, need := s.nc, s.need
	g := make([]int, nc)
	in := make([]bool, nc)
	type result struct {
		set        []int
		score, sec int
	}
	var results []result
	work := 0
	for seed := range nc {
		if s.class[seed] != seed {
			continue
		}
		if work > incumbentBudget/2 && len(results) > 0 {
			break
		}
		work += 2 * need * nc
		copy(g, s.base)
		clear(in)
		set := make([]int, 0, need)
		score, sec := 0, 0
		for c := seed; len(set) < need; {
			in[c] = true
			set = append(set, c)
			score += g[c]
			sec += s.row[c]
			p := s.pair[c*nc : (c+1)*nc]
			for x := range nc {
				g[x] += int(p[x])
			}
			c = -1
			for x := range nc {
				if !in[x] && (c < 0 || g[x] > g[c] || g[x] == g[c] && s.row[x] < s.row[c]) {
					c = x
				}
			}
		}
		results = append(results, result{set, score, sec})
	}
	slices.SortStableFunc(results, func(a, b result) int {
		if a.score != b.score {
			return b.score - a.score
		}
		return a.sec - b.sec
	})
	passes := max(1, incumbentBudget/2/(localSearchStarts*(need+1)*nc))
	for i, r := range results {
		if i < localSearchStarts {
			r.score, r.sec = s.improve(r.set, r.score, r.sec, g, in, passes)
		}
		slices.Sort(r.set)
		s.record(r.score, r.sec, r.set, false)
	}
}

// localSearchStarts is how many of the best greedy solutions local search
// improves.
const localSearchStarts = 4

// improve applies the best improving swap (one chosen candidate out, one
// other in) until none improves or a pass limit is reached, and returns the
// new score and secondary. g and in are scratch space.
func (s *searcher) improve(set []int, score, sec int, g []int, in []bool, maxPasses int) (int, int) {
	nc := s.nc
	copy(g, s.base)
	clear(in)
	for _, c := range set {
		in[c] = true
		p := s.pair[c*nc : (c+1)*nc]
		for x := range nc {
			g[x] += int(p[x])
		}
	}
	for pass := 0; pass < min(2*len(set)+2, maxPasses); pass++ {
		ba, bb, bd, bs := -1, -1, 0, 0
		for ai, a := range set {
			pa := s.pair[a*nc : (a+1)*nc]
			for b := range nc {
				if in[b] {
					continue
				}
				d := g[b] - int(pa[b]) - g[a]
				ds := s.row[b] - s.row[a]
				if d > bd || d == bd && ds < bs {
					ba, bb, bd, bs = ai, b, d, ds
				}
			}
		}
		if ba < 0 {
			break
		}
		a, b := set[ba], bb
		in[a], in[b] = false, true
		set[ba] = b
		score += bd
		sec += bs
		pa, pb := s.pair[a*nc:(a+1)*nc], s.pair[b*nc:(b+1)*nc]
		for x := range nc {
			g[x] += int(pb[x]) - int(pa[x])
		}
	}
	return score, sec
}

func (s *searcher) branchAndBound() {
	copy(s.gain, s.base)
	s.chosen = s.chosen[:0]
	s.dfs(0, 0, 0)
}

// dfs decides candidates pos, pos+1, … given the chosen ones with total
// added score cur and secondary sec. Include-first over ascending indices
// visits sets in lexicographic order.
func (s *searcher) dfs(pos, cur, sec int) {
	k := len(s.chosen)
	if k == s.need {
		s.record(cur, sec, s.chosen, true)
		return
	}
	if s.budget > 0 && s.work > s.budget {
		return
	}
	r := s.need - k
	ub2, secLB, ok := s.bound(pos, r)
	if !ok {
		return
	}
	if s.found {
		bound := 2*cur + ub2
		if bound < 2*s.bestScore {
			return
		}
		if bound == 2*s.bestScore && (sec+secLB > s.bestSec || sec+secLB == s.bestSec && s.bestFromDFS) {
			return
		}
	}
	p := pos
	for p < s.nc && s.closed[s.class[p]] {
		p++
	}
	if p == s.nc {
		return
	}
	nc := s.nc
	// Include p.
	gp := s.gain[p]
	row := s.pair[p*nc : (p+1)*nc]
	for x := p + 1; x < nc; x++ {
		s.gain[x] += int(row[x])
	}
	s.chosen = append(s.chosen, p)
	s.dfs(p+1, cur+gp, sec+s.row[p])
	s.chosen = s.chosen[:k]
	for x := p + 1; x < nc; x++ {
		s.gain[x] -= int(row[x])
	}
	// Exclude p, and with it the later members of its class.
	cl := s.class[p]
	s.closed[cl] = true
	s.dfs(p+1, cur, sec)
	s.closed[cl] = false
}

// bound returns twice an upper bound of the score the r remaining picks
// from candidates pos… can add, a lower bound of their secondary, and false
// if fewer than r candidates are open. The score bound is the sum of the r
// largest 2·gain(c) + topK(c, r-1): the picks' pairs among themselves score
// at most half the sum of each one's r-1 best pair scores.
func (s *searcher) bound(pos, r int) (ub2, secLB int, ok bool) {
	var topBuf, lowBuf [16]int
	top, low := topBuf[:0], lowBuf[:0]
	if r > len(topBuf) {
		top, low = make([]int, 0, r), make([]int, 0, r)
	}
	open := 0
	for c := pos; c < s.nc; c++ {
		if s.closed[s.class[c]] {
			continue
		}
		open++
		v := 2*s.gain[c] + s.topK[c*s.need+r-1]
		top = insertDesc(top, v, r)
		low = insertAsc(low, s.row[c], r)
	}
	s.work += (s.nc - pos) * (1 + r/16)
	if open < r {
		return 0, 0, false
	}
	for i := range r {
		ub2 += top[i]
		secLB += low[i]
	}
	return ub2, secLB, true
}

// insertDesc keeps the k largest values of a, sorted descending.
func insertDesc(a []int, v, k int) []int {
	if len(a) == k {
		if v <= a[k-1] {
			return a
		}
		a = a[:k-1]
	}
	i := len(a)
	a = append(a, v)
	for i > 0 && a[i-1] < v {
		a[i] = a[i-1]
		i--
	}
	a[i] = v
	return a
}

// insertAsc keeps the k smallest values of a, sorted ascending.
func insertAsc(a []int, v, k int) []int {
	if len(a) == k {
		if v >= a[k-1] {
			return a
		}
		a = a[:k-1]
	}
	i := len(a)
	a = append(a, v)
	for i > 0 && a[i-1] > v {
		a[i] = a[i-1]
		i--
	}
	a[i] = v
	return a
}
