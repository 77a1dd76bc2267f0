package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/podresources"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// defaultLabelWait bounds how long the start waits for the Node's labels
// before it serves the default profile: long enough for an API server that
// answers, short enough to register fast when it does not (pods admitted
// before the plugin registers fail).
const defaultLabelWait = 10 * time.Second

// selector decides which configuration is in force and applies a new one
// live: it follows the Node's profile label (kube.API.WatchNode), the
// profiles directory (dirWatch) and keeps the Node's GPU labels
// (-label-node). A change of either is resolved with the command line and
// the environment (options.Options.Select, Resolve); one that cannot be
// (an unknown profile, a profile file that became invalid) is logged once,
// as an error, and the configuration in force stays.
//
// Applying a configuration (apply) reconciles the state file with the new
// devices, stores the change in the history in the same transaction
// (store.ReconcileConfig: a crash keeps both or neither) and swaps the
// Server's catalog in one step (plugin.Server.UpdateCatalog), so the
// kubelet gets the new list as one ListAndWatch message and no health
// change can slip between; when the resource name changes it does so
// between ending the old name's Runner and starting the new one
// (plugin.Registrar.Switch). Then it restarts the fault plan and brings the GPU
// labels up to date.
//
// Its methods are safe for concurrent use; mu serializes every change.
type selector struct {
	o         *options.Options
	log       zerolog.Logger
	api       kube.API // nil without API access
	nodeName  string
	labelNode bool
	identity  string // GPU UUIDs are derived from it; "" derives none

	// current is the device set in force, for readers that do not take mu
	// (the metrics' score).
	current atomic.Pointer[deviceSet]

	firstOnce sync.Once
	first     chan struct{} // closed once the Node's labels are known, or cannot be

	mu       sync.Mutex
	profiles *options.Profiles // nil: -config is not a directory
	labels   map[string]string // the Node's labels as last seen
	haveNode bool              // labels holds the Node's labels
	label    string            // the profile label's value the selection is based on
	retry    bool              // the last change failed for a reason worth retrying
	lastErr  string            // the configuration error logged last, so it is logged once
	conflict map[string]bool   // devices whose UUID conflict was logged

	// Set by start: until then a change is only remembered.
	started bool
	live    liveParts
	set     *deviceSet
}

// liveParts are what applying a configuration changes: the state file, the
// Server, the registration, the lifecycle tracker, the fault plan, the
// files containers see and the GPU telemetry (nil when off).
type liveParts struct {
	obs       plugin.Observer // told of the devices a reconcile adds
	st        *store.Store
	srv       *plugin.Server
	reg       *plugin.Registrar
	tracker   *podresources.Tracker
	faults    *faults.Runner
	view      *view.Files
	telemetry *telemetry.Service
}

// newSelector returns a selector for the profiles (nil: -config is not a
// directory of profiles). api is nil without API access.
func newSelector(o *options.Options, profiles *options.Profiles, api kube.API, identity string, log zerolog.Logger) *selector {
	return &selector{
		o:         o,
		log:       log,
		api:       api,
		nodeName:  o.NodeName,
		labelNode: o.LabelNode,
		identity:  identity,
		profiles:  profiles,
		first:     make(chan struct{}),
		conflict:  map[string]bool{},
	}
}

// watchNode follows the Node's labels until ctx ends. A watch the API
// server refuses at start (no such Node, no permission) is logged once:
// the plugin then serves the configuration it has, and never reads the
// label.
func (s *selector) watchNode(ctx context.Context) error {
	err := s.api.WatchNode(ctx, s.nodeName, func(labels map[string]string) error { return s.onLabels(ctx, labels) })
	if err != nil && ctx.Err() == nil {
		s.log.Error().Err(err).Str("node", s.nodeName).
			Msg("cannot read this node's labels: the profile label is not followed and no GPU labels are written")
	}
	s.firstOnce.Do(func() { close(s.first) })
	return nil
}

