#!/usr/bin/env bash
# Runs the end-to-end suite against a real two-node cluster (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager; per node containerd + runc and a kubelet). Needs root on Linux, the Go module
# proxy and Debian apt.
#
#   e2e/run.sh [go test flags...]      e.g. e2e/run.sh -run TestDemo
#
# It runs every package of this module but chart and deploy (the chart, the manifests, the Dockerfile),
# which need no root and no cluster: `make unit` runs those (E2E_UNIT in the Makefile), so that
# `make test` runs them once. `go test -p 1 ./...` here runs them all. Among the packages it runs is
# ./sim: a control plane with kwok's fake nodes and no kubelet (e2e/README.md, "KWOK clusters").
#
# Environment:
#   VGPU_PLUGIN_BIN  plugin binary to test, absolute or relative to the repository root
#                    (default: built from this repository by the suite)
#   VGPU_E2E_CACHE   cache of built Kubernetes binaries and of the process registry
#                    (default /var/cache/virtual-gpu-e2e; survives between runs and fresh clones)
#   VGPU_E2E_KEEP=1  keep the cluster's temp dir (all process logs) after the run
#   VGPU_E2E_K8S_VERSION  Kubernetes release of the cluster, e.g. v1.34.4 (`make e2e K8S_VERSION=…`);
#                    unset: the k8s.io/kubernetes version go.mod pins. Another version is built once
#                    (15-25 min on 2 cores) into the cache, keyed by version.
#
# The first run builds the kubelet, kube-apiserver, kube-scheduler and kube-controller-manager from the
# Go module proxy (measured 13.3 min on 2 cores with empty Go caches for the first two, 10-15 min
# expected; the other two add about 1 min) and containerd 2 for the CDI scenario (about 2 min more
# after them, 4.5 min alone); later runs reuse them from the cache.
set -euo pipefail
cd "$(dirname "$0")"

if [[ $(id -u) -ne 0 ]]; then
	echo "e2e/run.sh: needs root (it mounts in a private mount namespace and runs containerd and a kubelet)" >&2
	exit 1
fi

# Install missing Debian packages and build (or reuse) the Kubernetes binaries before the tests,
# so that go test's timeout covers the tests only.
go run ./cmd/prepare

all=$(go list ./...)
mapfile -t pkgs < <(grep -v -x -e '.*/e2e/chart' -e '.*/e2e/deploy' <<<"$all")
# -parallel 4: the DRA scenarios that have a node of their own run four at a time, after the others
# (parallelDRA); they wait on kubelets and containerd more than they compute.
# -p 1: the suite (.) and ./sim each start a cluster, and only one cluster runs per cache dir at a
# time (the registry's lock): their test binaries run one after the other.
exec go test -count=1 -timeout 20m -p 1 -parallel 4 -v "$@" "${pkgs[@]}"
