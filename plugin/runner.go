package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/atomicfile"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/unixsock"
)

// KubeletSocketName is the kubelet's registration socket, in the
// device-plugin directory.
const KubeletSocketName = "kubelet.sock"

// Defaults of RunnerConfig.
const (
	DefaultRegisterTimeout = 10 * time.Second
	DefaultPollInterval    = 2 * time.Second
	DefaultBackoffInitial  = 100 * time.Millisecond
	DefaultBackoffMax      = 10 * time.Second
	// stableRegistration is how long a registration must last for the
	// next re-registration to start without backoff.
	stableRegistration = time.Minute
)

// DevicePlugin is what a Runner serves: the device plugin RPCs. *Server
// implements it. The Runner never closes it: it belongs to the Runner's
// owner, which may serve it through several Runners one after another.
type DevicePlugin interface {
	pluginapi.DevicePluginServer
}

// RunnerConfig configures a Runner. Dir, SocketName, ResourceName and
// Server are required; zero durations take the defaults above.
type RunnerConfig struct {
	// Dir is the kubelet's device-plugin directory, holding kubelet.sock
	// and the plugin's socket. Absolute.
	Dir string
	// SocketName is the plugin's socket file name inside Dir.
	SocketName string
	// ResourceName is registered with the kubelet, e.g. unicore.mcyou.cc/gpu.
	ResourceName string
	// Server answers the RPCs; the Runner serves it again after each
	// kubelet restart. It is the caller's: Run does not close it.
	Server DevicePlugin
	// RegisterTimeout bounds one Register call (default 10 s).
	RegisterTimeout time.Duration
	// PollInterval is the fallback check of both sockets, in case a
	// directory event is missed (default 2 s).
	PollInterval time.Duration
	// BackoffInitial and BackoffMax bound the exponential backoff between
	// Register attempts (defaults 100 ms and 10 s).
	BackoffInitial, BackoffMax time.Duration
	// Logger receives one line per registration, per failure and per
	// refused or failed RPC (at warn, with the fields rpc, code and
	// reason); the zero Logger discards.
	Logger zerolog.Logger
}

// Runner keeps a DevicePlugin served on its socket and registered with the
// kubelet under one resource name. Build it with NewRunner; call Run once.
// To register under another resource name, end this Runner's Run and run a
// new Runner on the same DevicePlugin (see Run). Its methods are safe for
// concurrent use.
type Runner struct {
	cfg         RunnerConfig
	socketPath  string
	kubeletSock string
	log         zerolog.Logger

	registered    atomic.Bool
	registrations atomic.Uint64
}

// NewRunner checks cfg and returns a Runner.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	switch {
	case cfg.Server == nil:
		return nil, errors.New("new runner: no server")
	case !filepath.IsAbs(cfg.Dir):
		return nil, fmt.Errorf("new runner: device-plugin dir %q is not absolute", cfg.Dir)
	case cfg.SocketName == "" || cfg.SocketName != filepath.Base(cfg.SocketName) || cfg.SocketName == KubeletSocketName:
		return nil, fmt.Errorf("new runner: socket name %q must be a plain file name other than %s", cfg.SocketName, KubeletSocketName)
	case cfg.ResourceName == "":
		return nil, errors.New("new runner: no resource name")
	}
	if cfg.RegisterTimeout <= 0 {
		cfg.RegisterTimeout = DefaultRegisterTimeout
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.BackoffInitial <= 0 {
		cfg.BackoffInitial = DefaultBackoffInitial
	}
	if cfg.BackoffMax < cfg.BackoffInitial {
		cfg.BackoffMax = max(DefaultBackoffMax, cfg.BackoffInitial)
	}
	return &Runner{
		cfg:         cfg,
		socketPath:  filepath.Join(cfg.Dir, cfg.SocketName),
		kubeletSock: filepath.Join(cfg.Dir, KubeletSocketName),
		log:         cfg.Logger.With().Str("resource", cfg.ResourceName).Logger(),
	}, nil
}

// ResourceName is the resource name the Runner registers.
func (r *Runner) ResourceName() string { return r.cfg.ResourceName }