// waitLabels waits until the Node's labels are known (or cannot be), at
// most wait; it reports whether they are.
func (s *selector) waitLabels(ctx context.Context, wait time.Duration) bool {
	if s.api == nil {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.first:
	case <-t.C:
		s.log.Warn().Dur("waited", wait).Msg("the node's labels are not known yet: starting with the default profile, the labelled one follows")
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.haveNode
}

// initial returns the configuration to start with: the profile the Node's
// label names, if its labels are known, else fallback (options.Load's:
// the -config-default profile, the -config file, or flags only); with why
// and detail for the history.
func (s *selector) initial(fallback *options.Config) (cfg *options.Config, why, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	why, detail = s.fallbackWhy(fallback)
	if s.profiles == nil || !s.haveNode {
		return fallback, why, detail
	}
	s.label, _ = kube.SelectedProfile(s.labels)
	cfg, why, detail, err := s.resolve()
	if err != nil {
		s.logErr(err, fallback.Profile)
		why, detail = s.fallbackWhy(fallback)
		return fallback, why, detail
	}
	return cfg, why, detail
}

// fallbackWhy says why fallback, options.Load's configuration, is in force.
func (s *selector) fallbackWhy(fallback *options.Config) (why, detail string) {
	switch {
	case fallback.Profile != "":
		return store.WhyDefault, "-config-default=" + fallback.Profile
	case fallback.File != "":
		return store.WhyFlags, "-config " + fallback.File
	}
	return store.WhyFlags, ""
}

// resolve selects and resolves the profile for s.label from s.profiles.
// The caller holds mu.
func (s *selector) resolve() (cfg *options.Config, why, detail string, err error) {
	f, err := s.o.Select(s.profiles, s.label)
	if err != nil {
		return nil, "", "", err
	}
	switch {
	case s.label != "":
		why, detail = store.WhyNodeLabel, kube.ConfigLabel+"="+s.label
	case f != nil:
		why, detail = store.WhyDefault, "-config-default="+f.Profile+" (no "+kube.ConfigLabel+" label)"
	default:
		why, detail = store.WhyFlags, "no "+kube.ConfigLabel+" label and no -config-default"
	}
	cfg, err = s.o.Resolve(f)
	return cfg, why, detail, err
}

// start makes the selector apply changes from now on, to parts. set is
// the device set in force and report what reconciling the state file with
// it did (reconcile, which stored it in the history). A label change that
// came after initial is applied now.
func (s *selector) start(ctx context.Context, parts liveParts, set *deviceSet, report store.ReconcileReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live, s.set, s.started = parts, set, true
	s.current.Store(set)
	s.logUUIDConflicts(report)
	if s.profiles != nil && s.haveNode {
		if label, _ := kube.SelectedProfile(s.labels); label != s.label {
			s.label = label
			if err := s.changeLocked(ctx, ""); err != nil {
				s.log.Error().Err(err).Msg("applying the profile the node's label names failed; retrying with the node's next change")
			}
		}
	}
	if err := s.syncLabels(ctx); err != nil {
		s.log.Warn().Err(err).Msg("GPU labels of the node not updated; retrying with the node's next change")
	}
}

// onLabels takes the Node's labels, at start and whenever they change
// (kube.API.WatchNode calls it): a new profile label selects another
// profile, and our GPU labels are put back if someone changed them. An
// error asks WatchNode to call again with the same labels after a backoff:
// only for what retrying may fix (the state file, the API server), never
// for a label naming no profile.
func (s *selector) onLabels(ctx context.Context, labels map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.labels, s.haveNode = labels, true
	s.firstOnce.Do(func() { close(s.first) })
	if !s.started {
		return nil
	}
	if s.profiles != nil {
		if label, _ := kube.SelectedProfile(labels); label != s.label || s.retry {
			s.label = label
			if err := s.changeLocked(ctx, ""); err != nil {
				return err
			}
		}
	}
	return s.syncLabels(ctx)
}

// Causes of a reload.
const (
	causeSIGHUP     = "SIGHUP"
	causeDirChanged = "profiles directory changed"
)

// reload reads the profiles directory again after it changed
// (causeDirChanged, from dirWatch) or on SIGHUP (causeSIGHUP) and applies
// what the node's label selects from it. It ends with one line saying the
// outcome: the configuration applied (and what changed), unchanged, or not
// applied (the error; the profiles and the configuration in force stay).
// An operator who sends SIGHUP is told every refusal; a directory change
// that fails as the last one did is not logged again (logErr): an
// unrelated file changing does not repeat it.
func (s *selector) reload(ctx context.Context, cause string) {
	s.log.Info().Str("dir", s.o.ConfigPath).Msg(cause + "; reading the profiles again")
	ps, err := options.LoadProfiles(s.o.ConfigPath)
	if err == nil {
		_, err = s.o.ResolveAll(ps) // every profile must be usable, as at start
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.refused(cause, err)
		return
	}
	s.profiles = ps
	if !s.started {
		s.log.Info().Str("cause", cause).Msg(cause + ": profiles read; the start applies them")
		return
	}
	prev := s.set
	refused, err := s.selectLocked(ctx, store.WhyFileChanged)
	switch {
	case refused != nil:
		s.refused(cause, refused)
		return
	case err != nil:
		s.log.Error().Err(err).Str("cause", cause).Str("profile_in_force", s.inForce()).
			Msg(cause + ": applying the changed profiles failed; the profile in force stays")
		return
	case s.set == prev:
		s.log.Info().Str("cause", cause).Str("profile", s.inForce()).Msg(cause + ": configuration unchanged")
	default:
		s.log.Info().Str("cause", cause).Str("profile", s.inForce()).Str("previous_profile", prev.cfg.Profile).
			Strs("changed", setChanges(prev, s.set)).Msg(cause + ": configuration applied")
	}
	if err := s.syncLabels(ctx); err != nil {
		s.log.Warn().Err(err).Msg("GPU labels of the node not updated; retrying with the node's next change")
	}
}

// refused logs a reload's configuration that cannot be applied: on SIGHUP
// every time, else once (logErr). The caller holds mu.
func (s *selector) refused(cause string, err error) {
	if cause != causeSIGHUP {
		s.logErr(err, s.inForce())
		return
	}
	s.lastErr = err.Error() // said: a directory change failing the same way need not say it again
	ev := s.log.Error().Err(err).Str("cause", cause)
	if inForce := s.inForce(); inForce != "" {
		ev = ev.Str("profile_in_force", inForce)
	}
	ev.Msg(cause + ": configuration not applied: the configuration in force stays")
}

// setChanges says what of the configuration in force differs from prev
// to set, for the reload's line: "devices 4 -> 8".
func setChanges(prev, set *deviceSet) []string {
	var out []string
	diff := func(what, a, b string) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %q -> %q", what, a, b))
		}
	}
	diff("profile", prev.cfg.Profile, set.cfg.Profile)
	diff("resource", prev.Resource(), set.Resource())
	diff("topology", prev.cfg.GPUs.Machine.Name(), set.cfg.GPUs.Machine.Name())
	if a, b := prev.Len(), set.Len(); a != b {
		out = append(out, fmt.Sprintf("devices %d -> %d", a, b))
	}
	if len(out) == 0 {
		out = append(out, "other settings (the same devices)")
	}
	return out
}

