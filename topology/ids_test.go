package topology_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// FuzzGPUOfID: a device id maps to a GPU only in the canonical forms
// fake-<i> and fake-<i>::<j>, and fake-<i> is then exactly GPUID(i).
func FuzzGPUOfID(f *testing.F) {
	for _, s := range []string{"fake-0", "fake-12", "fake-3::1", "fake-01", "fake-", "x", "fake-1::", "fake-99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		i, ok := topology.GPUOf(id)
		if !ok {
			return
		}
		if i < 0 {
			t.Fatalf("topology.GPUOf(%q) = %d", id, i)
		}
		if topology.IsReplicaID(id) {
			if !strings.HasPrefix(id, topology.GPUID(i)+topology.ReplicaSeparator) {
				t.Fatalf("replica %q maps to GPU %d", id, i)
			}
			return
		}
		if topology.GPUID(i) != id {
			t.Fatalf("topology.GPUOf(%q) = %d, but topology.GPUID(%d) = %q", id, i, i, topology.GPUID(i))
		}
	})
}

// TestGPUsOf: the distinct GPUs of device ids, ascending, a replica as its
// GPU, ids that name no GPU left out.
func TestGPUsOf(t *testing.T) {
	for _, tc := range []struct {
		ids  []string
		want []int
	}{
		{nil, []int{}},
		{[]string{"fake-3", "fake-1"}, []int{1, 3}},
		{[]string{"fake-2::1", "fake-2::0", "fake-0", "fake-2"}, []int{0, 2}},
		{[]string{"GPU-1234", "fake-01", "fake-5::x", "fake-7"}, []int{7}},
	} {
		if got := topology.GPUsOf(tc.ids...); !slices.Equal(got, tc.want) {
			t.Errorf("GPUsOf(%q) = %v, want %v", tc.ids, got, tc.want)
		}
	}
}
