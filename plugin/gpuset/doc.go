// Package gpuset is what one resolved configuration advertises: its
// devices (whole GPUs, the replicas of shared ones, or the MIG devices of a
// MIG layout, under one resource or, with the mixed strategy, one per
// profile: mig.go) with their health,
// the layout that maps devices to GPUs and back, how a request for some of
// them is placed and what environment a container of them gets, the GPU
// labels and the description of the configuration in the history. A Set is
// built from a Config (New) and is immutable; the kubelet APIs (the device
// plugin, DRA) and the services (view, telemetry, metrics, admin) all read
// it. It does not speak to the kubelet and writes no file.
package gpuset
