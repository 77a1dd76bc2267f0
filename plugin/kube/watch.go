package kube

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// watchTimeoutMin is the shortest watch the client asks for: each watch
// asks the server to end it after a random 5 to 10 minutes, as client-go's
// reflector does, so that the plugins of a cluster do not reconnect in
// step.
const watchTimeoutMin = 5 * time.Minute

// stableWatch is how long a watch that delivered nothing must last for the
// next one to start without backoff; a watch that delivered an event
// always counts as healthy.
const stableWatch = 10 * time.Second

// WatchNode follows the labels of Node name and calls fn with them: once
// the Node is first listed, then whenever its labels change (only then: a
// status update or a relist that leaves them equal calls nothing). It
// returns nil when ctx ends.
//
// It lists and watches with the field selector metadata.name=<name>, so it
// sees this Node only. A watch that fails or ends is resumed from the last
// resourceVersion seen, after a capped, jittered exponential backoff when it
// failed (Options.BackoffInitial..BackoffMax); when the server no longer has
// that version (410 Gone, "too old resource version") it lists again. The
// first list reads from the API server's cache (resourceVersion "0", as the
// kubelet does); a relist after 410 reads the current state. Every failure
// is logged once at warn and retried. Only what retrying cannot fix ends
// WatchNode early, and only at start: the Node does not exist
// (ErrNodeNotFound) or the server refuses the credentials (401 Unauthorized,
// 403 Forbidden: the RBAC rules are missing; apierrors.IsForbidden tells).
//
// fn runs on WatchNode's goroutine, never concurrently with itself; while it
// runs the watch waits. It gets a copy of the labels (never nil) that it may
// keep. If fn returns an error, WatchNode logs it at warn and calls fn again
// with the same labels after a backoff, until fn succeeds or the labels
// change (then fn gets the new ones at once). If the Node is deleted,
// WatchNode logs it, keeps watching and calls fn when the Node is
// registered again.
func (c *Client) WatchNode(ctx context.Context, name string, fn func(labels map[string]string) error) error {
	if name == "" {
		return fmt.Errorf("watch node: %w", ErrNoNodeName)
	}
	if fn == nil {
		return fmt.Errorf("watch node %q: no function to call", name)
	}
	w := &nodeWatch{
		c:        c,
		name:     name,
		fn:       fn,
		log:      c.log.With().Str("node", name).Logger(),
		selector: fields.OneTermEqualSelector(metav1.ObjectNameField, name).String(),
		failures: c.backoff,
		retries:  c.backoff,
		retry:    time.NewTimer(time.Hour),
	}
	w.retry.Stop()
	defer w.retry.Stop()
	return w.run(ctx)
}

// nodeWatch is the state of one WatchNode call; only its goroutine uses it.
type nodeWatch struct {
	c        *Client
	name     string
	fn       func(map[string]string) error
	log      zerolog.Logger
	selector string

	rv       string  // resourceVersion to watch from
	failures backoff // between failed lists and watches
	retries  backoff // between failed calls of fn
	retry    *time.Timer

	delivered map[string]string // labels fn last accepted, if have
	have      bool
	pending   map[string]string // labels fn failed on, retried when retry fires; nil if none
}

// run lists, then watches until the version expires, then lists again,
// until ctx ends.
func (w *nodeWatch) run(ctx context.Context) error {
	listRV := "0" // the API server's watch cache, as the kubelet lists
	for first := true; ctx.Err() == nil; {
		node, rv, err := w.list(ctx, listRV)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if first && (apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)) {
				return fmt.Errorf("watch node: %w", err)
			}
			d := w.failures.next()
			w.log.Warn().Err(err).Dur("retry_in", d).Msg("listing the node failed")
			w.sleep(ctx, d)
			continue
		}
		switch {
		case node != nil:
			w.deliver(node.Labels)
		case first:
			return fmt.Errorf("watch node %q: not in the API server (check the node name): %w", w.name, ErrNodeNotFound)
		default:
			w.log.Warn().Msg("node not found; waiting for it to be registered again")
			w.gone()
		}
		first = false
		w.rv = rv
		w.watch(ctx)
		listRV = "" // the version expired: read the current state
	}
	return nil
}

// list returns the Node (nil if it does not exist) and the list's
// resourceVersion.
func (w *nodeWatch) list(ctx context.Context, rv string) (*corev1.Node, string, error) {
	ctx, cancel := context.WithTimeout(ctx, w.c.opts.RequestTimeout)
	defer cancel()
	l, err := w.c.nodes.List(ctx, metav1.ListOptions{FieldSelector: w.selector, ResourceVersion: rv})
	if err != nil {
		return nil, "", fmt.Errorf("list node %q: %w", w.name, err)
	}
	for i := range l.Items {
		if l.Items[i].Name == w.name {
			return &l.Items[i], l.ResourceVersion, nil
		}
	}
	return nil, l.ResourceVersion, nil
}

