package loadsock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/time/rate"
)

// Defaults of Config.
const (
	// DefaultRate is how many requests a second one socket takes.
	DefaultRate = 5
	// DefaultBurst is how many requests one socket takes at once.
	DefaultBurst = 10
	// DefaultTimeout bounds one connection: reading the request, handling
	// it, writing the reply.
	DefaultTimeout = 5 * time.Second
	// readTimeout bounds reading the request.
	readTimeout = time.Second
)

// File modes: the parent directory is the plugin's; an allocation's
// directory is the container's mount root, searchable by any user; the
// socket is connectable by any user (connecting needs write permission).
const (
	dirMode    fs.FileMode = 0o700
	allocMode  fs.FileMode = 0o755
	socketMode fs.FileMode = 0o666
)

// Handler applies a request of allocation seq and returns how many GPUs it
// applied to. A refused request returns a *Refusal (other errors are
// answered as CauseFailed). ctx ends when the connection's time is up. It
// must be safe for concurrent use.
type Handler interface {
	SetLoad(ctx context.Context, seq uint64, req Request) (int, error)
}

// HandlerFunc is a function as a Handler.
type HandlerFunc func(ctx context.Context, seq uint64, req Request) (int, error)

// SetLoad calls f.
func (f HandlerFunc) SetLoad(ctx context.Context, seq uint64, req Request) (int, error) {
	return f(ctx, seq, req)
}

var _ Handler = HandlerFunc(nil)

// Config configures a Server. Dir and Handler are required.
type Config struct {
	// Dir holds a directory per allocation with its socket: <Dir>/<seq>/
	// load.sock. Created (0700) when the first socket is. The longest
	// socket path must fit a unix socket (options checks it).
	Dir string
	// Handler applies the requests that parse.
	Handler Handler
	// Rate and Burst bound the requests of one socket (token bucket);
	// 0 means DefaultRate and DefaultBurst.
	Rate  float64
	Burst int
	// Timeout bounds one connection (default DefaultTimeout).
	Timeout time.Duration
	// Now is the rate limiter's clock; nil means time.Now.
	Now func() time.Time
	// Logger gets one warning per refused request's cause and socket, and
	// errors creating or removing sockets; the zero Logger discards.
	Logger zerolog.Logger
}

// Server serves the load socket of every allocation that has one. Build it
// with NewServer; Open, Sync and Close are safe for concurrent use. Each
// socket is served by one goroutine, one connection at a time, until Close.
type Server struct {
	cfg Config
	log zerolog.Logger

	ctx    context.Context // ends at Close: ends the handlers' contexts
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	dirMade bool // Dir exists with dirMode
	sockets map[uint64]*socket
}

// socket is one allocation's listener and what it refused.
type socket struct {
	seq     uint64
	lis     net.Listener
	limiter *rate.Limiter
	logged  map[string]bool // causes logged; the serving goroutine's own
}

// NewServer checks cfg and returns a Server with no socket.
func NewServer(cfg Config) (*Server, error) {
	switch {
	case cfg.Dir == "" || !filepath.IsAbs(cfg.Dir):
		return nil, fmt.Errorf("load sockets: directory %q must be an absolute path", cfg.Dir)
	case cfg.Handler == nil:
		return nil, errors.New("load sockets: no handler")
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, log: cfg.Logger.With().Str("component", "load-sockets").Logger(),
		ctx: ctx, cancel: cancel, sockets: map[uint64]*socket{}}, nil
}

// HostDir returns the host directory of allocation seq's socket: what a
// container mounts at ContainerDir.
func (s *Server) HostDir(seq uint64) string { return hostDir(s.cfg.Dir, seq) }

// HostDir returns the host directory of allocation seq's socket under dir.
func HostDir(dir string, seq uint64) string { return hostDir(dir, seq) }

func hostDir(dir string, seq uint64) string {
	return filepath.Join(dir, strconv.FormatUint(seq, 10))
}

// Open makes allocation seq's socket exist and serves it; a socket already
// served is left as it is. A socket file left by an earlier run is
// replaced. After Close it is an error.
func (s *Server) Open(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.openLocked(seq)
}

func (s *Server) openLocked(seq uint64) error {
	if s.closed {
		return fmt.Errorf("load socket of allocation %d: server closed", seq)
	}
	if _, ok := s.sockets[seq]; ok {
		return nil
	}
	if !s.dirMade {
		if err := os.MkdirAll(s.cfg.Dir, dirMode); err != nil {
			return fmt.Errorf("load socket of allocation %d: %w", seq, err)
		}
		if err := os.Chmod(s.cfg.Dir, dirMode); err != nil {
			return fmt.Errorf("load socket of allocation %d: %w", seq, err)
		}
		s.dirMade = true
	}
	dir := s.HostDir(seq)
	if err := os.Mkdir(dir, allocMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("load socket of allocation %d: %w", seq, err)
	}
	if err := os.Chmod(dir, allocMode); err != nil { // umask, or an earlier run's mode
		return fmt.Errorf("load socket of allocation %d: %w", seq, err)
	}
	path := filepath.Join(dir, SocketName)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("load socket of allocation %d: remove the earlier socket: %w", seq, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("load socket of allocation %d: %w", seq, err)
	}
	if ul, ok := lis.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false) // Close keeps the file: the kubelet may start the container again meanwhile
	}
	if err := os.Chmod(path, socketMode); err != nil {
		lis.Close()
		return fmt.Errorf("load socket of allocation %d: %w", seq, err)
	}
	sock := &socket{seq: seq, lis: lis, logged: map[string]bool{},
		limiter: rate.NewLimiter(rate.Limit(s.cfg.Rate), s.cfg.Burst)}
	s.sockets[seq] = sock
	s.wg.Go(func() { s.serve(sock) })
	return nil
}

