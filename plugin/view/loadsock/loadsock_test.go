package loadsock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

func ptr[T any](v T) *T { return &v }

func TestParseRequest(t *testing.T) {
	ok := []struct {
		name, line string
		want       loadsock.Request
	}{
		{"util", "set util=90\n", loadsock.Request{UtilizationPercent: ptr(90.0)}},
		{"util and memory", "set util=42.5 mem=4096", loadsock.Request{UtilizationPercent: ptr(42.5), MemoryUsedMiB: ptr(4096)}},
		{"memory only", "set mem=0\r\n", loadsock.Request{MemoryUsedMiB: ptr(0)}},
		{"bounds", "set util=0 mem=0", loadsock.Request{UtilizationPercent: ptr(0.0), MemoryUsedMiB: ptr(0)}},
		{"gpus", "set util=100 gpus=fake-3,fake-5", loadsock.Request{UtilizationPercent: ptr(100.0), GPUs: []string{"fake-3", "fake-5"}}},
		{"clear", "clear", loadsock.Request{Clear: true}},
		{"clear gpus", "clear gpus=fake-1", loadsock.Request{Clear: true, GPUs: []string{"fake-1"}}},
		{"spaces", "  set   util=1  ", loadsock.Request{UtilizationPercent: ptr(1.0)}},
		{"signs and zeros", "set util=+007.50 mem=+0012", loadsock.Request{UtilizationPercent: ptr(7.5), MemoryUsedMiB: ptr(12)}},
		{"minus zero", "set util=-0 mem=-0", loadsock.Request{UtilizationPercent: ptr(0.0), MemoryUsedMiB: ptr(0)}},
		{"top", "set util=100.000", loadsock.Request{UtilizationPercent: ptr(100.0)}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadsock.ParseRequest(tc.line)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want.String() || got.Clear != tc.want.Clear {
				t.Errorf("ParseRequest(%q) = %s, want %s", tc.line, got, tc.want)
			}
		})
	}
	bad := []struct {
		name, line, cause, msg string
	}{
		{"empty", "\n", loadsock.CauseSyntax, "empty request"},
		{"verb", "get util=1", loadsock.CauseSyntax, `unknown request "get"`},
		{"no value", "set util", loadsock.CauseSyntax, "want key=value"},
		{"twice", "set util=1 util=2", loadsock.CauseSyntax, "util given twice"},
		{"nothing to set", "set gpus=fake-0", loadsock.CauseSyntax, "set needs util= or mem="},
		{"clear with a value", "clear util=3", loadsock.CauseSyntax, `unknown key "util" for clear`},
		{"unknown key", "set util=1 ttl=1h", loadsock.CauseSyntax, `unknown key "ttl"`},
		{"util not a number", "set util=ninety", loadsock.CauseValue, `utilization "ninety" is not a decimal number`},
		{"util NaN", "set util=NaN", loadsock.CauseValue, "is not a decimal number"},
		{"util infinite", "set util=+Inf", loadsock.CauseValue, "is not a decimal number"},
		{"util exponent", "set util=1e2", loadsock.CauseValue, `utilization "1e2" is not a decimal number`},
		{"util hex", "set util=0x1p2", loadsock.CauseValue, "is not a decimal number"},
		{"util underscore", "set util=1_0", loadsock.CauseValue, "is not a decimal number"},
		{"util bare point", "set util=5.", loadsock.CauseValue, "is not a decimal number"},
		{"util too large", "set util=100.5", loadsock.CauseValue, "utilization 100.5 % is out of range: want 0..100"},
		{"util just too large", "set util=100.0000001", loadsock.CauseValue, "utilization 100.0000001 % is out of range: want 0..100"},
		{"util negative", "set util=-1", loadsock.CauseValue, "utilization -1 % is out of range: want 0..100"},
		{"util huge", "set util=" + strings.Repeat("9", 240), loadsock.CauseValue, "is out of range"},
		{"mem fraction", "set mem=1.5", loadsock.CauseValue, `memory used "1.5" is not a whole number of MiB`},
		{"mem exponent", "set mem=1e3", loadsock.CauseValue, "is not a whole number of MiB"},
		{"mem negative", "set mem=-4", loadsock.CauseValue, "memory used -4 MiB is out of range: want 0 or more"},
		{"mem overflow", "set mem=99999999999999999999999", loadsock.CauseValue, "memory used 99999999999999999999999 MiB is too large"},
		{"mem negative overflow", "set mem=-99999999999999999999999", loadsock.CauseValue, "is out of range: want 0 or more"},
		{"empty gpu", "set util=1 gpus=fake-0,", loadsock.CauseSyntax, "want GPU ids"},
		{"control character", "set util=1\x00", loadsock.CauseSyntax, "control or non-ASCII"},
		{"non-ASCII", "set util=1 gpus=fäke-0", loadsock.CauseSyntax, "control or non-ASCII"},
		{"too long", "set util=1 gpus=" + strings.Repeat("x", 300), loadsock.CauseTooLong, "at most 256"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadsock.ParseRequest(tc.line)
			var r *loadsock.Refusal
			if !errors.As(err, &r) || !errors.Is(err, loadsock.ErrRefused) {
				t.Fatalf("ParseRequest(%q) = %v, want a refusal", tc.line, err)
			}
			if r.Cause != tc.cause || !strings.Contains(r.Msg, tc.msg) {
				t.Errorf("ParseRequest(%q) = %v, want cause %s and %q", tc.line, err, tc.cause, tc.msg)
			}
		})
	}
}

