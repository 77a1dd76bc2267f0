package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/unixsock"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Socket is the absolute path of the unix socket to listen on; needed
	// by Listen and Run, not by Handler.
	Socket string
	// Source is read for every answer: the plugin's open store. Required
	// unless Handler is set.
	Source Source
	// Handler, when set, is served instead of this package's API (the
	// simulator's, which serves a node's API per simulated node).
	Handler http.Handler
	// Health changes a device's health in the running plugin. Required for
	// PUT /v1/devices/{id}/health.
	Health HealthFunc
	// Reported returns the devices as the kubelet was last told them; only
	// their NUMA nodes are used. Nil: the reported NUMA nodes are unknown.
	Reported func() []gpuset.Device
	// ProbeTimeout bounds Listen's connect to an existing socket (default
	// unixsock.DefaultProbeTimeout; see unixsock.Claim).
	ProbeTimeout time.Duration
	// Logger logs the server's start and what it handles itself; the zero
	// value discards.
	Logger zerolog.Logger
}

// Server serves the admin API on a unix socket. Build it with NewServer,
// optionally Listen (to fail before starting anything else), then Run once.
// It is safe for concurrent use.
type Server struct {
	cfg ServerConfig
	log zerolog.Logger

	// reading is held while a snapshot is read: one at a time, so a
	// burst of requests costs the plugin the memory of one snapshot.
	reading chan struct{}

	mu     sync.Mutex
	lis    net.Listener
	ours   fs.FileInfo // the socket file Listen created
	closed bool
}

// NewServer returns a Server for cfg. It does nothing yet.
func NewServer(cfg ServerConfig) *Server {
	return &Server{cfg: cfg, log: cfg.Logger, reading: make(chan struct{}, 1)} // a zero Logger discards
}

// readBack bounds how long a health change waits to read its device back
// behind a snapshot being read; past it, the answer says what is known.
const readBack = 500 * time.Millisecond

// startReading waits until no other snapshot is being read, or ctx ends
// (the client is gone, or wait is over: ok false). The caller must call
// done when ok.
func (s *Server) startReading(ctx context.Context, wait time.Duration) (done func(), ok bool) {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	select {
	case s.reading <- struct{}{}:
	case <-ctx.Done():
		return nil, false
	}
	if ctx.Err() != nil { // gone while it waited: read nothing for nobody
		<-s.reading
		return nil, false
	}
	return func() { <-s.reading }, true
}

// Handler is the HTTP API, without the socket.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/snapshot", s.snapshot)
	mux.HandleFunc("PUT /v1/devices/{id}/health", s.setHealth)
	// Every answer is JSON, the mux's own 404 and 405 too.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The mux redirects a path with an empty, . or .. segment
		// (PUT /v1/devices//health) to its cleaned form: no route of the
		// API has such a path, and a redirect is no answer to a PUT.
		if p := r.URL.EscapedPath(); cleanPath(p) != p { // as the mux compares them
			fail(w, http.StatusNotFound, fmt.Errorf("%s %s: not found: the path has an empty, . or .. segment", r.Method, topology.Clip(r.URL.Path)))
			return
		}
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // routes again, setting the path values
			return
		}
		// The mux's answer (404, or 405 with Allow), in our format.
		probe := &statusProbe{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(probe, r)
		if probe.code >= 300 && probe.code < 400 { // any other redirect: no such route either
			probe.code = http.StatusNotFound
		}
		if allow := probe.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		fail(w, probe.code, fmt.Errorf("%s %s: %s", r.Method, topology.Clip(r.URL.Path), strings.ToLower(http.StatusText(probe.code))))
	})
}

// cleanPath is p as http.ServeMux cleans it before routing: rooted,
// without empty, . or .. segments, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// statusProbe records the status and headers a handler answers with and
// discards the body.
type statusProbe struct {
	header http.Header
	code   int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.code = code }

// Listen claims the socket path with unixsock.Claim — a stale socket
// (nobody listens) is replaced; a socket any process listens on, answering
// or not (another plugin, the kubelet, any program), is left alone and is
// an error wrapping unixsock.ErrInUse; any other file is an error wrapping
// unixsock.ErrNotSocket — then listens and restricts the socket to its owner
// (0600). Calling it again is a no-op. After Listen the caller must Run or
// Close.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fmt.Errorf("admin API on %s: %w", s.cfg.Socket, net.ErrClosed)
	case s.lis != nil:
		return nil
	case s.cfg.Socket == "":
		return errors.New("admin API: no socket path")
	}
	if err := unixsock.Claim(s.cfg.Socket, s.cfg.ProbeTimeout); err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	lis, err := net.Listen("unix", s.cfg.Socket)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	// Close must not unlink the path blindly: by then it may be another
	// process's socket. Close removes it only if it is still ours.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	fi, err := os.Lstat(s.cfg.Socket)
	if err == nil {
		err = os.Chmod(s.cfg.Socket, 0o600)
	}
	if err != nil {
		_ = lis.Close()
		_ = os.Remove(s.cfg.Socket) // just created by this process
		return fmt.Errorf("admin API: socket %s: %w", s.cfg.Socket, err)
	}
	s.lis, s.ours = lis, fi
	return nil
}

