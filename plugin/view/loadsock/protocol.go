// Package loadsock is how a workload drives the load of the GPUs it holds
// (-telemetry-writable): one unix socket per allocation, which the plugin
// mounts into the container, and a one-line text protocol over it. The
// fake nvidia-smi's --set-load is its client (Send); the plugin serves
// every socket with a Server, which checks each request and hands it to a
// Handler (the telemetry exporter's overrides).
//
// # The socket
//
// Allocation record <seq> gets the directory <Dir>/<seq> with the socket
// load.sock in it. The plugin mounts that directory read-only at
// ContainerDir (/run/virtual-gpu-load) and sets EnvSocket
// (VIRTUAL_GPU_LOAD_SOCKET) to ContainerPath. A directory rather than the
// socket itself: a plugin that restarts creates the socket again in the same
// directory, and a running container, whose mount is the directory, reaches
// the new one. The mount is read-only, so a container cannot write a byte
// to the node's disk through it; connecting to a socket needs no write
// access to the mount. The socket is created before Allocate answers (Open;
// best effort: one that cannot be created then is by a later Sync, in the
// directory the container already mounts), again at every start for every
// active allocation (Sync), and removed with its directory once the
// allocation is released or abandoned (Sync); never at shutdown, because
// the kubelet may start the container again with its cached answer while
// the plugin is down. The socket of an allocation that is over (newer ones
// hold all its devices) is closed, and so are the oldest beyond
// Config.MaxSockets (see Server).
//
// # Protocol
//
// One request per connection: a line of at most MaxRequestBytes bytes
// (ending with "\n", or with the end of the stream), then one reply line.
//
//	set util=<0..100> [mem=<MiB>] [gpus=<id>,<id>…]   the holder's utilization (a
//	set mem=<MiB> [gpus=…]                             decimal number, in %) and/or
//	                                                   memory used per GPU (MiB)
//	clear [gpus=…]                                     back to the load model
//
//	ok <n>                     the request applies to n GPUs
//	error <cause>: <message>   refused; cause is one of the Cause constants
//
// gpus names GPU ids of the allocation (fake-3; the GPU of a replica
// fake-3::1 is fake-3); without it the request applies to every GPU of the
// allocation. A socket takes at most DefaultRate requests a second (bursts
// of DefaultBurst); more are refused with CauseRate.
package loadsock

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Container paths and variables.
const (
	// EnvSocket is the variable naming the load socket in a container; the
	// allocation record stores it, so a record with it has a socket.
	EnvSocket = "VIRTUAL_GPU_LOAD_SOCKET"
	// ContainerDir is where the allocation's socket directory is mounted,
	// read-only.
	ContainerDir = "/run/virtual-gpu-load"
	// SocketName is the socket's name in its directory.
	SocketName = "load.sock"
	// ContainerPath is the socket in a container: EnvSocket's value.
	ContainerPath = ContainerDir + "/" + SocketName
)

// Limits of the protocol.
const (
	// MaxRequestBytes bounds a request line, its newline included.
	MaxRequestBytes = 256
	// MaxReplyBytes bounds a reply line.
	MaxReplyBytes = 1024
	// maxGPUs bounds the GPU ids of one request.
	maxGPUs = 64
	// maxIDBytes bounds one GPU id.
	maxIDBytes = 64
)

// Causes of a refusal: the word after "error" in a reply.
const (
	// CauseTooLong: the request is longer than MaxRequestBytes.
	CauseTooLong = "too-long"
	// CauseSyntax: the request does not parse.
	CauseSyntax = "syntax"
	// CauseValue: a value is not a number or out of its range.
	CauseValue = "value"
	// CauseGPU: a GPU the request names is not one of the allocation's.
	CauseGPU = "gpu"
	// CauseRate: more requests than the socket takes a second.
	CauseRate = "rate"
	// CauseNotHeld: no container holds the allocation (yet, or any more).
	CauseNotHeld = "not-held"
	// CauseOff: the configuration in force does not let containers set
	// their load, or the telemetry is off.
	CauseOff = "off"
	// CauseFailed: the plugin could not apply the request.
	CauseFailed = "failed"
)

