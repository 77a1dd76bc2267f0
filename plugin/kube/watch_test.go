package kube

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

const waitLimit = 10 * time.Second

// testClient returns a client of the fake server with millisecond backoffs,
// logging to log (if not nil) and to the test.
func testClient(t testing.TB, f *fakeAPIServer, log *plugintest.LogBuffer) *Client {
	t.Helper()
	var w = zerolog.NewTestWriter(t)
	logger := zerolog.New(w)
	if log != nil {
		logger = zerolog.New(zerolog.MultiLevelWriter(w, log))
	}
	c, err := NewClient(Options{
		Kubeconfig:     f.kubeconfig(t),
		Version:        "v9.9.9",
		Logger:         logger,
		BackoffInitial: time.Millisecond,
		BackoffMax:     20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// watchRun is one WatchNode call running in a goroutine the test owns.
type watchRun struct {
	mu    sync.Mutex
	calls []map[string]string
	done  chan error
	stop  context.CancelFunc
}

// startWatch runs c.WatchNode(name) until the test ends, recording every
// call of fn; fail (may be nil) decides whether a call fails.
func startWatch(t *testing.T, c *Client, name string, fail func(call int, labels map[string]string) error) *watchRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchRun{done: make(chan error, 1), stop: cancel}
	go func() {
		w.done <- c.WatchNode(ctx, name, func(labels map[string]string) error {
			w.mu.Lock()
			w.calls = append(w.calls, labels)
			n := len(w.calls)
			w.mu.Unlock()
			if fail != nil {
				return fail(n, labels)
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-w.done:
			if err != nil {
				t.Errorf("WatchNode returned %v after cancel, want nil", err)
			}
		case <-time.After(waitLimit):
			t.Error("WatchNode did not return after its context ended")
		}
	})
	return w
}

// callsSoFar returns the labels of every call of fn so far.
func (w *watchRun) callsSoFar() []map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]map[string]string(nil), w.calls...)
}

// waitCalls waits until fn has been called n times and returns the calls.
func (w *watchRun) waitCalls(t *testing.T, n int) []map[string]string {
	t.Helper()
	plugintest.WaitFor(t, waitLimit, strconv.Itoa(n)+" calls of fn", func() bool { return len(w.callsSoFar()) >= n })
	return w.callsSoFar()
}

// waitWatching waits until n watches are open on the server.
func waitWatching(t *testing.T, f *fakeAPIServer, n int) {
	t.Helper()
	plugintest.WaitFor(t, waitLimit, strconv.Itoa(n)+" open watches", func() bool { return f.openWatches() == n })
}

func TestWatchNode_DeliversAtStartAndOnLabelChangesOnly(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"zone": "a"}))
	c := testClient(t, f, nil)
	w := startWatch(t, c, "gpu-1", nil)

	calls := w.waitCalls(t, 1)
	if want := map[string]string{"zone": "a"}; !maps.Equal(calls[0], want) {
		t.Fatalf("first call got %v, want %v", calls[0], want)
	}
	waitWatching(t, f, 1)

	// Status updates, as the kubelet posts them, change no label: no call.
	for range 5 {
		f.touchStatus("gpu-1")
	}
	f.setLabels("gpu-1", map[string]string{ConfigLabel: "a100-shared"})
	calls = w.waitCalls(t, 2)
	if want := map[string]string{"zone": "a", ConfigLabel: "a100-shared"}; !maps.Equal(calls[1], want) {
		t.Errorf("second call got %v, want %v", calls[1], want)
	}
	f.touchStatus("gpu-1")
	f.setLabels("gpu-1", map[string]string{"zone": ""})
	calls = w.waitCalls(t, 3)
	if want := map[string]string{ConfigLabel: "a100-shared"}; !maps.Equal(calls[2], want) {
		t.Errorf("third call got %v, want %v", calls[2], want)
	}
	if len(calls) != 3 {
		t.Errorf("fn called %d times, want 3 (status updates must not call it): %v", len(calls), calls)
	}
}