// FuzzParseRequest: any line parses or is refused with a cause; what
// parses prints as a line that parses to the same request.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"set util=90", "set util=1.5 mem=3 gpus=fake-0,fake-1", "clear", "clear gpus=x", "set mem=-1", "set util=1e3", "\n", "set util=0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r, err := loadsock.ParseRequest(line)
		if err != nil {
			var ref *loadsock.Refusal
			if !errors.As(err, &ref) || ref.Cause == "" {
				t.Fatalf("ParseRequest(%q): %v is not a refusal with a cause", line, err)
			}
			return
		}
		again, err := loadsock.ParseRequest(r.String())
		if err != nil {
			t.Fatalf("ParseRequest(%q) = %s, which does not parse: %v", line, r, err)
		}
		if again.String() != r.String() {
			t.Fatalf("round trip of %q: %s then %s", line, r, again)
		}
		if u := r.UtilizationPercent; u != nil && (*u < 0 || *u > 100) {
			t.Fatalf("ParseRequest(%q): utilization %v", line, *u)
		}
	})
}

// recorder is a Handler that records what it was asked.
type recorder struct {
	mu   sync.Mutex
	reqs []string
	err  error
}

func (h *recorder) SetLoad(_ context.Context, seq uint64, req loadsock.Request) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs = append(h.reqs, req.String())
	if h.err != nil {
		return 0, h.err
	}
	return max(1, len(req.GPUs)), nil
}

func (h *recorder) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.reqs)
}

func newServer(t *testing.T, cfg loadsock.Config) *loadsock.Server {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(plugintest.ShortTempDir(t), "load")
	}
	s, err := loadsock.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// allocs returns allocations seqs, each of its own device fake-<seq>.
func allocs(seqs ...uint64) []loadsock.Allocation {
	out := make([]loadsock.Allocation, len(seqs))
	for i, seq := range seqs {
		out[i] = loadsock.Allocation{Seq: seq, Devices: []string{"fake-" + strconv.FormatUint(seq, 10)}}
	}
	return out
}

func socketPath(s *loadsock.Server, seq uint64) string {
	return filepath.Join(s.HostDir(seq), loadsock.SocketName)
}

// raw sends data as it is and returns the reply line.
func raw(t *testing.T, path string, data []byte) string {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { // a huge request blocks until the server stops reading
		_, _ = conn.Write(data)
		_ = conn.CloseWrite()
	}()
	buf := make([]byte, loadsock.MaxReplyBytes)
	n, _ := conn.Read(buf)
	return string(buf[:n])
}

