package admin

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// APIVersion and Kind identify a Snapshot document, Kubernetes style.
const (
	APIVersion   = "virtual-gpu.unicore.mcyou.cc/v1"
	KindSnapshot = "Snapshot"
)

// States of a Claim.
const (
	// ClaimPrepared is a claim the DRA driver prepared and the kubelet has
	// not unprepared: it holds its devices.
	ClaimPrepared = "prepared"
	// ClaimUnprepared is a claim unprepared since: history.
	ClaimUnprepared = "unprepared"
)

// Where a Snapshot was read: SourceInfo.Type.
const (
	// SourcePlugin is the running plugin, over its admin socket.
	SourcePlugin = "plugin"
	// SourceFile is the state file, opened read-only while no plugin runs.
	SourceFile = "file"
)

// Snapshot is the one document of the admin API and of `dump -o json|yaml`
// and `health list|set -o json|yaml`: the devices, and (for dump) the
// history and the damaged records. Its JSON form (camelCase keys, RFC 3339
// times) is stable: fields are only ever added. Devices are in index order;
// allocations, claims, health events and configuration events newest first.
type Snapshot struct {
	// APIVersion is always APIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is always KindSnapshot.
	Kind string `json:"kind"`
	// Source says where the snapshot was read.
	Source SourceInfo `json:"source"`
	// Devices are every stored device, removed ones flagged.
	Devices []Device `json:"devices"`
	// Allocations are the allocation records the query selected; absent in
	// a devices-only snapshot (health list, health set).
	Allocations []Allocation `json:"allocations,omitzero"`
	// Claims are the claim records of the DRA driver the query selected;
	// absent when there are none (a node serving the device-plugin API),
	// in a devices-only snapshot, and from a plugin without claims.
	Claims []Claim `json:"claims,omitempty"`
	// HealthEvents are the health events the query selected; absent in a
	// devices-only snapshot.
	HealthEvents []HealthEvent `json:"healthEvents,omitzero"`
	// ConfigEvents are the configuration changes the query selected; absent
	// in a devices-only snapshot (and from a plugin too old to record them).
	ConfigEvents []ConfigEvent `json:"configEvents,omitzero"`
	// DamagedRecords are records of the state file the store could not read
	// and set aside; absent in a devices-only snapshot, empty when none.
	DamagedRecords []DamagedRecord `json:"damagedRecords,omitzero"`
}

// SourceInfo says where a Snapshot was read.
type SourceInfo struct {
	// Type is SourcePlugin or SourceFile.
	Type string `json:"type"`
	// Path is the admin socket (plugin) or the state file (file).
	Path string `json:"path"`
}

