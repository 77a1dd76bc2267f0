package allocator

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Replica is one replica of a time-sliced GPU: replica Index of the GPU
// with index GPU, whose device id is topology.ReplicaID(GPU, Index),
// "fake-<GPU>::<Index>". The zero value is replica 0 of GPU 0.
type Replica struct {
	GPU, Index int
}

// String returns the replica's device id, "fake-<GPU>::<Index>".
func (r Replica) String() string { return topology.ReplicaID(r.GPU, r.Index) }

// CompareReplicas orders replicas by GPU, then by Index (the order of
// "lowest ids" in the shared policies), for slices.SortFunc.
func CompareReplicas(a, b Replica) int {
	if c := cmp.Compare(a.GPU, b.GPU); c != 0 {
		return c
	}
	return cmp.Compare(a.Index, b.Index)
}

// SharedPolicy chooses size replicas from available, including every
// mustInclude, on machine m whose GPUs are each shared as replicasPerGPU
// replicas. A replica of GPU g that is not in available is in use (an
// unhealthy GPU has no replica available). A SharedPolicy returns the
// chosen replicas sorted by CompareReplicas, or an error from ValidateShared
// for an invalid request; it never returns an invalid answer. Shared
// policies are pure and safe for concurrent use.
type SharedPolicy func(m *topology.Machine, replicasPerGPU int, available, mustInclude []Replica, size int) ([]Replica, error)

// Shared policy names, the keys of SharedPolicies: "distributed" and
// "packed" are the names of NVIDIA's -shared-devices-allocation-policy.
const (
	// SharedPolicyDistributed is Distributed, the default.
	SharedPolicyDistributed = "distributed"
	// SharedPolicyPacked is Packed.
	SharedPolicyPacked = "packed"
	// SharedPolicyLowestIndex is LowestReplicas: the lowest replica ids,
	// without regard to topology.
	SharedPolicyLowestIndex = "lowest-index"
)

// SharedPolicies is the table of replica placement policies by name, for a
// plugin flag such as -shared-devices-allocation-policy. Treat it as
// read-only.
var SharedPolicies = map[string]SharedPolicy{
	SharedPolicyDistributed: Distributed,
	SharedPolicyPacked:      Packed,
	SharedPolicyLowestIndex: LowestReplicas,
}