func TestServer_SetAndReply(t *testing.T) {
	h := &recorder{}
	s := newServer(t, loadsock.Config{Handler: h})
	if err := s.Open(7, []string{"fake-7"}); err != nil {
		t.Fatal(err)
	}
	n, err := loadsock.Send(t.Context(), socketPath(s, 7), loadsock.Request{UtilizationPercent: ptr(90.0), MemoryUsedMiB: ptr(2048), GPUs: []string{"fake-1", "fake-2"}})
	if err != nil || n != 2 {
		t.Fatalf("Send = %d, %v; want 2 GPUs", n, err)
	}
	if got := h.got(); !slices.Equal(got, []string{"set util=90 mem=2048 gpus=fake-1,fake-2"}) {
		t.Errorf("handler got %q", got)
	}
	// The handler's refusal reaches the client with its cause.
	h.err = loadsock.Refusef(loadsock.CauseNotHeld, "allocation 7 is allocated: no container holds it yet")
	_, err = loadsock.Send(t.Context(), socketPath(s, 7), loadsock.Request{Clear: true})
	var r *loadsock.Refusal
	if !errors.As(err, &r) || r.Cause != loadsock.CauseNotHeld || !strings.Contains(r.Msg, "no container holds it yet") {
		t.Errorf("Send = %v, want the not-held refusal", err)
	}
	// A request without a newline, ended by closing the write side.
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socketPath(s, 7), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h.err = nil
	_, _ = conn.Write([]byte("set util=5"))
	_ = conn.CloseWrite()
	buf := make([]byte, 64)
	n, _ = conn.Read(buf)
	if got := string(buf[:n]); got != "ok 1\n" {
		t.Errorf("reply to a request ended by EOF: %q", got)
	}
}

// TestServer_RefusesBadInput: a huge request, one that is not a number, a
// value out of range and garbage are refused with their cause, never
// reach the handler, and each cause is logged once per allocation.
func TestServer_RefusesBadInput(t *testing.T) {
	var logs plugintest.LogBuffer
	h := &recorder{}
	s := newServer(t, loadsock.Config{Handler: h, Burst: 100, Rate: 100, Logger: zerolog.New(&logs)})
	if err := s.Open(3, []string{"fake-3"}); err != nil {
		t.Fatal(err)
	}
	path := socketPath(s, 3)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"huge", []byte(strings.Repeat("set util=1 ", 100000) + "\n"), "error too-long: request longer than 256 bytes\n"},
		{"not a number", []byte("set util=lots\n"), "error value: utilization \"lots\" is not a decimal number\n"},
		{"too large", []byte("set util=101\n"), "error value: utilization 101 % is out of range: want 0..100\n"},
		{"garbage", []byte{0xff, 0xfe, '\n'}, "error syntax: request has a control or non-ASCII character\n"},
		{"nothing", nil, "error syntax: no request\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 {
				if got := raw(t, path, tc.data); got != tc.want {
					t.Fatalf("reply %q, want %q", got, tc.want)
				}
			}
		})
	}
	if got := h.got(); len(got) != 0 {
		t.Errorf("the handler got refused requests: %q", got)
	}
	for cause, want := range map[string]int{"too-long": 1, "value": 1, "syntax": 1} {
		if n := logs.Count(`"cause":"` + cause + `"`); n != want {
			t.Errorf("cause %s logged %d times, want %d:\n%s", cause, n, want, logs.String())
		}
	}
	// Another allocation's socket logs its own refusals.
	if err := s.Open(4, []string{"fake-4"}); err != nil {
		t.Fatal(err)
	}
	raw(t, socketPath(s, 4), []byte("set util=lots\n"))
	if n := logs.Count(`"cause":"value"`); n != 2 {
		t.Errorf("cause value logged %d times over two allocations, want 2", n)
	}
}

func TestServer_RateLimit(t *testing.T) {
	clock := storetest.NewClock(t, time.Unix(1_700_000_000, 0))
	h := &recorder{}
	s := newServer(t, loadsock.Config{Handler: h, Rate: 2, Burst: 3, Now: clock.Now})
	if err := s.Open(1, []string{"fake-1"}); err != nil {
		t.Fatal(err)
	}
	send := func() error {
		_, err := loadsock.Send(t.Context(), socketPath(s, 1), loadsock.Request{UtilizationPercent: ptr(50.0)})
		return err
	}
	for i := range 3 {
		if err := send(); err != nil {
			t.Fatalf("request %d of the burst: %v", i+1, err)
		}
	}
	var r *loadsock.Refusal
	if err := send(); !errors.As(err, &r) || r.Cause != loadsock.CauseRate {
		t.Fatalf("request after the burst: %v, want a rate refusal", err)
	}
	clock.Advance(500 * time.Millisecond) // one token at 2 a second
	if err := send(); err != nil {
		t.Errorf("request half a second later: %v", err)
	}
	if err := send(); !errors.As(err, &r) || r.Cause != loadsock.CauseRate {
		t.Errorf("second request half a second later: %v, want a rate refusal", err)
	}
	if n := len(h.got()); n != 4 {
		t.Errorf("handler got %d requests, want 4", n)
	}
}

