// Package cluster runs a real Kubernetes cluster of one or more nodes on one machine for the
// end-to-end tests of the virtual GPU device plugin: etcd (Debian's etcd-server), a kube-apiserver,
// kube-scheduler and kube-controller-manager, and per node a kubelet with its own containerd + runc
// running real containers from locally built busybox images. The Kubernetes binaries are built from the
// pinned k8s.io/kubernetes version of this module's go.mod, or another release named by
// $VGPU_E2E_K8S_VERSION (Options.KubernetesVersion), built in a module generated for it; either way once,
// into a cache keyed by version (EnsureKubeBinariesVersion).
//
// Everything lives in one temporary directory. Each node's kubelet and containerd run inside a private
// mount namespace of the node (held by a `sleep` process started with `unshare`) in which /var/lib,
// /var/log and /run are overlays over the host's directories and /var/lib/kubelet/device-plugins,
// /var/lib/kubelet/pod-resources, /var/lib/kubelet/plugins_registry, /var/lib/kubelet/plugins,
// /var/lib/virtual-gpu and /var/run/cdi are bind mounts of the node's temporary directories (all but the
// last two the kubelet's real ones), so the host's real kubelet and containerd directories are never
// written, two kubelets never share a containerd (a kubelet kills pods it does not know) and a plugin
// pod's hostPaths reach its own node's kubelet. A plugin process under test runs
// outside, pointed at one node's directories.
//
// A node runs Debian's containerd 1.6 unless its NodeOptions ask for RuntimeContainerd2: containerd 2
// built from the Go module proxy (EnsureContainerd2), with CDI enabled and its spec dir /var/run/cdi of
// the node's mount namespace bound from the node's CDISpecDir. Cluster.AddNode and Cluster.RemoveNode add
// and remove such a node while the cluster runs.
//
// For Dynamic Resource Allocation (resource.k8s.io/v1) a node exposes its kubelet's plugin registration
// and plugins directories (Node.PluginsRegistryDir, Node.PluginsDir), StartPlugin starts the plugin as
// a node's DRA driver (PluginOptions.KubeletAPI), and dra.go has the objects' builders, Apply/Delete,
// the ResourceSlices (CompletePool) and the kubelet's plugin registrations.
//
// Options.KWOK runs a control plane without kubelets (unless Options.Nodes asks for some) plus the kwok
// controller and etcd EtcdVersion (EnsureKWOKBinaries): kwok plays the kubelet of fake Nodes that
// Cluster.AddKWOKNodes creates, for simulations and scale tests (kwok.go).
//
// All nodes share the host's network namespace: pods use hostNetwork (there is no CNI), and two pods
// on different nodes cannot listen on the same port. In-cluster clients reach the API server through
// the default kubernetes Service's ClusterIP, which one DNAT rule of the harness routes to the API
// server (see Cluster.ServiceHost).
//
// Every process the harness starts is recorded in a registry file under the cache directory and is
// stopped by its process id by [Cluster.Stop]; processes left behind by an interrupted earlier run are
// killed (and its DNAT rule removed) when the next cluster starts. Only one cluster runs per cache
// directory at a time (a file lock enforces it).
//
// The package needs root on Linux. A [Cluster] is safe for concurrent use by the goroutines of one
// test binary, but tests that restart a kubelet or a plugin should not run in parallel.
package cluster