func TestWatchNode_SeesOnlyItsOwnNode(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", nil), testNode("gpu-2", map[string]string{"x": "1"}))
	c := testClient(t, f, nil)
	w := startWatch(t, c, "gpu-1", nil)
	w.waitCalls(t, 1)
	waitWatching(t, f, 1)

	f.setLabels("gpu-2", map[string]string{"x": "2"})
	f.setLabels("gpu-1", map[string]string{"mine": "yes"})
	calls := w.waitCalls(t, 2)
	if len(calls) != 2 || !maps.Equal(calls[1], map[string]string{"mine": "yes"}) {
		t.Errorf("calls %v, want {} then {mine:yes} only", calls)
	}
	for _, r := range f.log() {
		if r.Query["fieldSelector"] != "metadata.name=gpu-1" {
			t.Errorf("%s %s?%v: want fieldSelector=metadata.name=gpu-1 on every request", r.Method, r.Path, r.Query)
		}
		if isWatch(r) && r.Query["allowWatchBookmarks"] != "true" {
			t.Errorf("watch %v: want allowWatchBookmarks=true", r.Query)
		}
		if isWatch(r) {
			if s, err := strconv.Atoi(r.Query["timeoutSeconds"]); err != nil || s < 300 || s >= 600 {
				t.Errorf("watch timeoutSeconds=%q, want 300..599", r.Query["timeoutSeconds"])
			}
		}
	}
	if first := f.log()[0]; !isList(first) || first.Query["resourceVersion"] != "0" {
		t.Errorf("first request %s %v, want a list from the cache (resourceVersion=0)", first.Method, first.Query)
	}
}

func TestWatchNode_ResumesFromTheLastVersionAfterTheWatchEnds(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", nil))
	c := testClient(t, f, nil)
	w := startWatch(t, c, "gpu-1", nil)
	w.waitCalls(t, 1)
	waitWatching(t, f, 1)
	f.setLabels("gpu-1", map[string]string{"a": "1"})
	w.waitCalls(t, 2)

	f.endWatches() // a watch timeout or an API server restart
	f.setLabels("gpu-1", map[string]string{"a": "2"})
	calls := w.waitCalls(t, 3)
	if !maps.Equal(calls[2], map[string]string{"a": "2"}) {
		t.Errorf("after the watch ended got %v, want {a:2}", calls[2])
	}
	if n := f.count(isList); n != 1 {
		t.Errorf("%d lists, want 1: a watch that ends resumes without listing", n)
	}
	var versions []string
	for _, r := range f.log() {
		if isWatch(r) {
			versions = append(versions, r.Query["resourceVersion"])
		}
	}
	// The node was listed at version 1 and labelled at 2: the second watch
	// resumes from 2, the version of the last event.
	if len(versions) < 2 || versions[0] != "1" || versions[1] != "2" {
		t.Errorf("watches from versions %v, want 1 then 2", versions)
	}
}

func TestWatchNode_FollowsBookmarks(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", nil), testNode("gpu-2", nil))
	f.inject(func(f *fakeAPIServer) { f.bookmarks = true })
	c := testClient(t, f, nil)
	w := startWatch(t, c, "gpu-1", nil)
	w.waitCalls(t, 1)
	waitWatching(t, f, 1)
	f.setLabels("gpu-1", map[string]string{"a": "1"}) // version 3, bookmarked
	w.waitCalls(t, 2)
	f.endWatches()
	plugintest.WaitFor(t, waitLimit, "a second watch", func() bool { return f.count(isWatch) == 2 })
	if got := f.log()[len(f.log())-1].Query["resourceVersion"]; got != "3" {
		t.Errorf("second watch from version %s, want 3", got)
	}
}

