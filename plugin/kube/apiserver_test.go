package kube

// A fake Kubernetes API server for the Node endpoints this package uses, over
// real HTTP, so that tests exercise the whole client-go stack (kubeconfig,
// headers, field selector, JSON decoding, watch streams, merge patches). The
// real API server runs in the e2e suite. What it serves:
//
//	GET   /api/v1/nodes?fieldSelector=metadata.name=<n>[&resourceVersion=<rv>]   list
//	GET   /api/v1/nodes?fieldSelector=…&watch=true&resourceVersion=<rv>           watch (JSON lines)
//	PATCH /api/v1/nodes/<n>   application/merge-patch+json of metadata.labels only
//
// with resourceVersions, history replay, compaction (410 Expired on watch),
// bookmarks, injected failures, and a log of every request.

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
)

// apiRequest is one request the fake server got.
type apiRequest struct {
	Method, Path string
	Query        map[string]string // first value of each parameter
	UserAgent    string
	Accept       string
	ContentType  string
	Body         string
}

// isWatch reports whether the request is a watch.
func (r apiRequest) isWatch() bool { return r.Query["watch"] == "true" }

// fakeEvent is one change in the fake server's history.
type fakeEvent struct {
	rv   int
	typ  watch.EventType
	node corev1.Node
}

// fakeAPIServer is the fake API server. Its methods are safe for concurrent
// use.
type fakeAPIServer struct {
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	rv        int
	nodes     map[string]*corev1.Node
	history   []fakeEvent
	compacted int // watches from a version below this get 410 Expired
	watchers  map[chan fakeEvent]struct{}
	ends      chan struct{} // closed to end every open watch
	requests  []apiRequest
	failLists int  // the next n lists answer 500
	failWatch int  // the next n watches answer 500
	forbidden bool // every request answers 403
	bookmarks bool // send a bookmark after every event
	expireAll bool // every watch answers 410 Expired, as a lagging cache might
	jsonOnly  bool // answer JSON whatever the client accepts
}

// newFakeAPIServer starts a fake API server with the given Nodes; it stops
// when the test ends.
func newFakeAPIServer(t testing.TB, nodes ...*corev1.Node) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{t: t, nodes: map[string]*corev1.Node{}, watchers: map[chan fakeEvent]struct{}{}, ends: make(chan struct{})}
	for _, n := range nodes {
		f.rv++
		n = n.DeepCopy()
		n.ResourceVersion = strconv.Itoa(f.rv)
		f.nodes[n.Name] = n
		f.history = append(f.history, fakeEvent{f.rv, watch.Added, *n.DeepCopy()})
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.endWatches()
		f.srv.Close()
	})
	return f
}

// kubeconfig writes a kubeconfig for the server into a temporary directory
// and returns its path.
func (f *fakeAPIServer) kubeconfig(t testing.TB) string {
	t.Helper()
	return writeKubeconfig(t, f.srv.URL)
}

