package plugin

import (
	"context"
	"fmt"
	"path"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
)

// Record is one allocation as the Recorder stored it: what a container's
// answer is built from.
type Record struct {
	// Seq is the record's sequence number (store.Allocation.Seq):
	// increasing and never reused, so it tells one allocation from another
	// of the same ids. 0 when nothing records (a nil Recorder).
	Seq uint64
	// IDs are the allocated device ids, sorted by device Index.
	IDs []string
	// Envs is the stored environment: the catalog's Env and [EnvIDs].
	Envs map[string]string
}

// Recorder makes an allocation durable before Allocate answers it.
type Recorder interface {
	// RecordAllocation stores the allocation of ids (sorted by Index) with
	// the container's environment and returns the record as stored. An
	// error fails the Allocate call with codes.Unavailable. It must be
	// safe for concurrent use.
	RecordAllocation(ctx context.Context, ids []string, envs map[string]string) (Record, error)
}

// RespondFunc builds the rest of a container's Allocate answer from its
// stored record and its devices (those of rec.IDs, sorted by Index, as the
// catalog has them). It runs after the record is stored, once per container
// request. It must be deterministic in rec and the devices' ids and indices
// (the kubelet caches the answer and replays it for the pod's life; an
// answer rebuilt from the same record must equal it), and safe for
// concurrent use. Anything that differs per allocation (a per-allocation
// socket) is derived from rec.Seq. An error, or an answer that breaks the
// rules of [ContainerSpec], fails the call with codes.Internal; the record
// stays, as an allocation the kubelet never got.
type RespondFunc func(rec Record, devs []gpuset.Device) (ContainerSpec, error)

// ContainerSpec is what a RespondFunc adds to a container's Allocate answer,
// besides the stored environment: the view's Container. The Server turns it
// into the kubelet's ContainerAllocateResponse, checking its rules: every
// path absolute, no container path twice, device permissions of "rwm",
// CDI names vendor.com/class=name, and no variable that contradicts the
// stored record.
type ContainerSpec = view.Container

// Mount is one bind mount of a ContainerSpec.
type Mount = view.Mount

// DeviceNode is one device file of a ContainerSpec.
type DeviceNode = view.DeviceNode

// containerResponse builds the kubelet's answer for one container from its
// stored record and the RespondFunc's spec, checking the spec. The error
// wraps ErrInvalidResponse.
func containerResponse(rec Record, spec ContainerSpec) (*pluginapi.ContainerAllocateResponse, error) {
	resp := &pluginapi.ContainerAllocateResponse{Envs: rec.Envs}
	if len(spec.Envs) > 0 {
		resp.Envs = make(map[string]string, len(rec.Envs)+len(spec.Envs))
		for k, v := range rec.Envs {
			resp.Envs[k] = v
		}
		for k, v := range spec.Envs {
			if old, ok := rec.Envs[k]; ok && old != v {
				return nil, fmt.Errorf("variable %s=%q differs from the stored %q: %w", k, v, old, ErrInvalidResponse)
			}
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return nil, fmt.Errorf("variable name %q: %w", k, ErrInvalidResponse)
			}
			resp.Envs[k] = v
		}
	}
	paths := make(map[string]bool, len(spec.Mounts)+len(spec.DeviceNodes))
	checkPaths := func(what string, i int, container, host string) error {
		for _, p := range []string{container, host} {
			if !path.IsAbs(p) {
				return fmt.Errorf("%s %d: path %q is not absolute: %w", what, i, p, ErrInvalidResponse)
			}
		}
		if paths[path.Clean(container)] {
			return fmt.Errorf("%s %d: container path %s used twice: %w", what, i, container, ErrInvalidResponse)
		}
		paths[path.Clean(container)] = true
		return nil
	}
	for i, m := range spec.Mounts {
		if err := checkPaths("mount", i, m.ContainerPath, m.HostPath); err != nil {
			return nil, err
		}
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for i, d := range spec.DeviceNodes {
		if err := checkPaths("device node", i, d.ContainerPath, d.HostPath); err != nil {
			return nil, err
		}
		perm := d.Permissions
		if perm == "" {
			perm = "rw"
		}
		if !validPermissions(perm) {
			return nil, fmt.Errorf("device node %d: permissions %q, want one or more of r, w, m: %w", i, d.Permissions, ErrInvalidResponse)
		}
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: perm})
	}
	for _, name := range spec.CDIDevices {
		if !validCDIName(name) {
			return nil, fmt.Errorf("CDI device name %q, want vendor.com/class=name: %w", name, ErrInvalidResponse)
		}
		resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: name})
	}
	if len(spec.Annotations) > 0 {
		resp.Annotations = make(map[string]string, len(spec.Annotations))
		for k, v := range spec.Annotations {
			resp.Annotations[k] = v
		}
	}
	return resp, nil
}

// validPermissions reports whether p is one or more distinct letters of
// "rwm".
func validPermissions(p string) bool {
	if p == "" || len(p) > 3 {
		return false
	}
	for i, c := range p {
		if !strings.ContainsRune("rwm", c) || strings.ContainsRune(p[:i], c) {
			return false
		}
	}
	return true
}

// validCDIName reports whether name has the form of a fully qualified CDI
// device name, vendor/class=device, with none of the parts empty.
func validCDIName(name string) bool {
	kind, dev, ok := strings.Cut(name, "=")
	if !ok || dev == "" {
		return false
	}
	vendor, class, ok := strings.Cut(kind, "/")
	return ok && vendor != "" && class != "" && !strings.Contains(class, "/")
}