func TestWatchNode_ListsAgainWhenTheVersionExpired(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"a": "1"}))
	var log plugintest.LogBuffer
	c := testClient(t, f, &log)
	w := startWatch(t, c, "gpu-1", nil)
	w.waitCalls(t, 1)
	waitWatching(t, f, 1)

	// While the client is away, the label changes and the history is compacted.
	f.inject(func(f *fakeAPIServer) { f.failWatch = 1 })
	f.endWatches()
	f.setLabels("gpu-1", map[string]string{"a": "2"})
	f.compact()
	calls := w.waitCalls(t, 2)
	if !maps.Equal(calls[1], map[string]string{"a": "2"}) {
		t.Errorf("after relisting got %v, want {a:2}", calls[1])
	}
	var lists []string
	for _, r := range f.log() {
		if isList(r) {
			lists = append(lists, r.Query["resourceVersion"])
		}
	}
	if len(lists) != 2 || lists[0] != "0" || lists[1] != "" {
		t.Errorf("lists at versions %q, want \"0\" (cache) then \"\" (current state after 410)", lists)
	}
	if log.Count("listing the node again") != 1 {
		t.Errorf("want one log line about the relist; log:\n%s", log.String())
	}
	// And it keeps watching after the relist.
	waitWatching(t, f, 1)
	f.setLabels("gpu-1", map[string]string{"a": "3"})
	if calls = w.waitCalls(t, 3); !maps.Equal(calls[2], map[string]string{"a": "3"}) {
		t.Errorf("after relisting and watching got %v, want {a:3}", calls[2])
	}
}

func TestWatchNode_RetriesFailedRequestsWithBackoff(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"a": "1"}))
	f.inject(func(f *fakeAPIServer) { f.failLists, f.failWatch = 3, 3 })
	var log plugintest.LogBuffer
	c := testClient(t, f, &log)
	w := startWatch(t, c, "gpu-1", nil)
	w.waitCalls(t, 1)
	waitWatching(t, f, 1)
	f.setLabels("gpu-1", map[string]string{"a": "2"})
	if calls := w.waitCalls(t, 2); !maps.Equal(calls[1], map[string]string{"a": "2"}) {
		t.Errorf("got %v, want {a:2}", calls[1])
	}
	if n := log.Count("listing the node failed"); n != 3 {
		t.Errorf("%d list failures logged, want 3; log:\n%s", n, log.String())
	}
	if n := log.Count("watching the node failed"); n != 3 {
		t.Errorf("%d watch failures logged, want 3; log:\n%s", n, log.String())
	}
	if n := f.count(isList); n != 4 {
		t.Errorf("%d lists, want 4: failed watches are retried from their version, not relisted", n)
	}
}

func TestWatchNode_FailsAtStartOnlyForWhatRetryingCannotFix(t *testing.T) {
	t.Run("node not found", func(t *testing.T) {
		f := newFakeAPIServer(t, testNode("gpu-2", nil))
		c := testClient(t, f, nil)
		err := c.WatchNode(context.Background(), "gpu-1", func(map[string]string) error { return nil })
		if !errors.Is(err, ErrNodeNotFound) {
			t.Errorf("got %v, want ErrNodeNotFound", err)
		}
	})
	t.Run("forbidden", func(t *testing.T) {
		f := newFakeAPIServer(t, testNode("gpu-1", nil))
		f.inject(func(f *fakeAPIServer) { f.forbidden = true })
		c := testClient(t, f, nil)
		err := c.WatchNode(context.Background(), "gpu-1", func(map[string]string) error { return nil })
		if !apierrors.IsForbidden(err) {
			t.Errorf("got %v, want a Forbidden error", err)
		}
	})
	t.Run("no name", func(t *testing.T) {
		f := newFakeAPIServer(t)
		c := testClient(t, f, nil)
		if err := c.WatchNode(context.Background(), "", func(map[string]string) error { return nil }); !errors.Is(err, ErrNoNodeName) {
			t.Errorf("got %v, want ErrNoNodeName", err)
		}
		if n := len(f.log()); n != 0 {
			t.Errorf("%d requests sent, want none", n)
		}
	})
}