// SocketPath is the plugin's socket.
func (r *Runner) SocketPath() string { return r.socketPath }

// Registered reports whether the plugin is registered with a live kubelet
// right now, as far as the Runner knows.
func (r *Runner) Registered() bool { return r.registered.Load() }

// Registrations counts the successful Register calls of Run so far: the
// first and every re-registration.
func (r *Runner) Registrations() uint64 { return r.registrations.Load() }

// Run serves and registers until ctx ends, then stops its gRPC server
// (which ends its ListAndWatch streams: the kubelet marks the resource's
// devices unhealthy), removes its socket and returns nil. It does not close
// the DevicePlugin. It returns an error only for what retrying cannot fix:
// the socket path is taken by something that is not a socket
// (unixsock.ErrNotSocket) or by a socket another process listens on (unixsock.ErrInUse:
// a second plugin on the same path, which Run never removes), or the
// directory cannot be watched. A failure to serve (the kubelet removing the
// socket mid-start, a failed listen) is logged and retried with backoff.
//
// To change the resource name, cancel ctx, wait for Run to return (the
// socket is then gone), and Run a new Runner with the new name, on the same
// socket name and DevicePlugin if you like. The kubelet keys plugins by
// resource name, so the old name's ended stream cannot disconnect the new
// registration; should the kubelet drop it anyway, the new Runner
// registers again.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.waitForDir(ctx); err != nil || ctx.Err() != nil {
		if err == nil {
			r.log.Info().Str("dir", r.cfg.Dir).Msg("stopped before registering with the kubelet: the device-plugin directory does not exist")
		}
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", r.cfg.Dir, err)
	}
	defer w.Close()
	if err := w.Add(r.cfg.Dir); err != nil {
		return fmt.Errorf("watch %s: %w", r.cfg.Dir, err)
	}
	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()

	delay := time.Duration(0)
	serveBackoff := r.cfg.BackoffInitial
	for {
		g, err := r.serve()
		switch {
		case errors.Is(err, unixsock.ErrNotSocket):
			return err
		case errors.Is(err, unixsock.ErrInUse):
			return fmt.Errorf("%w; stop that process, or give this plugin another socket name", err)
		case err != nil:
			// A starting kubelet deletes every socket in the directory,
			// ours too, possibly between listen and the self-check.
			r.log.Warn().Err(err).Dur("retry_in", serveBackoff).Msg("serving the device plugin failed")
			select {
			case <-ctx.Done():
				r.log.Info().Str("socket", r.socketPath).Msg("stopped before registering with the kubelet: serving the device plugin failed")
				return nil
			case <-time.After(serveBackoff):
			}
			serveBackoff = min(2*serveBackoff, r.cfg.BackoffMax)
			continue
		}
		serveBackoff = r.cfg.BackoffInitial
		s := r.newSession(g, delay)
		reason := s.run(ctx, w, poll)
		g.stop()
		r.registered.Store(false)
		if ctx.Err() != nil {
			if s.state == registered {
				r.log.Info().Str("socket", r.socketPath).Msg("stopped")
			} else {
				r.log.Info().Str("socket", r.socketPath).Str("waiting_for", s.waitingFor()).Msg("stopped before registering with the kubelet")
			}
			return nil
		}
		delay = r.nextDelay(reason, s.registeredAt, delay)
		r.log.Info().Str("reason", reason).Dur("delay", delay).Msg("serving and registering again")
	}
}

// nextDelay is how long the next session waits before it registers, after
// one that ended for reason, having registered at registeredAt (zero if it
// did not) and waited prev itself.
func (r *Runner) nextDelay(reason string, registeredAt time.Time, prev time.Duration) time.Duration {
	switch {
	case reason != reasonStreamEnded && reason != reasonServeFailed:
		return 0 // the kubelet is back: register at once
	case registeredAt.IsZero() || time.Since(registeredAt) < stableRegistration:
		return min(max(2*prev, r.cfg.BackoffInitial), r.cfg.BackoffMax)
	default:
		return r.cfg.BackoffInitial
	}
}

