package main

import (
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// catalog returns the Server's catalog for the stored devices: build's,
// with the view's environment (view.View.Env: the set's, and the load
// socket's variable) and the view's answer (view.View.Answer) over the
// stored GPU UUIDs.
func (s *deviceSet) catalog(stored []store.Device) (plugin.Catalog, error) {
	cat, err := s.build(stored)
	if err != nil {
		return cat, err
	}
	v, uuids := s.view, gpuset.UUIDs(stored)
	cat.Env = v.Env
	cat.Respond = func(rec plugin.Record, devs []gpuset.Device) (plugin.ContainerSpec, error) {
		return v.Answer(uuids, rec.Seq, rec.Envs, devs)
	}
	return cat, nil
}

// viewHealth stores a health change (next) and then writes the GPU's
// status file, so nvidia-smi in running containers shows it. A status file
// that cannot be written is the view's to log and write again: the change
// is stored and served all the same.
type viewHealth struct {
	next  plugin.HealthRecorder
	files *view.Files
}

var _ plugin.HealthRecorder = viewHealth{}

func (h viewHealth) RecordHealth(id string, healthy bool, reason, cause string) error {
	if err := h.next.RecordHealth(id, healthy, reason, cause); err != nil {
		return err
	}
	h.files.Health(id, healthy, reason)
	return nil
}
