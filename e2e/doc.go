// Package e2e holds the end-to-end tests of the virtual GPU device plugin. They run the plugin binary
// against real kubelets, containerd + runc, kube-apiserver, kube-scheduler, kube-controller-manager and
// etcd started by package cluster (see e2e_test.go); `go run ./cmd/demo` runs the seed's demo on the
// same harness.
//
// This is a separate Go module so that the product's go.mod never depends on k8s.io/kubernetes, whose
// binaries the harness builds (see the replace block in go.mod).
package e2e
