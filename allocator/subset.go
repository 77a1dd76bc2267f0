package allocator

import (
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// subsetSearch is one search of bestSubset. Candidates are addressed by
// local index 0..nc-1, in ascending GPU order.
type subsetSearch struct {
	nc, need int
	w        []int // weight of each candidate (nil: unweighted)
	target   int   // required sum of the chosen weights
	pair     []int32
	base     []int // score of each candidate with the fixed set
	topK     []int // topK[c*need+j]: sum of the j largest pair scores of c
	class    []int // the first candidate interchangeable with c (same machine class and weight)

	gain   []int
	closed []bool
	chosen []int
	wsum   int

	found       bool
	best        []int
	bestScore   int
	bestFromDFS bool

	work, budget int
}

// bestSubset returns, as sorted local indices into cand (GPU indices,
// ascending, disjoint from fixed), the need candidates whose weights w sum
// to target (w nil: no constraint) that maximize Score(fixed ∪ chosen),
// ties going to the lexicographically smallest set. quota (weight ->
// count) describes one feasible choice; the greedy starts follow it. The
// search is exhaustive up to MaxExactGPUs candidates, else bounded; it
// always returns a feasible set if quota is feasible (or w is nil).
func bestSubset(m *topology.Machine, fixed, cand, w []int, need, target int, quota map[int]int) []int {
	nc := len(cand)
	if need == 1 {
		// The score is the connection to the fixed set alone.
		best, bestScore := -1, 0
		for c := range nc {
			if w != nil && w[c] != target {
				continue
			}
			sc := 0
			for _, x := range fixed {
				sc += PairScore(m, cand[c], x)
			}
			if best < 0 || sc > bestScore {
				best, bestScore = c, sc
			}
		}
		return []int{best}
	}
	s := &subsetSearch{
		nc: nc, need: need, w: w, target: target,
		pair:   make([]int32, nc*nc),
		base:   make([]int, nc),
		topK:   make([]int, nc*need),
		class:  make([]int, nc),
		gain:   make([]int, nc),
		closed: make([]bool, nc),
	}
	if nc > MaxExactGPUs {
		s.budget = sharedSearchBudget
	}
	for a := range nc {
		for b := a + 1; b < nc; b++ {
			p := int32(PairScore(m, cand[a], cand[b]))
			s.pair[a*nc+b], s.pair[b*nc+a] = p, p
		}
	}
	type classKey struct{ class, weight int }
	first := make(map[classKey]int)
	largest := make([]int, 0, need)
	for c := range nc {
		for _, x := range fixed {
			s.base[c] += PairScore(m, cand[c], x)
		}
		largest = largest[:0]
		for _, p := range s.pair[c*nc : (c+1)*nc] {
			largest = insertDesc(largest, int(p), need)
		}
		sum := 0
		for j := range need {
			s.topK[c*need+j] = sum
			if j < len(largest) {
				sum += largest[j]
			}
		}
		k := classKey{m.Class(cand[c]), s.weight(c)}
		if f, ok := first[k]; ok {
			s.class[c] = f
		} else {
			first[k] = c
			s.class[c] = c
		}
	}
	if quota == nil {
		quota = map[int]int{0: need}
	}
	s.incumbent(quota)
	copy(s.gain, s.base)
	s.dfs(0, 0)
	return s.best
}

func (s *subsetSearch) weight(c int) int {
	if s.w == nil {
		return 0
	}
	return s.w[c]
}

// better reports whether a set with this score and sorted members beats
// the best so far.
func (s *subsetSearch) better(score int, set []int) bool {
	switch {
	case !s.found || score > s.bestScore:
		return true
	case score < s.bestScore:
		return false
	}
	return slices.Compare(set, s.best) < 0
}

func (s *subsetSearch) record(score int, set []int, fromDFS bool) {
	if s.better(score, set) {
		s.found, s.bestScore, s.bestFromDFS = true, score, fromDFS
		s.best = append(s.best[:0], set...)
	}
}

// incumbent finds good feasible first solutions: a greedy build from every
// seed (one per class) taking the best-connected candidate whose weight
// still has quota, then swaps of equal weight that improve the score.
func (s *subsetSearch) incumbent(quota map[int]int) {
	nc, need := s.nc, s.need
	// Quota by candidate: kind[c] indexes left, -1 if c's weight has none.
	kinds := make(map[int]int)
	var total []int
	for wt, n := range quota {
		if n > 0 {
			kinds[wt] = len(total)
			total = append(total, n)
		}
	}
	kind := make([]int, nc)
	for c := range nc {
		if k, ok := kinds[s.weight(c)]; ok {
			kind[c] = k
		} else {
			kind[c] = -1
		}
	}
	left := make([]int, len(total))
	g := make([]int, nc)
	in := make([]bool, nc)
	ok := make([]bool, nc) // not chosen and its weight has quota left
	type result struct {
		set   []int
		score int
	}
	var results []result
	// Seeds: one per class, best connected to the fixed set first; if the
	// budget does not cover them all, evenly spread over that order.
	var seeds []int
	for c := range nc {
		if s.class[c] == c && kind[c] >= 0 {
			seeds = append(seeds, c)
		}
	}
	slices.SortStableFunc(seeds, func(a, b int) int { return s.base[b] - s.base[a] })
	if afford := max(1, sharedIncumbentBudget/2/(2*need*max(nc, 1))); afford < len(seeds) {
		spread := make([]int, afford)
		for i := range spread {
			spread[i] = seeds[i*len(seeds)/afford]
		}
		seeds = spread
	}
	for _, seed := range seeds {
		copy(g, s.base)
		copy(left, total)
		for x := range nc {
			ok[x] = kind[x] >= 0
		}
		set := make([]int, 0, need)
		score := 0
		for c := seed; c >= 0; {
			ok[c] = false
			k := kind[c]
			if left[k]--; left[k] == 0 {
				for x := range nc {
					if kind[x] == k {
						ok[x] = false
					}
				}
			}
			set = append(set, c)
			score += g[c]
			if len(set) == need {
				break
			}
			p := s.pair[c*nc : (c+1)*nc]
			c = -1
			for x := range nc {
				g[x] += int(p[x])
				if ok[x] && (c < 0 || g[x] > g[c]) {
					c = x
				}
			}
		}
		if len(set) == need {
			results = append(results, result{set, score})
		}
	}
	slices.SortStableFunc(results, func(a, b result) int { return b.score - a.score })
	passes := max(1, sharedIncumbentBudget/2/(localSearchStarts*(need+1)*max(nc, 1)))
	for i, r := range results {
		if i < localSearchStarts {
			r.score = s.improve(r.set, r.score, g, in, passes)
		}
		slices.Sort(r.set)
		s.record(r.score, r.set, false)
	}
}

// improve applies the best improving swap of two candidates of equal
// weight (one chosen out, one other in) until none improves or a pass
// limit is reached, and returns the new score. g and in are scratch space.
func (s *subsetSearch) improve(set []int, score int, g []int, in []bool, maxPasses int) int {
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
		ba, bb, bd := -1, -1, 0
		for ai, a := range set {
			pa := s.pair[a*nc : (a+1)*nc]
			for b := range nc {
				if in[b] || s.weight(b) != s.weight(a) {
					continue
				}
				if d := g[b] - int(pa[b]) - g[a]; d > bd {
					ba, bb, bd = ai, b, d
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
		pa, pb := s.pair[a*nc:(a+1)*nc], s.pair[b*nc:(b+1)*nc]
		for x := range nc {
			g[x] += int(pb[x]) - int(pa[x])
		}
	}
	return score
}

// dfs decides candidates pos, pos+1, … given the chosen ones with total
// added score cur. Include-first over ascending indices visits sets in
// lexicographic order, so a later set never wins a tie against one the
// search found.
func (s *subsetSearch) dfs(pos, cur int) {
	k := len(s.chosen)
	if k == s.need {
		if s.w == nil || s.wsum == s.target {
			s.record(cur, s.chosen, true)
		}
		return
	}
	if s.budget > 0 && s.work > s.budget {
		return
	}
	r := s.need - k
	ub2, ok := s.bound(pos, r)
	if !ok {
		return
	}
	if s.found {
		if bound := 2*cur + ub2; bound < 2*s.bestScore || bound == 2*s.bestScore && s.bestFromDFS {
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
	gp := s.gain[p]
	row := s.pair[p*nc : (p+1)*nc]
	for x := p + 1; x < nc; x++ {
		s.gain[x] += int(row[x])
	}
	s.chosen = append(s.chosen, p)
	s.wsum += s.weight(p)
	s.dfs(p+1, cur+gp)
	s.wsum -= s.weight(p)
	s.chosen = s.chosen[:k]
	for x := p + 1; x < nc; x++ {
		s.gain[x] -= int(row[x])
	}
	// Exclude p, and with it the later members of its class.
	cl := s.class[p]
	s.closed[cl] = true
	s.dfs(p+1, cur)
	s.closed[cl] = false
}

// bound returns twice an upper bound of the score the r remaining picks
// from the open candidates pos… can add (as Preferred's bound), and false
// if fewer than r are open or, with weights, their r smallest or r largest
// weights cannot make up the remaining target.
func (s *subsetSearch) bound(pos, r int) (int, bool) {
	var topBuf, lowBuf, highBuf [16]int
	top, low, high := topBuf[:0], lowBuf[:0], highBuf[:0]
	if r > len(topBuf) {
		top, low, high = make([]int, 0, r), make([]int, 0, r), make([]int, 0, r)
	}
	open := 0
	for c := pos; c < s.nc; c++ {
		if s.closed[s.class[c]] {
			continue
		}
		open++
		top = insertDesc(top, 2*s.gain[c]+s.topK[c*s.need+r-1], r)
		if s.w != nil {
			low = insertAsc(low, s.w[c], r)
			high = insertDesc(high, s.w[c], r)
		}
	}
	s.work += (s.nc - pos) * (1 + r/4)
	if open < r {
		return 0, false
	}
	ub2 := 0
	for _, v := range top {
		ub2 += v
	}
	if s.w != nil {
		rest, lo, hi := s.target-s.wsum, 0, 0
		for i := range r {
			lo += low[i]
			hi += high[i]
		}
		if rest < lo || rest > hi {
			return 0, false
		}
	}
	return ub2, true
}
