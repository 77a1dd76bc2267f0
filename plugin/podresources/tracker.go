// Package podresources follows every allocation to the pod that holds it and to
// its release, through the kubelet's PodResources API: the device plugin API
// never says who got the devices or when they came back.
//
// A [Tracker] polls PodResources List and updates the stored allocation
// records (newest first):
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
//     container came and went too fast to be seen).
//
// The Tracker polls fast (FastInterval, default 100 ms) while a record is
// still "allocated" (a container is about to appear) and for FastAfterRelease
// (default 5 s) after it saw a release (releases come in bursts), and slowly
// (Interval, default 5 s) otherwise, so an idle node costs the kubelet one
// List per Interval. Notify starts fast polling at once after an Allocate:
// a holder is recorded within about FastInterval of appearing in List, and a
// pod that lives for a second or two is recorded held and then released
// rather than abandoned. A release is seen within Interval.
//
// A failed List changes nothing: while the kubelet restarts, the socket is
// gone and every hold stays as it was; the Tracker retries every Interval.
// After a plugin restart the first successful List rebuilds who holds what
// and closes the records of pods that went away meanwhile.
//
// When the plugin's resource name changes (a new profile), FollowResourceName
// adds the new name: containers that got devices under an earlier name keep
// them, so their records stay held until those containers end. If the socket
// never answers, the Tracker says so once and keeps trying quietly: the
// plugin works without it.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Defaults of Config.
const (
	DefaultInterval     = 5 * time.Second
	DefaultAbandonAfter = time.Minute
	// DefaultFastInterval is 10 Lists a second at most: a tenth of the
	// kubelet's PodResources rate limit (about 100 a second, burst 10).
	DefaultFastInterval     = 100 * time.Millisecond
	DefaultFastAfterRelease = 5 * time.Second
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

// Clock is where a Tracker reads the time (for held_since and released_at)
// and waits between polls. Implementations must be safe for concurrent use.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// NewTimer starts a timer: c receives once d has passed; stop disarms
	// it and reports whether it was still armed.
	NewTimer(d time.Duration) (c <-chan time.Time, stop func() bool)
}

// systemClock is the wall clock.
type systemClock struct{}

var _ Clock = systemClock{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Config configures a Tracker. Socket, ResourceName and Store are required;
// a zero or negative duration means its default.
type Config struct {
	// Socket is the kubelet's PodResources socket (absolute).
	Socket string
	// ResourceName selects our devices in the pod resources (more with
	// Tracker.FollowResourceName).
	ResourceName string
	// Store holds the allocation records.
	Store Store
	// Interval between two List calls while nothing is expected to change,
	// and after a failed List (default 5 s).
	Interval time.Duration
	// FastInterval between two List calls while a record waits for its
	// holder and for FastAfterRelease after a release (default 100 ms;
	// never more than Interval). Keep it well above 10 ms: the kubelet
	// allows about 100 requests a second.
	FastInterval time.Duration
	// FastAfterRelease is how long to poll fast after a release was seen
	// (default 5 s).
	FastAfterRelease time.Duration
	// AbandonAfter is how long an allocation may stay unclaimed (default 1 m).
	AbandonAfter time.Duration
	// Logger gets one line per change of a record and per change of
	// availability; the zero Logger discards.
	Logger zerolog.Logger
	// Clock stamps the records and times the polls; nil means the system
	// clock.
	Clock Clock
}

// Tracker keeps allocation records in step with the pods holding them. Build
// it with New; call Run once. Notify and FollowResourceName are safe for
// concurrent use at any time; Sync must not run concurrently with itself or
// Run.
type Tracker struct {
	cfg    Config
	log    zerolog.Logger
	notify chan struct{}

	mu    sync.Mutex
	names []string // resource names whose devices are ours; never shrinks
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
	if cfg.FastInterval <= 0 {
		cfg.FastInterval = DefaultFastInterval
	}
	cfg.FastInterval = min(cfg.FastInterval, cfg.Interval)
	if cfg.FastAfterRelease <= 0 {
		cfg.FastAfterRelease = DefaultFastAfterRelease
	}
	if cfg.AbandonAfter <= 0 {
		cfg.AbandonAfter = DefaultAbandonAfter
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	return &Tracker{
		cfg:    cfg,
		log:    cfg.Logger.With().Str("component", "lifecycle").Logger(),
		notify: make(chan struct{}, 1),
		names:  []string{cfg.ResourceName},
	}, nil
}

// FollowResourceName makes the Tracker count the devices containers hold
// under name as the plugin's, from its next List on, besides those of
// Config.ResourceName and every name followed before: when a new profile
// registers the devices under another resource name, the containers that
// got devices under the earlier one keep them, and their records must keep
// their holders until those containers end. Following a name again changes
// nothing. Call it before the plugin registers the new name, so no
// allocation under it goes unseen.
func (t *Tracker) FollowResourceName(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if name != "" && !slices.Contains(t.names, name) {
		t.names = append(t.names, name)
	}
}

// resourceNames returns the names whose devices are ours.
func (t *Tracker) resourceNames() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.names)
}