// waitForDir polls until the device-plugin directory exists: the kubelet
// creates it, and may start after the plugin.
func (r *Runner) waitForDir(ctx context.Context) error {
	logged := false
	for {
		fi, err := os.Stat(r.cfg.Dir)
		switch {
		case err == nil && fi.IsDir():
			return nil
		case err == nil:
			return fmt.Errorf("device-plugin dir %q is not a directory", r.cfg.Dir)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("device-plugin dir: %w", err)
		}
		if !logged {
			r.log.Info().Str("dir", r.cfg.Dir).Msg("waiting for the device-plugin directory")
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.cfg.PollInterval):
		}
	}
}

// Reasons a session ends and the plugin is served and registered again.
const (
	reasonStreamEnded    = "kubelet ended the ListAndWatch stream"
	reasonSocketGone     = "plugin socket removed"
	reasonKubeletRestart = "kubelet.sock created again"
	reasonServeFailed    = "grpc server stopped"
)

// regState is where a session stands with the kubelet.
//
//	registering ──kubelet.sock missing──> awaitingKubelet
//	awaitingKubelet ──kubelet.sock appears──> registering (at once)
//	registering ──Register fails or kubelet.sock refuses──> registering (after backoff)
//	registering ──a new kubelet.sock──> registering (at once)
//	registering ──Register succeeds──> registered
//	registered ──new kubelet.sock, stream ended──> session ends
//
// In every state the session ends when the plugin's own socket is removed
// or replaced, the gRPC server stops, or ctx ends.
type regState int

const (
	// registering: a Register attempt is due when the retry timer fires
	// (after the session's start delay, at once, or after a backoff).
	registering regState = iota
	// awaitingKubelet: kubelet.sock does not exist. A directory event or
	// the poll notices it appear.
	awaitingKubelet
	// registered: the kubelet accepted the registration.
	registered
)

// session registers one generation with the kubelet and watches until it
// must be served again. It is a state machine (see regState) driven by
// Runner.Run's goroutine only.
type session struct {
	r     *Runner
	g     *generation
	state regState
	retry *time.Timer // fires when a Register attempt is due

	backoff      time.Duration // until the next attempt after a failure
	attempts     int
	kubeletID    fileID // the kubelet.sock last tried, or registered with
	tried        bool   // kubeletID is set
	refusedShown bool   // "its socket does not accept connections" logged
	absentWhy    string // why kubelet.sock is not used, as last logged ("" none yet)
	registeredAt time.Time
}

// waitingFor says what an unregistered session waits for, for the line
// that says it stopped.
func (s *session) waitingFor() string {
	switch {
	case s.state == awaitingKubelet && s.absentWhy != "":
		return "the kubelet: " + s.absentWhy
	case s.state == awaitingKubelet:
		return "the kubelet"
	case s.refusedShown:
		return "the kubelet: its socket does not accept connections"
	case s.attempts > 0:
		return "the kubelet to accept the registration"
	}
	return "the first registration attempt"
}

// newSession starts in registering, with the first attempt after delay.
func (r *Runner) newSession(g *generation, delay time.Duration) *session {
	return &session{r: r, g: g, state: registering, retry: time.NewTimer(delay), backoff: r.cfg.BackoffInitial}
}

// run drives the session until it must end and returns why ("" when ctx
// ended or the watcher closed).
func (s *session) run(ctx context.Context, w *fsnotify.Watcher, poll *time.Ticker) string {
	defer s.retry.Stop()
	for {
		var reason string
		select {
		case <-ctx.Done():
			return ""
		case err := <-s.g.serveErr:
			s.r.log.Error().Err(err).Msg("grpc server stopped")
			return reasonServeFailed
		case <-s.g.streamEnded:
			if s.state == registered {
				return reasonStreamEnded
			}
		case ev, ok := <-w.Events:
			if !ok {
				return ""
			}
			if name := filepath.Base(ev.Name); name == s.r.cfg.SocketName || name == KubeletSocketName {
				reason = s.dirChanged() // not the kubelet's checkpoint temp files and the like
			}
		case err, ok := <-w.Errors:
			if ok {
				s.r.log.Warn().Err(err).Str("dir", s.r.cfg.Dir).Msg("directory watch error; relying on polling")
			}
		case <-poll.C:
			reason = s.dirChanged()
		case <-s.retry.C:
			reason = s.attempt(ctx)
		}
		if reason != "" {
			return reason
		}
	}
}

