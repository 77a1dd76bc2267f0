// Package plugin is the only package of virtual-gpu-device-plugin that speaks
// gRPC and the kubelet's device plugin API (v1beta1).
//
// It has two halves, kept apart on purpose:
//
//   - [Server] answers the five DevicePlugin RPCs over a device set it owns:
//     ListAndWatch broadcasts the full device list to every open stream,
//     Allocate validates, records and answers, GetPreferredAllocation asks a
//     [PreferFunc] for the best set. It tells an [Observer] what it did. A
//     Server lives as long as the process and survives any number of kubelet
//     restarts. Its handlers return gRPC status errors and do not log them.
//   - [Runner] owns the kubelet plumbing for any [DevicePlugin] (a Server): it
//     claims its socket path ([ClaimSocket]: a stale socket is removed, one
//     another process answers on is never touched and Run fails with
//     [ErrSocketInUse]), listens, serves, checks that the server answers,
//     registers with the kubelet (waiting for kubelet.sock, retrying with
//     capped exponential backoff), and watches the device-plugin directory.
//     When the kubelet restarts (its socket is created again, or ours
//     disappears) or the kubelet ends our ListAndWatch stream while we are not
//     shutting down, the Runner stops the old gRPC server, removes its socket,
//     serves again and registers again. It logs every refused or failed RPC,
//     once, at warn.
//
// Both are safe for concurrent use; the zero values are not usable: build them
// with [NewServer] and [NewRunner].
package plugin
