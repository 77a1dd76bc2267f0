package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Target serves the agent's devices through the kubelet's device-plugin
// API: for every resource the set in force advertises (gpuset.Set.Resources:
// the GPUs' own, and with the mixed MIG strategy one per MIG profile) a
// Server whose catalog is that resource's devices of the set (CatalogOf),
// kept registered on a socket of its own by a Registrar, as NVIDIA's
// plugin serves each resource (SocketFor). The GPUs' resource is served on
// the configured socket. A resource without devices (the GPUs' when every
// GPU is partitioned) is not served, as NVIDIA's plugin skips it. It is
// the device plugin's agent.Target.
// Build it with NewTarget, run it with Run; its owner closes it (Close)
// when done.
type Target struct {
	cfg TargetConfig

	// mu guards what follows. Apply and SetHealth are called one at a time
	// (the agent's lock); Run, Registered and Registrations concurrently
	// with them.
	mu        sync.Mutex
	endpoints map[string]*endpoint // by socket name
	ctx       context.Context      // Run's; nil before Run and after it ended
	ended     bool
	errc      chan error
	past      uint64 // registrations of the endpoints removed
	observer  Observer
}

// endpoint is one resource's Server, its Registrar and the Registrar's run.
type endpoint struct {
	srv  *Server
	reg  *Registrar
	ids  map[string]bool // the devices of the catalog in force
	stop context.CancelFunc
	done chan struct{} // closed when the Registrar's Run returned
}

var (
	_ agent.Target         = (*Target)(nil)
	_ metrics.Registration = (*Target)(nil)
)

// RecordFunc stores an allocation before Allocate answers it: the agent's
// RecordAllocation.
type RecordFunc func(ctx context.Context, ids []string, envs map[string]string) (store.Allocation, error)

// TargetConfig configures a Target. Set, Stored, Record, Dir and
// SocketName are required.
type TargetConfig struct {
	// Set is the set served first and Stored the devices as the store has
	// them after Set was stored (agent.Agent.Begin's).
	Set    *agent.Set
	Stored []store.Device
	// Record stores every allocation before it is answered.
	Record RecordFunc
	// Dir is the kubelet's device-plugin directory and SocketName the
	// socket of the GPUs' resource in it; the sockets of the other
	// resources are named after it (SocketFor).
	Dir, SocketName string
	// Logger receives the Servers' and the Runners' lines; the zero
	// Logger discards.
	Logger zerolog.Logger
}

// SocketFor returns the socket name resource is served on when it is not
// the GPUs' resource, whose socket is main: main's name without ".sock",
// a dash and resource's name without its domain (virtual-gpu.sock and
// unicore.mcyou.cc/mig-1g.10gb give virtual-gpu-mig-1g.10gb.sock), as
// NVIDIA's plugin names its sockets after the resource.
func SocketFor(main, resource string) string {
	return strings.TrimSuffix(main, ".sock") + "-" + path.Base(resource) + ".sock"
}

// NewTarget returns the device-plugin Target of cfg: a Server with the
// catalog of each resource of cfg.Set, and its Registrar.
func NewTarget(cfg TargetConfig) (*Target, error) {
	if cfg.Set == nil || cfg.Record == nil {
		return nil, errors.New("device-plugin target: a set and a recorder are required")
	}
	t := &Target{cfg: cfg, endpoints: map[string]*endpoint{}, errc: make(chan error, 1)}
	for socket, resource := range t.sockets(cfg.Set) {
		cat, err := catalogOf(cfg.Set, cfg.Stored, resource)
		if err != nil {
			return nil, err
		}
		e, err := t.newEndpoint(socket, resource, cat)
		if err != nil {
			return nil, err
		}
		t.endpoints[socket] = e
	}
	return t, nil
}

// sockets returns the resources set advertises devices under
// (gpuset.Set.Resources) by the socket each is served on: the GPUs' on
// the configured socket.
func (t *Target) sockets(set *agent.Set) map[string]string {
	out := map[string]string{}
	for _, r := range set.GPUs.Resources() {
		if r == set.Resource() {
			out[t.cfg.SocketName] = r
		} else {
			out[SocketFor(t.cfg.SocketName, r)] = r
		}
	}
	return out
}