// writeKubeconfig writes a kubeconfig naming server into a temporary
// directory and returns its path.
func writeKubeconfig(t testing.TB, server string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
users:
- name: fake
  user:
    token: secret
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
current-context: fake
`, server)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testNode returns a Node with the given labels and some status, as a
// kubelet reports it.
func testNode(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: maps.Clone(labels)},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.36.3", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
}

// change applies fn to Node name (creating it if fn gets nil and returns
// one, deleting it if fn returns nil) and records the event. It reports
// false if there was nothing to change.
func (f *fakeAPIServer) change(name string, fn func(*corev1.Node) *corev1.Node) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changeLocked(name, fn)
}

func (f *fakeAPIServer) changeLocked(name string, fn func(*corev1.Node) *corev1.Node) bool {
	old := f.nodes[name]
	var arg *corev1.Node
	if old != nil {
		arg = old.DeepCopy()
	}
	n := fn(arg)
	if n == nil && old == nil {
		return false
	}
	f.rv++
	ev := fakeEvent{rv: f.rv}
	switch {
	case n == nil:
		delete(f.nodes, name)
		ev.typ, ev.node = watch.Deleted, *old.DeepCopy()
	case old == nil:
		ev.typ = watch.Added
	default:
		ev.typ = watch.Modified
	}
	if n != nil {
		n.Name = name
		n.ResourceVersion = strconv.Itoa(f.rv)
		f.nodes[name] = n
		ev.node = *n.DeepCopy()
	}
	ev.node.ResourceVersion = strconv.Itoa(f.rv)
	f.history = append(f.history, ev)
	for ch := range f.watchers {
		ch <- ev
	}
	return true
}

// setLabels sets (value) and removes ("" value → removed) labels of Node
// name, as `kubectl label` does.
func (f *fakeAPIServer) setLabels(name string, labels map[string]string) {
	f.change(name, func(n *corev1.Node) *corev1.Node {
		if n == nil {
			f.t.Fatalf("setLabels: no node %q", name)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for k, v := range labels {
			if v == "" {
				delete(n.Labels, k)
			} else {
				n.Labels[k] = v
			}
		}
		return n
	})
}

// touchStatus changes Node name's status only, as a kubelet's status update.
func (f *fakeAPIServer) touchStatus(name string) {
	f.change(name, func(n *corev1.Node) *corev1.Node {
		n.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
		n.Status.Conditions[0].Message = "kubelet is posting ready status " + n.ResourceVersion
		return n
	})
}

// labels returns a copy of Node name's labels.
func (f *fakeAPIServer) labels(name string) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.nodes[name]; n != nil {
		return maps.Clone(n.Labels)
	}
	return nil
}

// compact forgets the history before now, as etcd compaction does: a
// watch from an older version answers 410 Expired.
func (f *fakeAPIServer) compact() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.compacted = f.rv
}

// endWatches ends every open watch, as the API server does when a watch
// times out or the server restarts.
func (f *fakeAPIServer) endWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.ends)
	f.ends = make(chan struct{})
}

// inject sets the failures of the next requests.
func (f *fakeAPIServer) inject(fn func(f *fakeAPIServer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// openWatches counts the watches being served.
func (f *fakeAPIServer) openWatches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers)
}

// log returns the requests so far.
func (f *fakeAPIServer) log() []apiRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]apiRequest(nil), f.requests...)
}

// count counts the requests so far that match.
func (f *fakeAPIServer) count(match func(apiRequest) bool) int {
	n := 0
	for _, r := range f.log() {
		if match(r) {
			n++
		}
	}
	return n
}

func isList(r apiRequest) bool {
	return r.Method == http.MethodGet && r.Path == "/api/v1/nodes" && !r.isWatch()
}
func isWatch(r apiRequest) bool {
	return r.Method == http.MethodGet && r.Path == "/api/v1/nodes" && r.isWatch()
}
func isPatch(r apiRequest) bool { return r.Method == http.MethodPatch }

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := apiRequest{
		Method: r.Method, Path: r.URL.Path, Query: map[string]string{},
		UserAgent: r.UserAgent(), Accept: r.Header.Get("Accept"), ContentType: r.Header.Get("Content-Type"), Body: string(body),
	}
	for k, v := range r.URL.Query() {
		req.Query[k] = v[0]
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	forbidden := f.forbidden
	if f.jsonOnly {
		req.Accept = runtime.ContentTypeJSON
	}
	f.mu.Unlock()
	if forbidden {
		writeStatus(w, req.Accept, http.StatusForbidden, metav1.StatusReasonForbidden, `nodes is forbidden: User "system:serviceaccount:kube-system:default" cannot list resource "nodes"`)
		return
	}
	switch name, isItem := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/"); {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes" && req.isWatch():
		f.serveWatch(w, r, req)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
		f.serveList(w, req)
	case r.Method == http.MethodPatch && isItem:
		f.servePatch(w, name, req)
	default:
		writeStatus(w, req.Accept, http.StatusNotFound, metav1.StatusReasonNotFound, "the fake API server does not serve "+r.Method+" "+r.URL.Path)
	}
}

// selected returns the node name of the request's field selector, the only
// selector this package may use.
func selected(w http.ResponseWriter, req apiRequest) (string, bool) {
	name, ok := strings.CutPrefix(req.Query["fieldSelector"], "metadata.name=")
	if !ok || name == "" {
		writeStatus(w, req.Accept, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the fake API server wants fieldSelector=metadata.name=<node>")
	}
	return name, ok && name != ""
}

func (f *fakeAPIServer) serveList(w http.ResponseWriter, req apiRequest) {
	name, ok := selected(w, req)
	if !ok {
		return
	}
	f.mu.Lock()
	if f.failLists > 0 {
		f.failLists--
		f.mu.Unlock()
		writeStatus(w, req.Accept, http.StatusInternalServerError, metav1.StatusReasonInternalError, "etcdserver: request timed out")
		return
	}
	list := corev1.NodeList{
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(f.rv)},
		Items:    []corev1.Node{},
	}
	if n := f.nodes[name]; n != nil {
		list.Items = append(list.Items, *n.DeepCopy())
	}
	f.mu.Unlock()
	writeObject(w, req.Accept, http.StatusOK, &list)
}

func (f *fakeAPIServer) servePatch(w http.ResponseWriter, name string, req apiRequest) {
	if req.ContentType != "application/merge-patch+json" {
		writeStatus(w, req.Accept, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, "the fake API server takes merge patches only, not "+req.ContentType)
		return
	}
	var patch struct {
		Metadata struct {
			Labels map[string]*string `json:"labels"`
		} `json:"metadata"`
	}
	dec := json.NewDecoder(strings.NewReader(req.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&patch); err != nil {
		writeStatus(w, req.Accept, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the fake API server patches metadata.labels only: "+err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out *corev1.Node
	ok := f.changeLocked(name, func(n *corev1.Node) *corev1.Node {
		if n == nil {
			return nil
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for k, v := range patch.Metadata.Labels {
			if v == nil {
				delete(n.Labels, k)
			} else {
				n.Labels[k] = *v
			}
		}
		out = n
		return n
	})
	if !ok {
		writeStatus(w, req.Accept, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("nodes %q not found", name))
		return
	}
	writeObject(w, req.Accept, http.StatusOK, out)
}

func (f *fakeAPIServer) serveWatch(w http.ResponseWriter, r *http.Request, req apiRequest) {
	name, ok := selected(w, req)
	if !ok {
		return
	}
	from, err := strconv.Atoi(req.Query["resourceVersion"])
	if err != nil {
		writeStatus(w, req.Accept, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the fake API server wants a resourceVersion to watch from")
		return
	}
	f.mu.Lock()
	if f.failWatch > 0 {
		f.failWatch--
		f.mu.Unlock()
		writeStatus(w, req.Accept, http.StatusInternalServerError, metav1.StatusReasonInternalError, "etcdserver: leader changed")
		return
	}
	info := negotiated(req.Accept)
	contentType := info.MediaType
	if info.MediaType == runtime.ContentTypeProtobuf {
		contentType += ";stream=watch" // as the API server labels a protobuf watch
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush() // as the API server: headers at once, events as they come
	objects := fakeCodecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	events := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(w), info.StreamSerializer.Serializer)
	send := func(typ watch.EventType, obj runtime.Object) bool {
		raw, err := runtime.Encode(objects, obj)
		if err != nil {
			f.t.Errorf("fake API server: %v", err)
			return false
		}
		if err := events.Encode(&metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}); err != nil {
			return false
		}
		w.(http.Flusher).Flush()
		return true
	}
	sendNode := func(ev fakeEvent) bool {
		if ev.node.Name != name || ev.rv <= from {
			return true
		}
		n := ev.node.DeepCopy()
		if !send(ev.typ, n) {
			return false
		}
		if f.bookmarks {
			bm := &corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(ev.rv)}}
			return send(watch.Bookmark, bm)
		}
		return true
	}
	if from < f.compacted || f.expireAll {
		f.mu.Unlock()
		send(watch.Error, &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
			Message: fmt.Sprintf("too old resource version: %d (%d)", from, f.compacted),
		})
		return
	}
	for _, ev := range f.history {
		if !sendNode(ev) {
			f.mu.Unlock()
			return
		}
	}
	ch := make(chan fakeEvent, 1024)
	f.watchers[ch] = struct{}{}
	ends := f.ends
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.watchers, ch)
		f.mu.Unlock()
	}()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ends:
			return
		case ev := <-ch:
			if !sendNode(ev) {
				return
			}
		}
	}
}

// fakeCodecs encodes what the fake server answers: core/v1 and meta/v1.
var fakeCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(err) // a test fixture: the scheme is static
	}
	return serializer.NewCodecFactory(scheme)
}()

// negotiated returns the serializer an Accept header picks, as the API
// server would: protobuf if the client names it first, else JSON.
func negotiated(accept string) runtime.SerializerInfo {
	mediaType := runtime.ContentTypeJSON
	if strings.HasPrefix(accept, runtime.ContentTypeProtobuf) {
		mediaType = runtime.ContentTypeProtobuf
	}
	info, _ := runtime.SerializerInfoForMediaType(fakeCodecs.SupportedMediaTypes(), mediaType)
	return info
}

// writeObject answers obj in the encoding accept asks for.
func writeObject(w http.ResponseWriter, accept string, code int, obj runtime.Object) {
	info := negotiated(accept)
	data, err := runtime.Encode(fakeCodecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", info.MediaType)
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

func writeStatus(w http.ResponseWriter, accept string, code int, reason metav1.StatusReason, msg string) {
	writeObject(w, accept, code, &metav1.Status{
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg,
	})
}
