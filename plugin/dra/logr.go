package dra

import (
	"fmt"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
)

// Logr returns a logr.Logger writing to log: what the kubeletplugin and
// resourceslice libraries log (through klog's context logger) joins the
// plugin's own lines. logr's V-levels map onto zerolog's: V(0) is info,
// V(1) to V(4) debug (the libraries' registration and publishing lines),
// V(5) and above trace (their gRPC requests and responses). A name becomes
// the line's "logger" field, joined with dots.
func Logr(log zerolog.Logger) logr.Logger {
	return logr.New(&sink{log: log})
}

type sink struct {
	log  zerolog.Logger
	name string
}

var _ logr.LogSink = (*sink)(nil)

func (s *sink) Init(logr.RuntimeInfo) {}

// level is the zerolog level of V-level v.
func level(v int) zerolog.Level {
	switch {
	case v <= 0:
		return zerolog.InfoLevel
	case v < 5:
		return zerolog.DebugLevel
	}
	return zerolog.TraceLevel
}

func (s *sink) Enabled(v int) bool {
	l := level(v)
	return l >= s.log.GetLevel() && l >= zerolog.GlobalLevel()
}

func (s *sink) Info(v int, msg string, kv ...any) {
	s.event(s.log.WithLevel(level(v)), kv).Msg(msg)
}

func (s *sink) Error(err error, msg string, kv ...any) {
	s.event(s.log.Error().Err(err), kv).Msg(msg)
}

// event adds the sink's name and the key/value pairs to e.
func (s *sink) event(e *zerolog.Event, kv []any) *zerolog.Event {
	if e == nil {
		return nil
	}
	if s.name != "" {
		e = e.Str("logger", s.name)
	}
	return e.Fields(fields(kv))
}

func (s *sink) WithValues(kv ...any) logr.LogSink {
	return &sink{log: s.log.With().Fields(fields(kv)).Logger(), name: s.name}
}

func (s *sink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "." + name
	}
	return &sink{log: s.log, name: name}
}

// fields turns logr's key/value pairs into zerolog's: a key that is not a
// string is printed, a lone key gets the value "(MISSING)" (as klog), and
// a value that is a fmt.Stringer or an error is written as its text (klog's
// object references, errors).
func fields(kv []any) []any {
	out := make([]any, 0, len(kv)+len(kv)%2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			k = fmt.Sprint(kv[i])
		}
		var v any = "(MISSING)"
		if i+1 < len(kv) {
			v = kv[i+1]
		}
		switch x := v.(type) {
		case error:
			v = text(x.Error)
		case fmt.Stringer:
			v = text(x.String)
		}
		out = append(out, k, v)
	}
	return out
}

// text returns what f returns, or a note if it panics (a method of a nil
// pointer): a log line never takes the process down.
func text(f func() string) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprintf("(PANIC=%v)", r)
		}
	}()
	return f()
}
