package dra

import (
	"context"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apifields "k8s.io/apimachinery/pkg/fields"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/tools/cache"
)

// sliceRepublishDelay is how long after one of its slices was deleted the
// driver hands the library its devices again: long enough for the
// library's own informer to have seen the deletion too, so that its sync
// finds the slice missing.
const sliceRepublishDelay = 250 * time.Millisecond

// watchSlices watches the driver's slices of the node and publishes again
// when one is deleted by someone else. A kubelet that starts deletes all
// of its node's slices (at a moment of its own, before or after it
// registers the driver again); the library's slice controller would put
// them back only after its sync delay (30 s), and until then no new claim
// gets the node's GPUs. The watch ends with ctx; the returned wait returns
// once it has. (One informer of ResourceSlices, not a factory of every
// API group's: the binary links only what it uses.)
func (d *Driver) watchSlices(ctx context.Context) (wait func(), err error) {
	sel := apifields.Set{
		resourceapi.ResourceSliceSelectorNodeName: d.cfg.NodeName,
		resourceapi.ResourceSliceSelectorDriver:   d.cfg.DriverName,
	}.String()
	inf := resourceinformers.NewFilteredResourceSliceInformer(d.cfg.Client, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = sel })
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(any) { time.AfterFunc(sliceRepublishDelay, d.requestPublish) },
	}); err != nil {
		return nil, fmt.Errorf("dra driver: watch its ResourceSlices: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.Run(ctx.Done())
	}()
	return func() { <-done }, nil
}

// requestPublish asks the publisher to hand the library the devices again
// (the library then syncs the slices at once), without a change to tell.
func (d *Driver) requestPublish() {
	select {
	case d.republish <- struct{}{}:
	default: // one is pending: it publishes what is current then
	}
}