// Device is one device of a Snapshot: a GPU, or a replica of a GPU shared
// by time-slicing (GPU set), which has its GPU's index, NUMA node and
// health.
type Device struct {
	// ID is the device id the kubelet sees, e.g. "fake-0", or "fake-0::1"
	// for a replica.
	ID string `json:"id"`
	// Index is the device's position in the topology (a replica's is its
	// GPU's).
	Index int `json:"index"`
	// GPU is, for a replica or a MIG device, the id of its GPU; empty
	// (absent) for a GPU.
	GPU string `json:"gpu,omitempty"`
	// MIG is, for a MIG device, its profile ("3g.40gb"); empty (absent)
	// otherwise.
	MIG string `json:"mig,omitempty"`
	// Replica is, for a replica, its number among its GPU's replicas; nil
	// (absent) for a GPU.
	Replica *int `json:"replica,omitempty"`
	// Replicas says, for a shared GPU (one with configured replicas), how
	// many replicas it has and which are in use; nil (absent) for a GPU
	// advertised whole, and for a replica.
	Replicas *ReplicaUse `json:"replicas,omitempty"`
	// MIGDevices says, for a GPU with MIG devices, how many there are and
	// which are in use, as Replicas does for replicas; nil (absent)
	// otherwise.
	MIGDevices *ReplicaUse `json:"migDevices,omitempty"`
	// UUID is the device's GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-
	// xxxxxxxxxxxx), stored when the device was first configured and never
	// changed; empty (absent) until the plugin has stored one.
	UUID string `json:"uuid,omitempty"`
	// NUMANode is the topology's NUMA node of the device; -1 none.
	NUMANode int `json:"numaNode"`
	// ReportedNUMANode is the NUMA node the kubelet was told in
	// ListAndWatch; -1 none (-numa-report=never, or auto on a host without
	// that node). Nil (absent) when unknown: the snapshot was read from the
	// state file while no plugin runs, or the device is removed.
	ReportedNUMANode *int `json:"reportedNUMANode,omitempty"`
	// Healthy is the device's health.
	Healthy bool `json:"healthy"`
	// Reason says why the device is unhealthy; empty when healthy.
	Reason string `json:"reason,omitempty"`
	// Since is when Healthy or Reason last changed; zero (absent) only when
	// unknown.
	Since time.Time `json:"since,omitzero"`
	// Removed devices are no longer configured; their history is kept.
	Removed bool `json:"removed,omitempty"`
	// RemovedAt is when the device was removed; zero (absent) unless
	// Removed.
	RemovedAt time.Time `json:"removedAt,omitzero"`
	// Holder is the newest active allocation or prepared claim of the
	// device; nil (absent) when the device is free. A shared GPU has none
	// of its own: its replicas have (Replicas.Holders).
	Holder *Holder `json:"holder,omitempty"`
}

// ReplicaUse is how the replicas of a shared GPU are used.
type ReplicaUse struct {
	// Total is the number of the GPU's configured replicas.
	Total int `json:"total"`
	// InUse is the number of them an active allocation holds.
	InUse int `json:"inUse"`
	// Holders are the active allocations and prepared claims holding
	// them, newest first, each with the replicas of this GPU it holds
	// (Holder.DeviceIDs); absent when none.
	Holders []Holder `json:"holders,omitempty"`
}

// Holder is the allocation, or the claim (Claim set), that holds a device.
type Holder struct {
	// Seq is the allocation record's sequence number, or the claim
	// record's.
	Seq uint64 `json:"seq"`
	// State is "allocated" or "held" for an allocation, "prepared" for a
	// claim.
	State string `json:"state"`
	// Namespace, Pod and Container name the holder of an allocation once
	// the lifecycle tracker has seen it (state "held"); empty before.
	// Namespace is a claim's namespace.
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// Claim and ClaimUID are the name and uid of the ResourceClaim, for a
	// claim; absent for an allocation.
	Claim    string `json:"claim,omitempty"`
	ClaimUID string `json:"claimUID,omitempty"`
	// Pods are the pods a claim is reserved for, in its namespace; absent
	// when none, and for an allocation.
	Pods []string `json:"pods,omitempty"`
	// DeviceIDs are, in ReplicaUse.Holders, the replicas of the GPU the
	// allocation holds; absent elsewhere.
	DeviceIDs []string `json:"deviceIDs,omitempty"`
}

// Allocation is one answer given to the kubelet's Allocate, with what was
// later learned about who held the devices.
type Allocation struct {
	// Seq numbers the records: increasing, never reused.
	Seq uint64 `json:"seq"`
	// Time is when Allocate answered.
	Time time.Time `json:"time"`
	// DeviceIDs are the allocated devices, in device order.
	DeviceIDs []string `json:"deviceIDs"`
	// GPUIDs are the physical GPUs of DeviceIDs when some are replicas of
	// shared GPUs: each once, in device order; absent otherwise (the
	// devices are the GPUs).
	GPUIDs []string `json:"gpuIDs,omitempty"`
	// Envs is the environment handed to the container.
	Envs map[string]string `json:"envs,omitempty"`
	// State is allocated, held, released or abandoned.
	State string `json:"state"`
	// Namespace, Pod and Container name the holder, once known.
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// HeldSince is when a container was first seen using the devices.
	HeldSince time.Time `json:"heldSince,omitzero"`
	// ReleasedAt is when the devices were seen released, or the record
	// abandoned.
	ReleasedAt time.Time `json:"releasedAt,omitzero"`
}