// changeLocked selects and resolves the profile for s.label and applies
// it. why overrides the reason the selection gives (file-changed). A
// profile that cannot be selected or resolved is logged (once) and
// returns nil; an error applying it is returned, and the next change
// tries again. The caller holds mu.
func (s *selector) changeLocked(ctx context.Context, why string) error {
	refused, err := s.selectLocked(ctx, why)
	if refused != nil {
		s.logErr(refused, s.inForce())
	}
	return err
}

// selectLocked selects and resolves the profile for s.label and applies
// it; why overrides the reason the selection gives. It returns as refused
// a profile that cannot be selected or resolved, and as err a failure to
// apply it (the next change tries again). The caller holds mu.
func (s *selector) selectLocked(ctx context.Context, why string) (refused, err error) {
	cfg, selWhy, detail, err := s.resolve()
	if err != nil {
		return err, nil
	}
	if why == "" {
		why = selWhy
	} else {
		detail = s.o.ConfigPath + "; " + detail
	}
	s.retry = true
	if err := s.apply(ctx, cfg, why, detail); err != nil {
		return nil, err
	}
	s.retry, s.lastErr = false, ""
	return nil, nil
}

// logErr logs a configuration that cannot be applied, once: the same
// error again is not logged (a label or a file stays wrong until someone
// fixes it). inForce is the profile that stays ("" none).
func (s *selector) logErr(err error, inForce string) {
	if err.Error() == s.lastErr {
		return
	}
	s.lastErr = err.Error()
	ev := s.log.Error().Err(err)
	if inForce != "" {
		ev = ev.Str("profile_in_force", inForce)
	}
	ev.Msg("configuration not applied: the configuration in force stays")
}

