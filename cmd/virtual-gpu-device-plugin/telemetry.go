package main

import (
	"cmp"
	"slices"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// loadSyncInterval is how often the load sockets follow the active
// allocations.
const loadSyncInterval = time.Second

// activeLoadSockets returns the active allocations whose answer mounted a
// load socket (their record has loadsock.EnvSocket), ascending, with their
// devices: the load sockets' Server closes those whose devices newer ones
// took.
func activeLoadSockets(st telemetry.Allocations) ([]loadsock.Allocation, error) {
	recs, err := st.Allocations(store.AllocationFilter{Active: true})
	if err != nil {
		return nil, err
	}
	var out []loadsock.Allocation
	for _, r := range recs {
		if r.Envs[loadsock.EnvSocket] != "" {
			out = append(out, loadsock.Allocation{Seq: r.Seq, Devices: r.DeviceIDs})
		}
	}
	slices.SortFunc(out, func(a, b loadsock.Allocation) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}
