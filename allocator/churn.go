package allocator

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// ChurnConfig configures Churn. The zero value means every default.
type ChurnConfig struct {
	// Seed seeds the request stream; the same seed gives the same stream
	// and so the same results. Default 0.
	Seed uint64
	// Requests is the number of arriving requests. Default 2000.
	Requests int
	// Sizes are the GPU counts requested; sizes above the machine's GPU
	// count are dropped. Default 1, 2, 4, 8.
	Sizes []int
	// Weights are the relative frequencies of Sizes. Default 4, 3, 2, 1.
	Weights []int
	// MeanLifetime is the mean lifetime of a request, in arrivals (one
	// arrives per time step, lifetimes are uniform in 1..2·mean-1). Default:
	// the value that would keep about 80% of the GPUs busy (counting a
	// replica as 1/Replicas of a GPU).
	MeanLifetime int

	// Replicas is the number of replicas each GPU is shared as, 0..
	// topology.MaxReplicas. 0, the default, simulates whole-GPU requests
	// only and the policies are names from Policies. Above 0, a share of
	// the requests ask for replicas and the policies are names from
	// SharedPolicies; whole-GPU requests take GPUs with nothing in use, by
	// Preferred, in every run.
	Replicas int
	// ReplicaShare is the fraction of requests that ask for replicas, in
	// (0, 1]; used when Replicas > 0. Default 0.5.
	ReplicaShare float64
	// ReplicaSizes are the replica counts requested; sizes above the
	// machine's replica count are dropped. Default 1, 2, 4.
	ReplicaSizes []int
	// ReplicaWeights are the relative frequencies of ReplicaSizes.
	// Default 4, 2, 1 (with the default sizes), else all 1.
	ReplicaWeights []int
}

// ChurnResult is what one policy achieved on a request stream.
type ChurnResult struct {
	// Policy is the policy's name in Policies (SharedPolicies in a shared
	// run).
	Policy string
	// Requests is the number of arrivals; Placed were served, Rejected had
	// fewer free GPUs than they asked for (the same for every policy, since
	// free counts do not depend on placement).
	Requests, Placed, Rejected int
	// MultiGPU is the number of placed requests for 2 or more GPUs.
	MultiGPU int
	// RelScore is the mean, over placed multi-GPU requests, of the Score of
	// the placement divided by the Score of the best set of that size on
	// the empty machine (1 = as good as on an empty machine).
	RelScore float64
	// NVLinkPossible counts the placed multi-GPU requests for which a fully
	// NVLink-connected set (every pair with NVLinks) was free; NVLinkGot
	// those that got one.
	NVLinkPossible, NVLinkGot int

	// The fields below are set by shared runs (ChurnConfig.Replicas > 0);
	// the fields above then describe the whole-GPU requests among
	// Requests, Placed and Rejected.

	// WholeRequests and ReplicaRequests split Requests by kind;
	// WholeRejected and ReplicaRejected split Rejected. In a shared run
	// rejections depend on the policy: replicas spread over many GPUs
	// leave fewer GPUs free for whole-GPU requests.
	WholeRequests, WholeRejected     int
	ReplicaRequests, ReplicaRejected int
	// WholeGPUs is the mean, over arrivals (before placing each), of the
	// number of GPUs with no replica in use: idle ones and those held by
	// whole-GPU requests.
	WholeGPUs float64
	// MultiReplica is the number of placed replica requests whose replicas
	// span 2 or more GPUs; ReplicaRelScore is the mean over them of the
	// Score of their distinct GPUs divided by the Score of the best set of
	// as many GPUs on the empty machine.
	MultiReplica    int
	ReplicaRelScore float64
}

// NVLinkShare returns NVLinkGot / NVLinkPossible, or -1 if no request could
// have had a fully NVLink-connected set.
func (r ChurnResult) NVLinkShare() float64 {
	if r.NVLinkPossible == 0 {
		return -1
	}
	return float64(r.NVLinkGot) / float64(r.NVLinkPossible)
}

