package dra

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// request is one request of a claim with the driver's devices allocated
// to it on this node.
type request struct {
	name    string   // the request's name, without a subrequest
	results []string // its allocation results' request names (with subrequests), by device
	devices []string // the devices, in the allocation's order
	admin   bool     // admin access: the devices are not held
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: each claim is
// prepared on its own (one that fails does not fail the others). See
// Prepare.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		start := time.Now()
		devs, err := d.Prepare(ctx, c)
		out[c.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devs}
		if err != nil {
			d.log.Error().Err(err).Str("claim", c.Namespace+"/"+c.Name).Str("uid", string(c.UID)).Msg("claim not prepared")
		}
		ids := make([]string, len(devs))
		for i, dev := range devs {
			ids[i] = dev.DeviceName
		}
		if d.observer != nil {
			d.observer.Allocated(ids, resultOf(err), time.Since(start))
		}
		if err == nil {
			d.tellChanged(ids)
		}
	}
	return out, nil
}

// Prepare prepares one claim: its devices of the driver in this node's
// pool must be devices served now (ErrNotServed) and not prepared for
// another claim (ErrInUse; admin access holds nothing); its opaque
// configurations of the driver must decode (ErrInvalidConfig). Then the
// claim is recorded in the store, committed, and its CDI spec written:
// one CDI device per request, named "<uid>-<request>", with the
// environment a device-plugin container of the same GPUs gets
// (VIRTUAL_GPU_IDS in device order, VIRTUAL_GPU_UUIDS, the topology
// variables, the configurations' env), the GPUs' device nodes, and the
// shared mounts and device nodes. Nothing is left half-done: a spec that
// cannot be written takes the record back.
//
// It is idempotent: a claim prepared already (its newest record is
// prepared, before or after a restart) gets the same answer, its spec
// written again only if it is gone.
func (d *Driver) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	name := claim.Namespace + "/" + claim.Name
	reqs, err := d.requests(claim)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.name
	}
	var configs []resourceapi.DeviceAllocationConfiguration
	if claim.Status.Allocation != nil {
		configs = claim.Status.Allocation.Devices.Config
	}
	envs, err := requestEnvs(d.cfg.DriverName, configs, resultNames(reqs))
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	uid := string(claim.UID)
	set, stored, served := d.current()

	d.prep.Lock()
	defer d.prep.Unlock()
	rec, err := d.st.Claim(uid)
	switch {
	case err == nil && rec.Prepared():
		if ok, err := d.specs.Exists(uid); err != nil {
			return nil, fmt.Errorf("claim %s: %w", name, err)
		} else if !ok {
			if err := d.writeSpec(uid, set, stored, served, reqs, envs); err != nil {
				return nil, fmt.Errorf("claim %s: prepared before, but its CDI spec is gone and cannot be written again: %w", name, err)
			}
			d.log.Warn().Str("claim", name).Str("uid", uid).Msg("CDI spec of a prepared claim was gone: written again")
		}
		return d.answer(uid, reqs), nil
	case err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrDamaged):
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	var ids []string
	for _, r := range reqs {
		for _, id := range r.devices {
			if err := d.servedLocked(served, set, id); err != nil {
				return nil, fmt.Errorf("claim %s: %w", name, err)
			}
			if other, ok := d.held[id]; ok && other != uid && !r.admin {
				holder := other
				if c, err := d.st.Claim(other); err == nil {
					holder = c.Namespace + "/" + c.Name + " (uid " + other + ")"
				}
				return nil, fmt.Errorf("claim %s: device %s: %w: %s", name, topology.QuoteID(id), ErrInUse, holder)
			}
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	if err := d.checkOverlapLocked(set.GPUs, uid, heldBy(reqs, ids)); err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	all := devicesOf(served, ids)
	rec = store.Claim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, DeviceIDs: idsOf(all), AdminDeviceIDs: adminOnly(reqs, ids),
		Envs: set.View.Env(all), ReservedFor: consumers(claim.Status.ReservedFor)}
	if rec, _, err = d.st.RecordClaimPrepared(rec); err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	if err := d.writeSpec(uid, set, stored, served, reqs, envs); err != nil {
		if _, _, uerr := d.st.RecordClaimUnprepared(uid, rec.PreparedAt); uerr != nil {
			err = errors.Join(err, fmt.Errorf("taking the record back: %w", uerr))
		}
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	d.prepared[uid] = rec
	for _, r := range reqs {
		if !r.admin {
			for _, id := range r.devices {
				d.held[id] = uid
			}
		}
	}
	d.log.Info().Str("claim", name).Str("uid", uid).Strs("devices", rec.DeviceIDs).Msg("claim prepared")
	return d.answer(uid, reqs), nil
}

// heldBy returns the devices of ids that some request reaches without
// admin access, in ids' order: those the claim holds.
func heldBy(reqs []request, ids []string) []string {
	admin := adminOnly(reqs, ids)
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(admin, id) })
}

