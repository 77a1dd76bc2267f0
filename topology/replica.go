package topology

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Replica ids. When GPUs are shared by time-slicing, each GPU is advertised
// as replicasPerGPU devices: replica j of GPU i is "fake-<i>::<j>", j =
// 0..replicasPerGPU-1, in the "<gpu id>::<n>" format of NVIDIA's device
// plugin. A GPU id ("fake-<i>") never contains the separator, so
// IsReplicaID tells the two kinds apart.

// ReplicaSeparator separates the GPU id from the replica number in a
// replica id, as NVIDIA's device plugin writes it.
const ReplicaSeparator = "::"

// MaxReplicas is the largest number of replicas per GPU. It bounds the
// device list a shared machine advertises (at most MaxGPUs × MaxReplicas
// ids) and the arithmetic of the allocators; 1024 covers the
// thousand-replica "milli-GPU" configurations in use.
const MaxReplicas = 1024

// ReplicaID returns the device id of replica j of GPU i, "fake-<i>::<j>".
// It does not check i or j.
func ReplicaID(gpu, replica int) string {
	return IDPrefix + strconv.Itoa(gpu) + ReplicaSeparator + strconv.Itoa(replica)
}

// IsReplicaID reports whether id is meant as a replica id: whether it
// contains ReplicaSeparator, as NVIDIA's plugin decides. It says nothing of
// validity: ParseReplicaID checks the form, and a GPU id (Machine.Index)
// never contains the separator.
func IsReplicaID(id string) bool { return strings.Contains(id, ReplicaSeparator) }

// ParseReplicaID parses a replica id "fake-<i>::<j>" into GPU index i and
// replica number j. Only the canonical form ReplicaID writes is accepted:
// both numbers decimal without sign, spaces or leading zeros. It checks
// the form only, not a machine's ranges (see Machine.ReplicaIndex). Errors
// wrap ErrInvalidReplicaID and quote the id and the offending part.
func ParseReplicaID(id string) (gpu, replica int, err error) {
	rest, ok := strings.CutPrefix(id, IDPrefix)
	if !ok {
		return 0, 0, fmt.Errorf("replica id %q: want %s<gpu>%s<replica>: %w", id, IDPrefix, ReplicaSeparator, ErrInvalidReplicaID)
	}
	g, r, ok := strings.Cut(rest, ReplicaSeparator)
	if !ok {
		return 0, 0, fmt.Errorf("replica id %q: no %q separator: want %s<gpu>%s<replica>: %w", id, ReplicaSeparator, IDPrefix, ReplicaSeparator, ErrInvalidReplicaID)
	}
	if gpu, err = canonicalUint(g); err != nil {
		return 0, 0, fmt.Errorf("replica id %q: GPU number %q: %w: %w", id, g, err, ErrInvalidReplicaID)
	}
	if replica, err = canonicalUint(r); err != nil {
		return 0, 0, fmt.Errorf("replica id %q: replica number %q: %w: %w", id, r, err, ErrInvalidReplicaID)
	}
	return gpu, replica, nil
}

// ReplicaIndex parses a replica id (see ParseReplicaID) and checks that it
// names a replica of this machine shared as replicasPerGPU replicas per
// GPU: GPU index below Len() and replica number below replicasPerGPU.
// Errors wrap ErrInvalidReplicaID.
func (m *Machine) ReplicaIndex(id string, replicasPerGPU int) (gpu, replica int, err error) {
	gpu, replica, err = ParseReplicaID(id)
	switch {
	case err != nil:
		return 0, 0, err
	case m == nil:
		return 0, 0, fmt.Errorf("replica id %q: no machine: %w", id, ErrInvalidReplicaID)
	case replicasPerGPU < 1 || replicasPerGPU > MaxReplicas:
		return 0, 0, fmt.Errorf("replica id %q: %d replicas per GPU, want 1..%d: %w", id, replicasPerGPU, MaxReplicas, ErrInvalidReplicaID)
	case gpu >= m.Len():
		return 0, 0, fmt.Errorf("replica id %q: machine %s has GPUs 0..%d: %w", id, m.Name(), m.Len()-1, ErrInvalidReplicaID)
	case replica >= replicasPerGPU:
		return 0, 0, fmt.Errorf("replica id %q: GPUs have replicas 0..%d: %w", id, replicasPerGPU-1, ErrInvalidReplicaID)
	}
	return gpu, replica, nil
}

// ReplicaIDs returns the ids of every replica of the machine shared as
// replicasPerGPU replicas per GPU, GPU-major: fake-0::0, fake-0::1, …,
// fake-1::0, …. It returns nil for a count outside 1..MaxReplicas.
func (m *Machine) ReplicaIDs(replicasPerGPU int) []string {
	if replicasPerGPU < 1 || replicasPerGPU > MaxReplicas {
		return nil
	}
	ids := make([]string, 0, m.Len()*replicasPerGPU)
	for i := range m.Len() {
		for j := range replicasPerGPU {
			ids = append(ids, ReplicaID(i, j))
		}
	}
	return ids
}

var (
	errEmpty       = errors.New("empty")
	errNotDecimal  = errors.New("not a decimal number")
	errLeadingZero = errors.New("leading zero")
	errTooLarge    = errors.New("too large")
)

// canonicalUint parses a non-negative decimal number without sign, spaces
// or leading zeros.
func canonicalUint(s string) (int, error) {
	switch {
	case s == "":
		return 0, errEmpty
	case strings.ContainsFunc(s, func(c rune) bool { return c < '0' || c > '9' }):
		return 0, errNotDecimal
	case len(s) > 1 && s[0] == '0':
		return 0, errLeadingZero
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errTooLarge
	}
	return n, nil
}
