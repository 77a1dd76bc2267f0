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
	// the value that would keep about 80% of the GPUs busy.
	MeanLifetime int
}

// ChurnResult is what one policy achieved on a request stream.
type ChurnResult struct {
	// Policy is the policy's name in Policies.
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
}

// Churn simulates a seeded random stream of requests arriving at and leaving
// machine m and places each one with every named policy (names from
// Policies), each on its own copy of the machine, so policies are compared
// on the same stream in one run. It is deterministic for a given config.
func Churn(m *topology.Machine, policies []string, cfg ChurnConfig) ([]ChurnResult, error) {
	if m == nil {
		return nil, ErrNilMachine
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