// TestServer_Sync: sockets follow the active allocations; the others'
// directories, and leftovers, are removed; Close keeps the files, and a new
// Server serves the same directory again, reachable by the same path.
func TestServer_Sync(t *testing.T) {
	dir := filepath.Join(plugintest.ShortTempDir(t), "load")
	h := &recorder{}
	s := newServer(t, loadsock.Config{Dir: dir, Handler: h})
	if err := os.MkdirAll(filepath.Join(dir, "99"), 0o755); err != nil { // a leftover of an earlier run
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "notes"), 0o755); err != nil { // not ours
		t.Fatal(err)
	}
	list := func(seqs ...uint64) func() ([]loadsock.Allocation, error) {
		return func() ([]loadsock.Allocation, error) { return allocs(seqs...), nil }
	}
	if err := s.Sync(list(1, 2)); err != nil {
		t.Fatal(err)
	}
	if got := s.Served(); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("served %v, want [1 2]", got)
	}
	for _, tc := range []struct {
		path string
		mode os.FileMode
	}{{s.HostDir(1), os.ModeDir | 0o755}, {socketPath(s, 1), os.ModeSocket | 0o666}, {dir, os.ModeDir | 0o700}} {
		fi, err := os.Stat(tc.path)
		if err != nil || fi.Mode() != tc.mode {
			t.Errorf("%s: %v, %v; want mode %v", tc.path, fi.Mode(), err, tc.mode)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "99")); !os.IsNotExist(err) {
		t.Errorf("leftover directory 99: %v, want it removed", err)
	}
	if err := s.Sync(list(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.HostDir(1)); !os.IsNotExist(err) {
		t.Errorf("released allocation 1's directory: %v, want it removed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes")); err != nil {
		t.Errorf("a directory that is not an allocation's was removed: %v", err)
	}
	if _, err := loadsock.Send(t.Context(), socketPath(s, 2), loadsock.Request{Clear: true}); err != nil {
		t.Errorf("allocation 2 after Sync: %v", err)
	}
	// A restart: Close keeps the socket file; the next Server replaces it.
	s.Close()
	if fi, err := os.Stat(socketPath(s, 2)); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("after Close: %v, %v; want the socket file kept", fi, err)
	}
	if _, err := loadsock.Send(t.Context(), socketPath(s, 2), loadsock.Request{Clear: true}); err == nil {
		t.Error("a closed server answered")
	}
	if err := s.Open(5, []string{"fake-5"}); err == nil {
		t.Error("Open after Close succeeded")
	}
	s2 := newServer(t, loadsock.Config{Dir: dir, Handler: h})
	if err := s2.Sync(list(2)); err != nil {
		t.Fatal(err)
	}
	if n, err := loadsock.Send(t.Context(), socketPath(s2, 2), loadsock.Request{Clear: true}); err != nil || n != 1 {
		t.Errorf("allocation 2 after a restart: %d, %v", n, err)
	}
}

// TestServer_SyncNeverUndoesOpen: an Open that races with a Sync whose
// list does not have it yet survives.
func TestServer_SyncNeverUndoesOpen(t *testing.T) {
	s := newServer(t, loadsock.Config{Handler: &recorder{}})
	opened := make(chan error, 1)
	err := s.Sync(func() ([]loadsock.Allocation, error) {
		go func() { opened <- s.Open(8, []string{"fake-8"}) }() // the record of 8 is stored after this list was read
		time.Sleep(10 * time.Millisecond)                       // let Open wait for the lock (it cannot run before)
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	if got := s.Served(); !slices.Equal(got, []uint64{8}) {
		t.Errorf("served %v, want [8]", got)
	}
}

func TestNewServer_Refuses(t *testing.T) {
	for _, cfg := range []loadsock.Config{{Dir: "", Handler: &recorder{}}, {Dir: "rel", Handler: &recorder{}}, {Dir: "/x"}} {
		if _, err := loadsock.NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v) succeeded", cfg)
		}
	}
}