// Claim is one ResourceClaim the DRA driver prepared on the node, with the
// pods it was reserved for and when it was unprepared.
type Claim struct {
	// Seq numbers the claim records: increasing, never reused (a sequence
	// of its own, apart from the allocations').
	Seq uint64 `json:"seq"`
	// UID is the ResourceClaim's uid; a claim prepared again after it was
	// unprepared has a record of its own.
	UID string `json:"uid"`
	// Namespace and Name name the ResourceClaim.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// DeviceIDs are the devices allocated to the claim on this node, in
	// device order.
	DeviceIDs []string `json:"deviceIDs"`
	// GPUIDs are the physical GPUs of DeviceIDs when some are replicas of
	// shared GPUs: each once, in device order; absent otherwise.
	GPUIDs []string `json:"gpuIDs,omitempty"`
	// Envs is the environment the claim's containers get.
	Envs map[string]string `json:"envs,omitempty"`
	// ReservedFor are the consumers (pods) the claim was reserved for when
	// it was prepared; absent when none.
	ReservedFor []ClaimConsumer `json:"reservedFor,omitempty"`
	// State is ClaimPrepared or ClaimUnprepared.
	State string `json:"state"`
	// PreparedAt is when the claim was prepared.
	PreparedAt time.Time `json:"preparedAt"`
	// UnpreparedAt is when it was unprepared; zero (absent) while it is
	// prepared.
	UnpreparedAt time.Time `json:"unpreparedAt,omitzero"`
}

