// Package kube is the plugin's only contact with the Kubernetes API server:
// it watches the plugin's own Node for its labels (the profile label picks
// the per-node profile) and keeps the Node's GPU labels up to date. Nothing
// else in the project imports client-go; the rest uses the small [API]
// interface declared here, so its tests can use a fake.
//
// # Client
//
// [NewClient] finds the API server as kubectl does: an explicit kubeconfig
// path (-kubeconfig), else the files of $KUBECONFIG or ~/.kube/config, else
// the in-cluster service account of the pod. Without any of them it fails
// with [ErrNoAPIAccess]. Requests carry the user agent
// "virtual-gpu-device-plugin/<version> (<os>/<arch>)" and ask for protobuf,
// as the kubelet's do.
//
// # One Node only
//
// [Client.WatchNode] lists and watches a single Node, selected by the field
// selector metadata.name=<node>, exactly as each kubelet watches its own
// Node. The API server indexes Node watches by name, so a plugin on each of
// 5,000 nodes adds what their kubelets already cost: one cheap watch each,
// fed only its own Node's events. It never lists or watches other Nodes or
// any other kind. The watch survives API server restarts and network
// failures (capped, jittered exponential backoff), resumes from the last
// resourceVersion it saw (bookmarks keep that fresh), and lists again when
// the server has compacted that version (410 Gone / Expired). The caller's
// function sees the Node's labels at start and again only when they change.
//
// # Labels it writes, and those it never touches
//
// [GPULabels] computes, as a pure function of the machine model and the
// profile, the labels NVIDIA's GPU feature discovery would put on a node
// with those GPUs, under [LabelPrefix] ("unicore.mcyou.cc/gpu.") instead of
// "nvidia.com/gpu.", plus three of ours (topology, nvlink, profile), and
// GFD's MIG labels ([MIGSpec]) and mig-manager's state of [MIGConfigLabel].
// [SyncLabels] applies them with one JSON merge patch that names only the
// keys to set or remove, and only when the Node's labels differ: no
// read-modify-write of the label map, so no race with anyone else's labels.
// [Client.PatchNodeLabels] refuses any key that is not ours ([Owned]). The package
// never writes any other label, annotation, taint or status field; in
// particular it only reads [ConfigLabel] ("unicore.mcyou.cc/device-plugin.config"),
// which the cluster operator sets to choose the node's profile
// ([SelectedProfile]).
//
// # RBAC
//
// The plugin's service account needs get, list and watch on nodes; patch on
// nodes only when it labels its Node (deploy/base/rbac.yaml).
package kube