// Refusal is why a request was refused: a Cause constant and what was
// wrong. It wraps ErrRefused and, if set, Err.
type Refusal struct {
	// Cause is one of the Cause constants.
	Cause string
	// Msg says what was wrong, naming the value and the rule.
	Msg string
	// Err is the error behind the refusal, if any.
	Err error
}

// Refusef returns a Refusal of cause with a formatted message; %w wraps.
func Refusef(cause, format string, args ...any) *Refusal {
	err := fmt.Errorf(format, args...)
	return &Refusal{Cause: cause, Msg: err.Error(), Err: errors.Unwrap(err)}
}

// Error returns "<cause>: <message>".
func (r *Refusal) Error() string { return r.Cause + ": " + r.Msg }

// Unwrap returns ErrRefused and the cause's error.
func (r *Refusal) Unwrap() []error {
	if r.Err != nil {
		return []error{ErrRefused, r.Err}
	}
	return []error{ErrRefused}
}

// Request is one request: set the holder's own utilization and/or memory
// used on its GPUs, or clear them (the load model drives the GPUs again).
type Request struct {
	// Clear returns the GPUs to the load model; UtilizationPercent and
	// MemoryUsedMiB are then nil.
	Clear bool
	// UtilizationPercent is the holder's utilization of each GPU, 0..100;
	// nil keeps the model's.
	UtilizationPercent *float64
	// MemoryUsedMiB is the holder's memory used on each GPU, in MiB; nil
	// keeps the model's. Its upper bound is the GPU's memory, which the
	// Handler checks.
	MemoryUsedMiB *int
	// GPUs are GPU ids of the allocation ("fake-3"); empty means all.
	GPUs []string
}

// String returns the request's line, without the newline.
func (r Request) String() string {
	var b strings.Builder
	if r.Clear {
		b.WriteString("clear")
	} else {
		b.WriteString("set")
		if r.UtilizationPercent != nil {
			b.WriteString(" util=" + strconv.FormatFloat(*r.UtilizationPercent, 'g', -1, 64))
		}
		if r.MemoryUsedMiB != nil {
			b.WriteString(" mem=" + strconv.Itoa(*r.MemoryUsedMiB))
		}
	}
	if len(r.GPUs) > 0 {
		b.WriteString(" gpus=" + strings.Join(r.GPUs, ","))
	}
	return b.String()
}

// ParseRequest reads a request line (a trailing "\n" or "\r\n" is
// allowed). Errors are *Refusal: CauseTooLong, CauseSyntax or CauseValue
// (a value ParseUtilization or ParseMemoryMiB refuses).
func ParseRequest(line string) (Request, error) {
	var r Request
	if len(line) > MaxRequestBytes {
		return r, Refusef(CauseTooLong, "request of %d bytes, at most %d", len(line), MaxRequestBytes)
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return r, Refusef(CauseSyntax, "empty request: want set util=N [mem=MiB] [gpus=ID,…] or clear [gpus=ID,…]")
	}
	if strings.ContainsFunc(line, func(c rune) bool { return (c < 0x20 && c != ' ' && c != '\t') || c == 0x7f || c > 0x7e }) {
		return r, Refusef(CauseSyntax, "request has a control or non-ASCII character")
	}
	switch fields[0] {
	case "set":
	case "clear":
		r.Clear = true
	default:
		return r, Refusef(CauseSyntax, "unknown request %q: want set or clear", trunc(fields[0]))
	}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return r, Refusef(CauseSyntax, "%q: want key=value", trunc(f))
		}
		if seen[key] {
			return r, Refusef(CauseSyntax, "%s given twice", trunc(key))
		}
		seen[key] = true
		switch {
		case key == "util" && !r.Clear:
			u, err := ParseUtilization(val)
			if err != nil {
				return r, err
			}
			r.UtilizationPercent = &u
		case key == "mem" && !r.Clear:
			m, err := ParseMemoryMiB(val)
			if err != nil {
				return r, err
			}
			r.MemoryUsedMiB = &m
		case key == "gpus":
			ids := strings.Split(val, ",")
			if len(ids) > maxGPUs {
				return r, Refusef(CauseSyntax, "%d GPUs named, at most %d", len(ids), maxGPUs)
			}
			for _, id := range ids {
				if id == "" || len(id) > maxIDBytes {
					return r, Refusef(CauseSyntax, "gpus=%q: want GPU ids like fake-0,fake-1", trunc(val))
				}
			}
			r.GPUs = ids
		default:
			return r, Refusef(CauseSyntax, "unknown key %q for %s", trunc(key), fields[0])
		}
	}
	if !r.Clear && r.UtilizationPercent == nil && r.MemoryUsedMiB == nil {
		return r, Refusef(CauseSyntax, "set needs util= or mem=")
	}
	return r, nil
}