// TestServer_OverAllocationsClosed: without any release (no lifecycle
// tracking), an allocation whose devices a newer one took has its socket
// closed at once, so that hundreds of allocations of the same devices keep
// as many sockets open as there are devices; the directories stay, since
// a container may mount them, until Sync no longer lists them.
func TestServer_OverAllocationsClosed(t *testing.T) {
	s := newServer(t, loadsock.Config{Handler: &recorder{}})
	before := plugintest.OpenSockets(t)
	devices := [][]string{{"fake-0"}, {"fake-1::0", "fake-1::1"}, {"fake-1::1"}, {"fake-1::0"}}
	const n = 300
	var listed []loadsock.Allocation
	for seq := uint64(1); seq <= n; seq++ {
		devs := devices[seq%uint64(len(devices))]
		if err := s.Open(seq, devs); err != nil {
			t.Fatalf("Open(%d): %v", seq, err)
		}
		listed = append(listed, loadsock.Allocation{Seq: seq, Devices: devs})
		if served := len(s.Served()); served > 3 {
			t.Fatalf("after allocation %d: %d sockets served, want at most 3 (one per device)", seq, served)
		}
	}
	// The newest of fake-0 (300), of fake-1::0 (299), of fake-1::1 (298).
	if got := s.Served(); !slices.Equal(got, []uint64{n - 2, n - 1, n}) {
		t.Errorf("served %v, want [%d %d %d]", got, n-2, n-1, n)
	}
	if got := plugintest.OpenSockets(t) - before; got > 3 {
		t.Errorf("%d more sockets open after %d allocations, want at most 3", got, n)
	}
	for _, seq := range []uint64{1, n - 3} {
		if fi, err := os.Stat(s.HostDir(seq)); err != nil || !fi.IsDir() {
			t.Errorf("directory of allocation %d that is over: %v, want it kept", seq, err)
		}
		if _, err := os.Stat(socketPath(s, seq)); !os.IsNotExist(err) {
			t.Errorf("socket of allocation %d that is over: %v, want it removed", seq, err)
		}
		if _, err := loadsock.Send(t.Context(), socketPath(s, seq), loadsock.Request{Clear: true}); err == nil {
			t.Errorf("allocation %d that is over answered", seq)
		}
	}
	if _, err := loadsock.Send(t.Context(), socketPath(s, n), loadsock.Request{Clear: true}); err != nil {
		t.Errorf("the newest allocation: %v", err)
	}
	// Sync, as after a restart, agrees; the directories of what it does not
	// list go.
	if err := s.Sync(func() ([]loadsock.Allocation, error) { return listed[n-10:], nil }); err != nil {
		t.Fatal(err)
	}
	if got := s.Served(); !slices.Equal(got, []uint64{n - 2, n - 1, n}) {
		t.Errorf("after Sync: served %v", got)
	}
	if _, err := os.Stat(s.HostDir(1)); !os.IsNotExist(err) {
		t.Errorf("directory of allocation 1, no longer listed: %v, want it removed", err)
	}
	if _, err := os.Stat(s.HostDir(n - 9)); err != nil {
		t.Errorf("directory of allocation %d, listed though over: %v, want it kept", n-9, err)
	}
}