// inForce returns the profile in force, "" for none or before start. The
// caller holds mu.
func (s *selector) inForce() string {
	if s.set == nil {
		return ""
	}
	return s.set.cfg.Profile
}

// apply makes cfg the configuration in force, if it serves anything other
// than the one in force. The caller holds mu.
func (s *selector) apply(ctx context.Context, cfg *options.Config, why, detail string) error {
	set, err := newDeviceSet(cfg, s.identity)
	if err != nil {
		return err
	}
	prev := s.set
	if prev.equal(set) {
		return nil
	}
	p := s.live
	var report store.ReconcileReport
	swap := func() error {
		stored := false
		err := p.srv.UpdateCatalog(func(plugin.Catalog) (plugin.Catalog, error) {
			change, cat, err := reconcile(p.st, set, why, detail)
			report, stored = change.Report, err == nil
			return cat, err
		})
		if err != nil && stored {
			// Stored, then refused by the Server: back to the devices it
			// keeps serving, in the history too.
			if _, _, uerr := reconcile(p.st, prev, why, detail+"; not applied: "+err.Error()); uerr != nil {
				return errors.Join(err, uerr)
			}
		}
		return err
	}
	if err := p.view.Prepare(set.view, prev.view); err != nil { // what set's answers name exists first
		return err
	}
	if set.Resource() != prev.Resource() {
		p.tracker.FollowResourceName(set.Resource()) // before anything is allocated under it
		err = p.reg.Switch(set.Resource(), swap)
	} else {
		err = swap()
	}
	if err != nil {
		return err
	}
	s.set = set
	s.current.Store(set)
	p.view.Publish(set.view) // what cannot be written now is written by view.Files.Run once it can
	if p.telemetry != nil {
		if err := p.telemetry.Follow(set.Set, set.cfg.Telemetry); err != nil {
			s.log.Error().Err(err).Msg("GPU telemetry unavailable with the configuration applied")
		}
	}
	logConfig(s.log, cfg)
	logNUMA(s.log, cfg, set)
	s.logUUIDConflicts(report)
	s.log.Info().Str("why", why).Str("detail", detail).Str("profile", cfg.Profile).Str("previous_profile", prev.cfg.Profile).
		Str("resource", set.Resource()).Str("previous_resource", prev.Resource()).Str("topology", cfg.GPUs.Machine.Name()).
		Int("devices", set.Len()).Strs("added", report.Added).Strs("removed", report.Removed).Strs("restored", report.Restored).
		Msg("configuration applied")
	p.faults.Restart(cfg.Faults, set.GPUIDs())
	observeReconcile(p.obs, report)
	return nil
}