// ownSocketIntact reports whether the plugin's socket is still the one this
// generation listens on.
func (s *session) ownSocketIntact() bool {
	id, err := statSocket(s.r.socketPath)
	return err == nil && id == s.g.socketID
}

// dirChanged handles a change in the directory (or the poll): it compares
// both sockets with what the session saw and returns a reason to end, or "".
func (s *session) dirChanged() string {
	if !s.ownSocketIntact() {
		return reasonSocketGone
	}
	id, err := statSocket(s.r.kubeletSock)
	switch s.state {
	case registered:
		// A missing socket is a kubelet restarting: wait for the new one.
		if err == nil && id != s.kubeletID {
			return reasonKubeletRestart
		}
	case awaitingKubelet:
		if err == nil {
			s.tryNow()
		}
	case registering:
		if err == nil && s.tried && id != s.kubeletID {
			s.tryNow() // a new kubelet: no need to wait out the backoff
		}
	}
	return ""
}

// tryNow moves to registering with an attempt due at once.
func (s *session) tryNow() {
	s.state = registering
	s.retry.Reset(0)
}

// retryLater schedules the next attempt after the backoff, and doubles it.
func (s *session) retryLater() {
	s.retry.Reset(s.backoff)
	s.backoff = min(2*s.backoff, s.r.cfg.BackoffMax)
}

// attempt handles the retry timer: one Register attempt if the kubelet is
// there. It returns a reason to end, or "".
func (s *session) attempt(ctx context.Context) string {
	if s.state != registering {
		return ""
	}
	if !s.ownSocketIntact() {
		// A restarting kubelet deleted it; its event may still be queued
		// behind this timer.
		return reasonSocketGone
	}
	id, err := statSocket(s.r.kubeletSock)
	if err != nil {
		s.state = awaitingKubelet
		// Said once per reason, with it: no kubelet.sock yet is the
		// kubelet not started, another file there is a mistake to fix.
		if why := absentReason(s.r.kubeletSock, err); why != s.absentWhy {
			s.absentWhy = why
			s.r.log.Info().Str("socket", s.r.kubeletSock).Str("reason", why).Msg("waiting for the kubelet")
		}
		return ""
	}
	s.kubeletID, s.tried = id, true
	if err := dialCheck(s.r.kubeletSock); err != nil {
		// A dead kubelet's socket: wait for the new one (its creation
		// retries at once), polling gently meanwhile.
		if !s.refusedShown {
			s.r.log.Info().Str("socket", s.r.kubeletSock).Err(err).Msg("waiting for the kubelet: its socket does not accept connections")
			s.refusedShown = true
		}
		s.retryLater()
		return ""
	}
	s.attempts++
	if err := s.r.register(ctx); err != nil {
		if ctx.Err() != nil {
			return "" // run sees ctx end
		}
		s.r.log.Warn().Err(err).Int("attempt", s.attempts).Dur("retry_in", s.backoff).Msg("register with kubelet failed")
		s.retryLater()
		return ""
	}
	s.state = registered
	s.registeredAt = time.Now()
	s.r.registered.Store(true)
	s.r.registrations.Add(1)
	s.r.log.Info().Str("socket", s.r.socketPath).Int("attempt", s.attempts).Msg("registered with kubelet")
	return ""
}

// absentReason says why the kubelet's socket at path cannot be used, from
// statSocket's error.
func absentReason(path string, err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "its socket does not exist yet"
	}
	if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode().Type() != fs.ModeSocket {
		return "its socket is " + atomicfile.Kind(fi.Mode()) + ", not a socket"
	}
	return err.Error()
}

// dialCheck reports whether something accepts connections on the unix
// socket at path.
func dialCheck(path string) error {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// register calls the kubelet's Register with this plugin's socket name,
// resource name and options.
func (r *Runner) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+r.kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial %s: %w", r.kubeletSock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RegisterTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     r.cfg.SocketName,
		ResourceName: r.cfg.ResourceName,
		Options:      Options(),
	})
	if err != nil {
		return fmt.Errorf("register %s at %s: %w", r.cfg.ResourceName, r.kubeletSock, err)
	}
	return nil
}

