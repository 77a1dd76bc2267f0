package allocator

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func TestAllocator_Churn_BestConnectedWins(t *testing.T) {
	names := append(topology.PresetNames(), "generic-8")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			m := MustMachine(t, name)
			cfg := ChurnConfig{Seed: 7, Requests: 400}
			res, err := Churn(m, []string{PolicyLowestIndex, PolicyBestConnected}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			low, best := res[0], res[1]
			if low.Placed != best.Placed || low.Rejected != best.Rejected || low.Placed+low.Rejected != 400 {
				t.Errorf("policies saw different streams: %+v %+v", low, best)
			}
			if best.RelScore < low.RelScore || best.RelScore > 1.0000001 || best.RelScore < 0.9 {
				t.Errorf("relative score: best-connected %.3f, lowest-index %.3f", best.RelScore, low.RelScore)
			}
			if best.NVLinkShare() < low.NVLinkShare() {
				t.Errorf("NVLink share: best-connected %.3f, lowest-index %.3f", best.NVLinkShare(), low.NVLinkShare())
			}
			again, err := Churn(m, []string{PolicyLowestIndex, PolicyBestConnected}, cfg)
			if err != nil || !slices.Equal(again, res) {
				t.Errorf("Churn is not deterministic: %+v vs %+v", again, res)
			}
		})
	}
}

func TestAllocator_Churn_Errors(t *testing.T) {
	m := MustMachine(t, "hgx-h100")
	if _, err := Churn(nil, nil, ChurnConfig{}); !errors.Is(err, ErrNilMachine) {
		t.Errorf("nil machine: %v", err)
	}
	if _, err := Churn(m, []string{"random"}, ChurnConfig{Requests: 10}); err == nil {
		t.Error("unknown policy: no error")
	}
	if _, err := Churn(m, nil, ChurnConfig{Sizes: []int{16}}); !errors.Is(err, ErrInvalidSize) {
		t.Errorf("no usable size: %v", err)
	}
	if _, err := Churn(m, nil, ChurnConfig{Sizes: []int{1}, Weights: []int{1, 2}}); !errors.Is(err, ErrInvalidSize) {
		t.Errorf("weights mismatch: %v", err)
	}
}

func TestAllocator_nvlinkCliqueExists(t *testing.T) {
	m := MustMachine(t, "dgx1-volta")
	tests := []struct {
		free []int
		size int
		want bool
	}{
		{[]int{0, 1, 2, 3}, 4, true},
		{[]int{0, 1, 2, 4}, 3, true},
		{[]int{0, 1, 2, 4}, 4, false},
		{[]int{0, 5, 6}, 2, true},
		{[]int{0, 5}, 2, false},
		{all(8), 5, false},
	}
	for _, tt := range tests {
		if got := nvlinkCliqueExists(m, tt.free, tt.size); got != tt.want {
			t.Errorf("nvlinkCliqueExists(%v, %d) = %v", tt.free, tt.size, got)
		}
	}
}

func TestAllocator_Churn_Shared(t *testing.T) {
	names := append(topology.PresetNames(), "generic-8")
	policies := []string{SharedPolicyLowestIndex, SharedPolicyPacked, SharedPolicyDistributed}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			m := MustMachine(t, name)
			cfg := ChurnConfig{Seed: 5, Requests: 600, Replicas: 4}
			res, err := Churn(m, policies, cfg)
			if err != nil {
				t.Fatal(err)
			}
			low, packed, dist := res[0], res[1], res[2]
			for _, r := range res {
				if r.WholeRequests+r.ReplicaRequests != 600 || r.Placed+r.Rejected != 600 ||
					r.WholeRejected+r.ReplicaRejected != r.Rejected || r.WholeRequests != low.WholeRequests {
					t.Errorf("%s: inconsistent counts %+v", r.Policy, r)
				}
				if r.WholeGPUs < 0 || r.WholeGPUs > float64(m.Len()) || r.ReplicaRelScore > 1.0000001 || r.RelScore > 1.0000001 {
					t.Errorf("%s: out of range %+v", r.Policy, r)
				}
			}
			if packed.WholeGPUs < dist.WholeGPUs {
				t.Errorf("packed keeps %.2f GPUs whole, distributed %.2f", packed.WholeGPUs, dist.WholeGPUs)
			}
			if dist.MultiReplica < packed.MultiReplica || dist.MultiReplica == 0 {
				t.Errorf("distributed spread %d requests, packed %d", dist.MultiReplica, packed.MultiReplica)
			}
			// Use comes before links in distributed, so on NVSwitch machines,
			// where links hardly differ, it may lose a little to lowest-index.
			if dist.ReplicaRelScore < low.ReplicaRelScore-0.01 {
				t.Errorf("replica placement score: distributed %.3f, lowest-index %.3f", dist.ReplicaRelScore, low.ReplicaRelScore)
			}
			again, err := Churn(m, policies, cfg)
			if err != nil || !slices.Equal(again, res) {
				t.Errorf("Churn is not deterministic: %+v vs %+v", again, res)
			}
		})
	}
}

func TestAllocator_Churn_SharedErrors(t *testing.T) {
	m := MustMachine(t, "hgx-h100")
	tests := []struct {
		name     string
		policies []string
		cfg      ChurnConfig
		want     error
	}{
		{"negative replicas", nil, ChurnConfig{Replicas: -1}, ErrInvalidReplicas},
		{"too many replicas", nil, ChurnConfig{Replicas: topology.MaxReplicas + 1}, ErrInvalidReplicas},
		{"share above 1", nil, ChurnConfig{Replicas: 2, ReplicaShare: 1.5}, ErrInvalidSize},
		{"negative share", nil, ChurnConfig{Replicas: 2, ReplicaShare: -0.5}, ErrInvalidSize},
		{"no usable replica size", nil, ChurnConfig{Replicas: 2, ReplicaSizes: []int{17}}, ErrInvalidSize},
		{"replica weights mismatch", nil, ChurnConfig{Replicas: 2, ReplicaSizes: []int{1}, ReplicaWeights: []int{1, 2}}, ErrInvalidSize},
		{"whole-GPU policy name", []string{PolicyBestConnected}, ChurnConfig{Replicas: 2, Requests: 10}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Churn(m, tt.policies, tt.cfg)
			if tt.want == nil {
				if err == nil || !strings.Contains(err.Error(), "unknown shared policy") {
					t.Errorf("error %v, want an unknown shared policy", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
		})
	}
	// Only replica requests: no whole-GPU size is needed.
	res, err := Churn(m, []string{SharedPolicyPacked}, ChurnConfig{Replicas: 2, ReplicaShare: 1, Sizes: []int{}, Requests: 50})
	if err != nil || res[0].WholeRequests != 0 || res[0].ReplicaRequests != 50 {
		t.Errorf("replicas only: %+v, %v", res, err)
	}
}