// adminOnly returns the devices of ids that every request naming them
// reaches with admin access, in ids' order: the claim does not hold them.
func adminOnly(reqs []request, ids []string) []string {
	var out []string
	for _, id := range ids {
		admin := true
		for _, r := range reqs {
			if !r.admin && slices.Contains(r.devices, id) {
				admin = false
			}
		}
		if admin {
			out = append(out, id)
		}
	}
	return out
}

// resultOf is how a Prepare that returned err ended, for the metrics: a
// claim the driver cannot serve is rejected, anything else failed.
func resultOf(err error) metrics.Result {
	switch {
	case err == nil:
		return metrics.ResultOK
	case errors.Is(err, ErrNotServed), errors.Is(err, ErrInUse), errors.Is(err, ErrInvalidConfig), errors.Is(err, ErrNoAllocation):
		return metrics.ResultRejected
	}
	return metrics.ResultFailed
}

// requests returns the claim's requests with the driver's devices in this
// node's pool, in the order of their first result; a device of the driver
// in another pool is an error wrapping ErrNotServed.
func (d *Driver) requests(claim *resourceapi.ResourceClaim) ([]request, error) {
	a := claim.Status.Allocation
	if a == nil {
		return nil, ErrNoAllocation
	}
	var out []request
	for _, r := range a.Devices.Results {
		if r.Driver != d.cfg.DriverName {
			continue
		}
		if r.Pool != d.cfg.NodeName {
			return nil, fmt.Errorf("device %s of pool %q: %w: its pool is %q", topology.QuoteID(r.Device), r.Pool, ErrNotServed, d.cfg.NodeName)
		}
		main, _, _ := strings.Cut(r.Request, "/")
		i := slices.IndexFunc(out, func(q request) bool { return q.name == main })
		if i < 0 {
			out = append(out, request{name: main})
			i = len(out) - 1
		}
		out[i].results = append(out[i].results, r.Request)
		out[i].devices = append(out[i].devices, r.Device)
		out[i].admin = out[i].admin || (r.AdminAccess != nil && *r.AdminAccess)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no device of %s in its allocation", ErrNoAllocation, d.cfg.DriverName)
	}
	return out, nil
}