// Run listens (if Listen was not called), serves until ctx ends or Close
// is called, and then closes: it removes the socket only if the file at
// the path is still the one it created.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	lis := s.lis
	s.mu.Unlock()
	h := s.cfg.Handler
	if h == nil {
		h = s.Handler()
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	s.log.Info().Str("socket", s.cfg.Socket).Msg("admin API listening")
	select {
	case err := <-errc:
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil
		}
		if cerr := s.Close(); cerr != nil {
			return fmt.Errorf("admin API on %s: %w; %w", s.cfg.Socket, err, cerr)
		}
		return fmt.Errorf("admin API on %s: %w", s.cfg.Socket, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx) // a request still running after 1 s is cut off
	<-errc
	return s.Close()
}

// Close stops listening and removes the socket if the file at its path is
// still the one Listen created. It is safe to call more than once and
// while Run serves (Run then returns nil).
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.lis == nil {
		return nil
	}
	_ = s.lis.Close() // already closed when Run shut the server down
	cur, err := os.Lstat(s.cfg.Socket)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("admin API: socket %s: %w", s.cfg.Socket, err)
	case !os.SameFile(s.ours, cur):
		return nil // replaced by someone else meanwhile: theirs now
	}
	if err := os.Remove(s.cfg.Socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("admin API: remove socket: %w", err)
	}
	return nil
}

// reported maps device ids to the NUMA node the kubelet was told; nil when
// unknown.
func (s *Server) reported() map[string]int {
	if s.cfg.Reported == nil {
		return nil
	}
	devs := s.cfg.Reported()
	m := make(map[string]int, len(devs))
	for _, d := range devs {
		m[d.ID] = d.NUMA
	}
	return m
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r.URL.Query())
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	done, ok := s.startReading(r.Context(), 0)
	if !ok {
		return // the client is gone
	}
	snap, err := Read(s.cfg.Source, q, s.reported())
	done()
	if r.Context().Err() != nil {
		return // gone while it was read: do not encode it for nobody
	}
	switch {
	case errors.Is(err, store.ErrUnknownDevice):
		fail(w, http.StatusNotFound, err)
		return
	case err != nil:
		fail(w, http.StatusInternalServerError, err)
		return
	}
	snap.Source = SourceInfo{Type: SourcePlugin, Path: s.cfg.Socket}
	reply(w, snap)
}

func (s *Server) setHealth(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	req, err := decodeHealthRequest(w, r)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	devs, err := s.cfg.Source.Devices()
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	i := slices.IndexFunc(devs, func(d store.Device) bool { return d.ID == id })
	switch {
	case i < 0:
		fail(w, http.StatusNotFound, unknownDevice(id, gpuIDs(devs)))
		return
	case devs[i].Removed:
		fail(w, http.StatusNotFound, fmt.Errorf("%w %q: removed from the configuration (devices: %s)",
			store.ErrUnknownDevice, topology.Clip(id), ShortList(gpuIDs(devs))))
		return
	case devs[i].IsReplica():
		fail(w, http.StatusBadRequest, fmt.Errorf("%s is replica %d of %s: health is per GPU; set %s (all its replicas follow)",
			topology.Clip(id), devs[i].Replica, devs[i].GPU, devs[i].GPU))
		return
	}
	if err := s.cfg.Health(id, *req.Healthy, req.Reason); err != nil {
		if errors.Is(err, store.ErrUnknownDevice) {
			fail(w, http.StatusNotFound, unknownDevice(id, gpuIDs(devs)))
			return
		}
		fail(w, http.StatusInternalServerError, err)
		return
	}
	// The change is made: from here on the answer is a success.
	reported := s.reported()
	snap := Snapshot{APIVersion: APIVersion, Kind: KindSnapshot, Source: SourceInfo{Type: SourcePlugin, Path: s.cfg.Socket}}
	var full Snapshot
	done, ok := s.startReading(r.Context(), readBack)
	if ok {
		full, err = Read(s.cfg.Source, Query{DevicesOnly: true}, reported)
		done()
	} else {
		err = errors.New("a snapshot is being read")
	}
	if j := slices.IndexFunc(full.Devices, func(d Device) bool { return d.ID == id }); err == nil && j >= 0 {
		snap.Devices = []Device{full.Devices[j]}
	} else {
		s.log.Warn().Err(err).Str("device", id).Msg("health changed, but reading the device back failed; answering with what is known")
		d := deviceOf(devs[i], nil, reported)
		d.Healthy, d.Reason, d.Since = *req.Healthy, req.Reason, time.Time{}
		snap.Devices = []Device{d}
	}
	reply(w, snap)
}