type churnRequest struct {
	size, lifetime int
	replicas       bool // a request for replicas rather than whole GPUs
}

// Churn simulates a seeded random stream of requests arriving at and leaving
// machine m and places each one with every named policy (names from
// Policies), each on its own copy of the machine, so policies are compared
// on the same stream in one run. It is deterministic for a given config.
//
// With cfg.Replicas > 0 the GPUs are shared: the stream mixes whole-GPU
// and replica requests, policies are names from SharedPolicies placing the
// replica requests, whole-GPU requests take GPUs with nothing in use (by
// Preferred), and the results also report the shared fields of
// ChurnResult. Placements then change what later requests can get, so
// Placed and Rejected differ between policies.
func Churn(m *topology.Machine, policies []string, cfg ChurnConfig) ([]ChurnResult, error) {
	if m == nil {
		return nil, ErrNilMachine
	}
	if cfg.Replicas != 0 {
		return churnShared(m, policies, cfg)
	}
	if cfg.Requests == 0 {
		cfg.Requests = 2000
	}
	if cfg.Sizes == nil {
		cfg.Sizes, cfg.Weights = []int{1, 2, 4, 8}, []int{4, 3, 2, 1}
	}
	if cfg.Weights == nil {
		cfg.Weights = make([]int, len(cfg.Sizes))
		for i := range cfg.Weights {
			cfg.Weights[i] = 1
		}
	}
	if len(cfg.Weights) != len(cfg.Sizes) || cfg.Requests < 0 || cfg.MeanLifetime < 0 {
		return nil, fmt.Errorf("churn config: %d sizes, %d weights, %d requests, lifetime %d: %w",
			len(cfg.Sizes), len(cfg.Weights), cfg.Requests, cfg.MeanLifetime, ErrInvalidSize)
	}
	var sizes, weights []int
	total, wsum := 0, 0
	for i, s := range cfg.Sizes {
		if s >= 1 && s <= m.Len() && cfg.Weights[i] > 0 {
			sizes = append(sizes, s)
			weights = append(weights, cfg.Weights[i])
			total += s * cfg.Weights[i]
			wsum += cfg.Weights[i]
		}
	}
	if len(sizes) == 0 {
		return nil, fmt.Errorf("churn on %s: no request size in 1..%d: %w", m.Name(), m.Len(), ErrInvalidSize)
	}
	if cfg.MeanLifetime == 0 {
		cfg.MeanLifetime = max(2, int(0.8*float64(m.Len())*float64(wsum)/float64(total)+0.5))
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x636875726e))
	stream := make([]churnRequest, cfg.Requests)
	for i := range stream {
		r := rng.IntN(wsum)
		k := 0
		for r >= weights[k] {
			r -= weights[k]
			k++
		}
		stream[i] = churnRequest{size: sizes[k], lifetime: 1 + rng.IntN(2*cfg.MeanLifetime-1)}
	}
	best := make(map[int]int)
	for _, s := range sizes {
		set, err := Preferred(m, allGPUs(m.Len()), nil, s)
		if err != nil {
			return nil, fmt.Errorf("best set of %d on %s: %w", s, m.Name(), err)
		}
		best[s] = Score(m, set)
	}
	out := make([]ChurnResult, 0, len(policies))
	for _, name := range policies {
		p, ok := Policies[name]
		if !ok {
			return nil, fmt.Errorf("churn: unknown policy %q (known: %v)", name, PolicyNames())
		}
		r, err := churnOne(m, p, stream, best)
		if err != nil {
			return nil, fmt.Errorf("churn %s with %s: %w", m.Name(), name, err)
		}
		r.Policy = name
		out = append(out, r)
	}
	return out, nil
}

