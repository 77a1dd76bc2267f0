package agent

import "github.com/unicore/virtual-gpu-device-plugin/store"

// Target is one kubelet API the agent's devices are served through: the
// device plugin (plugin.Target), and next a DRA driver. The agent owns what
// is served and every change of it; a Target only publishes. Its methods
// are called with the agent's lock held, one at a time.
type Target interface {
	// Apply makes set the devices served, as one change. commit stores the
	// change (the devices and its configuration event, in one transaction)
	// and returns the stored devices; Apply calls it exactly once, at the
	// moment the target stops answering for the set in force and before it
	// answers for set, and publishes what it returned. An error of commit,
	// or one of Apply's own, leaves the set in force served (the agent
	// stores it back if commit had run).
	Apply(set *Set, commit func() ([]store.Device, error)) error
	// SetHealth publishes the health of the advertised devices ids, the
	// members of GPU gpu (a shared GPU's replicas), stored already.
	SetHealth(gpu string, ids []string, healthy bool, reason string) error
}

// Tracker follows allocations to their pods; *podresources.Tracker
// implements it.
type Tracker interface {
	// FollowResourceName makes it follow devices allocated under name too.
	FollowResourceName(name string)
	// Notify asks it to look for the holders of new allocations now.
	Notify()
}

// Observer is told of every health change, for the metrics;
// *metrics.Metrics implements it.
type Observer interface {
	HealthChanged(id string, healthy bool, cause string)
}
