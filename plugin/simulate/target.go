package simulate

import (
	"strings"
	"sync"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// target is a simulated node's kubelet API (agent.Target): what its
// plugin would publish, kept as the desired state, which the Simulator's
// worker writes: into the Node's status under the device plugin API
// (desiredStatus), as its ResourceSlices under DRA (resources). The agent calls Apply and SetHealth with its
// lock held, one at a time; the rest is safe for concurrent use.
type target struct {
	node   string
	api    agent.KubeletAPI
	st     *store.Store
	driver string
	log    zerolog.Logger
	// changed is called after every change of what is published: the
	// Simulator queues the node, whose worker writes what differs.
	changed func()

	mu     sync.Mutex
	set    *agent.Set
	devs   []gpuset.Device
	stored []store.Device
	// published are the extended resources this target wrote into the
	// Node's status, so that one no longer served is removed.
	published map[string]bool
}

var _ agent.Target = (*target)(nil)

// begin takes the set the agent began with and its stored devices.
func (t *target) begin(set *agent.Set, stored []store.Device) error {
	return t.Apply(set, func() ([]store.Device, error) { return stored, nil })
}

// Apply implements agent.Target.
func (t *target) Apply(set *agent.Set, commit func() ([]store.Device, error)) error {
	stored, err := commit()
	if err != nil {
		return err
	}
	devs, err := set.GPUs.Devices(stored)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.set, t.stored, t.devs = set, stored, devs
	t.mu.Unlock()
	return t.push()
}

// SetHealth implements agent.Target: the health is stored already; the
// stored devices are read again for the taint's time.
func (t *target) SetHealth(_ string, ids []string, healthy bool, reason string) error {
	stored, err := t.st.Devices()
	if err != nil {
		return err
	}
	t.mu.Lock()
	for i := range t.devs {
		for _, id := range ids {
			if t.devs[i].ID == id {
				t.devs[i].Healthy, t.devs[i].Reason = healthy, reason
			}
		}
	}
	t.stored = stored
	t.mu.Unlock()
	return t.push()
}

// push has the node's worker write what changed: its status, or its
// ResourceSlices.
func (t *target) push() error {
	t.changed()
	return nil
}

// resources is the node's DRA pool.
func (t *target) resources() (resourceslice.DriverResources, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return dra.Resources(t.driver, t.node, t.set.GPUs, t.devs, t.stored)
}

// desiredStatus returns the extended resources' capacity and allocatable
// the node's plugin would have the kubelet report — a resource per name
// with at least one device, capacity all of them, allocatable the healthy
// ones — and the names to remove: resources this target published before
// and does not serve now, and, in the resource's domain, any the node
// holds that no configuration serves (an earlier run's). Nil maps without
// the device plugin API.
func (t *target) desiredStatus(node *corev1.Node) (capacity, allocatable map[string]int64, remove []string) {
	if t.api != agent.KubeletAPIDevicePlugin {
		return nil, nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	capacity, allocatable = map[string]int64{}, map[string]int64{}
	for _, d := range t.devs {
		capacity[d.Resource]++
		if d.Healthy {
			allocatable[d.Resource]++
		} else if _, ok := allocatable[d.Resource]; !ok {
			allocatable[d.Resource] = 0
		}
	}
	domain := resourceDomain(t.set.Resource())
	owned := func(name string) bool {
		return t.published[name] || domain != "" && strings.HasPrefix(name, domain)
	}
	for _, list := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		for name := range list {
			if _, ok := capacity[string(name)]; !ok && owned(string(name)) {
				remove = append(remove, string(name))
			}
		}
	}
	return capacity, allocatable, remove
}

// markPublished records the resources written into the Node's status.
func (t *target) markPublished(names map[string]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.published == nil {
		t.published = map[string]bool{}
	}
	for n := range names {
		t.published[n] = true
	}
}

// current returns the set in force and its devices with their health.
func (t *target) current() (*agent.Set, []gpuset.Device) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.set, append([]gpuset.Device(nil), t.devs...)
}

// resourceDomain returns "unicore.mcyou.cc/" for
// "unicore.mcyou.cc/gpu"; "" for a name without a domain.
func resourceDomain(name string) string {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return ""
	}
	return name[:i+1]
}

// statusDiffers reports whether the node's status differs from the
// capacity and allocatable wanted, or holds a resource to remove.
func statusDiffers(node *corev1.Node, capacity, allocatable map[string]int64, remove []string) bool {
	if len(remove) > 0 {
		return true
	}
	differs := func(list corev1.ResourceList, want map[string]int64) bool {
		for name, n := range want {
			q, ok := list[corev1.ResourceName(name)]
			if !ok || q.Cmp(*resource.NewQuantity(n, resource.DecimalSI)) != 0 {
				return true
			}
		}
		return false
	}
	return differs(node.Status.Capacity, capacity) || differs(node.Status.Allocatable, allocatable)
}