// The grammar of the values, the one the protocol and nvidia-smi's
// --set-load share: a utilization is a decimal number (digits, optionally
// a point and more digits; no exponent, hex or underscores), a memory a
// whole number of MiB; either may have a sign, and is then checked against
// its range (-0 is 0).
var (
	utilRE = regexp.MustCompile(`^[+-]?[0-9]+(\.[0-9]+)?$`)
	memRE  = regexp.MustCompile(`^[+-]?[0-9]+$`)
)

// ParseUtilization reads a utilization in %: a decimal number from 0 to
// 100 ("90", "42.5"). A refusal is a *Refusal of CauseValue saying whether
// the value is not a decimal number or out of range.
func ParseUtilization(val string) (float64, error) {
	if !utilRE.MatchString(val) {
		return 0, Refusef(CauseValue, "utilization %q is not a decimal number", trunc(val))
	}
	u, err := strconv.ParseFloat(val, 64)
	if err != nil || u < 0 || u > 100 { // a range error is a huge number
		return 0, Refusef(CauseValue, "utilization %s %% is out of range: want 0..100", trunc(val))
	}
	return u + 0, nil // -0 is 0
}

// ParseMemoryMiB reads a memory used in MiB: a whole number, 0 or more
// (its upper bound, the GPU's memory, is the Handler's to check). A
// refusal is a *Refusal of CauseValue saying whether the value is not a
// whole number, negative or too large.
func ParseMemoryMiB(val string) (int, error) {
	if !memRE.MatchString(val) {
		return 0, Refusef(CauseValue, "memory used %q is not a whole number of MiB", trunc(val))
	}
	m, err := strconv.Atoi(val)
	switch {
	case strings.HasPrefix(val, "-") && strings.Trim(val, "-0") != "":
		return 0, Refusef(CauseValue, "memory used %s MiB is out of range: want 0 or more", trunc(val))
	case err != nil:
		return 0, Refusef(CauseValue, "memory used %s MiB is too large", trunc(val))
	}
	return m, nil
}

// trunc shortens what a message quotes from a request.
func trunc(s string) string {
	const max = 32
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// parseReply reads a reply line: ok <n>, or error <cause>: <message> (a
// *Refusal).
func parseReply(line string) (int, error) {
	line = strings.TrimSuffix(line, "\n")
	if rest, ok := strings.CutPrefix(line, "ok "); ok {
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("load socket: bad reply %q", trunc(line))
		}
		return n, nil
	}
	if rest, ok := strings.CutPrefix(line, "error "); ok {
		cause, msg, ok := strings.Cut(rest, ": ")
		if !ok {
			return 0, &Refusal{Cause: CauseFailed, Msg: rest}
		}
		return 0, &Refusal{Cause: cause, Msg: msg}
	}
	return 0, fmt.Errorf("load socket: bad reply %q", trunc(line))
}

// reply returns the reply line to n, err.
func reply(n int, err error) string {
	if err == nil {
		return "ok " + strconv.Itoa(n) + "\n"
	}
	var r *Refusal
	if !errors.As(err, &r) {
		r = &Refusal{Cause: CauseFailed, Msg: err.Error()}
	}
	msg := strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return ' '
		}
		return c
	}, r.Msg)
	line := "error " + r.Cause + ": " + msg
	if len(line) > MaxReplyBytes-1 {
		line = line[:MaxReplyBytes-1]
	}
	return line + "\n"
}
