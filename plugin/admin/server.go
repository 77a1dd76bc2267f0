package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Server serves the admin API on a unix socket. Build it with NewServer and
// call Run once; it is safe for concurrent use.
type Server struct {
	socket string
	source Source
	health HealthFunc
	log    zerolog.Logger
}

// NewServer returns a Server for socket (an absolute path) reading from
// source and changing health through health.
func NewServer(socket string, source Source, health HealthFunc, log zerolog.Logger) *Server {
	return &Server{socket: socket, source: source, health: health, log: log}
}

// Handler is the HTTP API, without the socket.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/devices", s.devices)
	mux.HandleFunc("GET /v1/allocations", s.allocations)
	mux.HandleFunc("GET /v1/events", s.events)
	mux.HandleFunc("PUT /v1/devices/{id}/health", s.setHealth)
	return mux
}

// Run listens on the socket (replacing a stale socket, refusing any other
// file), restricts it to its owner (0600), serves until ctx ends, and
// removes the socket.
func (s *Server) Run(ctx context.Context) error {
	if fi, err := os.Lstat(s.socket); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return fmt.Errorf("admin socket %s: exists and is not a unix socket", s.socket)
		}
		if err := os.Remove(s.socket); err != nil {
			return fmt.Errorf("admin socket: remove stale %s: %w", s.socket, err)
		}
	}
	lis, err := net.Listen("unix", s.socket)
	if err != nil {
		return fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(s.socket, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("admin socket: %w", err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	s.log.Info().Str("socket", s.socket).Msg("admin API listening")
	select {
	case err := <-errc:
		return fmt.Errorf("admin socket %s: %w", s.socket, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx) // closes the listener, which removes the socket
	<-errc
	return nil
}

func (s *Server) devices(w http.ResponseWriter, _ *http.Request) {
	devs, err := s.source.Devices()
	reply(w, devs, err)
}

func (s *Server) allocations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f store.AllocationFilter
	var err error
	f.DeviceID = q.Get("device")
	if f.Since, err = parseSince(q.Get("since")); err == nil {
		if f.Limit, err = parseLimit(q.Get("limit")); err == nil {
			f.Active, err = parseBool("active", q.Get("active"))
		}
	}
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	allocs, err := s.source.Allocations(f)
	reply(w, allocs, err)
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f store.EventFilter
	var err error
	f.DeviceID = q.Get("device")
	if f.Since, err = parseSince(q.Get("since")); err == nil {
		f.Limit, err = parseLimit(q.Get("limit"))
	}
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	events, err := s.source.HealthEvents(f)
	reply(w, events, err)
}

func (s *Server) setHealth(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req healthRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("health request: %w", err))
		return
	}
	if req.Healthy == nil {
		fail(w, http.StatusBadRequest, errors.New(`health request: "healthy" is required`))
		return
	}
	if err := s.health(id, *req.Healthy, req.Reason); err != nil {
		if errors.Is(err, store.ErrUnknownDevice) {
			fail(w, http.StatusNotFound, fmt.Errorf("unknown device %q", id))
			return
		}
		s.log.Error().Err(err).Str("device", id).Msg("admin health change failed")
		fail(w, http.StatusInternalServerError, err)
		return
	}
	devs, err := s.source.Devices()
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	for _, d := range devs {
		if d.ID == id {
			reply(w, d, nil)
			return
		}
	}
	fail(w, http.StatusNotFound, fmt.Errorf("unknown device %q", id))
}

func parseSince(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("since %q: want an RFC 3339 time", v)
	}
	return t, nil
}

func parseLimit(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("limit %q: want a non-negative integer", v)
	}
	return n, nil
}

func parseBool(name, v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s %q: want true or false", name, v)
	}
	return b, nil
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v) // the client sees a short body
}

func fail(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorBody{Error: err.Error()})
}
