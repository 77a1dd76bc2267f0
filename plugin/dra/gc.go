package dra

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// collect unprepares what no kubelet will unprepare: the claims prepared
// here that the API server no longer has (deleted, replaced by a claim of
// the same name, or deallocated: their pods are gone, or the claim would
// still be reserved and allocated), and removes the CDI specs of the
// driver's kind for claims not prepared (left by a crash between the
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