// resultNames lists the request names of reqs' results, each once.
func resultNames(reqs []request) []string {
	var out []string
	for _, r := range reqs {
		for _, n := range r.results {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// servedLocked says whether the device id is served now, and if not, why.
func (d *Driver) servedLocked(served []gpuset.Device, set *agent.Set, id string) error {
	if slices.ContainsFunc(served, func(dev gpuset.Device) bool { return dev.ID == id }) {
		return nil
	}
	what := "the configuration in force"
	if p := set.Config.Profile; p != "" {
		what = fmt.Sprintf("profile %q", p)
	}
	return fmt.Errorf("device %s: %w: %s serves %s (a configuration change removed it?)", topology.QuoteID(id), ErrNotServed, what, describeIDs(served))
}

// describeIDs names the devices briefly: "fake-0 … fake-7 (8 devices)".
func describeIDs(devs []gpuset.Device) string {
	switch len(devs) {
	case 0:
		return "no devices"
	case 1:
		return devs[0].ID
	}
	return fmt.Sprintf("%s … %s (%d devices)", devs[0].ID, devs[len(devs)-1].ID, len(devs))
}

// devicesOf returns the devices of served with the given ids, sorted by
// Index (the order of VIRTUAL_GPU_IDS).
func devicesOf(served []gpuset.Device, ids []string) []gpuset.Device {
	var out []gpuset.Device
	for _, dev := range served {
		if slices.Contains(ids, dev.ID) {
			out = append(out, dev)
		}
	}
	slices.SortFunc(out, func(a, b gpuset.Device) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

func idsOf(devs []gpuset.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.ID
	}
	return out
}

// consumers returns the claim's consumers as the store records them.
func consumers(refs []resourceapi.ResourceClaimConsumerReference) []store.ClaimConsumer {
	var out []store.ClaimConsumer
	for _, r := range refs {
		out = append(out, store.ClaimConsumer{Resource: r.Resource, Name: r.Name, UID: string(r.UID)})
	}
	return out
}

// cdiName is the CDI device name of request req of claim uid.
func cdiName(uid, req string) string { return uid + "-" + req }

// answer is Prepare's answer for reqs: every device with its request
// and, on the first device of each request, the request's CDI device (the
// kubelet passes every id of every device to the runtime, so each is
// named once).
func (d *Driver) answer(uid string, reqs []request) []kubeletplugin.Device {
	var out []kubeletplugin.Device
	for _, r := range reqs {
		name := d.specs.Kind().QualifiedName(cdiName(uid, r.name))
		for i, id := range r.devices {
			dev := kubeletplugin.Device{Requests: []string{r.results[i]}, PoolName: d.cfg.NodeName, DeviceName: id}
			if i == 0 {
				dev.CDIDeviceIDs = []string{name}
			}
			out = append(out, dev)
		}
	}
	return out
}

// writeSpec writes the claim's CDI spec: per request, the view's
// container of its devices (set.View.Claim) with the set's environment
// and the configurations' env; the shared device nodes and mounts once.
func (d *Driver) writeSpec(uid string, set *agent.Set, stored []store.Device, served []gpuset.Device, reqs []request, envs map[string]map[string]string) error {
	uuids, view := gpuset.UUIDs(stored), set.View.WithStored(stored)
	cfg := cdi.ClaimConfig{UID: uid}
	shared := map[string]bool{}
	for _, r := range reqs {
		for _, id := range r.devices {
			if err := d.servedLocked(served, set, id); err != nil {
				return err
			}
		}
		devs := devicesOf(served, r.devices)
		c, err := view.Claim(uuids, devs)
		if err != nil {
			return err
		}
		env := map[string]string{}
		for _, n := range r.results {
			maps.Copy(env, envs[n])
		}
		maps.Copy(env, set.View.Env(devs))
		maps.Copy(env, c.Envs)
		dev := cdi.ClaimDevice{Name: cdiName(uid, r.name), Envs: env}
		for _, n := range c.DeviceNodes {
			node := cdi.DeviceNode{Path: n.ContainerPath, HostNode: n.HostPath}
			if n.ContainerPath == cdi.ControlDevicePath || n.ContainerPath == cdi.UVMDevicePath {
				if !shared[n.ContainerPath] {
					shared[n.ContainerPath] = true
					cfg.SharedNodes = append(cfg.SharedNodes, node)
				}
				continue
			}
			dev.Nodes = append(dev.Nodes, node)
		}
		for _, m := range c.Mounts {
			if !shared[m.ContainerPath] {
				shared[m.ContainerPath] = true
				cfg.Mounts = append(cfg.Mounts, cdi.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath})
			}
		}
		cfg.Devices = append(cfg.Devices, dev)
	}
	return d.specs.Write(cfg)
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: see
// Unprepare.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = d.Unprepare(ctx, string(c.UID), c.Namespace+"/"+c.Name, "kubelet")
	}
	return out, nil
}

// Unprepare releases claim uid (named name, for the log): its record is
// marked unprepared, committed, and its CDI spec removed. A claim that is
// not prepared (never, or unprepared already) is not an error. why says
// who asked, for the log.
func (d *Driver) Unprepare(_ context.Context, uid, name, why string) error {
	ids, err := d.unprepare(uid, name, why)
	d.tellChanged(ids)
	return err
}

// tellChanged tells Config.Changed of a claim's devices ids, if one is a MIG
// device.
func (d *Driver) tellChanged(ids []string) {
	if d.cfg.Changed != nil && slices.ContainsFunc(ids, topology.IsMIGID) {
		d.cfg.Changed(ids)
	}
}

// unprepare is Unprepare, returning the devices of the claim when its
// record changed.
func (d *Driver) unprepare(uid, name, why string) ([]string, error) {
	d.prep.Lock()
	defer d.prep.Unlock()
	rec, changed, err := d.st.RecordClaimUnprepared(uid, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	removed, err := d.specs.Remove(uid)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	delete(d.prepared, uid)
	for id, u := range d.held {
		if u == uid {
			delete(d.held, id)
		}
	}
	if changed || removed {
		d.log.Info().Str("claim", name).Str("uid", uid).Strs("devices", rec.DeviceIDs).Str("by", why).Bool("spec_removed", removed).Msg("claim unprepared")
	}
	if !changed {
		return nil, nil
	}
	return rec.DeviceIDs, nil
}
