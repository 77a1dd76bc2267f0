// Package lifecycle follows every allocation to the pod that holds it and to
// its release, through the kubelet's PodResources API: the device plugin API
// never says who got the devices or when they came back.
//
// A [Tracker] polls PodResources List every interval and updates the stored
// allocation records (newest first):
//
//   - A container that holds exactly a record's device set claims the newest
//     active record with that set: the record becomes "held" with the
//     container's namespace, pod and name, and held_since.
//   - A held record whose set no container holds any more (or whose holder was
//     claimed by a newer record of the same set: the kubelet calls Allocate
//     only when it admits a new container) becomes "released" with
//     released_at.
//   - An "allocated" record that no container claimed within AbandonAfter of
//     its Allocate becomes "abandoned" (admission failed after Allocate, or a
//     container came and went between two polls).
//
// A failed List changes nothing: while the kubelet restarts, the socket is
// gone and every hold stays as it was. After a plugin restart the first
// successful List rebuilds who holds what and closes the records of pods
// that went away meanwhile. If the socket never answers, the Tracker says so
// once and keeps trying quietly: the plugin works without it.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Defaults of Config.
const (
	DefaultInterval     = 5 * time.Second
	DefaultAbandonAfter = time.Minute
	// listTimeout bounds one List call.
	listTimeout = 5 * time.Second
)

// DefaultSocket is the kubelet's PodResources socket.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Store is what the Tracker needs of the state store.
type Store interface {
	Allocations(store.AllocationFilter) ([]store.Allocation, error)
	UpdateAllocation(seq uint64, fn func(*store.Allocation) error) (store.Allocation, error)
}

var _ Store = (*store.Store)(nil)

// Config configures a Tracker. Socket, ResourceName and Store are required.
type Config struct {
	// Socket is the kubelet's PodResources socket (absolute).
	Socket string
	// ResourceName selects our devices in the pod resources.
	ResourceName string
	// Store holds the allocation records.
	Store Store
	// Interval between two List calls (default 5 s; the kubelet allows
	// about 100 a second).
	Interval time.Duration
	// AbandonAfter is how long an allocation may stay unclaimed (default 1 m).
	AbandonAfter time.Duration
	// Logger gets one line per change of a record and per change of
	// availability; the zero Logger discards.
	Logger zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Tracker keeps allocation records in step with the pods holding them. Build
// it with New; call Run once. Sync may be called concurrently with nothing
// else; Run calls it.
type Tracker struct {
	cfg Config
	log zerolog.Logger
}

// New checks cfg and returns a Tracker.
func New(cfg Config) (*Tracker, error) {
	switch {
	case cfg.Socket == "" || !strings.HasPrefix(cfg.Socket, "/"):
		return nil, fmt.Errorf("lifecycle: pod-resources socket %q must be an absolute path", cfg.Socket)
	case cfg.ResourceName == "":
		return nil, errors.New("lifecycle: no resource name")
	case cfg.Store == nil:
		return nil, errors.New("lifecycle: no store")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.AbandonAfter <= 0 {
		cfg.AbandonAfter = DefaultAbandonAfter
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Tracker{cfg: cfg, log: cfg.Logger.With().Str("component", "lifecycle").Logger()}, nil
}

// Run syncs at once and then every Interval until ctx ends. It returns nil
// when ctx ends; List failures are logged when availability changes, never
// returned.
func (t *Tracker) Run(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+t.cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("lifecycle: %s: %w", t.cfg.Socket, err)
	}
	defer conn.Close()
	client := podresourcesapi.NewPodResourcesListerClient(conn)
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	available, first := false, true
	for {
		err := t.Sync(ctx, client)
		listFailed := errors.Is(err, ErrListFailed)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !listFailed:
			t.log.Error().Err(err).Msg("lifecycle: updating allocation records failed; retrying next interval")
		case listFailed && (available || first):
			t.log.Warn().Err(err).Str("socket", t.cfg.Socket).
				Msg("lifecycle tracking is off: the kubelet's PodResources API does not answer; allocations are still served and recorded, without holders or releases (retrying)")
			available = false
		case err == nil && !available:
			t.log.Info().Str("socket", t.cfg.Socket).Msg("lifecycle tracking is on: following allocations to their pods")
			available = true
		}
		first = false
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// holderKey names one container.
type holderKey struct{ namespace, pod, container string }

// Sync lists the pods once and updates the records. A List error changes
// nothing and is returned wrapping ErrListFailed; a store error is returned
// as it is.
func (t *Tracker) Sync(ctx context.Context, client podresourcesapi.PodResourcesListerClient) error {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	resp, err := client.List(lctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrListFailed, err)
	}
	// Containers by the exact set of our devices they hold.
	holders := map[string][]holderKey{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			var ids []string
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == t.cfg.ResourceName {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			if len(ids) > 0 {
				k := setKey(ids)
				holders[k] = append(holders[k], holderKey{pod.GetNamespace(), pod.GetName(), c.GetName()})
			}
		}
	}
	active, err := t.cfg.Store.Allocations(store.AllocationFilter{Active: true}) // newest first
	if err != nil {
		return fmt.Errorf("lifecycle: %w", err)
	}
	now := t.cfg.Now().UTC()
	taken := map[holderKey]bool{}
	for _, a := range active {
		key := setKey(a.DeviceIDs)
		var h *holderKey
		// A held record keeps its holder if it is still there and free.
		cur := holderKey{a.Namespace, a.Pod, a.Container}
		if a.State == store.StateHeld && slices.Contains(holders[key], cur) && !taken[cur] {
			h = &cur
		} else {
			for _, c := range holders[key] {
				if !taken[c] {
					h = &c
					break
				}
			}
		}
		var change func(*store.Allocation) error
		switch {
		case h != nil:
			taken[*h] = true
			if a.State == store.StateHeld && *h == cur {
				continue
			}
			change = func(r *store.Allocation) error {
				if r.State != store.StateHeld || r.HeldSince.IsZero() || (holderKey{r.Namespace, r.Pod, r.Container}) != *h {
					r.HeldSince = now
				}
				r.State, r.Namespace, r.Pod, r.Container = store.StateHeld, h.namespace, h.pod, h.container
				return nil
			}
		case a.State == store.StateHeld:
			change = func(r *store.Allocation) error {
				r.State, r.ReleasedAt = store.StateReleased, now
				return nil
			}
		case now.Sub(a.Time) >= t.cfg.AbandonAfter:
			change = func(r *store.Allocation) error {
				r.State, r.ReleasedAt = store.StateAbandoned, now
				return nil
			}
		default:
			continue
		}
		updated, err := t.cfg.Store.UpdateAllocation(a.Seq, change)
		if errors.Is(err, store.ErrNotFound) {
			continue // pruned meanwhile
		}
		if err != nil {
			return fmt.Errorf("lifecycle: %w", err)
		}
		t.log.Info().Uint64("seq", updated.Seq).Strs("ids", updated.DeviceIDs).Str("state", updated.State).
			Str("namespace", updated.Namespace).Str("pod", updated.Pod).Str("container", updated.Container).
			Msg("allocation " + updated.State)
	}
	return nil
}

// setKey is a canonical key for a set of device ids.
func setKey(ids []string) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}