func allGPUs(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func churnOne(m *topology.Machine, p Policy, stream []churnRequest, best map[int]int) (ChurnResult, error) {
	type active struct {
		end  int
		gpus []int
	}
	var (
		res    = ChurnResult{Requests: len(stream)}
		busy   = make([]bool, m.Len())
		nBusy  int
		live   []active
		relSum float64
	)
	for t, req := range stream {
		live = slices.DeleteFunc(live, func(a active) bool {
			if a.end > t {
				return false
			}
			for _, g := range a.gpus {
				busy[g] = false
			}
			nBusy -= len(a.gpus)
			return true
		})
		if req.size > m.Len()-nBusy {
			res.Rejected++
			continue
		}
		free := make([]int, 0, m.Len()-nBusy)
		for g, b := range busy {
			if !b {
				free = append(free, g)
			}
		}
		possible := req.size > 1 && nvlinkCliqueExists(m, free, req.size)
		set, err := p(m, free, nil, req.size)
		if err != nil {
			return res, err
		}
		if len(set) != req.size {
			return res, fmt.Errorf("policy returned %d GPUs for %d", len(set), req.size)
		}
		for _, g := range set {
			if g < 0 || g >= m.Len() || busy[g] {
				return res, fmt.Errorf("policy returned busy or unknown GPU %d", g)
			}
			busy[g] = true
		}
		nBusy += len(set)
		live = append(live, active{end: t + req.lifetime, gpus: set})
		res.Placed++
		if req.size > 1 {
			res.MultiGPU++
			if b := best[req.size]; b > 0 {
				relSum += float64(Score(m, set)) / float64(b)
			}
			if possible {
				res.NVLinkPossible++
				if NVLinkConnected(m, set) {
					res.NVLinkGot++
				}
			}
		}
	}
	if res.MultiGPU > 0 {
		res.RelScore = relSum / float64(res.MultiGPU)
	}
	return res, nil
}

// cliqueBudget bounds the clique search of one request.
const cliqueBudget = 1 << 16

// nvlinkCliqueExists reports whether size GPUs of free are pairwise
// NVLinked. The search is bounded; if the bound is hit it answers false.
func nvlinkCliqueExists(m *topology.Machine, free []int, size int) bool {
	work := 0
	var rec func(cands []int, k int) bool
	rec = func(cands []int, k int) bool {
		if k == 0 {
			return true
		}
		for i, c := range cands {
			if len(cands)-i < k || work > cliqueBudget {
				return false
			}
			work++
			var next []int
			for _, d := range cands[i+1:] {
				if m.Link(c, d).NVLinks > 0 {
					next = append(next, d)
				}
			}
			if rec(next, k-1) {
				return true
			}
		}
		return false
	}
	return rec(free, size)
}

// churnSizes keeps the sizes in 1..limit with positive weights and returns
// them with their weights, the weight sum and the weighted size sum.
func churnSizes(sizes, weights []int, limit int) (ks, ws []int, wsum, total int) {
	for i, s := range sizes {
		if s >= 1 && s <= limit && weights[i] > 0 {
			ks = append(ks, s)
			ws = append(ws, weights[i])
			wsum += weights[i]
			total += s * weights[i]
		}
	}
	return ks, ws, wsum, total
}

// pick draws an index with probability proportional to weights.
func pick(rng *rand.Rand, weights []int, wsum int) int {
	r := rng.IntN(wsum)
	k := 0
	for r >= weights[k] {
		r -= weights[k]
		k++
	}
	return k
}

// churnShared is Churn with cfg.Replicas > 0: mixed whole-GPU and replica
// requests, replicas placed by the named SharedPolicies.
func churnShared(m *topology.Machine, policies []string, cfg ChurnConfig) ([]ChurnResult, error) {
	if cfg.Replicas < 1 || cfg.Replicas > topology.MaxReplicas {
		return nil, fmt.Errorf("churn: %d replicas per GPU, want 1..%d: %w", cfg.Replicas, topology.MaxReplicas, ErrInvalidReplicas)
	}
	if cfg.Requests == 0 {
		cfg.Requests = 2000
	}
	if cfg.ReplicaShare == 0 {
		cfg.ReplicaShare = 0.5
	}
	if cfg.Sizes == nil {
		cfg.Sizes, cfg.Weights = []int{1, 2, 4, 8}, []int{4, 3, 2, 1}
	}
	if cfg.ReplicaSizes == nil {
		cfg.ReplicaSizes, cfg.ReplicaWeights = []int{1, 2, 4}, []int{4, 2, 1}
	}
	ones := func(n int) []int {
		w := make([]int, n)
		for i := range w {
			w[i] = 1
		}
		return w
	}
	if cfg.Weights == nil {
		cfg.Weights = ones(len(cfg.Sizes))
	}
	if cfg.ReplicaWeights == nil {
		cfg.ReplicaWeights = ones(len(cfg.ReplicaSizes))
	}
	if len(cfg.Weights) != len(cfg.Sizes) || len(cfg.ReplicaWeights) != len(cfg.ReplicaSizes) ||
		cfg.Requests < 0 || cfg.MeanLifetime < 0 || !(cfg.ReplicaShare > 0 && cfg.ReplicaShare <= 1) {
		return nil, fmt.Errorf("churn config: %d sizes, %d weights, %d replica sizes, %d replica weights, %d requests, lifetime %d, replica share %v: %w",
			len(cfg.Sizes), len(cfg.Weights), len(cfg.ReplicaSizes), len(cfg.ReplicaWeights), cfg.Requests, cfg.MeanLifetime, cfg.ReplicaShare, ErrInvalidSize)
	}
	n, R := m.Len(), cfg.Replicas
	sizes, weights, wsum, total := churnSizes(cfg.Sizes, cfg.Weights, n)
	rsizes, rweights, rwsum, rtotal := churnSizes(cfg.ReplicaSizes, cfg.ReplicaWeights, n*R)
	share := cfg.ReplicaShare
	if len(rsizes) == 0 || share < 1 && len(sizes) == 0 {
		return nil, fmt.Errorf("churn on %s: no whole-GPU size in 1..%d or replica size in 1..%d: %w", m.Name(), n, n*R, ErrInvalidSize)
	}
	if cfg.MeanLifetime == 0 {
		// GPUs' worth per request: whole sizes, and replicas as 1/R each.
		perRequest := share * float64(rtotal) / float64(rwsum) / float64(R)
		if share < 1 {
			perRequest += (1 - share) * float64(total) / float64(wsum)
		}
		cfg.MeanLifetime = max(2, int(0.8*float64(n)/perRequest+0.5))
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x736861726564))
	stream := make([]churnRequest, cfg.Requests)
	for i := range stream {
		if rng.Float64() < share {
			stream[i] = churnRequest{size: rsizes[pick(rng, rweights, rwsum)], replicas: true}
		} else {
			stream[i] = churnRequest{size: sizes[pick(rng, weights, wsum)]}
		}
		stream[i].lifetime = 1 + rng.IntN(2*cfg.MeanLifetime-1)
	}
	// The best score of d GPUs on the empty machine, for every d a whole
	// or replica request can span.
	span := slices.Max(rsizes)
	if len(sizes) > 0 {
		span = max(span, slices.Max(sizes))
	}
	best := make(map[int]int)
	for d := 2; d <= min(n, span); d++ {
		set, err := Preferred(m, allGPUs(n), nil, d)
		if err != nil {
			return nil, fmt.Errorf("best set of %d on %s: %w", d, m.Name(), err)
		}
		best[d] = Score(m, set)
	}
	out := make([]ChurnResult, 0, len(policies))
	for _, name := range policies {
		p, ok := SharedPolicies[name]
		if !ok {
			return nil, fmt.Errorf("churn: unknown shared policy %q (known: %v)", name, SharedPolicyNames())
		}
		r, err := churnSharedOne(m, R, p, stream, best)
		if err != nil {
			return nil, fmt.Errorf("churn %s with %s: %w", m.Name(), name, err)
		}
		r.Policy = name
		out = append(out, r)
	}
	return out, nil
}

