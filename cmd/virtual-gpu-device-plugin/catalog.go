package main

import (
	"reflect"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// deviceSet is everything one resolved configuration advertises: the GPU
// set (gpuset.Set: devices, replicas, placement, environment), the GPU
// labels, how the configuration is described in the history, and the
// container view. It is an immutable value.
type deviceSet struct {
	*gpuset.Set
	// cfg is the configuration the set was built from.
	cfg *options.Config
	// labels describe the machine for the node's GPU labels.
	labels kube.LabelSpec
	// event describes the configuration for the history; the caller adds
	// why, when and what the reconcile did.
	event store.ConfigEvent
	// view is what a container sees besides the environment.
	view *view.View
}

// newDeviceSet builds the device set of cfg. identity is what GPU UUIDs
// are derived from (topology.NodeIdentity); "" derives none.
func newDeviceSet(cfg *options.Config, identity string) (*deviceSet, error) {
	set, err := gpuset.New(cfg.GPUs, identity)
	if err != nil {
		return nil, err
	}
	s := &deviceSet{Set: set, cfg: cfg, view: view.New(cfg.View, set)}
	m := cfg.GPUs.Machine
	s.labels = kube.LabelSpec{Machine: m, Topology: cfg.GPUs.Topology, Profile: cfg.Profile}
	s.event = store.ConfigEvent{Profile: cfg.Profile, ResourceName: set.Resource(), Machine: m.Name(), Devices: set.Len()}
	if sh := cfg.GPUs.Sharing; sh.Enabled() {
		s.labels.Replicas, s.labels.Renamed = sh.Replicas, sh.Renamed
		s.event.Replicas = sh.Replicas
	}
	return s, nil
}

// build returns the Server's catalog for the devices as the store has them
// after reconciling it with the set's specs (gpuset.Set.Devices).
func (s *deviceSet) build(stored []store.Device) (plugin.Catalog, error) {
	devices, err := s.Devices(stored)
	if err != nil {
		return plugin.Catalog{}, err
	}
	cat := plugin.Catalog{Devices: devices, Prefer: s.Prefer, Env: s.Env}
	cat.Limit.Max, cat.Limit.Rule = s.Limit()
	return cat, nil
}

// equal reports whether s and o serve the same: the same GPU set (its
// derived devices and configuration) and the same configuration in force
// (compared whole: a field added later is compared too). A new
// configuration equal to the one in force changes nothing, not even a
// ListAndWatch message. A nil set equals nothing.
func (s *deviceSet) equal(o *deviceSet) bool {
	if s == nil || o == nil {
		return false
	}
	return s.Set.Equal(o.Set) && reflect.DeepEqual(s.cfg.Config, o.cfg.Config)
}