// watch watches from w.rv, again and again, until the server no longer has
// that version (it returns, to list again) or ctx ends. The backoff is
// reset by a healthy watch only: one that delivered an event or lasted
// stableWatch. If the version a list returned has expired before any watch
// from it was healthy, the server's versions are inconsistent (a lagging
// cache): it backs off before listing again rather than spin.
func (w *nodeWatch) watch(ctx context.Context) {
	healthy := false
	for ctx.Err() == nil {
		start := time.Now()
		events, err := w.watchOnce(ctx)
		switch {
		case ctx.Err() != nil:
		case expired(err) && (healthy || events > 0):
			w.failures.reset()
			w.log.Info().Err(err).Msg("watch version expired; listing the node again")
			return
		case expired(err):
			d := w.failures.next()
			w.log.Warn().Err(err).Dur("retry_in", d).Msg("watch version expired; listing the node again")
			w.sleep(ctx, d)
			return
		case err != nil:
			d := w.failures.next()
			w.log.Warn().Err(err).Dur("retry_in", d).Msg("watching the node failed")
			w.sleep(ctx, d)
		case events == 0 && time.Since(start) < stableWatch:
			d := w.failures.next()
			w.log.Debug().Dur("retry_in", d).Msg("node watch ended at once")
			w.sleep(ctx, d)
		default:
			healthy = true
			w.failures.reset()
		}
	}
}

// expired reports whether err says the watched resourceVersion is no
// longer available, so the node must be listed again.
func expired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// watchOnce runs one watch until it ends, an error event arrives or ctx
// ends, and counts the Node events it got.
func (w *nodeWatch) watchOnce(ctx context.Context) (events int, err error) {
	timeout := int64((watchTimeoutMin + rand.N(watchTimeoutMin)) / time.Second)
	wi, err := w.c.nodes.Watch(ctx, metav1.ListOptions{
		FieldSelector:       w.selector,
		ResourceVersion:     w.rv,
		AllowWatchBookmarks: true,
		TimeoutSeconds:      &timeout,
	})
	if err != nil {
		return 0, fmt.Errorf("watch node %q from version %s: %w", w.name, w.rv, err)
	}
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return events, nil
		case <-w.retry.C:
			w.retryPending()
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return events, nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				node, ok := ev.Object.(*corev1.Node)
				if !ok {
					return events, fmt.Errorf("watch node %q: %s event with a %T", w.name, ev.Type, ev.Object)
				}
				if node.Name != w.name {
					continue
				}
				w.rv = node.ResourceVersion
				events++
				if ev.Type == watch.Deleted {
					w.log.Warn().Msg("node deleted; waiting for it to be registered again")
					w.gone()
					continue
				}
				w.deliver(node.Labels)
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
					w.rv = m.GetResourceVersion()
				}
			case watch.Error:
				return events, fmt.Errorf("watch node %q from version %s: %w", w.name, w.rv, apierrors.FromObject(ev.Object))
			}
		}
	}
}

// deliver calls fn with labels if they differ from what fn last accepted,
// or from what it failed on (that is retried by the timer).
func (w *nodeWatch) deliver(labels map[string]string) {
	switch {
	case w.pending != nil && maps.Equal(labels, w.pending):
	case w.pending == nil && w.have && maps.Equal(labels, w.delivered):
	default:
		w.call(labels)
	}
}

// call calls fn with a copy of labels and records the outcome.
func (w *nodeWatch) call(labels map[string]string) {
	mine := maps.Clone(labels)
	if mine == nil {
		mine = map[string]string{}
	}
	if err := w.fn(maps.Clone(mine)); err != nil {
		d := w.retries.next()
		w.log.Warn().Err(err).Dur("retry_in", d).Msg("acting on the node's labels failed")
		w.pending = mine
		w.retry.Reset(d)
		return
	}
	w.retry.Stop()
	w.retries.reset()
	w.delivered, w.have, w.pending = mine, true, nil
}

// retryPending calls fn again with the labels it failed on.
func (w *nodeWatch) retryPending() {
	if w.pending != nil {
		w.call(w.pending)
	}
}

// gone forgets the Node, which was deleted: its next labels are delivered
// whatever they are, and a pending retry is dropped.
func (w *nodeWatch) gone() {
	w.retry.Stop()
	w.retries.reset()
	w.delivered, w.have, w.pending = nil, false, nil
}

// sleep waits d or until ctx ends, retrying a failed delivery meanwhile.
func (w *nodeWatch) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-w.retry.C:
			w.retryPending()
		}
	}
}

// backoff is a capped exponential backoff with 20% jitter. The zero value
// waits 0; copy a configured one to start afresh.
type backoff struct {
	initial, max, cur time.Duration
}

// next returns the next wait: initial, then doubling up to max, each plus
// up to 20%.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.initial
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	if b.cur < 5 {
		return b.cur
	}
	return b.cur + rand.N(b.cur/5)
}

// reset makes the next wait initial again.
func (b *backoff) reset() { b.cur = 0 }
