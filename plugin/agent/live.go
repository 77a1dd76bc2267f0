package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Live changes. The agent follows the Node's profile label (WatchNode), the
// profiles directory (DirWatch, Reload) and SIGHUP (Reload), and keeps the
// Node's GPU labels (-label-node). A change of either is resolved by the
// Source; one that cannot be (an unknown profile, a profile file that
// became invalid) is logged once, as an error, and the configuration in
// force stays.
//
// Applying a configuration (apply) reconciles the state file with the new
// devices, stores the change in the history in the same transaction
// (store.ReconcileConfig: a crash keeps both or neither) and swaps every
// Target's devices in one step, so the kubelet gets the new list as one
// message and no health change can slip between (SetHealth takes the same
// lock); a device plugin whose resource name changes does so between
// ending the old name's registration and starting the new one. Then it
// brings the host files, the telemetry, the fault plan and the GPU labels
// up to date.

// Causes of a reload.
const (
	// CauseSIGHUP is a reload an operator asked for.
	CauseSIGHUP = "SIGHUP"
	// CauseDirChanged is a reload after the profiles directory changed.
	CauseDirChanged = "profiles directory changed"
)

// onLabels takes the Node's labels, at start and whenever they change
// (kube.API.WatchNode calls it): a new profile label selects another
// profile, and our GPU labels are put back if someone changed them. An
// error asks WatchNode to call again with the same labels after a backoff:
// only for what retrying may fix (the state file, the API server), never
// for a label naming no profile.
func (a *Agent) onLabels(ctx context.Context, labels map[string]string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.labels, a.haveNode = labels, true
	a.firstOnce.Do(func() { close(a.first) })
	if !a.started {
		return nil
	}
	if sel := a.selection(labels); sel != a.sel || a.retry {
		a.sel = sel
		if err := a.changeLocked(ctx, ""); err != nil {
			return err
		}
	}
	return a.syncLabels(ctx)
}

// selection returns what labels select: the profile label's value when
// there are profiles to select from, and the MIG layout label's.
func (a *Agent) selection(labels map[string]string) Selection {
	var sel Selection
	if a.src.Profiles() {
		sel.Profile, _ = kube.SelectedProfile(labels)
	}
	sel.MIGConfig, _ = kube.SelectedMIGConfig(labels)
	return sel
}

// setMIGState records whether the selection of the MIG layout label took
// effect, for kube.LabelMIGConfigState; without the label there is no
// state. The caller holds mu.
func (a *Agent) setMIGState(ok bool) {
	switch {
	case a.sel.MIGConfig == "":
		a.migState = ""
	case ok:
		a.migState = kube.MIGStateSuccess
	default:
		a.migState = kube.MIGStateFailed
	}
}

// Reload reads the profiles directory again after it changed
// (CauseDirChanged, from DirWatch) or on SIGHUP (CauseSIGHUP) and applies
// what the node's label selects from it. It ends with one line saying the
// outcome: the configuration applied (and what changed), unchanged, or not
// applied (the error; the profiles and the configuration in force stay).
// An operator who sends SIGHUP is told every refusal; a directory change
// that fails as the last one did is not logged again (logErr): an
// unrelated file changing does not repeat it.
func (a *Agent) Reload(ctx context.Context, cause string) {
	a.log.Info().Str("dir", a.src.Dir()).Msg(cause + "; reading the profiles again")
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.src.Reload(); err != nil {
		a.refused(cause, err)
		return
	}
	if !a.started {
		a.log.Info().Str("cause", cause).Msg(cause + ": profiles read; the start applies them")
		return
	}
	prev := a.set
	refused, err := a.selectLocked(ctx, store.WhyFileChanged)
	switch {
	case refused != nil:
		a.refused(cause, refused)
		return
	case err != nil:
		a.log.Error().Err(err).Str("cause", cause).Str("profile_in_force", a.inForce()).
			Msg(cause + ": applying the changed profiles failed; the profile in force stays")
		return
	case a.set == prev:
		a.log.Info().Str("cause", cause).Str("profile", a.inForce()).Msg(cause + ": configuration unchanged")
	default:
		a.log.Info().Str("cause", cause).Str("profile", a.inForce()).Str("previous_profile", prev.Config.Profile).
			Strs("changed", a.set.changes(prev)).Msg(cause + ": configuration applied")
	}
	if err := a.syncLabels(ctx); err != nil {
		a.log.Warn().Err(err).Msg("GPU labels of the node not updated; retrying with the node's next change")
	}
}

