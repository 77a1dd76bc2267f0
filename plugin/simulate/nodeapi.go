package simulate

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
)

// nodeAPI is a simulated node's view of the API server, as its agent
// needs it (kube.API): the Node's labels come from the Simulator's one
// watch of all Nodes (feed), not from a watch of its own, and its label
// patches go through the Simulator's client.
type nodeAPI struct {
	client kubernetes.Interface
	feed   *labelFeed
	// retry is the wait before the agent is given the same labels again
	// after it failed to apply them.
	retry time.Duration
}

var _ kube.API = (*nodeAPI)(nil)

// WatchNode calls fn with the node's labels as the feed last had them,
// then after every change, and again after retry when fn failed, until
// ctx ends.
func (a *nodeAPI) WatchNode(ctx context.Context, _ string, fn func(labels map[string]string) error) error {
	var (
		seen  uint64
		retry <-chan time.Time
	)
	for {
		labels, gen, changed := a.feed.next()
		if gen != seen || retry != nil {
			seen = gen
			retry = nil
			if err := fn(labels); err != nil {
				retry = time.After(a.retry)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-retry:
		}
	}
}

// PatchNodeLabels sets and removes labels of Node name with one merge
// patch of its metadata.
func (a *nodeAPI) PatchNodeLabels(ctx context.Context, name string, set map[string]string, remove []string) error {
	labels := make(map[string]any, len(set)+len(remove))
	for k, v := range set {
		labels[k] = v
	}
	for _, k := range remove {
		labels[k] = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	if _, err := a.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch labels of node %q: %w", name, err)
	}
	return nil
}

// labelFeed holds a node's labels as last seen, with a generation that
// moves on every change, for one reader (nodeAPI.WatchNode).
type labelFeed struct {
	mu      sync.Mutex
	labels  map[string]string
	gen     uint64
	changed chan struct{} // closed and replaced on every change
}

func newLabelFeed(labels map[string]string) *labelFeed {
	return &labelFeed{labels: maps.Clone(labels), gen: 1, changed: make(chan struct{})}
}

// set stores labels, if they differ from the ones held.
func (f *labelFeed) set(labels map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if maps.Equal(f.labels, labels) {
		return
	}
	f.labels = maps.Clone(labels)
	f.gen++
	close(f.changed)
	f.changed = make(chan struct{})
}

// next returns the labels, their generation and a channel closed at the
// next change.
func (f *labelFeed) next() (map[string]string, uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.labels), f.gen, f.changed
}
