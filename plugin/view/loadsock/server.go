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
	"strings"
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
	// DefaultMaxSockets is how many sockets a Server serves at once when
	// Config.MaxSockets does not say.
	DefaultMaxSockets = 64
	// readTimeout bounds reading the request.
	readTimeout = time.Second
	// replyTime is what a connection keeps of its Timeout (at most half of
	// it) to write the reply: the Handler's context ends that much before
	// the connection's deadline, so that a refusal for want of time (a
	// holder not recorded yet) still reaches the client.
	replyTime = 500 * time.Millisecond
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
// ctx ends a little before the connection's deadline (Config.Timeout), so
// that a Handler that gives up when it ends can still be answered.
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
	// MaxSockets returns how many sockets may be served at once; beyond
	// it the oldest allocations' sockets are closed (their directories
	// stay: a container may mount them) until fewer are open. It is called
	// at every Open and Sync, so that it may follow the configuration in
	// force; nil, or a result below 1, means DefaultMaxSockets.
	MaxSockets func() int
	// Now is the rate limiter's clock; nil means time.Now.
	Now func() time.Time
	// Logger gets one warning per refused request's cause and socket, and
	// errors creating or removing sockets; the zero Logger discards.
	Logger zerolog.Logger
}

// Allocation is an allocation with a load socket, as Sync lists it: its
// record's sequence number and device ids.
type Allocation struct {
	Seq     uint64
	Devices []string
}

// Server serves the load socket of every allocation that has one and is
// not over. Build it with NewServer; Open, Sync and Close are safe for
// concurrent use. Each socket is served by one goroutine, one connection
// at a time, until the socket is closed.
//
// An allocation is over once every one of its devices belongs to a newer
// allocation the Server knows (Open, or Sync's list): the kubelet
// allocates free devices only, so a device id (a replica id when shared)
// belongs to at most one live container, the newest. That holds whatever
// the lifecycle tracker knows (without the kubelet's PodResources API it
// never marks a record released). An allocation that is over has its
// socket closed and its socket file removed, its directory kept while
// Sync lists it (the kubelet may still start a container with the cached
// answer that mounts it). Beyond Config.MaxSockets, the oldest
// allocations' sockets are closed too (directories kept), so that open
// descriptors stay bounded whatever the input.
type Server struct {
	cfg Config
	log zerolog.Logger

	ctx    context.Context // ends at Close: ends the handlers' contexts
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	dirMade bool                // Dir exists with dirMode
	allocs  map[uint64][]string // the allocations known: Sync's list and those opened since, with their devices
	sockets map[uint64]*socket  // the served ones
	capped  bool                // the cap closed live sockets (logged once until it no longer does)
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
		ctx: ctx, cancel: cancel, allocs: map[uint64][]string{}, sockets: map[uint64]*socket{}}, nil
}

// HostDir returns the host directory of allocation seq's socket: what a
// container mounts at ContainerDir.
func (s *Server) HostDir(seq uint64) string { return hostDir(s.cfg.Dir, seq) }

// HostDir returns the host directory of allocation seq's socket under dir.
func HostDir(dir string, seq uint64) string { return hostDir(dir, seq) }

func hostDir(dir string, seq uint64) string {
	return filepath.Join(dir, strconv.FormatUint(seq, 10))
}

// Prepare makes allocation seq's directory exist (what the container
// mounts), without its socket. After Close it is an error.
func (s *Server) Prepare(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("load socket of allocation %d: server closed", seq)
	}
	return s.prepareLocked(seq)
}

// Open makes allocation seq, of devices, known, its directory and socket
// exist, and serves the socket; a socket already served is left as it is.
// A socket file left by an earlier run is replaced. The allocations that
// seq makes over have their sockets closed, and beyond MaxSockets the
// oldest are (seq too, if it is the oldest). An error says why seq's
// socket is not served; seq stays known, and the next Sync tries again.
// After Close it is an error.
func (s *Server) Open(seq uint64, devices []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("load socket of allocation %d: server closed", seq)
	}
	s.allocs[seq] = slices.Clone(devices)
	if !s.settleLocked()[seq] {
		return s.prepareLocked(seq) // over, or beyond the cap: the directory alone
	}
	return s.openLocked(seq)
}

