package allocator

import (
	"errors"
	"slices"
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
