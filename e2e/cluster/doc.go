// Package cluster runs a real one-node Kubernetes cluster for the end-to-end tests of the virtual GPU
// device plugin: etcd (Debian's etcd-server), a kube-apiserver on 127.0.0.1, containerd + runc running
// real containers from locally built busybox images, and a kubelet built from the pinned
// k8s.io/kubernetes version of this module's go.mod.
//
// Everything lives in one temporary directory. The kubelet and containerd run inside a private mount
// namespace (held by a `sleep` process started with `unshare`) in which /var/lib, /var/log and /run are
// overlays over the host's directories and /var/lib/kubelet/device-plugins, /var/lib/kubelet/pod-resources
// and /var/lib/virtual-gpu are bind mounts of temporary directories (the first two the kubelet's real
// ones), so the host's real kubelet and containerd directories are never written and a plugin pod's
// hostPaths reach the kubelet. A plugin process under test runs outside that namespace and is pointed at
// the temporary directories.
//
// Every process the harness starts is recorded in a registry file under the cache directory and is
// stopped by its process id by [Cluster.Stop]; processes left behind by an interrupted earlier run are
// killed when the next cluster starts. Only one cluster runs per cache directory at a time (a file
// lock enforces it).
//
// The package needs root on Linux. A [Cluster] is safe for concurrent use by the goroutines of one
// test binary, but tests that restart the kubelet or the plugin should not run in parallel.
package cluster
