package dra

import (
	"context"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// collect unprepares what no kubelet will unprepare: the claims prepared
// here that the API server no longer has (deleted, replaced by a claim of
// the same name, or deallocated: their pods are gone, or the claim would
// still be reserved and allocated); writes again the CDI spec of a claim
// still prepared whose spec is gone or damaged (a reboot empties
// /var/run/cdi, and the kubelet, which keeps its prepared claims in a
// checkpoint, does not prepare them again); and removes the CDI specs of
// the driver's kind for claims not prepared (left by a crash between the
// record and the spec). A claim the API server cannot be asked about now
// is left for the next round.
func (d *Driver) collect(ctx context.Context) {
	prepared, err := d.st.PreparedClaims()
	if err != nil {
		d.log.Error().Err(err).Msg("prepared claims not read: not checked against the API server")
		return
	}
	var keep []string
	for _, c := range prepared {
		keep = append(keep, c.UID)
		name := c.Namespace + "/" + c.Name
		got, err := d.cfg.Client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		var why string
		switch {
		case apierrors.IsNotFound(err):
			why = "the claim is gone from the API server"
		case err != nil:
			if ctx.Err() == nil {
				d.log.Debug().Err(err).Str("claim", name).Msg("prepared claim not checked against the API server; retrying later")
			}
			continue
		case string(got.UID) != c.UID:
			why = "the claim was replaced by another of the same name"
		case got.Status.Allocation == nil:
			why = "the claim was deallocated"
		default:
			d.restoreSpec(ctx, got)
			d.followConsumers(c, got)
			continue
		}
		d.log.Warn().Str("claim", name).Str("uid", c.UID).Str("why", why).Msg("unpreparing a claim the kubelet did not unprepare")
		if err := d.Unprepare(ctx, c.UID, name, "collector"); err != nil {
			d.log.Error().Err(err).Str("claim", name).Msg("claim not unprepared; retrying later")
			continue
		}
		keep = keep[:len(keep)-1]
	}
	d.prep.Lock()
	defer d.prep.Unlock()
	uids, err := d.specs.UIDs()
	if err != nil {
		d.log.Warn().Err(err).Msg("CDI spec directory not fully read")
	}
	for _, uid := range uids {
		if slices.Contains(keep, uid) {
			continue
		}
		if c, err := d.st.Claim(uid); err == nil && c.Prepared() { // prepared since the list was read
			continue
		}
		removed, err := d.specs.Remove(uid)
		switch {
		case err != nil:
			d.log.Warn().Err(err).Str("uid", uid).Msg("CDI spec of a claim not prepared not removed")
		case removed:
			d.log.Info().Str("uid", uid).Str("spec", d.specs.Path(uid)).Msg("removed the CDI spec of a claim not prepared")
		}
	}
}

// restoreSpec writes the CDI spec of claim, prepared here, again if it is
// gone or damaged, through Prepare's path for a claim prepared before.
func (d *Driver) restoreSpec(ctx context.Context, claim *resourceapi.ResourceClaim) {
	if ok, err := d.specs.Exists(string(claim.UID)); err != nil || ok {
		return
	}
	if _, err := d.Prepare(ctx, claim); err != nil {
		d.log.Error().Err(err).Str("claim", claim.Namespace+"/"+claim.Name).Str("uid", string(claim.UID)).
			Msg("CDI spec of a prepared claim is gone and not written again; retrying later")
	}
}

// followConsumers records the pods claim, prepared here as c, is reserved
// for now, when they differ and are not none: a shared claim is prepared
// once, for its first pod, and the kubelet does not prepare it again for
// the others, which the telemetry labels the claim's GPUs with too. No
// consumers (the pods ended: the kubelet unprepares it) keep the last.
func (d *Driver) followConsumers(c store.Claim, claim *resourceapi.ResourceClaim) {
	now := consumers(claim.Status.ReservedFor)
	if len(now) == 0 || slices.Equal(now, c.ReservedFor) {
		return
	}
	rec, changed, err := d.st.SetClaimConsumers(c.UID, now)
	if err != nil {
		d.log.Warn().Err(err).Str("claim", c.Namespace+"/"+c.Name).Msg("the claim's consumers not recorded; retrying later")
		return
	}
	if !changed {
		return
	}
	d.prep.Lock()
	if _, ok := d.prepared[c.UID]; ok {
		d.prepared[c.UID] = rec
	}
	d.prep.Unlock()
	d.log.Info().Str("claim", c.Namespace+"/"+c.Name).Int("consumers", len(now)).Msg("claim reserved for other pods: recorded")
}
