package allocator

import (
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Policy chooses size GPUs from available, including every mustInclude.
// Indices are GPU indices of m (fake-<i> is index i). A Policy returns the
// chosen indices sorted ascending, or an error from Validate for an invalid
// request; it never returns an invalid set. Policies are pure and safe for
// concurrent use.
type Policy func(m *topology.Machine, available, mustInclude []int, size int) ([]int, error)

// Policy names, the keys of Policies.
const (
	// PolicyBestConnected is Preferred, the default.
	PolicyBestConnected = "best-connected"
	// PolicyLowestIndex is LowestIndex, what the kubelet does without a
	// preference.
	PolicyLowestIndex = "lowest-index"
)

// Policies is the table of allocation policies by name, for a plugin flag
// such as -allocation-policy. Treat it as read-only.
var Policies = map[string]Policy{
	PolicyBestConnected: Preferred,
	PolicyLowestIndex:   LowestIndex,
}

// PolicyNames returns the keys of Policies, sorted.
func PolicyNames() []string {
	names := make([]string, 0, len(Policies))
	for k := range Policies {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// LowestIndex is the policy that ignores topology: the must-include devices
// plus the lowest-index other available devices, sorted.
func LowestIndex(m *topology.Machine, available, mustInclude []int, size int) ([]int, error) {
	if err := Validate(m, available, mustInclude, size); err != nil {
		return nil, err
	}
	out := slices.Clone(mustInclude)
	rest := slices.Clone(available)
	slices.Sort(rest)
	for _, i := range rest {
		if len(out) == size {
			break
		}
		if !slices.Contains(mustInclude, i) {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out, nil
}