func TestWatchNode_RetriesAFailedCallWithTheSameLabels(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"a": "1"}))
	var log plugintest.LogBuffer
	c := testClient(t, f, &log)
	boom := errors.New("boom")
	w := startWatch(t, c, "gpu-1", func(call int, _ map[string]string) error {
		if call <= 2 {
			return boom
		}
		return nil
	})
	calls := w.waitCalls(t, 3)
	for i, l := range calls[:3] {
		if !maps.Equal(l, map[string]string{"a": "1"}) {
			t.Errorf("call %d got %v, want {a:1}", i+1, l)
		}
	}
	if n := log.Count("acting on the node's labels failed"); n != 2 {
		t.Errorf("%d failures logged, want 2; log:\n%s", n, log.String())
	}
	// Accepted: no further retries; the next change is delivered.
	waitWatching(t, f, 1)
	f.setLabels("gpu-1", map[string]string{"a": "2"})
	calls = w.waitCalls(t, 4)
	if len(calls) != 4 || !maps.Equal(calls[3], map[string]string{"a": "2"}) {
		t.Errorf("calls %v, want a 4th with {a:2}", calls)
	}
}

func TestWatchNode_NewLabelsReplaceAPendingRetry(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"a": "1"}))
	c := testClient(t, f, nil)
	c.backoff = backoff{initial: time.Hour, max: time.Hour} // the retry never comes by itself
	w := startWatch(t, c, "gpu-1", func(_ int, l map[string]string) error {
		if l["a"] == "1" {
			return errors.New("boom")
		}
		return nil
	})
	w.waitCalls(t, 1)
	waitWatching(t, f, 1)
	f.setLabels("gpu-1", map[string]string{"a": "2"})
	if calls := w.waitCalls(t, 2); !maps.Equal(calls[1], map[string]string{"a": "2"}) {
		t.Errorf("got %v, want {a:2} at once, without waiting for the retry", calls[1])
	}
}

func TestWatchNode_FollowsTheNodeThroughDeletion(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"a": "1"}))
	var log plugintest.LogBuffer
	c := testClient(t, f, &log)
	w := startWatch(t, c, "gpu-1", nil)
	w.waitCalls(t, 1)
	waitWatching(t, f, 1)

	f.change("gpu-1", func(*corev1.Node) *corev1.Node { return nil })
	plugintest.WaitFor(t, waitLimit, "the deletion logged", func() bool { return log.Count("node deleted") == 1 })
	// The kubelet registers the node again, with the same labels: they are
	// delivered again, since whoever acts on them (labels of ours) must act
	// again on the new Node.
	f.change("gpu-1", func(*corev1.Node) *corev1.Node { return testNode("gpu-1", map[string]string{"a": "1"}) })
	if calls := w.waitCalls(t, 2); !maps.Equal(calls[1], map[string]string{"a": "1"}) {
		t.Errorf("after re-registration got %v, want {a:1}", calls[1])
	}
}

func TestWatchNode_ReturnsNilWhenTheContextEnds(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", nil))
	c := testClient(t, f, nil)
	w := startWatch(t, c, "gpu-1", nil)
	w.waitCalls(t, 1)
	waitWatching(t, f, 1)
	w.stop()
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("got %v, want nil", err)
		}
		w.done <- nil // for the cleanup
	case <-time.After(waitLimit):
		t.Fatal("WatchNode did not return")
	}
	waitWatching(t, f, 0)
}