// SharedPolicyNames returns the keys of SharedPolicies, sorted.
func SharedPolicyNames() []string {
	names := make([]string, 0, len(SharedPolicies))
	for k := range SharedPolicies {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// Work limits of the shared policies' searches, as in Preferred: the branch
// and bound is exhaustive when at most MaxExactGPUs GPUs compete for the
// connectivity step, else bounded by sharedSearchBudget candidate visits
// after greedy starts bounded by sharedIncumbentBudget pair-score updates.
// sharedDPLimit bounds the exact subset-sum table of Packed's third
// objective, in 64-bit words of work.
const (
	sharedSearchBudget    = 1 << 16
	sharedIncumbentBudget = 1 << 19
	sharedDPLimit         = 1 << 20
)

// ValidateShared checks a shared request and returns nil or an error
// wrapping one of the sentinel errors, naming the offending replica or
// number: a nil machine, replicasPerGPU outside 1..topology.MaxReplicas
// (ErrInvalidReplicas), size <= 0, a replica whose GPU is not a GPU of m or
// whose index is not in 0..replicasPerGPU-1 (ErrIndexOutOfRange), a
// duplicate in available or mustInclude, a must-include replica not in
// available, more must-include replicas than size, or size >
// len(available). Every SharedPolicy calls it first.
func ValidateShared(m *topology.Machine, replicasPerGPU int, available, mustInclude []Replica, size int) error {
	_, err := newSharedRequest(m, replicasPerGPU, available, mustInclude, size)
	return err
}

// Distributed is the default shared policy: spread a request over as many
// GPUs as possible, onto the least used ones, best connected. With the
// terms of the package documentation (R replicas per GPU; inUse(g) = R
// minus the available replicas of g; k(g) the replicas of the answer on g;
// G the GPUs with k(g) > 0), it returns the valid answer that is best by,
// in order:
//
//  1. the most distinct GPUs |G|;
//  2. the most even use after the allocation: the values inUse(g) + k(g)
//     of the chosen GPUs, sorted in decreasing order, lexicographically
//     smallest. This is the lowest maximum of replicas in use on a chosen
//     GPU, then the fewest GPUs at that maximum, and so on; among answers
//     on as many GPUs it also gives the lowest sum over G of inUse(g) +
//     k(g);
//  3. the highest Score(G);
//  4. the lowest ids: the smallest answer sorted by CompareReplicas,
//     compared element by element.
//
// The result is exactly that optimum whenever at most MaxExactGPUs GPUs tie
// after objective 2; with more, objective 3 is searched within a fixed
// budget after greedy starts (as Preferred does beyond MaxExactGPUs), and
// objectives 1 and 2 still hold. Invalid requests get an error from
// ValidateShared.
func Distributed(m *topology.Machine, replicasPerGPU int, available, mustInclude []Replica, size int) ([]Replica, error) {
	q, err := newSharedRequest(m, replicasPerGPU, available, mustInclude, size)
	if err != nil {
		return nil, err
	}
	return q.result(q.distributed()), nil
}

// Packed is the shared policy that keeps GPUs whole: it fills GPUs already
// in use before it touches an idle one. With the terms of Distributed, and
// idle meaning inUse(g) == 0 before the allocation, it returns the valid
// answer that is best by, in order:
//
//  1. the fewest idle GPUs in G;
//  2. the fewest distinct GPUs |G|;
//  3. the most replicas already in use on the chosen GPUs: the highest sum
//     over G of inUse(g), before the allocation, each chosen GPU counted
//     once whatever k(g) is;
//  4. the highest Score(G);
//  5. the lowest ids, as in Distributed (so, among answers on the same
//     GPUs, the lowest GPUs take the most replicas).
//
// The result is exactly that optimum whenever at most MaxExactGPUs GPUs
// compete in objective 4 and the subset-sum table of objective 3 stays
// within a fixed size (requests spanning fewer than about a hundred
// partly used GPUs); beyond, the search is bounded as in Distributed and,
// for the table, objective 3 comes from a greedy choice. Objectives 1 and
// 2 always hold. Invalid requests get an error from ValidateShared.
func Packed(m *topology.Machine, replicasPerGPU int, available, mustInclude []Replica, size int) ([]Replica, error) {
	q, err := newSharedRequest(m, replicasPerGPU, available, mustInclude, size)
	if err != nil {
		return nil, err
	}
	return q.result(q.packed()), nil
}

// LowestReplicas is the shared policy that ignores topology and usage: the
// must-include replicas plus the lowest other available replicas by
// CompareReplicas, sorted.
func LowestReplicas(m *topology.Machine, replicasPerGPU int, available, mustInclude []Replica, size int) ([]Replica, error) {
	q, err := newSharedRequest(m, replicasPerGPU, available, mustInclude, size)
	if err != nil {
		return nil, err
	}
	k := make([]int, len(q.gpus))
	need := q.size - q.nMust
	for p, g := range q.gpus {
		take := min(need, g.avail()-g.must)
		k[p] = g.must + take
		need -= take
	}
	return q.result(k), nil
}

// sharedRequest is a validated shared request, grouped by GPU.
type sharedRequest struct {
	m      *topology.Machine
	perGPU int
	size   int
	nMust  int
	gpus   []gpuReplicas // the GPUs with an available replica, ascending
}

// gpuReplicas are the available replicas of one GPU.
type gpuReplicas struct {
	gpu int
	// order lists the available replica indices in the order a policy
	// takes them: must-include ones first, then the others, each part
	// ascending. Taking the first k is the lowest-ids choice of k.
	order []int
	must  int // the number of must-include replicas, a prefix of order
}

func (g *gpuReplicas) avail() int { return len(g.order) }

// inUse returns the replicas of group p that are not available.
func (q *sharedRequest) inUse(p int) int { return q.perGPU - q.gpus[p].avail() }

func newSharedRequest(m *topology.Machine, perGPU int, available, mustInclude []Replica, size int) (*sharedRequest, error) {
	if m == nil {
		return nil, ErrNilMachine
	}
	if perGPU < 1 || perGPU > topology.MaxReplicas {
		return nil, fmt.Errorf("%d replicas per GPU, want 1..%d: %w", perGPU, topology.MaxReplicas, ErrInvalidReplicas)
	}
	if size <= 0 {
		return nil, fmt.Errorf("allocation size %d: %w", size, ErrInvalidSize)
	}
	n := m.Len()
	check := func(what string, r Replica) error {
		if r.GPU < 0 || r.GPU >= n {
			return fmt.Errorf("%s replica %v: GPU index %d, machine %s has GPUs 0..%d: %w", what, r, r.GPU, m.Name(), n-1, ErrIndexOutOfRange)
		}
		if r.Index < 0 || r.Index >= perGPU {
			return fmt.Errorf("%s replica %v: replica index %d, GPUs have replicas 0..%d: %w", what, r, r.Index, perGPU-1, ErrIndexOutOfRange)
		}
		return nil
	}
	for _, r := range available {
		if err := check("available", r); err != nil {
			return nil, err
		}
	}
	for _, r := range mustInclude {
		if err := check("must-include", r); err != nil {
			return nil, err
		}
	}
	avail := sortedReplicas(available)
	if d, ok := firstDuplicate(avail); ok {
		return nil, fmt.Errorf("available replica %v listed twice: %w", d, ErrDuplicate)
	}
	must := sortedReplicas(mustInclude)
	if d, ok := firstDuplicate(must); ok {
		return nil, fmt.Errorf("must-include replica %v listed twice: %w", d, ErrDuplicate)
	}
	for _, r := range must {
		if _, found := slices.BinarySearchFunc(avail, r, CompareReplicas); !found {
			return nil, fmt.Errorf("must-include replica %v: %w", r, ErrNotAvailable)
		}
	}
	if len(must) > size {
		return nil, fmt.Errorf("%d must-include replicas for an allocation of %d: %w", len(must), size, ErrTooManyMustInclude)
	}
	if size > len(avail) {
		return nil, fmt.Errorf("allocation size %d but %d replicas available: %w", size, len(avail), ErrNotEnoughDevices)
	}

	q := &sharedRequest{m: m, perGPU: perGPU, size: size, nMust: len(must)}
	backing := make([]int, 0, len(avail)) // never grows: one entry per replica
	mi := 0
	for i := 0; i < len(avail); {
		g := avail[i].GPU
		j := i
		for j < len(avail) && avail[j].GPU == g {
			j++
		}
		start := len(backing)
		for mi < len(must) && must[mi].GPU == g {
			backing = append(backing, must[mi].Index)
			mi++
		}
		nm := len(backing) - start
		mk := start
		for _, r := range avail[i:j] {
			if mk < start+nm && backing[mk] == r.Index {
				mk++
				continue
			}
			backing = append(backing, r.Index)
		}
		q.gpus = append(q.gpus, gpuReplicas{gpu: g, order: backing[start:len(backing):len(backing)], must: nm})
		i = j
	}
	return q, nil
}

// sortedReplicas returns rs sorted by CompareReplicas, copying only if it
// is not strictly ascending already.
func sortedReplicas(rs []Replica) []Replica {
	for i := 1; i < len(rs); i++ {
		if a, b := rs[i-1], rs[i]; a.GPU > b.GPU || a.GPU == b.GPU && a.Index >= b.Index {
			s := slices.Clone(rs)
			slices.SortFunc(s, CompareReplicas)
			return s
		}
	}
	return rs
}

// firstDuplicate returns the lowest replica listed twice in sorted rs.
func firstDuplicate(rs []Replica) (Replica, bool) {
	for i := 1; i < len(rs); i++ {
		if rs[i] == rs[i-1] {
			return rs[i], true
		}
	}
	return Replica{}, false
}

// result returns the answer that takes the first k[p] replicas of each GPU
// group p, sorted.
func (q *sharedRequest) result(k []int) []Replica {
	out := make([]Replica, 0, q.size)
	var idx []int
	for p, n := range k {
		if n == 0 {
			continue
		}
		g := &q.gpus[p]
		idx = append(idx[:0], g.order[:n]...)
		slices.Sort(idx)
		for _, j := range idx {
			out = append(out, Replica{GPU: g.gpu, Index: j})
		}
	}
	return out
}

// gpuIndices returns the GPU indices of groups ps.
func (q *sharedRequest) gpuIndices(ps []int) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = q.gpus[p].gpu
	}
	return out
}