// TestServer_MaxSockets: allocations of distinct devices beyond the cap
// keep only the newest sockets open, whatever the input; the older ones
// keep their directory and are served again when there is room.
func TestServer_MaxSockets(t *testing.T) {
	max := 8
	s := newServer(t, loadsock.Config{Handler: &recorder{}, MaxSockets: func() int { return max }})
	before := plugintest.OpenSockets(t)
	const n = 100
	for seq := uint64(1); seq <= n; seq++ {
		if err := s.Open(seq, []string{"fake-" + strconv.FormatUint(seq, 10)}); err != nil {
			t.Fatalf("Open(%d): %v", seq, err)
		}
	}
	want := []uint64{93, 94, 95, 96, 97, 98, 99, 100}
	if got := s.Served(); !slices.Equal(got, want) {
		t.Errorf("served %v, want %v", got, want)
	}
	if got := plugintest.OpenSockets(t) - before; got > max {
		t.Errorf("%d more sockets open after %d allocations, want at most %d", got, n, max)
	}
	if _, err := os.Stat(s.HostDir(1)); err != nil {
		t.Errorf("directory of allocation 1 beyond the cap: %v, want it kept", err)
	}
	// An allocation older than every served one is not served, but has its
	// directory.
	if err := s.Open(0, []string{"fake-x"}); err != nil {
		t.Fatal(err)
	}
	if got := s.Served(); !slices.Equal(got, want) {
		t.Errorf("after opening an older allocation: served %v, want %v", got, want)
	}
	if _, err := os.Stat(s.HostDir(0)); err != nil {
		t.Errorf("directory of allocation 0: %v", err)
	}
	// More room: Sync serves the older ones again.
	max = 10
	if err := s.Sync(func() ([]loadsock.Allocation, error) { return allocs(1, 2, 50, 99, 100), nil }); err != nil {
		t.Fatal(err)
	}
	if got := s.Served(); !slices.Equal(got, []uint64{1, 2, 50, 99, 100}) {
		t.Errorf("after Sync: served %v", got)
	}
	if _, err := loadsock.Send(t.Context(), socketPath(s, 1), loadsock.Request{Clear: true}); err != nil {
		t.Errorf("allocation 1 served again: %v", err)
	}
}

// TestServer_NotHeldAnswered: a handler that waits until its context ends
// (no container holds the allocation yet) still gets its refusal to the
// client, with its cause and text, before the connection's time is up.
func TestServer_NotHeldAnswered(t *testing.T) {
	h := loadsock.HandlerFunc(func(ctx context.Context, seq uint64, req loadsock.Request) (int, error) {
		<-ctx.Done()
		return 0, loadsock.Refusef(loadsock.CauseNotHeld, "allocation %d: no container holds it yet", seq)
	})
	s := newServer(t, loadsock.Config{Handler: h, Timeout: 600 * time.Millisecond})
	if err := s.Open(4, []string{"fake-4"}); err != nil {
		t.Fatal(err)
	}
	_, err := loadsock.Send(t.Context(), socketPath(s, 4), loadsock.Request{UtilizationPercent: ptr(50.0)})
	var r *loadsock.Refusal
	if !errors.As(err, &r) || r.Cause != loadsock.CauseNotHeld || r.Msg != "allocation 4: no container holds it yet" {
		t.Errorf("Send = %v, want the not-held refusal", err)
	}
}

// TestServer_OpenFails: a socket that cannot be created is an error of
// Open naming its cause; the allocation stays known and the next Sync
// that can serves it, in the same directory.
func TestServer_OpenFails(t *testing.T) {
	s := newServer(t, loadsock.Config{Handler: &recorder{}})
	// A directory where the socket goes: listen fails, the directory stays.
	if err := os.MkdirAll(filepath.Join(s.HostDir(6), loadsock.SocketName, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := s.Open(6, []string{"fake-6"})
	if err == nil || !strings.Contains(err.Error(), "load socket of allocation 6") {
		t.Fatalf("Open = %v, want an error", err)
	}
	if len(s.Served()) != 0 {
		t.Errorf("served %v", s.Served())
	}
	if cause := loadsock.ErrorCause(err); cause == "" || strings.Contains(cause, "6") {
		t.Errorf("ErrorCause(%v) = %q, want the cause without the allocation", err, cause)
	}
	if err := os.RemoveAll(filepath.Join(s.HostDir(6), loadsock.SocketName)); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(func() ([]loadsock.Allocation, error) { return allocs(6), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := loadsock.Send(t.Context(), socketPath(s, 6), loadsock.Request{Clear: true}); err != nil {
		t.Errorf("allocation 6 after Sync: %v", err)
	}
}

func TestErrorCause(t *testing.T) {
	errno := errors.New("too many open files")
	a := fmt.Errorf("load socket of allocation 5: listen: %w", errno)
	b := fmt.Errorf("load socket of allocation 9: listen: %w", errno)
	c := fmt.Errorf("load socket of allocation 9: remove: %w", errors.New("permission denied"))
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"one", a, "too many open files"},
		{"same cause, other allocation", b, "too many open files"},
		{"joined", errors.Join(a, b, c), "permission denied; too many open files"},
	} {
		if got := loadsock.ErrorCause(tc.err); got != tc.want {
			t.Errorf("%s: ErrorCause = %q, want %q", tc.name, got, tc.want)
		}
	}
}