// TestWatchNode_LabelsConverge wires WatchNode to SyncLabels as the plugin
// does: the patch's own event changes nothing more, so one patch is sent;
// a label of ours removed by hand comes back, and nobody else's label is
// touched.
func TestWatchNode_LabelsConverge(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"zone": "a", LabelPrefix + "stale": "x"}))
	c := testClient(t, f, nil)
	desired := map[string]string{LabelCount: "8", LabelProduct: "NVIDIA-A100-SXM4-40GB"}
	ctx := t.Context()
	startWatch(t, c, "gpu-1", func(_ int, labels map[string]string) error {
		_, err := SyncLabels(ctx, c, "gpu-1", labels, desired)
		return err
	})
	want := map[string]string{"zone": "a", LabelCount: "8", LabelProduct: "NVIDIA-A100-SXM4-40GB"}
	plugintest.WaitFor(t, waitLimit, "the labels applied", func() bool { return maps.Equal(f.labels("gpu-1"), want) })
	waitWatching(t, f, 1)
	f.touchStatus("gpu-1") // an event after the patch's own
	f.setLabels("gpu-1", map[string]string{LabelCount: "", "team": "ml"})
	want["team"] = "ml"
	plugintest.WaitFor(t, waitLimit, "the removed label restored", func() bool { return maps.Equal(f.labels("gpu-1"), want) })
	if n := f.count(isPatch); n != 2 {
		t.Errorf("%d patches, want 2 (one at start, one after the label was removed)", n)
	}
}

func TestWatchNode_BacksOffWhenEveryVersionExpires(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"a": "1"}))
	f.inject(func(f *fakeAPIServer) { f.expireAll = true })
	var log plugintest.LogBuffer
	c := testClient(t, f, &log)
	w := startWatch(t, c, "gpu-1", nil)
	plugintest.WaitFor(t, waitLimit, "8 lists", func() bool { return f.count(isList) >= 8 })
	w.stop()
	var waits []time.Duration
	for _, line := range strings.Split(log.String(), "\n") {
		var e struct {
			Message string  `json:"message"`
			RetryIn float64 `json:"retry_in"` // ms
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Message == "watch version expired; listing the node again" {
			waits = append(waits, time.Duration(e.RetryIn*float64(time.Millisecond)))
		}
	}
	if len(waits) < 7 {
		t.Fatalf("%d relists logged with a backoff, want every one of at least 7; log:\n%s", len(waits), log.String())
	}
	// 1, 2, 4, 8, 16, 20, 20 ms, each plus up to 20%.
	for i, d := range waits[:7] {
		base := min(time.Millisecond<<i, 20*time.Millisecond)
		if d < base || d > base+base/5 {
			t.Errorf("relist %d waited %v, want %v plus up to 20%%", i+1, d, base)
		}
	}
	if calls := w.callsSoFar(); len(calls) != 1 {
		t.Errorf("fn called %d times, want once: relisting the same labels calls nothing", len(calls))
	}
}

// TestWatchNode_BothEncodings: the fake server answers protobuf when asked
// first, as the API server does; one that speaks JSON only works too.
func TestWatchNode_BothEncodings(t *testing.T) {
	for _, jsonOnly := range []bool{false, true} {
		t.Run("jsonOnly="+strconv.FormatBool(jsonOnly), func(t *testing.T) {
			f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"a": "1"}))
			f.inject(func(f *fakeAPIServer) { f.jsonOnly, f.bookmarks = jsonOnly, true })
			c := testClient(t, f, nil)
			w := startWatch(t, c, "gpu-1", nil)
			w.waitCalls(t, 1)
			waitWatching(t, f, 1)
			if err := c.PatchNodeLabels(t.Context(), "gpu-1", map[string]string{LabelCount: "2"}, nil); err != nil {
				t.Fatal(err)
			}
			if calls := w.waitCalls(t, 2); !maps.Equal(calls[1], map[string]string{"a": "1", LabelCount: "2"}) {
				t.Errorf("got %v after the patch", calls[1])
			}
			f.inject(func(f *fakeAPIServer) { f.compacted = f.rv + 1 })
			f.endWatches()
			plugintest.WaitFor(t, waitLimit, "a relist after 410", func() bool { return f.count(isList) >= 2 })
		})
	}
}