// newEndpoint returns the Server of cat and its Registrar for resource on
// socket, not running.
func (t *Target) newEndpoint(socket, resource string, cat Catalog) (*endpoint, error) {
	srv, err := NewServer(ServerConfig{Catalog: cat, Recorder: recordFunc(t.cfg.Record), Logger: t.cfg.Logger})
	if err != nil {
		return nil, err
	}
	if t.observer != nil {
		srv.SetObserver(t.observer)
	}
	reg := NewRegistrar(RunnerConfig{Dir: t.cfg.Dir, SocketName: socket, Server: srv, Logger: t.cfg.Logger}, resource)
	return &endpoint{srv: srv, reg: reg, ids: idsOf(cat)}, nil
}

func idsOf(cat Catalog) map[string]bool {
	ids := make(map[string]bool, len(cat.Devices))
	for _, d := range cat.Devices {
		ids[d.ID] = true
	}
	return ids
}

// SetObserver makes o the Observer of every Server, those of resources
// added later too. Call it before Run.
func (t *Target) SetObserver(o Observer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observer = o
	for _, e := range t.endpoints {
		e.srv.SetObserver(o)
	}
}

// Resources returns the resource names served, by socket name.
func (t *Target) Resources() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]string, len(t.endpoints))
	for s, e := range t.endpoints {
		out[s] = e.reg.ResourceName()
	}
	return out
}

// Run keeps every Server registered with the kubelet until ctx ends
// (Registrar.Run), those of resources added meanwhile too. A Registrar's
// error ends Run with it.
func (t *Target) Run(ctx context.Context) error {
	t.mu.Lock()
	if t.ctx != nil || t.ended {
		t.mu.Unlock()
		return errors.New("device-plugin target: run twice")
	}
	t.ctx = ctx
	for _, e := range t.endpoints {
		t.startLocked(e)
	}
	t.mu.Unlock()
	var err error
	select {
	case <-ctx.Done():
	case err = <-t.errc:
	}
	t.mu.Lock()
	t.ctx, t.ended = nil, true
	eps := make([]*endpoint, 0, len(t.endpoints))
	for _, e := range t.endpoints {
		eps = append(eps, e)
	}
	t.mu.Unlock()
	for _, e := range eps {
		e.halt()
	}
	return err
}

// startLocked runs e's Registrar under Run's context. The caller holds mu
// and Run is running.
func (t *Target) startLocked(e *endpoint) {
	ctx, stop := context.WithCancel(t.ctx)
	e.stop, e.done = stop, make(chan struct{})
	go func() {
		defer close(e.done)
		if err := e.reg.Run(ctx); err != nil {
			select {
			case t.errc <- err:
			default: // one error ends Run; another is moot
			}
		}
	}()
}

// halt ends e's Registrar, if it runs, and waits until its socket is gone.
func (e *endpoint) halt() {
	if e.stop == nil {
		return
	}
	e.stop()
	<-e.done
	e.stop = nil
}

// Close ends every Server's ListAndWatch streams; call it after Run
// returned.
func (t *Target) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.endpoints {
		e.srv.Close()
	}
}

