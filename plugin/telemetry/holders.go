package telemetry

import (
	"fmt"
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Holder is a container holding a GPU: the namespace, pod and container
// labels of its series. It identifies a load: the same holder puts the same
// load on a GPU under the same seed, across restarts.
type Holder struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
}

// name returns "namespace/pod/container", for messages. (Not a String
// method: HolderReading would inherit it and print as its holder alone.)
func (h Holder) name() string { return h.Namespace + "/" + h.Pod + "/" + h.Container }

// Holding is one container and the device ids it holds now, as the kubelet
// handed them out: GPU ids ("fake-0") or replica ids ("fake-0::3").
type Holding struct {
	Holder
	DeviceIDs []string
}

// HolderSource says who holds which devices now; StoreHolders reads it from
// the allocation records the lifecycle tracker keeps. Holdings is called at
// every scrape and every Readings call, so it must be safe for concurrent
// use and quick. The order matters where several containers share a GPU and
// Config.PerPod is off: that GPU's series carry the last holder's labels,
// as dcgm-exporter labels them with the last container of the kubelet's
// PodResources list.
type HolderSource interface {
	Holdings() ([]Holding, error)
}

// Devices lists the advertised devices with their health; the agent
// implements it.
type Devices interface {
	Devices() []gpuset.Device
}

// Allocations reads allocation records; *store.Store implements it.
type Allocations interface {
	// Allocations lists records, newest (highest Seq) first.
	Allocations(store.AllocationFilter) ([]store.Allocation, error)
}

var (
	_ HolderSource = StoreHolders{}
	_ Allocations  = (*store.Store)(nil)
)

// StoreHolders is a HolderSource over the allocation records: each active
// record the lifecycle tracker marked held is one holding, oldest first, so
// that the newest holder of a shared GPU labels its series. A record still
// "allocated" (its container not seen yet) holds nothing: its GPUs idle
// until the container runs. Each call reads the active records
// (AllocationFilter{Active: true}), which walks the stored history: cheap
// for the few thousand records the store keeps. The zero value (nil Store)
// holds nothing.
type StoreHolders struct {
	Store Allocations
}

// Holdings implements HolderSource.
func (s StoreHolders) Holdings() ([]Holding, error) {
	if s.Store == nil {
		return nil, nil
	}
	recs, err := s.Store.Allocations(store.AllocationFilter{Active: true})
	if err != nil {
		return nil, fmt.Errorf("telemetry holders: %w", err)
	}
	return HoldingsOf(recs), nil
}

// HoldingsOf returns the holdings of the held records among recs (newest
// first, as the store lists them), oldest first.
func HoldingsOf(recs []store.Allocation) []Holding {
	var out []Holding
	for _, r := range slices.Backward(recs) {
		if r.State != store.StateHeld || r.Pod == "" {
			continue
		}
		out = append(out, Holding{
			Holder:    Holder{Namespace: r.Namespace, Pod: r.Pod, Container: r.Container},
			DeviceIDs: r.DeviceIDs,
		})
	}
	return out
}