// distributed returns the replicas to take from each GPU group.
//
// If the request can take its other replicas (need) on as many GPUs
// without must-include replicas (N), objective 1 gives each of need such
// GPUs exactly one replica and the must-include GPUs nothing more; the
// sorted use of objective 2 is then smallest exactly for the need least
// used GPUs of N, so the GPUs used less than the need-th least used are
// taken, those used as much form a pool, and objective 3 chooses among the
// pool. Otherwise every GPU is used and objective 2 is water filling: each
// GPU up to the highest level that fits, and the lowest GPUs one more
// (objective 4).
func (q *sharedRequest) distributed() []int {
	k := make([]int, len(q.gpus))
	var fixed, others []int
	for p, g := range q.gpus {
		k[p] = g.must
		if g.must > 0 {
			fixed = append(fixed, p)
		} else {
			others = append(others, p)
		}
	}
	need := q.size - q.nMust
	if need == 0 {
		return k
	}
	if need <= len(others) {
		slices.SortStableFunc(others, func(a, b int) int { return cmp.Compare(q.inUse(a), q.inUse(b)) })
		v := q.inUse(others[need-1])
		var pool []int // ascending: stable sort of an ascending list
		r := need
		for _, p := range others {
			switch u := q.inUse(p); {
			case u < v:
				k[p] = 1
				fixed = append(fixed, p)
				r--
			case u == v:
				pool = append(pool, p)
			}
		}
		if r == len(pool) {
			for _, p := range pool {
				k[p] = 1
			}
			return k
		}
		for _, c := range bestSubset(q.m, q.gpuIndices(fixed), q.gpuIndices(pool), nil, r, 0, nil) {
			k[pool[c]] = 1
		}
		return k
	}
	for p := range q.gpus {
		k[p] = max(k[p], 1)
	}
	// Water filling: at level l a GPU holds replicas up to l in use, within
	// its lower bound k[p] and its available ones. Find the highest level
	// whose total fits the request, then raise the lowest GPUs at that
	// level by one for the rest.
	at := func(p, l int) int { return max(k[p], min(q.gpus[p].avail(), l-q.inUse(p))) }
	total := func(l int) int {
		c := 0
		for p := range q.gpus {
			c += at(p, l)
		}
		return c
	}
	lo, hi := 0, q.perGPU // total(0) is the lower bounds, below size; total(perGPU) is at least size
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if total(mid) <= q.size {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	rem := q.size
	for p := range q.gpus {
		k[p] = at(p, lo)
		rem -= k[p]
	}
	for p := range q.gpus {
		if rem > 0 && at(p, lo+1) > k[p] {
			k[p]++
			rem--
		}
	}
	return k
}

// packed returns the replicas to take from each GPU group.
//
// The GPUs with must-include replicas are always in G. If they cannot
// hold the request, the deficit D is covered by partly used GPUs B (not
// idle, no must-include) and idle ones I. Objective 1: only if B cannot
// hold D, j = ceil((D - cap(B)) / R) idle GPUs. Objective 2: the fewest x
// GPUs of B holding the rest, D - jR: those with the most available
// replicas. Objective 3: among x-subsets of B holding it, the least
// available replicas in total (the most in use), a subset-sum solved
// exactly by a (count, sum) table. Objective 4 then chooses the GPUs: any
// x of B with that total and any j of I (a weighted subset search). The
// replicas are spread over G lowest GPU first (objective 5).
func (q *sharedRequest) packed() []int {
	R := q.perGPU
	inG := make([]bool, len(q.gpus))
	var fixed, busy, idle []int
	capM := 0
	for p, g := range q.gpus {
		switch {
		case g.must > 0:
			fixed = append(fixed, p)
			inG[p] = true
			capM += g.avail()
		case g.avail() == R:
			idle = append(idle, p)
		default:
			busy = append(busy, p)
		}
	}
	if capM < q.size {
		q.packedChoose(inG, fixed, busy, idle, q.size-capM)
	}
	// Lowest GPUs first: each takes as many as it can while the later ones
	// keep at least their lower bound (1, or their must-include count).
	k := make([]int, len(q.gpus))
	lbRest := 0
	for p, g := range q.gpus {
		if inG[p] {
			lbRest += max(g.must, 1)
		}
	}
	rem := q.size
	for p, g := range q.gpus {
		if !inG[p] {
			continue
		}
		lbRest -= max(g.must, 1)
		k[p] = min(g.avail(), rem-lbRest)
		rem -= k[p]
	}
	return k
}

// packedChoose adds to inG the GPUs of busy and idle that cover deficit
// replicas beyond the must-include GPUs (see packed).
func (q *sharedRequest) packedChoose(inG []bool, fixed, busy, idle []int, deficit int) {
	R := q.perGPU
	capB := 0
	for _, p := range busy {
		capB += q.gpus[p].avail()
	}
	j := 0
	if capB < deficit {
		j = (deficit - capB + R - 1) / R
	}
	rest := deficit - j*R
	x, sum := 0, 0
	var take map[int]int // available count -> how many such GPUs of busy
	if rest > 0 {
		vals := make([]int, len(busy))
		for i, p := range busy {
			vals[i] = q.gpus[p].avail()
		}
		slices.SortFunc(vals, func(a, b int) int { return b - a })
		for x < len(vals) && sum < rest {
			sum += vals[x]
			x++
		}
		sum, take = minSumAtLeast(vals, x, rest)
	}
	if x+j == 0 {
		return
	}
	// Candidates: the busy GPUs that can be among x summing to sum, and the
	// idle ones if j > 0. Weights encode both constraints in one sum: a
	// busy GPU weighs its available count, an idle one w0, more than any x+j
	// busy GPUs together, so a total of sum + j·w0 means exactly j idle GPUs
	// and busy ones summing to sum.
	w0 := (x + j) * R
	var pos, cand, w []int
	quota := make(map[int]int)
	if x > 0 {
		for _, p := range busy {
			if a := q.gpus[p].avail(); a <= sum-(x-1) {
				pos, cand, w = append(pos, p), append(cand, q.gpus[p].gpu), append(w, a)
			}
		}
		for a, c := range take {
			quota[a] = c
		}
	}
	if j > 0 {
		for _, p := range idle {
			pos, cand, w = append(pos, p), append(cand, q.gpus[p].gpu), append(w, w0)
		}
		quota[w0] = j
	}
	// Candidates must be ascending for the lowest-ids tie-break.
	order := make([]int, len(pos))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(cand[a], cand[b]) })
	sp, sc, sw := make([]int, len(pos)), make([]int, len(pos)), make([]int, len(pos))
	for i, o := range order {
		sp[i], sc[i], sw[i] = pos[o], cand[o], w[o]
	}
	for _, c := range bestSubset(q.m, q.gpuIndices(fixed), sc, sw, x+j, sum+j*w0, quota) {
		inG[sp[c]] = true
	}
}