func churnSharedOne(m *topology.Machine, R int, p SharedPolicy, stream []churnRequest, best map[int]int) (ChurnResult, error) {
	type active struct {
		end      int
		gpus     []int     // held whole
		replicas []Replica // held as replicas
	}
	n := m.Len()
	var (
		res       = ChurnResult{Requests: len(stream)}
		whole     = make([]bool, n) // held by a whole-GPU request
		used      = make([]bool, n*R)
		inUse     = make([]int, n) // replicas in use per GPU
		live      []active
		relSum    float64
		repRelSum float64
		wholeSum  int
	)
	for t, req := range stream {
		live = slices.DeleteFunc(live, func(a active) bool {
			if a.end > t {
				return false
			}
			for _, g := range a.gpus {
				whole[g] = false
			}
			for _, r := range a.replicas {
				used[r.GPU*R+r.Index] = false
				inUse[r.GPU]--
			}
			return true
		})
		var idle []int
		for g := range n {
			if inUse[g] == 0 {
				wholeSum++
				if !whole[g] {
					idle = append(idle, g)
				}
			}
		}
		if !req.replicas {
			res.WholeRequests++
			if req.size > len(idle) {
				res.Rejected++
				res.WholeRejected++
				continue
			}
			possible := req.size > 1 && nvlinkCliqueExists(m, idle, req.size)
			set, err := Preferred(m, idle, nil, req.size)
			if err != nil {
				return res, err
			}
			for _, g := range set {
				whole[g] = true
			}
			live = append(live, active{end: t + req.lifetime, gpus: set})
			res.Placed++
			if req.size > 1 {
				res.MultiGPU++
				if b := best[req.size]; b > 0 {
					relSum += float64(Score(m, set)) / float64(b)
				}
				if possible {
					res.NVLinkPossible++
					if NVLinkConnected(m, set) {
						res.NVLinkGot++
					}
				}
			}
			continue
		}
		res.ReplicaRequests++
		var avail []Replica
		for g := range n {
			if whole[g] {
				continue
			}
			for j := range R {
				if !used[g*R+j] {
					avail = append(avail, Replica{g, j})
				}
			}
		}
		if req.size > len(avail) {
			res.Rejected++
			res.ReplicaRejected++
			continue
		}
		got, err := p(m, R, avail, nil, req.size)
		if err != nil {
			return res, err
		}
		if len(got) != req.size {
			return res, fmt.Errorf("policy returned %d replicas for %d", len(got), req.size)
		}
		var gpus []int
		for _, r := range got {
			if r.GPU < 0 || r.GPU >= n || r.Index < 0 || r.Index >= R || whole[r.GPU] || used[r.GPU*R+r.Index] {
				return res, fmt.Errorf("policy returned busy or unknown replica %v", r)
			}
			used[r.GPU*R+r.Index] = true
			if !slices.Contains(gpus, r.GPU) {
				gpus = append(gpus, r.GPU)
			}
			inUse[r.GPU]++
		}
		live = append(live, active{end: t + req.lifetime, replicas: got})
		res.Placed++
		if len(gpus) > 1 {
			res.MultiReplica++
			if b := best[len(gpus)]; b > 0 {
				repRelSum += float64(Score(m, gpus)) / float64(b)
			}
		}
	}
	if res.MultiGPU > 0 {
		res.RelScore = relSum / float64(res.MultiGPU)
	}
	if res.MultiReplica > 0 {
		res.ReplicaRelScore = repRelSum / float64(res.MultiReplica)
	}
	if len(stream) > 0 {
		res.WholeGPUs = float64(wholeSum) / float64(len(stream))
	}
	return res, nil
}
