package dra

import (
	"fmt"
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Claims lists the prepared claims' records, newest first: the *Driver
// from memory (what serve passes), a *store.Store from the file.
type Claims interface {
	PreparedClaims() ([]store.Claim, error)
}

// Holders is the telemetry's telemetry.HolderSource in DRA mode: each pod
// a prepared claim is reserved for holds the claim's devices (no
// container: a claim is a pod's), oldest claim first, so that the newest
// holder of a shared GPU labels its series, as with the device plugin's
// records.
type Holders struct {
	Store Claims
}

var _ telemetry.HolderSource = Holders{}

// Holdings implements telemetry.HolderSource.
func (h Holders) Holdings() ([]telemetry.Holding, error) {
	if h.Store == nil {
		return nil, nil
	}
	claims, err := h.Store.PreparedClaims()
	if err != nil {
		return nil, fmt.Errorf("telemetry holders: %w", err)
	}
	var out []telemetry.Holding
	for _, c := range slices.Backward(claims) {
		held := slices.DeleteFunc(slices.Clone(c.DeviceIDs), func(id string) bool { return !c.Holds(id) })
		if len(held) == 0 {
			continue // admin access only: a monitor, not a workload on the GPUs
		}
		for _, p := range c.ReservedFor {
			if p.Resource != store.ConsumerPods {
				continue
			}
			out = append(out, telemetry.Holding{Holder: telemetry.Holder{Namespace: c.Namespace, Pod: p.Name}, DeviceIDs: held})
		}
	}
	return out, nil
}