// Notify tells the Tracker that a new allocation was recorded: it polls fast
// from now on, without waiting for the next slow poll, until the record is
// claimed or abandoned. It never blocks; call it after the record is stored.
func (t *Tracker) Notify() {
	select {
	case t.notify <- struct{}{}:
	default: // one pending notice is enough
	}
}

// Run syncs at once and then every Interval, or every FastInterval while a
// record waits for its holder or a release was just seen, until ctx ends.
// It returns nil when ctx ends; List failures are logged when availability
// changes, never returned.
func (t *Tracker) Run(ctx context.Context) error {
	// Reconnect at least every Interval after the kubelet restarts (gRPC's
	// default backoff grows to two minutes).
	bo := backoff.DefaultConfig
	bo.MaxDelay = max(t.cfg.Interval, bo.BaseDelay)
	conn, err := grpc.NewClient("unix://"+t.cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: listTimeout}))
	if err != nil {
		return fmt.Errorf("lifecycle: %s: %w", t.cfg.Socket, err)
	}
	defer conn.Close()
	client := podresourcesapi.NewPodResourcesListerClient(conn)
	available, first := false, true
	var fastUntil time.Time
	for {
		res, err := t.sync(ctx, client)
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
		now := t.cfg.Clock.Now()
		if res.released > 0 {
			fastUntil = now.Add(t.cfg.FastAfterRelease)
		}
		next := t.cfg.Interval
		if err == nil && (res.waiting || now.Before(fastUntil)) {
			next = t.cfg.FastInterval
		}
		if !t.wait(ctx, next) {
			return nil
		}
	}
}

// wait waits d, or FastInterval from a Notify if that comes sooner; it
// reports false when ctx ended.
func (t *Tracker) wait(ctx context.Context, d time.Duration) bool {
	c, stop := t.cfg.Clock.NewTimer(d)
	defer func() { stop() }()
	deadline := t.cfg.Clock.Now().Add(d)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-c:
			return true
		case <-t.notify:
			// Never postpone a poll: many Allocates in a row must not starve it.
			if soon := t.cfg.Clock.Now().Add(t.cfg.FastInterval); soon.Before(deadline) {
				stop()
				c, stop = t.cfg.Clock.NewTimer(t.cfg.FastInterval)
				deadline = soon
			}
		}
	}
}

// holderKey names one container.
type holderKey struct{ namespace, pod, container string }

// Sync lists the pods once and updates the records. A List error changes
// nothing and is returned wrapping ErrListFailed; a store error is returned
// as it is.
func (t *Tracker) Sync(ctx context.Context, client podresourcesapi.PodResourcesListerClient) error {
	_, err := t.sync(ctx, client)
	return err
}

// syncResult is what one sync saw.
type syncResult struct {
	// waiting: a record is still "allocated", its holder is expected.
	waiting bool
	// released is how many records became "released".
	released int
}

func (t *Tracker) sync(ctx context.Context, client podresourcesapi.PodResourcesListerClient) (syncResult, error) {
	var res syncResult
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	resp, err := client.List(lctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrListFailed, err)
	}
	// Containers by the exact set of our devices they hold.
	names := t.resourceNames()
	holders := map[string][]holderKey{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			var ids []string
			for _, d := range c.GetDevices() {
				if slices.Contains(names, d.GetResourceName()) {
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
		return res, fmt.Errorf("lifecycle: %w", err)
	}
	now := t.cfg.Clock.Now().UTC()
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
			res.waiting = true
			continue
		}
		updated, err := t.cfg.Store.UpdateAllocation(a.Seq, change)
		if errors.Is(err, store.ErrNotFound) {
			continue // pruned meanwhile
		}
		if err != nil {
			return res, fmt.Errorf("lifecycle: %w", err)
		}
		if updated.State == store.StateReleased {
			res.released++
		}
		t.log.Info().Uint64("seq", updated.Seq).Strs("ids", updated.DeviceIDs).Str("state", updated.State).
			Str("namespace", updated.Namespace).Str("pod", updated.Pod).Str("container", updated.Container).
			Msg("allocation " + updated.State)
	}
	return res, nil
}

// setKey is a canonical key for a set of device ids.
func setKey(ids []string) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}
