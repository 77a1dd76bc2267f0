package gpuset

import (
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Config is what a Set is built from: the machine, how it is advertised
// and how requests for it are placed. It is a plain, comparable-by-value
// configuration (reflect.DeepEqual tells two apart; it holds policy names,
// not functions). The options package fills it from the flags, the
// environment and the configuration file; the zero value is not valid:
// Machine and ResourceName are required.
type Config struct {
	// ResourceName is the extended resource the GPUs are registered under
	// (default unicore.mcyou.cc/gpu). Shared GPUs may be advertised under
	// Sharing.ResourceName instead.
	ResourceName string
	// Topology is the -topology value the machine came from: "" for the
	// generic layout, a preset name, or a file path.
	Topology string
	// Machine is the modelled machine: its GPU count is Machine.Len().
	Machine *topology.Machine
	// NUMAReport is how the GPUs' NUMA nodes are reported (default auto).
	NUMAReport topology.NUMAReport
	// SysfsRoot is the host's sysfs, where the auto NUMA report reads the
	// host's nodes (default /sys).
	SysfsRoot string
	// AllocationPolicy names the preferred-allocation policy of whole GPUs,
	// a key of allocator.Policies (default best-connected).
	AllocationPolicy string
	// Sharing is how GPUs are shared; Sharing.Replicas is 1 when they are
	// not.
	Sharing Sharing
	// MIG is the MIG layout and how its devices are advertised; the zero
	// value has none.
	MIG MIG
}

// Sharing is the configuration of time-sliced GPUs: each shared GPU is
// advertised as Replicas devices. The zero value shares nothing; so does
// Replicas 1.
type Sharing struct {
	// Replicas is the number of devices advertised per shared GPU; 1 means
	// no sharing (default 1).
	Replicas int
	// ResourceName is the resource the shared GPUs are advertised as:
	// Config.ResourceName, or "<resource>.shared" with renameByDefault, or
	// the resource's rename.
	ResourceName string
	// Renamed reports that ResourceName is not Config.ResourceName.
	Renamed bool
	// FailRequestsGreaterThanOne refuses a container that asks for more
	// than one shared device (default false).
	FailRequestsGreaterThanOne bool
	// GPUs are the indices of the shared GPUs, ascending; nil means every
	// GPU (devices: all, the default).
	GPUs []int
	// PolicyName names how requests for replicas are placed, a key of
	// allocator.SharedPolicies (default distributed).
	PolicyName string
}

// Enabled reports whether GPUs are shared.
func (s Sharing) Enabled() bool { return s.Replicas > 1 }

// Shares reports whether GPU index i is shared.
func (s Sharing) Shares(i int) bool {
	return s.Enabled() && (s.GPUs == nil || slices.Contains(s.GPUs, i))
}