// ClaimConsumer is one consumer a claim is reserved for, in the claim's
// namespace.
type ClaimConsumer struct {
	// Resource is the consumer's resource: "pods" for a pod.
	Resource string `json:"resource"`
	// Name and UID name the consumer.
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// HealthEvent is one recorded health change.
type HealthEvent struct {
	// Seq numbers the events: increasing, never reused.
	Seq uint64 `json:"seq"`
	// Time is when the health changed.
	Time time.Time `json:"time"`
	// DeviceID is the device whose health changed.
	DeviceID string `json:"deviceID"`
	// Healthy is the new health.
	Healthy bool `json:"healthy"`
	// Reason says why, when unhealthy.
	Reason string `json:"reason,omitempty"`
	// Cause says who changed it: admin, fault-injection, reconcile, ….
	Cause string `json:"cause,omitempty"`
}

// ConfigEvent is one recorded change of the plugin's configuration.
type ConfigEvent struct {
	// Seq numbers the events: increasing, never reused.
	Seq uint64 `json:"seq"`
	// Time is when the configuration took effect.
	Time time.Time `json:"time"`
	// Profile names the profile in force; empty (absent) for none: flags
	// only.
	Profile string `json:"profile,omitempty"`
	// PreviousProfile names the profile in force before; empty (absent)
	// for none, or nothing known before.
	PreviousProfile string `json:"previousProfile,omitempty"`
	// Why says what chose the configuration: node-label, file-changed,
	// default, flags, ….
	Why string `json:"why"`
	// Detail says more, e.g. the label and its value; optional.
	Detail string `json:"detail,omitempty"`
	// ResourceName is the extended resource advertised.
	ResourceName string `json:"resourceName,omitempty"`
	// Machine names the topology.
	Machine string `json:"machine,omitempty"`
	// Devices is the number of devices configured.
	Devices int `json:"devices"`
	// Replicas is the number of device ids each GPU is shared as; 0
	// (absent) when GPUs are not shared.
	Replicas int `json:"replicas,omitempty"`
	// Added, Removed and Restored are the device ids the change added,
	// removed and restored; absent when none.
	Added    []string `json:"added,omitempty"`
	Removed  []string `json:"removed,omitempty"`
	Restored []string `json:"restored,omitempty"`
	// MIGStrategy and MIGLayout are the device plugin's MIG strategy and
	// the MIG layout in force; absent without a layout.
	MIGStrategy string `json:"migStrategy,omitempty"`
	MIGLayout   string `json:"migLayout,omitempty"`
}

// DamagedRecord is a record of the state file that could not be read and
// was set aside (quarantined) rather than dropped.
type DamagedRecord struct {
	// Bucket is the bbolt bucket the record was in.
	Bucket string `json:"bucket"`
	// Key is the record's key, printable (as the store renders it).
	Key string `json:"key"`
	// Reason says what was wrong with it.
	Reason string `json:"reason"`
}

// Query selects what a Snapshot holds. The zero value selects every
// device, every record and every event.
type Query struct {
	// DeviceID selects the history of one device (its allocations and
	// claims, its health events, and the configuration events that added,
	// removed or restored it); "" all. The device list is never filtered.
	DeviceID string
	// Since selects history at or after this time (a claim's: when it was
	// prepared); zero all.
	Since time.Time
	// Limit keeps the newest Limit records of each kind (allocations,
	// claims, health events, configuration events); 0 all.
	Limit int
	// Active selects only allocations that still hold their devices and
	// claims still prepared; the events are not filtered by it.
	Active bool
	// DevicesOnly leaves out the history and the damaged records.
	DevicesOnly bool
}

// Read builds a Snapshot from src: the devices with their holders and the
// history q selects. reported maps device ids to the NUMA node the kubelet
// was told (negative: none); nil means unknown. Source is left for the
// caller. An unknown q.DeviceID is an error wrapping store.ErrUnknownDevice
// that lists the known ids.
func Read(src Source, q Query, reported map[string]int) (Snapshot, error) {
	snap := Snapshot{APIVersion: APIVersion, Kind: KindSnapshot}
	devs, err := src.Devices()
	if err != nil {
		return snap, err
	}
	if q.DeviceID != "" && !slices.ContainsFunc(devs, func(d store.Device) bool { return d.ID == q.DeviceID }) {
		return snap, unknownDevice(q.DeviceID, deviceIDs(devs))
	}
	active, err := src.Allocations(store.AllocationFilter{Active: true})
	if err != nil {
		return snap, err
	}
	prepared, err := src.Claims(store.ClaimFilter{Prepared: true})
	if err != nil {
		return snap, err
	}
	holders := holdersOf(active, prepared)
	snap.Devices = make([]Device, len(devs))
	for i, d := range devs {
		snap.Devices[i] = deviceOf(d, holders, reported)
	}
	addReplicaUse(snap.Devices, holders)
	if q.DevicesOnly {
		return snap, nil
	}
	allocs, err := src.Allocations(store.AllocationFilter{DeviceID: q.DeviceID, Since: q.Since, Limit: q.Limit, Active: q.Active})
	if err != nil {
		return snap, err
	}
	claims, err := src.Claims(store.ClaimFilter{DeviceID: q.DeviceID, Since: q.Since, Limit: q.Limit, Prepared: q.Active})
	if err != nil {
		return snap, err
	}
	events, err := src.HealthEvents(store.EventFilter{DeviceID: q.DeviceID, Since: q.Since, Limit: q.Limit})
	if err != nil {
		return snap, err
	}
	configs, err := src.ConfigEvents(store.ConfigFilter{DeviceID: q.DeviceID, Since: q.Since, Limit: q.Limit})
	if err != nil {
		return snap, err
	}
	damaged, err := src.DamagedRecords()
	if err != nil {
		return snap, err
	}
	snap.Allocations = make([]Allocation, len(allocs))
	for i, a := range allocs {
		snap.Allocations[i] = allocationOf(a)
	}
	for _, c := range claims {
		snap.Claims = append(snap.Claims, claimOf(c))
	}
	snap.HealthEvents = make([]HealthEvent, len(events))
	for i, e := range events {
		snap.HealthEvents[i] = HealthEvent{Seq: e.Seq, Time: e.Time, DeviceID: e.DeviceID, Healthy: e.Healthy, Reason: e.Reason, Cause: e.Cause}
	}
	snap.ConfigEvents = make([]ConfigEvent, len(configs))
	for i, e := range configs {
		snap.ConfigEvents[i] = configEventOf(e)
	}
	snap.DamagedRecords = append([]DamagedRecord{}, damaged...)
	return snap, nil
}

// holding is a device's possible holder: an active allocation or a
// prepared claim, with its devices.
type holding struct {
	h   Holder
	ids []string
}

// holderKey identifies a holder: allocations and claims number their
// records apart.
type holderKey struct {
	claimUID string // "" for an allocation
	seq      uint64
}

func keyOf(h Holder) holderKey { return holderKey{h.ClaimUID, h.Seq} }

// holdersOf lists the active allocations and the prepared claims (each
// newest first) as holders, newest first: the two lists merged by when
// they were recorded (Allocate answered, the claim was prepared), an
// allocation first on a tie. Without claims it is the allocations, in
// their order.
func holdersOf(active []store.Allocation, prepared []store.Claim) []holding {
	out := make([]holding, 0, len(active)+len(prepared))
	i, j := 0, 0
	for i < len(active) || j < len(prepared) {
		if j == len(prepared) || i < len(active) && !prepared[j].PreparedAt.After(active[i].Time) {
			a := active[i]
			out = append(out, holding{h: Holder{Seq: a.Seq, State: a.State, Namespace: a.Namespace, Pod: a.Pod, Container: a.Container}, ids: a.DeviceIDs})
			i++
			continue
		}
		c := prepared[j]
		h := Holder{Seq: c.Seq, State: ClaimPrepared, Namespace: c.Namespace, Claim: c.Name, ClaimUID: c.UID}
		for _, r := range c.ReservedFor {
			if r.Resource == store.ConsumerPods {
				h.Pods = append(h.Pods, r.Name)
			}
		}
		out = append(out, holding{h: h, ids: c.DeviceIDs})
		j++
	}
	return out
}

// deviceOf converts a stored device, with its newest holder (holders is
// newest first) and its reported NUMA node.
func deviceOf(d store.Device, holders []holding, reported map[string]int) Device {
	out := Device{ID: d.ID, Index: d.Index, UUID: d.UUID, NUMANode: max(d.NUMA, -1), Healthy: d.Healthy, Reason: d.Reason,
		Since: d.Since, Removed: d.Removed, RemovedAt: d.RemovedAt}
	switch {
	case d.IsMIG():
		out.GPU, out.MIG = d.GPU, d.MIG
	case d.IsReplica():
		out.GPU, out.Replica = d.GPU, &d.Replica
	}
	if n, ok := reported[d.ID]; ok && !d.Removed {
		n = max(n, -1)
		out.ReportedNUMANode = &n
	}
	for _, h := range holders {
		if slices.Contains(h.ids, d.ID) {
			hh := h.h
			hh.Pods = slices.Clone(hh.Pods)
			out.Holder = &hh
			break
		}
	}
	return out
}

// addReplicaUse fills Replicas of every shared GPU of devs (stored order:
// a GPU before its replicas) from its configured replicas, and MIGDevices
// of every GPU with MIG devices from those, their holders
// in the order of holders (newest first), and gives a shared GPU without a
// reported NUMA node its replicas' (the kubelet is told of the replicas,
// not of the GPU).
func addReplicaUse(devs []Device, holders []holding) {
	rank := make(map[holderKey]int, len(holders))
	for i, h := range holders {
		rank[keyOf(h.h)] = i
	}
	gpus := map[string]int{} // GPU id -> position in devs
	for i, d := range devs {
		if d.GPU == "" {
			gpus[d.ID] = i
		}
	}
	for _, r := range devs {
		g, ok := gpus[r.GPU]
		if r.GPU == "" || r.Removed || !ok {
			continue
		}
		gpu := &devs[g]
		use := &gpu.Replicas
		if r.MIG != "" {
			use = &gpu.MIGDevices
		}
		if *use == nil {
			*use = &ReplicaUse{}
		}
		if gpu.ReportedNUMANode == nil && r.ReportedNUMANode != nil && !gpu.Removed {
			n := *r.ReportedNUMANode
			gpu.ReportedNUMANode = &n
		}
		u := *use
		u.Total++
		if r.Holder == nil {
			continue
		}
		u.InUse++
		j := slices.IndexFunc(u.Holders, func(h Holder) bool { return keyOf(h) == keyOf(*r.Holder) })
		if j < 0 {
			h := *r.Holder
			h.Pods = slices.Clone(h.Pods)
			u.Holders = append(u.Holders, h)
			j = len(u.Holders) - 1
		}
		u.Holders[j].DeviceIDs = append(u.Holders[j].DeviceIDs, r.ID)
	}
	for _, d := range devs {
		for _, u := range []*ReplicaUse{d.Replicas, d.MIGDevices} {
			if u != nil {
				slices.SortStableFunc(u.Holders, func(a, b Holder) int { return cmp.Compare(rank[keyOf(a)], rank[keyOf(b)]) })
			}
		}
	}
}

func allocationOf(a store.Allocation) Allocation {
	return Allocation{Seq: a.Seq, Time: a.Time, DeviceIDs: a.DeviceIDs, GPUIDs: a.GPUIDs, Envs: a.Envs,
		State: a.State, Namespace: a.Namespace, Pod: a.Pod, Container: a.Container, HeldSince: a.HeldSince, ReleasedAt: a.ReleasedAt}
}

func claimOf(c store.Claim) Claim {
	out := Claim{Seq: c.Seq, UID: c.UID, Namespace: c.Namespace, Name: c.Name, DeviceIDs: c.DeviceIDs, GPUIDs: c.GPUIDs, Envs: c.Envs,
		State: ClaimPrepared, PreparedAt: c.PreparedAt, UnpreparedAt: c.UnpreparedAt}
	if !c.Prepared() {
		out.State = ClaimUnprepared
	}
	for _, r := range c.ReservedFor {
		out.ReservedFor = append(out.ReservedFor, ClaimConsumer{Resource: r.Resource, Name: r.Name, UID: r.UID})
	}
	return out
}

func configEventOf(e store.ConfigEvent) ConfigEvent {
	return ConfigEvent{Seq: e.Seq, Time: e.Time, Profile: e.Profile, PreviousProfile: e.PreviousProfile, Why: e.Why,
		Detail: e.Detail, ResourceName: e.ResourceName, Machine: e.Machine, Devices: e.Devices, Replicas: e.Replicas,
		Added: e.Added, Removed: e.Removed, Restored: e.Restored, MIGStrategy: e.MIGStrategy, MIGLayout: e.MIGLayout}
}

// deviceIDs lists the ids of devs, removed ones and replicas included.
func deviceIDs(devs []store.Device) []string {
	ids := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.ID
	}
	return ids
}

// gpuIDs lists the ids of the configured GPUs of devs (not removed, not
// replicas): the devices whose health can be set.
func gpuIDs(devs []store.Device) []string {
	ids := make([]string, 0, len(devs))
	for _, d := range devs {
		if !d.Removed && !d.IsReplica() {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// ShortList joins ids with ", "; a list longer than 8 names its first 8
// and how many more there are.
func ShortList(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	if len(ids) <= topology.MaxListedIDs {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s, … and %d more", strings.Join(ids[:topology.MaxListedIDs], ", "), len(ids)-topology.MaxListedIDs)
}

// unknownDevice is the error for an id that names no device: it wraps
// store.ErrUnknownDevice and lists the valid ids.
func unknownDevice(id string, valid []string) error {
	return fmt.Errorf("%w %q (devices: %s)", store.ErrUnknownDevice, topology.Clip(id), ShortList(valid))
}