// generation is one gRPC server on one socket file.
type generation struct {
	grpc        *grpc.Server
	socketPath  string
	socketID    fileID
	serveErr    chan error    // the server stopped by itself
	streamEnded chan struct{} // the last ListAndWatch stream ended
	stopping    atomic.Bool
	done        chan struct{} // Serve returned

	mu      sync.Mutex
	streams int
}

// serve claims the socket path (unixsock.Claim: a socket nobody listens on is
// removed, one somebody listens on refused), listens, serves the
// DevicePlugin and checks that it answers.
func (r *Runner) serve() (*generation, error) {
	if err := unixsock.Claim(r.socketPath, 0); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", r.socketPath)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", r.socketPath, err)
	}
	// Closing the listener must not unlink the path: by then another
	// process may have replaced our socket with its own. stop removes the
	// file only if it is still the one created here.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	id, err := statSocket(r.socketPath)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("listen on %s: %w", r.socketPath, err)
	}
	g := &generation{
		grpc:        grpc.NewServer(grpc.UnaryInterceptor(logFailures(r.log))),
		socketPath:  r.socketPath,
		socketID:    id,
		serveErr:    make(chan error, 1),
		streamEnded: make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	pluginapi.RegisterDevicePluginServer(g.grpc, &generationServer{DevicePlugin: r.cfg.Server, g: g})
	go func() {
		defer close(g.done)
		if err := g.grpc.Serve(lis); err != nil && !g.stopping.Load() {
			g.serveErr <- fmt.Errorf("serve %s: %w", r.socketPath, err)
		}
	}()
	if err := selfCheck(r.socketPath); err != nil {
		g.stop()
		return nil, err
	}
	r.log.Info().Str("socket", r.socketPath).Msg("listening")
	return g, nil
}

// stop ends the server and its streams and removes its socket if it is
// still the one this generation created.
func (g *generation) stop() {
	g.stopping.Store(true)
	g.grpc.Stop()
	<-g.done
	if id, err := statSocket(g.socketPath); err == nil && id == g.socketID {
		_ = os.Remove(g.socketPath) // best effort: the next serve removes it too
	}
}

// generationServer counts one generation's ListAndWatch streams so the
// Runner learns when the kubelet dropped the last one.
type generationServer struct {
	DevicePlugin
	g *generation
}

func (gs *generationServer) ListAndWatch(e *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	gs.g.mu.Lock()
	gs.g.streams++
	gs.g.mu.Unlock()
	err := gs.DevicePlugin.ListAndWatch(e, stream)
	gs.g.mu.Lock()
	gs.g.streams--
	last := gs.g.streams == 0
	gs.g.mu.Unlock()
	if last && !gs.g.stopping.Load() {
		select {
		case gs.g.streamEnded <- struct{}{}:
		default:
		}
	}
	return err
}

// selfCheck calls GetDevicePluginOptions on the socket, as the kubelet will
// inside Register.
func selfCheck(socket string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("check %s: %w", socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		return fmt.Errorf("check %s: %w: %w", socket, ErrServerNotAnswering, err)
	}
	return nil
}

// logFailures is the one place a refused or failed unary RPC is logged:
// once, at warn, with the RPC's name, the status code and its message
// (which the Server keeps short). The handlers only return their errors.
func logFailures(log zerolog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			st := status.Convert(err)
			msg := "request failed"
			if c := st.Code(); c == codes.InvalidArgument || c == codes.FailedPrecondition || c == codes.NotFound {
				msg = "request refused"
			}
			log.Warn().Str("rpc", path.Base(info.FullMethod)).Str("code", st.Code().String()).Str("reason", st.Message()).Msg(msg)
		}
		return resp, err
	}
}

// fileID identifies one file: a socket created again has another.
type fileID struct{ dev, ino uint64 }

// statSocket returns the identity of the unix socket at path.
func statSocket(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fileID{}, fmt.Errorf("%s: %w", path, unixsock.ErrNotSocket)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no inode", path)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}
