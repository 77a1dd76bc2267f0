package dra

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

// TestRun_SlicesDeletedRepublished: a kubelet that starts deletes all of
// its node's ResourceSlices, before or after it registers the drivers it
// finds again. The library's slice controller would put them back only
// after its sync delay (30 s), leaving the node without devices for new
// claims that long; the driver watches its slices and publishes again at
// once.
func TestRun_SlicesDeletedRepublished(t *testing.T) {
	r := newRig(t, "dgx-a100")
	ctx := r.run(t)
	reg := registerapi.NewRegistrationClient(dial(t, r.d.cfg.RegistrationSocket()))
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	plugintest.WaitFor(t, 10*time.Second, "the node's slice", func() bool { return len(r.slices(ctx)) == 1 })

	// A new kubelet: it registers the driver again, and wipes the slices,
	// first one way round, then the other.
	wipe := func() {
		t.Helper()
		for _, s := range r.slices(ctx) {
			if err := r.client.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	register := func() {
		t.Helper()
		if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
			t.Fatal(err)
		}
	}
	back := func() bool {
		s := r.slices(ctx)
		return len(s) == 1 && len(s[0].Spec.Devices) == 8
	}
	wipe()
	register()
	plugintest.WaitFor(t, 5*time.Second, "the slice published again (wiped, then registered)", back)
	register()
	wipe()
	plugintest.WaitFor(t, 5*time.Second, "the slice published again (registered, then wiped)", back)
	if n := r.d.Registrations(); n != 3 {
		t.Errorf("%d registrations, want 3", n)
	}
}
