package cluster

import "errors"

// ErrUnsupported is returned by Start when the harness cannot run here (not Linux, or not root).
// Tests skip on it.
var ErrUnsupported = errors.New("the e2e cluster needs root on Linux")

// ErrStopTimeout is returned by Process.Stop when the process did not exit within its grace period
// after SIGTERM and had to be killed.
var ErrStopTimeout = errors.New("process did not exit after SIGTERM: killed")

// ErrPodPhase is returned by WaitPodPhase when the pod reached a terminal phase other than the one
// waited for.
var ErrPodPhase = errors.New("pod reached another terminal phase")

// ErrPodScheduled is returned by WaitPodUnschedulable when the pod was bound to a node.
var ErrPodScheduled = errors.New("pod was scheduled")

// ErrKubernetesVersion is returned when a Kubernetes version to build is not a release of
// k8s.io/kubernetes (v1.<minor>.<patch>) or the Go module proxy does not serve it.
var ErrKubernetesVersion = errors.New("not a Kubernetes release on the Go module proxy")

// ErrUnsupportedKind is returned by Cluster.Apply and Cluster.Delete for an object of a kind they do
// not handle.
var ErrUnsupportedKind = errors.New("kind not supported")

// ErrNoPool is returned by CompletePool when no ResourceSlice belongs to the pool.
var ErrNoPool = errors.New("no ResourceSlice of the pool")

// ErrPoolIncomplete is returned by CompletePool when the pool's newest generation has fewer (or more)
// slices than its resourceSliceCount: the driver is publishing it.
var ErrPoolIncomplete = errors.New("pool incomplete")

// ErrUnknownFeatureGate is returned by Cluster.FeatureEnabled when the component does not know the
// feature gate (its Kubernetes version has none of that name).
var ErrUnknownFeatureGate = errors.New("unknown feature gate")
