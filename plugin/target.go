package plugin

import (
	"context"
	"errors"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Target serves the agent's devices through the kubelet's device-plugin
// API: a Server whose catalog is the set in force (CatalogOf), kept
// registered under the set's resource name by a Registrar. It is the
// device plugin's agent.Target. Build it with NewTarget, run it with Run;
// its owner closes it (Close) when done.
type Target struct {
	srv *Server
	reg *Registrar
}

var _ agent.Target = (*Target)(nil)

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
	// plugin's socket in it.
	Dir, SocketName string
	// Logger receives the Server's and the Runners' lines; the zero
	// Logger discards.
	Logger zerolog.Logger
}

// NewTarget returns the device-plugin Target of cfg: a Server with the
// catalog of cfg.Set, and its Registrar for the set's resource name.
func NewTarget(cfg TargetConfig) (*Target, error) {
	if cfg.Set == nil || cfg.Record == nil {
		return nil, errors.New("device-plugin target: a set and a recorder are required")
	}
	cat, err := CatalogOf(cfg.Set, cfg.Stored)
	if err != nil {
		return nil, err
	}
	srv, err := NewServer(ServerConfig{Catalog: cat, Recorder: recordFunc(cfg.Record), Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	reg := NewRegistrar(RunnerConfig{Dir: cfg.Dir, SocketName: cfg.SocketName, Server: srv, Logger: cfg.Logger}, cfg.Set.Resource())
	return &Target{srv: srv, reg: reg}, nil
}

// Server returns the Target's Server (SetObserver, Devices).
func (t *Target) Server() *Server { return t.srv }

// Registrar returns the Target's Registrar (Registered, Registrations).
func (t *Target) Registrar() *Registrar { return t.reg }

// Run keeps the Server registered with the kubelet until ctx ends
// (Registrar.Run).
func (t *Target) Run(ctx context.Context) error { return t.reg.Run(ctx) }

// Close ends the Server's ListAndWatch streams; call it after Run returned.
func (t *Target) Close() { t.srv.Close() }

// Apply serves set: its catalog, built from the devices commit stores,
// swapped in whole (Server.UpdateCatalog: one ListAndWatch message, and no
// health change between), under its resource name. A new resource name is
// registered between ending the old name's Runner and starting the new
// one (Registrar.Switch), commit running in between.
func (t *Target) Apply(set *agent.Set, commit func() ([]store.Device, error)) error {
	swap := func() error {
		return t.srv.UpdateCatalog(func(Catalog) (Catalog, error) {
			stored, err := commit()
			if err != nil {
				return Catalog{}, err
			}
			return CatalogOf(set, stored)
		})
	}
	return t.reg.Switch(set.Resource(), swap)
}

// SetHealth publishes the health of devices ids to every ListAndWatch
// stream (Server.SetHealthOf).
func (t *Target) SetHealth(_ string, ids []string, healthy bool, reason string) error {
	_, err := t.srv.SetHealthOf(ids, healthy, reason)
	return err
}

// CatalogOf returns the Server's catalog of set for the devices as the
// store has them after set was stored: set's devices with their stored
// health, placed by the set's policies (gpuset.Set.Prefer), with the
// view's environment (view.View.Env: the set's, and the load socket's
// variable), the view's answer over the stored GPU UUIDs
// (view.View.Answer), and the set's bound on devices per container.
func CatalogOf(set *agent.Set, stored []store.Device) (Catalog, error) {
	gpus, v := set.GPUs, set.View
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

// recordFunc adapts the agent's RecordAllocation to a Recorder.
type recordFunc RecordFunc

func (f recordFunc) RecordAllocation(ctx context.Context, ids []string, envs map[string]string) (Record, error) {
	a, err := f(ctx, ids, envs)
	if err != nil {
		return Record{}, err
	}
	return Record{Seq: a.Seq, IDs: a.DeviceIDs, Envs: a.Envs}, nil
}
