package simulate

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// target is a simulated node's kubelet API (agent.Target): what its
// plugin would publish, kept as the desired state. Under the device
// plugin API the Simulator's worker writes it into the Node's status
// (desiredStatus); under DRA a resourceslice controller of the node's
// own publishes its pool. The agent calls Apply and SetHealth with its
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

	// DRA: the node's resourceslice controller, once started.
	ctrl *resourceslice.Controller
}

var _ agent.Target = (*target)(nil)

// begin takes the set the agent began with and its stored devices.
func (t *target) begin(set *agent.Set, stored []store.Device) error {
	devs, err := set.GPUs.Devices(stored)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.set, t.stored, t.devs = set, stored, devs
	t.mu.Unlock()
	return t.push()
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

// push publishes the state: the node's worker writes the status; the
// DRA controller gets the new pool.
func (t *target) push() error {
	if t.api == agent.KubeletAPIDRA {
		t.mu.Lock()
		ctrl := t.ctrl
		t.mu.Unlock()
		if ctrl != nil {
			res, err := t.resources()
			if err != nil {
				return err
			}
			ctrl.Update(&res)
		}
	}
	t.changed()
	return nil
}

// resources is the node's DRA pool.
func (t *target) resources() (resourceslice.DriverResources, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return dra.Resources(t.driver, t.node, t.set.GPUs, t.devs, t.stored)
}

// startSlices starts the node's resourceslice controller, owned by the
// Node (its slices go when the Node goes), with the pool as it is now,
// and then gives it the pool again in case it changed meanwhile:
// StartController waits for its informer, about a second.
func (t *target) startSlices(ctx context.Context, client kubernetes.Interface, uid types.UID) error {
	res, err := t.resources()
	if err != nil {
		return err
	}
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: t.driver,
		KubeClient: client,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: t.node, UID: uid},
		Resources:  &res,
		ErrorHandler: func(_ context.Context, err error, msg string) {
			t.log.Warn().Err(err).Msg("ResourceSlices: " + msg)
		},
	})
	if err != nil {
		return fmt.Errorf("ResourceSlices of node %q: %w", t.node, err)
	}
	t.mu.Lock()
	t.ctrl = ctrl
	t.mu.Unlock()
	res, err = t.resources()
	if err != nil {
		return err
	}
	ctrl.Update(&res)
	return nil
}

// stopSlices stops the controller, if it started; the slices stay.
func (t *target) stopSlices() {
	t.mu.Lock()
	ctrl := t.ctrl
	t.ctrl = nil
	t.mu.Unlock()
	if ctrl != nil {
		ctrl.Stop()
	}
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