// Apply serves set: each resource's catalog, built from the devices commit
// stores, swapped in whole (Server.UpdateCatalog: one ListAndWatch
// message, and no health change between). commit runs inside the swap of
// the first resource served before and after (the GPUs' first), or alone
// when there is none; an error of it leaves everything as it was. A new
// name of a resource's socket is registered between ending the old
// name's Runner and starting the new one (Registrar.Switch). Then the
// other resources served before and after are swapped, those set no
// longer advertises end (their sockets go: the kubelet marks their
// devices unhealthy), and those it adds start.
func (t *Target) Apply(set *agent.Set, commit func() ([]store.Device, error)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	want := t.sockets(set)
	var kept []string
	for _, socket := range t.order(want) {
		if t.endpoints[socket] != nil {
			kept = append(kept, socket)
		}
	}
	var stored []store.Device
	if len(kept) == 0 {
		var err error
		if stored, err = commit(); err != nil {
			return err
		}
	} else if err := t.swap(t.endpoints[kept[0]], set, want[kept[0]], func() ([]store.Device, error) {
		var err error
		stored, err = commit()
		return stored, err
	}); err != nil {
		return err
	}
	have := func() ([]store.Device, error) { return stored, nil }
	var errs []error
	for _, socket := range kept[min(1, len(kept)):] {
		if err := t.swap(t.endpoints[socket], set, want[socket], have); err != nil {
			errs = append(errs, err)
		}
	}
	for socket, e := range t.endpoints {
		if _, ok := want[socket]; !ok {
			e.halt()
			e.srv.Close()
			t.past += e.reg.Registrations()
			delete(t.endpoints, socket)
		}
	}
	for _, socket := range t.order(want) {
		if t.endpoints[socket] != nil {
			continue
		}
		resource := want[socket]
		cat, err := catalogOf(set, stored, resource)
		if err == nil {
			var e *endpoint
			if e, err = t.newEndpoint(socket, resource, cat); err == nil {
				t.endpoints[socket] = e
				if t.ctx != nil {
					t.startLocked(e)
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("serve %s: %w", resource, err))
		}
	}
	return errors.Join(errs...)
}

// order returns the sockets of want, the GPUs' first, the others sorted.
func (t *Target) order(want map[string]string) []string {
	out := slices.Sorted(maps.Keys(want))
	if i := slices.Index(out, t.cfg.SocketName); i > 0 {
		out = slices.Insert(slices.Delete(out, i, i+1), 0, t.cfg.SocketName)
	}
	return out
}

// swap makes e serve resource's catalog of set, from the devices stored
// returns, under resource's name.
func (t *Target) swap(e *endpoint, set *agent.Set, resource string, stored func() ([]store.Device, error)) error {
	var ids map[string]bool
	err := e.reg.Switch(resource, func() error {
		return e.srv.UpdateCatalog(func(Catalog) (Catalog, error) {
			st, err := stored()
			if err != nil {
				return Catalog{}, err
			}
			cat, err := catalogOf(set, st, resource)
			ids = idsOf(cat)
			return cat, err
		})
	})
	if err == nil {
		e.ids = ids
	}
	return err
}

// SetHealth publishes the health of devices ids to every ListAndWatch
// stream of the Servers that advertise them (Server.SetHealthOf): a GPU's
// MIG devices may be under several resources.
func (t *Target) SetHealth(_ string, ids []string, healthy bool, reason string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	left := len(ids)
	for _, e := range t.endpoints {
		var mine []string
		for _, id := range ids {
			if e.ids[id] {
				mine = append(mine, id)
			}
		}
		if len(mine) == 0 {
			continue
		}
		left -= len(mine)
		if _, err := e.srv.SetHealthOf(mine, healthy, reason); err != nil {
			errs = append(errs, err)
		}
	}
	if left > 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("set health of %v: not all advertised: %w", ids, store.ErrUnknownDevice))
	}
	return errors.Join(errs...)
}

// Registered reports whether every resource is registered with the
// kubelet right now.
func (t *Target) Registered() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.endpoints {
		if !e.reg.Registered() {
			return false
		}
	}
	return true
}

// Registrations counts the successful Register calls of every resource so
// far, of those no longer served too.
func (t *Target) Registrations() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.past
	for _, e := range t.endpoints {
		n += e.reg.Registrations()
	}
	return n
}

// CatalogOf returns the Server's catalog of set for the devices as the
// store has them after set was stored: set's devices with their stored
// health, placed by the set's policies (gpuset.Set.Prefer), with the
// view's environment (view.View.Env: the set's, and the load socket's
// variable), the view's answer over the stored GPU UUIDs
// (view.View.Answer), and the set's bound on devices per container. Of a
// set advertising several resources it is every resource's devices; a
// Server serves one resource's (see Target).
func CatalogOf(set *agent.Set, stored []store.Device) (Catalog, error) {
	gpus, v := set.GPUs, set.View.WithStored(stored)
	devices, err := gpus.Devices(stored)
	if err != nil {
		return Catalog{}, err
	}
	uuids := gpuset.UUIDs(stored)
	cat := Catalog{
		Devices: devices,
		Prefer:  gpus.Prefer,
		Env:     v.Env,
		Respond: func(rec Record, devs []gpuset.Device) (ContainerSpec, error) {
			return v.Answer(uuids, rec.Seq, rec.Envs, devs)
		},
	}
	cat.Limit.Max, cat.Limit.Rule = gpus.Limit()
	return cat, nil
}

// catalogOf is CatalogOf with resource's devices alone.
func catalogOf(set *agent.Set, stored []store.Device, resource string) (Catalog, error) {
	cat, err := CatalogOf(set, stored)
	if err != nil {
		return Catalog{}, err
	}
	cat.Devices = gpuset.OfResource(cat.Devices, resource)
	return cat, nil
}

// recordFunc adapts the agent's RecordAllocation to a Recorder.
type recordFunc RecordFunc

func (f recordFunc) RecordAllocation(ctx context.Context, ids []string, envs map[string]string) (Record, error) {
	a, err := f(ctx, ids, envs)
	if err != nil {
		return Record{}, err
	}
	return Record{Seq: a.Seq, IDs: a.DeviceIDs, Envs: a.Envs}, nil
}
