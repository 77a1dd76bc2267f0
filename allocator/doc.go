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
package allocator
