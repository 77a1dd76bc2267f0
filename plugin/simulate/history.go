package simulate

import (
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// holder names a container that holds devices: a pod's container under
// the device plugin API.
type holder struct{ namespace, pod, container string }

// wants are the containers of the pods bound to a node that ask for one
// of resources, with how many devices of which resource each asks for:
// what the kubelet would call Allocate for. Pods that ended (Succeeded,
// Failed) or are being deleted hold nothing.
func wants(pods []*corev1.Pod, resources []string) map[holder]map[string]int {
	out := map[holder]map[string]int{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range list {
				for _, r := range resources {
					q, ok := c.Resources.Limits[corev1.ResourceName(r)]
					if !ok {
						q, ok = c.Resources.Requests[corev1.ResourceName(r)]
					}
					if !ok || q.Value() <= 0 {
						continue
					}
					h := holder{p.Namespace, p.Name, c.Name}
					if out[h] == nil {
						out[h] = map[string]int{}
					}
					out[h][r] = int(q.Value())
				}
			}
		}
	}
	return out
}

// syncAllocations makes the node's allocation history follow the pods
// bound to it, as its kubelet and plugin would: a new container asking
// for GPUs is given devices (the set's placement policy over the free
// healthy ones) and recorded as held by it; an active record whose
// container is gone is released. Containers already recorded are left
// alone, so a restart records nothing twice.
func (n *node) syncAllocations(pods []*corev1.Pod, now time.Time) error {
	set, devs := n.tgt.current()
	if set == nil {
		return nil
	}
	want := wants(pods, set.Resources())
	active, err := n.st.Allocations(store.AllocationFilter{Active: true})
	if err != nil {
		return err
	}
	used := map[string]bool{}
	have := map[holder]bool{}
	var errs []error
	for _, a := range active {
		h := holder{a.Namespace, a.Pod, a.Container}
		if _, ok := want[h]; ok && a.Pod != "" {
			have[h] = true
			for _, id := range a.DeviceIDs {
				used[id] = true
			}
			continue
		}
		if _, err := n.st.UpdateAllocation(a.Seq, func(r *store.Allocation) error {
			r.State, r.ReleasedAt = store.StateReleased, now
			return nil
		}); err != nil {
			errs = append(errs, err)
		}
	}
	holders := make([]holder, 0, len(want))
	for h := range want {
		if !have[h] {
			holders = append(holders, h)
		}
	}
	slices.SortFunc(holders, func(a, b holder) int { // deterministic: oldest name first
		return compareHolders(a, b)
	})
	for _, h := range holders {
		for r, count := range want[h] {
			ids, err := n.place(set.GPUs, devs, r, count, used)
			if err != nil {
				key := h.namespace + "/" + h.pod + "/" + h.container
				if !n.warned[key] {
					n.warned[key] = true
					n.log.Warn().Err(err).Str("pod", h.namespace+"/"+h.pod).Str("container", h.container).
						Msg("pod bound to the node but its GPUs cannot be placed: not recorded (a real kubelet would refuse it: UnexpectedAdmissionError)")
				}
				continue
			}
			chosen := pick(devs, ids)
			if _, err := n.st.RecordAllocation(store.Allocation{DeviceIDs: ids, Envs: set.GPUs.Env(chosen), State: store.StateHeld,
				Namespace: h.namespace, Pod: h.pod, Container: h.container, HeldSince: now}); err != nil {
				errs = append(errs, err)
				continue
			}
			for _, id := range ids {
				used[id] = true
			}
		}
	}
	return errors.Join(errs...)
}

func compareHolders(a, b holder) int {
	switch {
	case a.namespace != b.namespace:
		return cmpString(a.namespace, b.namespace)
	case a.pod != b.pod:
		return cmpString(a.pod, b.pod)
	}
	return cmpString(a.container, b.container)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// place chooses count devices of resource r among the healthy ones not in
// used, by the set's policy, sorted by index.
func (n *node) place(gpus *gpuset.Set, devs []gpuset.Device, r string, count int, used map[string]bool) ([]string, error) {
	var free []gpuset.Device
	for _, d := range devs {
		if d.Resource == r && d.Healthy && !used[d.ID] {
			free = append(free, d)
		}
	}
	if len(free) < count {
		return nil, fmt.Errorf("%d of %s asked for, %d free and healthy", count, r, len(free))
	}
	ids, err := gpus.Prefer(free, nil, count)
	if err != nil {
		return nil, err
	}
	chosen := pick(devs, ids)
	out := make([]string, len(chosen))
	for i, d := range chosen {
		out[i] = d.ID
	}
	return out, nil
}

// pick returns the devices of devs named by ids, in index order.
func pick(devs []gpuset.Device, ids []string) []gpuset.Device {
	var out []gpuset.Device
	for _, d := range devs {
		if slices.Contains(ids, d.ID) {
			out = append(out, d)
		}
	}
	return out
}

// claimDevices returns the devices of the node's pool (driver, node)
// that claim's allocation names; nil when it has none here.
func claimDevices(c *resourcev1.ResourceClaim, driver, node string) (ids, admin []string) {
	if c.Status.Allocation == nil {
		return nil, nil
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != driver || r.Pool != node || slices.Contains(ids, r.Device) {
			continue
		}
		ids = append(ids, r.Device)
		if r.AdminAccess != nil && *r.AdminAccess {
			admin = append(admin, r.Device)
		}
	}
	return ids, admin
}

// syncClaims makes the node's claim history follow the ResourceClaims
// allocated devices of its pool: a newly allocated claim is recorded as
// prepared (what its kubelet would prepare), with the consumers it is
// reserved for; a prepared record whose claim is gone, or no longer
// allocated here, is unprepared.
func (n *node) syncClaims(claims []*resourcev1.ResourceClaim, driver string, now time.Time) error {
	prepared, err := n.st.PreparedClaims()
	if err != nil {
		return err
	}
	held := map[string]bool{}
	var errs []error
	current := map[string]*resourcev1.ResourceClaim{}
	for _, c := range claims {
		if ids, _ := claimDevices(c, driver, n.name); len(ids) > 0 {
			current[string(c.UID)] = c
		}
	}
	for _, p := range prepared {
		if _, ok := current[p.UID]; ok {
			held[p.UID] = true
			continue
		}
		if _, _, err := n.st.RecordClaimUnprepared(p.UID, now); err != nil {
			errs = append(errs, err)
		}
	}
	for uid, c := range current {
		if held[uid] {
			continue
		}
		ids, adminIDs := claimDevices(c, driver, n.name)
		rec := store.Claim{UID: uid, Namespace: c.Namespace, Name: c.Name, DeviceIDs: ids, AdminDeviceIDs: adminIDs, PreparedAt: now}
		for _, r := range c.Status.ReservedFor {
			rec.ReservedFor = append(rec.ReservedFor, store.ClaimConsumer{Resource: r.Resource, Name: r.Name, UID: string(r.UID)})
		}
		if _, _, err := n.st.RecordClaimPrepared(rec); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err))
		}
	}
	return errors.Join(errs...)
}