// observeReconcile tells obs (nil: nobody) of the health events a
// reconcile stored: a new GPU is added healthy, cause reconcile. Replicas
// and restored devices get no health event.
func observeReconcile(obs plugin.Observer, report store.ReconcileReport) {
	if obs == nil {
		return
	}
	for _, id := range report.Added {
		if !topology.IsReplicaID(id) {
			obs.HealthChanged(id, true, store.CauseReconcile)
		}
	}
}

// reconcile makes the state file's devices those of set and stores the
// configuration change in the history (why and detail as given, the device
// changes from the reconcile; nothing when set is the configuration of the
// newest stored event and no device changed), in one transaction
// (store.ReconcileConfig): a crash keeps both or neither. It returns what
// it stored and the catalog built from the stored devices; a catalog that
// cannot be built stores nothing.
func reconcile(st *store.Store, set *deviceSet, why, detail string) (store.ConfigChange, plugin.Catalog, error) {
	e := set.event
	e.Why, e.Detail = why, detail
	var cat plugin.Catalog
	change, err := st.ReconcileConfig(set.Specs(), e, func(stored []store.Device) error {
		var err error
		cat, err = set.catalog(stored)
		return err
	})
	if err != nil {
		return store.ConfigChange{}, plugin.Catalog{}, err
	}
	return change, cat, nil
}

// logUUIDConflicts logs, once per device, a stored UUID that differs from
// the one derived now (the node was renamed): the stored one is kept.
func (s *selector) logUUIDConflicts(report store.ReconcileReport) {
	for _, c := range report.UUIDConflicts {
		if s.conflict[c.ID] {
			continue
		}
		s.conflict[c.ID] = true
		s.log.Warn().Str("device", c.ID).Str("uuid", c.Stored).Str("derived", c.Given).
			Msg("device keeps its stored UUID; the one derived from the node's identity now differs (renamed node?)")
	}
}

// syncLabels brings the Node's GPU labels (kube.LabelPrefix) in line with
// the device set in force, with -label-node: one patch naming only the
// labels to set or remove, and none when they match. The caller holds mu.
func (s *selector) syncLabels(ctx context.Context) error {
	if !s.labelNode || s.api == nil || !s.haveNode {
		return nil
	}
	desired, err := kube.GPULabels(s.set.labels)
	if err != nil {
		return err
	}
	set, remove, err := kube.LabelChanges(s.labels, desired)
	if err != nil {
		return err
	}
	if len(set) == 0 && len(remove) == 0 {
		return nil
	}
	if _, err := kube.SyncLabels(ctx, s.api, s.nodeName, s.labels, desired); err != nil {
		return err
	}
	s.log.Info().Strs("set", slices.Sorted(maps.Keys(set))).Strs("removed", remove).Msg("GPU labels of the node updated")
	// As the watch will show them: a change before its event must not patch again.
	labels := maps.Clone(s.labels)
	maps.Copy(labels, set)
	for _, k := range remove {
		delete(labels, k)
	}
	s.labels = labels
	return nil
}

// setHealth sets GPU id's health on srv, as one change: on all its
// replicas when the configuration in force shares it (health is per GPU;
// a replica id is refused). Before start it sets the device id.
func (s *selector) setHealth(srv *plugin.Server, id string, healthy bool, reason, cause string) error {
	set := s.current.Load()
	if set == nil {
		_, err := srv.SetHealth(id, healthy, reason, cause)
		return err
	}
	ids, err := set.Members(id)
	if err != nil {
		return err
	}
	_, err = srv.SetHealthOf(id, ids, healthy, reason, cause)
	return err
}

// score rates a preferred set on the machine in force, for the metrics;
// 0 before start.
func (s *selector) score(chosen []int) int {
	if set := s.current.Load(); set != nil {
		return set.Score(chosen)
	}
	return 0
}