// minSumAtLeast returns the least sum of exactly x of vals (sorted
// descending, x no more than needed to reach floor with the largest) that
// is at least floor, and how many of each value make it up. It is exact
// with a table of reachable (count, sum) pairs per distinct value when that
// stays within sharedDPLimit words of work; otherwise it takes the x-1
// largest values and the smallest one that reaches floor.
//
// The least sum S is below floor + min(chosen): if dropping a chosen value
// still reached floor, x-1 values would do. So sums beyond floor + max(vals)
// - 1 are never needed.
func minSumAtLeast(vals []int, x, floor int) (int, map[int]int) {
	top := 0
	for _, v := range vals[:x] {
		top += v
	}
	maxS := min(top, floor+vals[0]-1)
	words := maxS/64 + 1
	// Distinct values ascending, with counts capped at x.
	var dv, dc []int
	for i := len(vals) - 1; i >= 0; i-- {
		if n := len(dv); n > 0 && dv[n-1] == vals[i] {
			dc[n-1] = min(dc[n-1]+1, x)
		} else {
			dv, dc = append(dv, vals[i]), append(dc, 1)
		}
	}
	items := 0
	for _, c := range dc {
		items += c
	}
	if (x+1)*(items+len(dv)+1)*words > sharedDPLimit {
		return minSumGreedy(vals, x, floor)
	}
	d := len(dv)
	reach := make([]uint64, (d+1)*(x+1)*words)
	layer := func(i, c int) []uint64 { o := (i*(x+1) + c) * words; return reach[o : o+words] }
	layer(0, 0)[0] = 1
	for i := 1; i <= d; i++ {
		v, n := dv[i-1], dc[i-1]
		for c := 0; c <= x; c++ {
			dst := layer(i, c)
			for t := 0; t <= min(n, c); t++ {
				orShifted(dst, layer(i-1, c-t), t*v)
			}
		}
	}
	final := layer(d, x)
	s := floor
	for s <= maxS && final[s/64]&(1<<(s%64)) == 0 {
		s++
	}
	if s > maxS {
		// Unreachable by the argument above; stay valid regardless.
		return minSumGreedy(vals, x, floor)
	}
	take := make(map[int]int)
	sum, c := s, x
	for i := d; i >= 1; i-- {
		v, n := dv[i-1], dc[i-1]
		for t := 0; t <= min(n, c); t++ {
			if r := sum - t*v; r >= 0 {
				if prev := layer(i-1, c-t); prev[r/64]&(1<<(r%64)) != 0 {
					if t > 0 {
						take[v] = t
					}
					sum, c = r, c-t
					break
				}
			}
		}
	}
	return s, take
}

// minSumGreedy is minSumAtLeast's fallback: the x-1 largest values and the
// smallest other one that reaches floor.
func minSumGreedy(vals []int, x, floor int) (int, map[int]int) {
	take := make(map[int]int)
	sum := 0
	for _, v := range vals[:x-1] {
		sum += v
		take[v]++
	}
	last := x - 1
	for last+1 < len(vals) && sum+vals[last+1] >= floor {
		last++
	}
	take[vals[last]]++
	return sum + vals[last], take
}

// orShifted sets dst |= src << sh, bits beyond dst's length dropped.
func orShifted(dst, src []uint64, sh int) {
	ws, bs := sh/64, uint(sh%64)
	for i := len(dst) - 1; i >= ws; i-- {
		v := src[i-ws] << bs
		if bs > 0 && i-ws-1 >= 0 {
			v |= src[i-ws-1] >> (64 - bs)
		}
		dst[i] |= v
	}
}