// refused logs a reload's configuration that cannot be applied: on SIGHUP
// every time, else once (logErr). The caller holds mu.
func (a *Agent) refused(cause string, err error) {
	if cause != CauseSIGHUP {
		a.logErr(err, a.inForce())
		return
	}
	a.lastErr = err.Error() // said: a directory change failing the same way need not say it again
	ev := a.log.Error().Err(err).Str("cause", cause)
	if inForce := a.inForce(); inForce != "" {
		ev = ev.Str("profile_in_force", inForce)
	}
	ev.Msg(cause + ": configuration not applied: the configuration in force stays")
}

// changeLocked selects and resolves the configuration for a.sel and applies
// it. why overrides the reason the selection gives (file-changed). A
// profile that cannot be selected or resolved is logged (once) and
// returns nil; an error applying it is returned, and the next change
// tries again. The caller holds mu.
func (a *Agent) changeLocked(ctx context.Context, why string) error {
	refused, err := a.selectLocked(ctx, why)
	if refused != nil {
		a.logErr(refused, a.inForce())
	}
	return err
}

// selectLocked selects and resolves the configuration for a.sel and applies
// it; why overrides the reason the selection gives. It returns as refused
// a profile that cannot be selected or resolved, and as err a failure to
// apply it (the next change tries again). The caller holds mu.
func (a *Agent) selectLocked(ctx context.Context, why string) (refused, err error) {
	defer func() { a.setMIGState(refused == nil && err == nil) }()
	ch, err := a.src.Select(a.sel)
	if err != nil {
		return err, nil
	}
	if err := a.sameKubeletAPI(ch.Config); err != nil {
		return err, nil
	}
	if why != "" {
		ch.Why, ch.Detail = why, a.src.Dir()+"; "+ch.Detail
	}
	a.retry = true
	if err := a.apply(ctx, ch); err != nil {
		return nil, err
	}
	a.retry, a.lastErr = false, ""
	return nil, nil
}

// sameKubeletAPI refuses a configuration served through another kubelet
// API than the one in force: the API is chosen at start (Config.KubeletAPI).
// The caller holds mu.
func (a *Agent) sameKubeletAPI(cfg Config) error {
	want, have := cfg.KubeletAPI.OrDefault(), a.set.Config.KubeletAPI.OrDefault()
	if want == have {
		return nil
	}
	name := "the configuration"
	if cfg.Profile != "" {
		name = fmt.Sprintf("profile %q", cfg.Profile)
	}
	return fmt.Errorf("%s serves the GPUs through the kubelet API %q, but the plugin started with %q: the kubelet API is chosen at start; "+
		"restart the plugin (delete its pod) to switch", name, want, have)
}

// logErr logs a configuration that cannot be applied, once: the same
// error again is not logged (a label or a file stays wrong until someone
// fixes it). inForce is the profile that stays ("" none).
func (a *Agent) logErr(err error, inForce string) {
	if err.Error() == a.lastErr {
		return
	}
	a.lastErr = err.Error()
	ev := a.log.Error().Err(err)
	if inForce != "" {
		ev = ev.Str("profile_in_force", inForce)
	}
	ev.Msg("configuration not applied: the configuration in force stays")
}

// inForce returns the profile in force, "" for none or before Begin. The
// caller holds mu.
func (a *Agent) inForce() string {
	if a.set == nil {
		return ""
	}
	return a.set.Config.Profile
}