// Sync makes the sockets those of the allocations list returns (it calls
// list with the Server's lock held, so that an Open racing with it is never
// undone): it opens the missing ones, and stops and removes (with their
// directories) the sockets of every other allocation, and any other
// numbered directory under Dir. It returns the errors joined; what could be
// done is.
func (s *Server) Sync(list func() ([]uint64, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("load sockets: server closed")
	}
	active, err := list()
	if err != nil {
		return fmt.Errorf("load sockets: %w", err)
	}
	keep := make(map[uint64]bool, len(active))
	var errs []error
	for _, seq := range active {
		keep[seq] = true
		if err := s.openLocked(seq); err != nil {
			errs = append(errs, err)
		}
	}
	for seq, sock := range s.sockets {
		if keep[seq] {
			continue
		}
		sock.lis.Close()
		delete(s.sockets, seq)
	}
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errors.Join(append(errs, fmt.Errorf("load sockets: %w", err))...)
	}
	for _, e := range entries {
		seq, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || keep[seq] || strconv.FormatUint(seq, 10) != e.Name() {
			continue // not ours, or kept
		}
		if err := os.RemoveAll(filepath.Join(s.cfg.Dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("load socket of allocation %d: remove: %w", seq, err))
		}
	}
	return errors.Join(errs...)
}

// Served reports the allocations whose sockets are served, ascending.
func (s *Server) Served() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint64, 0, len(s.sockets))
	for seq := range s.sockets {
		out = append(out, seq)
	}
	slices.Sort(out)
	return out
}

// Run calls Sync(list) every interval until ctx ends, then Close. A Sync
// error is logged when it differs from the last one.
func (s *Server) Run(ctx context.Context, interval time.Duration, list func() ([]uint64, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			s.Close()
			return nil
		case <-t.C:
		}
		err := s.Sync(list)
		switch {
		case err != nil && err.Error() != last:
			s.log.Error().Err(err).Msg("load sockets not all in step with the active allocations; retrying")
			last = err.Error()
		case err == nil:
			last = ""
		}
	}
}

// Close stops serving every socket and waits for the serving goroutines.
// It keeps the socket files and directories: the kubelet may start a
// container again with its cached answer while the plugin is down, and the
// next start serves them again. Close is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for seq, sock := range s.sockets {
		sock.lis.Close()
		delete(s.sockets, seq)
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// serve accepts sock's connections, one at a time, until its listener is
// closed.
func (s *Server) serve(sock *socket) {
	for {
		conn, err := sock.lis.Accept()
		if err != nil {
			return // closed (Sync or Close); a unix listener has no temporary errors worth a retry
		}
		s.handle(sock, conn)
	}
}

// handle answers one connection.
func (s *Server) handle(sock *socket, conn net.Conn) {
	defer conn.Close()
	start := time.Now()
	_ = conn.SetDeadline(start.Add(s.cfg.Timeout))
	n, err := s.answer(sock, conn, start)
	if err != nil {
		s.refused(sock, err)
	}
	_, _ = io.WriteString(conn, reply(n, err)) // a client gone: nothing to do
}

// answer reads and applies one request.
func (s *Server) answer(sock *socket, conn net.Conn, start time.Time) (int, error) {
	_ = conn.SetReadDeadline(start.Add(min(readTimeout, s.cfg.Timeout)))
	line, err := readLine(conn)
	if !sock.limiter.AllowN(s.cfg.Now(), 1) { // every request counts, bad ones too
		return 0, Refusef(CauseRate, "more than %g requests a second (bursts of %d)", s.cfg.Rate, s.cfg.Burst)
	}
	if err != nil {
		return 0, err
	}
	req, err := ParseRequest(line)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithDeadline(s.ctx, start.Add(s.cfg.Timeout))
	defer cancel()
	return s.cfg.Handler.SetLoad(ctx, sock.seq, req)
}

// readLine reads one request line of at most MaxRequestBytes bytes: up to
// and including "\n", or to the end of the stream.
func readLine(conn net.Conn) (string, error) {
	r := bufio.NewReaderSize(io.LimitReader(conn, MaxRequestBytes+1), MaxRequestBytes+1)
	line, err := r.ReadString('\n')
	switch {
	case len(line) > MaxRequestBytes:
		return "", Refusef(CauseTooLong, "request longer than %d bytes", MaxRequestBytes)
	case err == nil, errors.Is(err, io.EOF) && line != "":
		return line, nil
	case errors.Is(err, io.EOF):
		return "", Refusef(CauseSyntax, "no request")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "", Refusef(CauseSyntax, "no complete request line within %s", readTimeout)
	}
	return "", Refusef(CauseFailed, "read request: %w", err)
}

// refused logs a refused request, once per cause and socket.
func (s *Server) refused(sock *socket, err error) {
	cause := CauseFailed
	var r *Refusal
	if errors.As(err, &r) {
		cause = r.Cause
	}
	if sock.logged[cause] {
		return
	}
	sock.logged[cause] = true
	s.log.Warn().Err(err).Uint64("seq", sock.seq).Str("cause", cause).
		Msg("load request of a container refused (logged once per cause and allocation)")
}
