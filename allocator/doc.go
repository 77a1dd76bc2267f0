// Package allocator chooses which GPUs of a topology.Machine a container
// gets. It is pure: plain GPU indices and a machine in, indices out; no
// gRPC, files or logging. Every function is safe for concurrent use.
//
// # Score
//
// The connectivity score of a set of GPUs is the sum over its pairs of
//
//	PairScore(a, b) = 100 × NVLinks(a, b)                      (NVLinkWeight)
//	                + PCIe term: BOARD 60, PIX 50, PXB 40, PHB 30, NODE 20, SYS 10
//	                + 5 if a and b are on the same known NUMA node (SameNUMAWeight)
//
// One NVLink outweighs any PCIe and NUMA difference, so link count dominates,
// then PCIe proximity, then NUMA locality. The PCIe values are those of
// NVIDIA's go-gpuallocator; unlike it, a pair in an NVSwitch domain gets its
// per-pair link count like direct links (NV12 on a DGX A100 scores 1200),
// and NUMA counts.
//
// # Preferred allocation
//
// Preferred, the "best-connected" policy, returns exactly size GPUs from the
// available ones, including every must-include one, chosen by, in order:
//
//  1. the highest Score of the set;
//  2. then the least connection between the set and the available GPUs left
//     over (the sum of their PairScores), which keeps the remainder best
//     connected: a 1-GPU request takes a GPU whose NVLink partner is already
//     busy instead of breaking an intact pair or quad, and a small request
//     goes where the machine is already fragmented (best fit);
//  3. then the lowest indices.
//
// With up to MaxExactGPUs (16) available GPUs the answer is exactly that
// optimum: a branch and bound over include/exclude decisions, pruned by an
// upper bound of the score still reachable and by the symmetry of
// interchangeable GPUs (topology.Machine.Class). With more, the same search
// runs within a fixed work budget after a greedy start from every seed GPU
// improved by swaps, and the best set found is returned. Measured on a
// 2-core machine (BenchmarkPreferred): at most 15 µs per call at 8 GPUs,
// 0.1 ms exact at 16, 2.5 ms at 128 half-busy, about 0.1 s at 1024.
// Answers are always valid, sorted by index.
//
// Invalid requests return errors wrapping the sentinels of errors.go, naming
// the offending device or number (see Validate).
//
// # Policies
//
// Policies maps policy names to functions of type Policy: "best-connected"
// (Preferred) and "lowest-index" (LowestIndex, the kubelet's behaviour
// without a preference). Churn replays one seeded stream of requests
// arriving and leaving against several policies and reports, per policy,
// the mean score relative to the best set on an empty machine and the share
// of multi-GPU requests placed on a fully NVLink-connected set when one was
// free; cmd/vgpu-churn prints that table for every preset.
//
// # Shared GPUs
//
// When GPUs are shared by time-slicing, each is advertised as R replicas
// (replicasPerGPU): replica j of GPU i is Replica{GPU: i, Index: j}, device
// id "fake-<i>::<j>" (topology.ReplicaID), NVIDIA's "<id>::<n>" format.
// Replicas of one GPU are interchangeable, so a placement is a choice of
// how many replicas k(g) each GPU g gives, then which: the must-include
// ones first, then the lowest indices. NVIDIA's plugin chooses replicas by
// use alone; these policies also know the links.
//
// Terms: a replica of g that is not in the available list is in use
// (allocated, or all of an unhealthy GPU's), so inUse(g) = R − available(g);
// an idle GPU has inUse(g) = 0; G is the set of GPUs with k(g) > 0, and its
// connectivity is Score(G) over the distinct GPUs. SharedPolicies maps the
// names of NVIDIA's -shared-devices-allocation-policy to functions of type
// SharedPolicy, each a strict lexicographic order of objectives (the
// functions' documentation defines them exactly):
//
//   - "distributed" (Distributed, the default): the most distinct GPUs,
//     then the most even use after the allocation (the lowest maximum of
//     inUse(g) + k(g) over G, and so on), then the best-connected G, then
//     the lowest ids. A 2-replica request on an empty DGX-1 gets two GPUs
//     joined by two NVLinks under one PCIe switch.
//   - "packed" (Packed): the fewest idle GPUs touched, then the fewest
//     GPUs, then the most replicas already in use on them, then the
//     best-connected G, then the lowest ids. Idle GPUs stay whole for
//     whole-GPU work, and a request that must open an idle GPU takes one
//     NVLinked to the rest of its GPUs.
//   - "lowest-index" (LowestReplicas): the lowest replica ids, the
//     baseline without topology or use.
//
// The objectives before connectivity have closed forms (sorting, water
// filling, and for Packed an exact subset-sum table); connectivity is a
// branch and bound over the GPUs that still tie, exact up to MaxExactGPUs
// of them and bounded beyond, as for Preferred. On 1,024 replica devices
// (BenchmarkShared: 8 GPUs × 128 replicas and 128 × 8, empty or half in
// use, 1 to 16 replicas) a call takes at most a third of Preferred's time
// at 128 GPUs and size 8 in the same run; the worst case, 8 replicas on an
// empty 128-GPU machine, used about 1 ms of CPU on a loaded 2-core
// machine, and 8 × 128 stays under 0.1 ms. Requests are checked by
// ValidateShared, with the sentinels of errors.go (ErrInvalidReplicas for
// a replica count out of range).
//
// With ChurnConfig.Replicas > 0, Churn mixes whole-GPU and replica
// requests and compares shared policies: rejections of each kind, the mean
// number of GPUs with no replica in use, and the relative score of the GPUs
// of replica requests that span several; vgpu-churn -replicas=N prints it.
package allocator