// apply makes ch's configuration the one in force, if it serves anything
// other than the one in force. The caller holds mu.
func (a *Agent) apply(_ context.Context, ch Choice) error {
	set, err := NewSet(ch.Config, a.identity)
	if err != nil {
		return err
	}
	prev := a.set
	if prev.Equal(set) {
		return nil
	}
	p := a.parts
	if p.Files != nil {
		if err := p.Files.Prepare(set.View, prev.View); err != nil { // what set's answers name exists first
			return err
		}
	}
	if p.Tracker != nil {
		for _, r := range set.Resources() {
			if !slices.Contains(prev.Resources(), r) {
				p.Tracker.FollowResourceName(r) // before anything is allocated under it
			}
		}
	}
	// commit runs once, inside the first Target's swap; the others get
	// what it stored.
	var (
		committed bool
		report    store.ReconcileReport
		stored    []store.Device
		devs      []gpuset.Device
		commitErr error
	)
	commit := func() ([]store.Device, error) {
		if !committed {
			committed = true
			var change store.ConfigChange
			change, stored, devs, commitErr = a.commit(set, ch.Why, ch.Detail)
			report = change.Report
		}
		return stored, commitErr
	}
	var errs []error
	for _, t := range p.Targets {
		if err := t.Apply(set, commit); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		if committed && commitErr == nil {
			// Stored, then refused by a Target: back to the devices it
			// keeps serving, in the history too.
			if _, _, _, uerr := a.commit(prev, ch.Why, ch.Detail+"; not applied: "+err.Error()); uerr != nil {
				return errors.Join(err, uerr)
			}
		}
		return err
	}
	if !committed { // no Target asked: store it all the same
		if _, err := commit(); err != nil {
			return err
		}
	}
	a.set, a.why = set, ch.Why
	a.publish(set, devs)
	if p.Files != nil {
		p.Files.Publish(set.View) // what cannot be written now is written by Files.Run once it can
	}
	if p.Telemetry != nil {
		if err := p.Telemetry.Follow(set.GPUs, set.Config.Telemetry); err != nil {
			a.log.Error().Err(err).Msg("GPU telemetry unavailable with the configuration applied")
		}
	}
	cfg := set.Config
	logConfig(a.log, ch)
	logNUMA(a.log, set)
	a.logUUIDConflicts(report)
	a.log.Info().Str("why", ch.Why).Str("detail", ch.Detail).Str("profile", cfg.Profile).Str("previous_profile", prev.Config.Profile).
		Str("resource", set.Resource()).Str("previous_resource", prev.Resource()).Str("topology", cfg.GPUs.Machine.Name()).
		Int("devices", set.GPUs.Len()).Strs("added", report.Added).Strs("removed", report.Removed).Strs("restored", report.Restored).
		Msg("configuration applied")
	p.Faults.Restart(cfg.Faults, set.GPUs.GPUIDs())
	observeReconcile(p.Observer, report)
	return nil
}

// logUUIDConflicts logs, once per device, a stored UUID that differs from
// the one derived now (the node was renamed): the stored one is kept. The
// caller holds mu.
func (a *Agent) logUUIDConflicts(report store.ReconcileReport) {
	for _, c := range report.UUIDConflicts {
		if a.conflict[c.ID] {
			continue
		}
		a.conflict[c.ID] = true
		a.log.Warn().Str("device", c.ID).Str("uuid", c.Stored).Str("derived", c.Given).
			Msg("device keeps its stored UUID; the one derived from the node's identity now differs (renamed node?)")
	}
}

// syncLabels brings the Node's GPU labels (kube.LabelPrefix) in line with
// the set in force, with -label-node: one patch naming only the labels to
// set or remove, and none when they match. The caller holds mu.
func (a *Agent) syncLabels(ctx context.Context) error {
	if !a.labelNode || a.api == nil || !a.haveNode {
		return nil
	}
	desired, err := kube.GPULabels(a.set.Labels())
	if err != nil {
		return err
	}
	if a.migState != "" {
		desired[kube.LabelMIGConfigState] = a.migState
	}
	set, remove, err := kube.LabelChanges(a.labels, desired)
	if err != nil {
		return err
	}
	if len(set) == 0 && len(remove) == 0 {
		return nil
	}
	if _, err := kube.SyncLabels(ctx, a.api, a.nodeName, a.labels, desired); err != nil {
		return err
	}
	a.log.Info().Strs("set", slices.Sorted(maps.Keys(set))).Strs("removed", remove).Msg("GPU labels of the node updated")
	// As the watch will show them: a change before its event must not patch again.
	labels := maps.Clone(a.labels)
	if labels == nil { // a Node without labels
		labels = make(map[string]string, len(set))
	}
	maps.Copy(labels, set)
	for _, k := range remove {
		delete(labels, k)
	}
	a.labels = labels
	return nil
}
