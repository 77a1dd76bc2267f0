// Package plugin is the device plugin: the only package of
// virtual-gpu-device-plugin that speaks the kubelet's device plugin API
// (v1beta1). It serves what the agent (package agent) decides, as one of
// its kubelet API targets: [Target] turns the agent's sets into catalogs
// ([CatalogOf]) and its health changes into ListAndWatch messages, and
// keeps the Server registered under the set's resource name ([Registrar]).
// The rest of the plugin (the view, the telemetry, the admin API, the
// metrics) speaks the agent's device type, gpuset.Device, not this API.
//
// It has two halves, kept apart on purpose:
//
//   - [Server] answers the five DevicePlugin RPCs for one [Catalog] at a
//     time: the advertised devices, how to place an allocation ([PreferFunc],
//     over devices, so a shared-GPU catalog maps replica ids itself), what
//     environment to store with it ([EnvFunc]), what else a container gets
//     ([RespondFunc]: mounts, device nodes, CDI device names, annotations,
//     built from the stored [Record]) and how many devices one container may
//     get ([Limit]). [Server.SetCatalog] swaps the catalog atomically and
//     live: every ListAndWatch stream gets the new full list, every RPC runs
//     with the catalog it began with. ListAndWatch broadcasts the full device
//     list to every open stream on every change; Allocate validates,
//     records ([Recorder]) and answers from the stored record;
//     GetPreferredAllocation asks the catalog's Prefer for the best set and
//     checks its answer. It tells an [Observer] what it did. A Server lives
//     as long as its owner wants (usually the process) and survives any
//     number of kubelet restarts and Runners. Its handlers return gRPC status
//     errors and do not log them. Any error fails the pod's admission in the
//     kubelet (UnexpectedAdmissionError), and its message reaches the pod's
//     status and events.
//   - [Runner] owns the kubelet plumbing for any [DevicePlugin] (a Server)
//     under one resource name: it claims its socket path ([unixsock.Claim]: a
//     stale socket, one nobody listens on, is removed; one another process
//     listens on, answering or not, is never touched and Run fails with
//     [unixsock.ErrInUse]), listens, serves, checks
//     that the server answers, registers with the kubelet (waiting for
//     kubelet.sock, retrying with capped exponential backoff), and watches the
//     device-plugin directory. When the kubelet restarts (its socket is
//     created again, or ours disappears) or the kubelet ends our ListAndWatch
//     stream while we are not shutting down, the Runner stops the old gRPC
//     server, removes its socket, serves again and registers again. It logs
//     every refused or failed RPC, once, at warn. It never closes the Server:
//     to register under another resource name, the owner ends the Runner's
//     Run and runs a new Runner on the same Server.
//
// Both are safe for concurrent use; the zero values are not usable: build them
// with [NewServer] and [NewRunner] (or the whole with [NewTarget]). The
// Server publishes health changes; storing, logging and counting them is
// the agent's one health path.
package plugin