// MaxReason bounds a health reason, in bytes: the status files containers
// read hold at most this much.
const MaxReason = 1024

// maxBody bounds a request body.
const maxBody = 64 << 10

// decodeHealthRequest reads exactly one JSON object with known fields,
// each once.
func decodeHealthRequest(w http.ResponseWriter, r *http.Request) (healthRequest, error) {
	var req healthRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return req, fmt.Errorf("health request: %w", err)
	}
	if err := uniqueKeys(body); err != nil {
		return req, fmt.Errorf("health request: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("health request: %w", err)
	}
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		return req, errors.New("health request: unexpected data after the JSON object")
	}
	switch {
	case req.Healthy == nil:
		return req, errors.New(`health request: "healthy" is required`)
	case *req.Healthy && req.Reason != "":
		return req, errors.New(`health request: "reason" is only for "healthy": false`)
	case len(req.Reason) > MaxReason:
		return req, fmt.Errorf(`health request: "reason" is %d bytes: at most %d`, len(req.Reason), MaxReason)
	}
	return req, nil
}

// uniqueKeys refuses a JSON text with an object that has a key twice,
// which encoding/json would read as the last value. Keys are compared as
// encoding/json matches them to a struct's fields: without regard to case.
// A text that is not valid JSON passes: its decoding says what is wrong.
func uniqueKeys(data []byte) error {
	type object struct {
		keys    map[string]string // folded key: the key as written first
		wantKey bool              // the next string is a key
	}
	var stack []*object // nil entries: arrays
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF, or a syntax error Decode reports
		}
		var top *object
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &object{keys: map[string]string{}, wantKey: true})
				continue
			case '[':
				stack = append(stack, nil)
				continue
			}
			stack = stack[:len(stack)-1] // } or ]: a value of the enclosing object ends
			if len(stack) > 0 {
				top = stack[len(stack)-1]
			} else {
				top = nil
			}
		case string:
			if top != nil && top.wantKey {
				folded := foldKey(t)
				if first, dup := top.keys[folded]; dup {
					if first == t {
						return fmt.Errorf("duplicate key %q", topology.Clip(t))
					}
					return fmt.Errorf("duplicate key %q: the same as %q (keys are matched without regard to case)", topology.Clip(t), topology.Clip(first))
				}
				top.keys[folded] = t
				top.wantKey = false
				continue
			}
		}
		if top != nil {
			top.wantKey = true // a value ended: a key or the end is next
		}
	}
}

// foldKey folds a key as encoding/json does to match it to a field name.
func foldKey(k string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, k)
}

// queryParams are the parameters GET /v1/snapshot takes.
var queryParams = []string{"device", "since", "limit", "active", "devicesOnly"}

// parseQuery reads the parameters of GET /v1/snapshot: each known, given
// at most once, and not empty (an empty device is not every device: the
// parameter left out is).
func parseQuery(v url.Values) (Query, error) {
	var q Query
	for _, k := range slices.Sorted(maps.Keys(v)) {
		switch {
		case !slices.Contains(queryParams, k):
			return q, fmt.Errorf("unknown parameter %q (parameters: %s)", topology.Clip(k), ShortList(queryParams))
		case len(v[k]) > 1:
			return q, fmt.Errorf("parameter %s given %d times: give it once", k, len(v[k]))
		case v[k][0] == "":
			return q, fmt.Errorf("parameter %s is empty: give a value, or leave %s out", k, k)
		}
	}
	var err error
	q.DeviceID = v.Get("device")
	if q.Since, err = parseSince(v.Get("since")); err != nil {
		return q, err
	}
	if q.Limit, err = parseLimit(v.Get("limit")); err != nil {
		return q, err
	}
	if q.Active, err = parseBool("active", v.Get("active")); err != nil {
		return q, err
	}
	q.DevicesOnly, err = parseBool("devicesOnly", v.Get("devicesOnly"))
	return q, err
}

func parseSince(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("since %q: want an RFC 3339 time", topology.Clip(v))
	}
	return t, nil
}

func parseLimit(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("limit %q: want a non-negative integer", topology.Clip(v))
	}
	return n, nil
}

func parseBool(name, v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s %q: want true or false", name, topology.Clip(v))
	}
	return b, nil
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v) // a failed write: the client sees a short body
}

func fail(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorBody{Error: err.Error()})
}
