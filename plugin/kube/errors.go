package kube

import "errors"

// Sentinel errors of this package, returned wrapped with context; compare
// with errors.Is.
var (
	// ErrNoAPIAccess means NewClient found no way to reach the API server:
	// no kubeconfig was given, none of the files of $KUBECONFIG (or
	// ~/.kube/config) exists or names a cluster, and the process does not
	// run in a pod with a service account.
	ErrNoAPIAccess = errors.New("no API access: not in a pod and no kubeconfig")
	// ErrNoNodeName means WatchNode or PatchNodeLabels was called without a
	// node name.
	ErrNoNodeName = errors.New("no node name")
	// ErrNodeNotFound means the plugin's Node does not exist when WatchNode
	// starts: the node name (-node-name, NODE_NAME) is wrong.
	ErrNodeNotFound = errors.New("node not found")
	// ErrForeignLabel means a label key that is not ours (Owned) was to be set or
	// removed; the package touches only its own labels.
	ErrForeignLabel = errors.New("label is not one of ours")
	// ErrInvalidLabel means a label key or value is not valid in Kubernetes
	// (a value: at most 63 characters, alphanumerics, '-', '_' and '.',
	// starting and ending with an alphanumeric), or a GPULabels input is
	// out of range.
	ErrInvalidLabel = errors.New("invalid label")
)
