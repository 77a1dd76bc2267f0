// Package simulate gives kubelet-less nodes (KWOK's, sigs.k8s.io/kwok) the
// GPUs a real node of their profile would have: one process, the
// Simulator, watches the Nodes a scope.Selector picks and publishes for each what
// that node's plugin would — the extended resources' capacity and
// allocatable and the GPU labels under the device plugin API, or the
// node's ResourceSlices, owned by the Node, under DRA — and records in a
// state file per node what the pods bound there and the claims allocated
// there took.
//
// Each simulated node is an agent (plugin/agent) of its own, with its own
// state file, fault plan and health path, fed the node's labels from one
// shared watch of the Nodes: a profile or MIG layout label applies live, a
// health change (the admin API, a fault plan) changes allocatable or the
// device's taint. The Simulator writes only what differs from what the API
// server holds, so a cluster that does not change costs it no writes.
//
// # Lifetime and concurrency
//
// Build a Simulator with New and Run it once; Run returns when its context
// ends, after every node's agent has stopped and its state file is closed.
// Handler and Nodes are safe to call from any goroutine while it runs.
package simulate