// settleLocked closes the sockets of the known allocations that are over
// or beyond the cap, and returns those that may be served.
func (s *Server) settleLocked() map[uint64]bool {
	owner := make(map[string]uint64)
	for seq, devs := range s.allocs {
		for _, d := range devs {
			owner[d] = max(owner[d], seq)
		}
	}
	live := make([]uint64, 0, len(s.allocs))
	over := make(map[uint64]bool)
	for seq, devs := range s.allocs {
		if len(devs) > 0 && !slices.ContainsFunc(devs, func(d string) bool { return owner[d] == seq }) {
			over[seq] = true
			continue
		}
		live = append(live, seq)
	}
	slices.Sort(live)
	limit := DefaultMaxSockets
	if s.cfg.MaxSockets != nil {
		if n := s.cfg.MaxSockets(); n > 0 {
			limit = n
		}
	}
	var capped []uint64
	if len(live) > limit {
		capped, live = live[:len(live)-limit], live[len(live)-limit:]
	}
	serve := make(map[uint64]bool, len(live))
	for _, seq := range live {
		serve[seq] = true
	}
	for seq, sock := range s.sockets {
		if serve[seq] {
			continue
		}
		sock.lis.Close()
		delete(s.sockets, seq)
		if over[seq] { // nobody connects to it any more: say so by its absence
			_ = os.Remove(filepath.Join(s.HostDir(seq), SocketName))
		}
	}
	switch {
	case len(capped) > 0 && !s.capped:
		s.log.Warn().Int("live", len(live)+len(capped)).Int("max", limit).Uint64("oldest_served", live[0]).
			Msg("more allocations with a load socket than the cap: the oldest ones' sockets are closed (logged once until fewer)")
		s.capped = true
	case len(capped) == 0:
		s.capped = false
	}
	return serve
}

// prepareLocked makes Dir and allocation seq's directory exist with their
// modes. Dir is made again if it went since it was made.
func (s *Server) prepareLocked(seq uint64) error {
	dir := s.HostDir(seq)
	for again := true; ; again = false {
		if !s.dirMade {
			if err := os.MkdirAll(s.cfg.Dir, dirMode); err != nil {
				return fmt.Errorf("load socket of allocation %d: %w", seq, err)
			}
			if err := os.Chmod(s.cfg.Dir, dirMode); err != nil {
				return fmt.Errorf("load socket of allocation %d: %w", seq, err)
			}
			s.dirMade = true
		}
		err := os.Mkdir(dir, allocMode)
		if errors.Is(err, fs.ErrNotExist) && again { // Dir removed behind our back
			s.dirMade = false
			continue
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("load socket of allocation %d: %w", seq, err)
		}
		break
	}
	if err := os.Chmod(dir, allocMode); err != nil { // umask, or an earlier run's mode
		return fmt.Errorf("load socket of allocation %d: %w", seq, err)
	}
	return nil
}

// openLocked makes allocation seq's directory and socket exist and serves
// the socket, unless it is served already.
func (s *Server) openLocked(seq uint64) error {
	if _, ok := s.sockets[seq]; ok {
		return nil
	}
	if err := s.prepareLocked(seq); err != nil {
		return err
	}
	path := filepath.Join(s.HostDir(seq), SocketName)
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

// Sync makes the known allocations those list returns (it calls list with
// the Server's lock held, so that an Open racing with it is never undone),
// serves the sockets of those that are neither over nor beyond the cap
// (opening the missing ones), closes the others', and removes every
// numbered directory under Dir that is not a listed allocation's. It
// returns the errors joined; what could be done is.
func (s *Server) Sync(list func() ([]Allocation, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("load sockets: server closed")
	}
	active, err := list()
	if err != nil {
		return fmt.Errorf("load sockets: %w", err)
	}
	clear(s.allocs)
	for _, a := range active {
		s.allocs[a.Seq] = slices.Clone(a.Devices)
	}
	serve := s.settleLocked()
	var errs []error
	for _, a := range active { // in the list's order, the errors too
		if serve[a.Seq] {
			if err := s.openLocked(a.Seq); err != nil {
				errs = append(errs, err)
			}
		}
	}
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errors.Join(append(errs, fmt.Errorf("load sockets: %w", err))...)
	}
	for _, e := range entries {
		seq, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || strconv.FormatUint(seq, 10) != e.Name() {
			continue // not ours
		}
		if _, ok := s.allocs[seq]; ok {
			continue // kept
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
// error is logged when its causes (ErrorCause) differ from the last one's.
func (s *Server) Run(ctx context.Context, interval time.Duration, list func() ([]Allocation, error)) error {
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
		case err != nil && ErrorCause(err) != last:
			s.log.Error().Err(err).Msg("load sockets not all in step with the active allocations; retrying (logged again when the cause changes)")
			last = ErrorCause(err)
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
	clear(s.allocs)
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
	// The reply gets its own time, whatever the handler took of the
	// connection's: every request is answered, a refusal with its cause.
	_ = conn.SetWriteDeadline(time.Now().Add(s.replyTime()))
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
	ctx, cancel := context.WithDeadline(s.ctx, start.Add(s.cfg.Timeout-s.replyTime()))
	defer cancel()
	return s.cfg.Handler.SetLoad(ctx, sock.seq, req)
}

// replyTime is what a connection keeps of its Timeout to write the reply.
func (s *Server) replyTime() time.Duration { return min(replyTime, s.cfg.Timeout/2) }

// ErrorCause returns what an error of Open or Sync is about without the
// allocations it names: the innermost error of each joined one (such as
// "too many open files"), unique, sorted, joined with "; ". Two errors of
// the same causes give the same string, so that they are logged once.
func ErrorCause(err error) string {
	var causes []string
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		for {
			next := errors.Unwrap(err)
			if next == nil {
				break
			}
			err = next
		}
		causes = append(causes, err.Error())
	}
	if err != nil {
		walk(err)
	}
	slices.Sort(causes)
	return strings.Join(slices.Compact(causes), "; ")
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
