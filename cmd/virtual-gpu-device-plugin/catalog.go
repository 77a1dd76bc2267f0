package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// deviceSet is everything one resolved configuration advertises, built in
// one place (newDeviceSet) so that the start and every live change serve
// the same thing for the same configuration: the resource name, the
// devices the store keeps, the catalog the Server answers with, the GPU
// labels, and how the configuration is described in the history. It is an
// immutable value; its functions are safe for concurrent use.
//
// Shared GPUs are advertised as replicas (layout): specs list every GPU
// and the replicas of the shared ones, slots what is advertised, build
// fills the Catalog's Prefer, Env and Limit for them, and event and labels
// say how the GPUs are shared. The container view (mounts, CDI devices,
// status files) extends build with the Catalog's Respond.
type deviceSet struct {
	// cfg is the configuration the set was built from.
	cfg *options.Config
	// resource is the extended resource the devices are registered under.
	resource string
	// specs are the devices to reconcile the store with, UUIDs derived:
	// every GPU, and the replicas of the shared ones.
	specs []store.DeviceSpec
	// slots are the advertised devices by id: replicas of the shared GPUs,
	// the others whole.
	slots map[string]slot
	// layout maps the advertised devices to GPUs and back.
	layout layout
	// numa is the NUMA node each GPU reports, and what to log about it.
	numa topology.ReportedNUMA
	// labels describe the machine for the node's GPU labels.
	labels kube.LabelSpec
	// event describes the configuration for the history; the caller adds
	// why, when and what the reconcile did.
	event store.ConfigEvent
	// faultIDs are the GPU ids the configuration's fault plan drives (a
	// shared GPU's health reaches its replicas: layout.members).
	faultIDs []string
	// view is what a container sees besides the environment (container.go).
	view containerView
}

// newDeviceSet builds the device set of cfg. identity is what GPU UUIDs
// are derived from (topology.NodeIdentity); "" derives none. It reads the host's
// NUMA nodes from cfg.SysfsRoot (in -numa-report=auto) and nothing else.
func newDeviceSet(cfg *options.Config, identity string) (*deviceSet, error) {
	m := cfg.Machine
	if m == nil || m.Len() == 0 {
		return nil, errors.New("device set: no machine")
	}
	s := &deviceSet{
		cfg:      cfg,
		resource: cfg.ResourceName,
		numa:     m.ReportNUMA(cfg.NUMAReport, os.DirFS(cfg.SysfsRoot)),
		layout:   newLayout(cfg),
		faultIDs: make([]string, m.Len()),
		view:     newContainerView(cfg),
	}
	s.specs, s.slots = s.layout.specs(identity)
	for i := range s.faultIDs {
		s.faultIDs[i] = m.ID(i)
	}
	s.labels = kube.LabelSpec{Machine: m, Topology: cfg.Topology, Profile: cfg.Profile}
	s.event = store.ConfigEvent{Profile: cfg.Profile, ResourceName: s.resource, Machine: m.Name(), Devices: len(s.slots)}
	if sh := cfg.Sharing; sh.Enabled() {
		s.resource, s.event.ResourceName = sh.ResourceName, sh.ResourceName
		s.labels.Replicas, s.labels.Renamed = sh.Replicas, sh.Renamed
		s.event.Replicas = sh.Replicas
	}
	return s, nil
}

// score rates a preferred set of catalog indices, for the metrics: the
// connectivity of their GPUs.
func (s *deviceSet) score(chosen []int) int { return s.layout.score(chosen) }

// members returns the advertised devices that carry GPU id's health (see
// layout.members).
func (s *deviceSet) members(id string) ([]string, error) { return s.layout.members(id) }

// gpuOf returns the GPU index of an advertised device of this set.
func (s *deviceSet) gpuOf(d gpuset.Device) int { return s.layout.gpu(d.Index) }

// build returns the Server's catalog for the devices as the store has them
// after reconciling it with s.specs: the advertised ones, with their
// stored health (a replica's is its GPU's); removed devices, devices s
// does not configure and shared GPUs themselves (advertised as their
// replicas) are left out.
func (s *deviceSet) build(stored []store.Device) (plugin.Catalog, error) {
	m, policy := s.cfg.Machine, s.cfg.Policy
	devices := make([]gpuset.Device, 0, len(s.slots))
	for _, d := range stored {
		sl, ok := s.slots[d.ID]
		if !ok || d.Removed {
			continue
		}
		devices = append(devices, gpuset.Device{ID: d.ID, Index: sl.index, NUMA: s.numa.Node(sl.gpu), Healthy: d.Healthy, Reason: d.Reason})
	}
	if len(devices) != len(s.slots) {
		return plugin.Catalog{}, fmt.Errorf("device set: %d of %d configured devices are in the state file: %w", len(devices), len(s.slots), store.ErrUnknownDevice)
	}
	cat := plugin.Catalog{
		Devices: devices,
		Prefer: plugin.PreferByIndex(func(available, mustInclude []int, size int) ([]int, error) {
			return policy(m, available, mustInclude, size)
		}),
		Env: plugin.EnvByIndex(m.ContainerEnv),
	}
	if s.cfg.Sharing.Enabled() {
		s.layout.sharedCatalog(&cat, s.cfg)
	}
	return cat, nil
}

// equal reports whether s and o serve the same: the same resource, devices
// (UUIDs included), NUMA nodes, machine, policies, sharing, fault plan,
// container view, telemetry load model, GPU labels and description in the
// history. A new configuration equal to
// the one in force changes nothing, not even a ListAndWatch message. A nil
// set equals nothing.
func (s *deviceSet) equal(o *deviceSet) bool {
	if s == nil || o == nil {
		return false
	}
	a, b := s.cfg, o.cfg
	sa, sb := a.Sharing, b.Sharing
	return s.resource == o.resource && slices.Equal(s.specs, o.specs) && slices.Equal(s.numa.Nodes, o.numa.Nodes) &&
		s.event.SameConfig(o.event) && s.labels.Topology == o.labels.Topology && s.labels.Profile == o.labels.Profile &&
		s.labels.Replicas == o.labels.Replicas && s.labels.Renamed == o.labels.Renamed &&
		a.Topology == b.Topology && reflect.DeepEqual(a.Machine, b.Machine) && a.AllocationPolicy == b.AllocationPolicy &&
		a.FaultPlan == b.FaultPlan && slices.Equal(a.DeviceListStrategies, b.DeviceListStrategies) &&
		sa.Replicas == sb.Replicas && sa.ResourceName == sb.ResourceName && sa.Renamed == sb.Renamed &&
		sa.FailRequestsGreaterThanOne == sb.FailRequestsGreaterThanOne && slices.Equal(sa.GPUs, sb.GPUs) &&
		sa.PolicyName == sb.PolicyName && s.view == o.view &&
		a.TelemetryModel == b.TelemetryModel && a.TelemetrySeed == b.TelemetrySeed && a.TelemetryPerPod == b.TelemetryPerPod
}
