package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/types"
)

// nilStringer panics in String: a klog object reference of a nil pointer.
type nilStringer struct{ name string }

func (n *nilStringer) String() string { return n.name }

// TestLogr: the libraries' logr lines become the plugin's zerolog lines,
// V-levels mapped (0 info, 1-4 debug, 5+ trace) and filtered by the
// logger's level, names joined with dots, key/value pairs as fields
// (errors and Stringers as text, a lone key "(MISSING)", a panicking
// String noted), WithValues kept.
func TestLogr(t *testing.T) {
	var buf bytes.Buffer
	l := Logr(zerolog.New(&buf).Level(zerolog.DebugLevel))
	lines := func() []map[string]any {
		t.Helper()
		var out []map[string]any
		for _, s := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if s == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				t.Fatalf("line %q: %v", s, err)
			}
			out = append(out, m)
		}
		buf.Reset()
		return out
	}

	l.Info("started", "claim", types.NamespacedName{Namespace: "ns", Name: "c"}, "count", 2)
	l.V(3).Info("published")
	l.V(5).Info("request") // trace: below the logger's debug level
	got := lines()
	if len(got) != 2 {
		t.Fatalf("lines %v, want the info and the debug line", got)
	}
	if got[0]["level"] != "info" || got[0]["message"] != "started" || got[0]["claim"] != "ns/c" || got[0]["count"] != float64(2) {
		t.Errorf("info line %v", got[0])
	}
	if got[1]["level"] != "debug" || got[1]["message"] != "published" {
		t.Errorf("V(3) line %v", got[1])
	}
	if l.V(5).Enabled() || !l.V(4).Enabled() || !l.V(0).Enabled() {
		t.Errorf("Enabled: V(5) %v V(4) %v V(0) %v, want false true true", l.V(5).Enabled(), l.V(4).Enabled(), l.V(0).Enabled())
	}

	named := l.WithName("kubeletplugin").WithName("registrar").WithValues("driver", "gpu.example.com")
	named.Error(errors.New("connection refused"), "registration failed", "lone")
	named.Info("odd keys", 7, "seven", "ref", (*nilStringer)(nil))
	got = lines()
	if len(got) != 2 {
		t.Fatalf("lines %v, want 2", got)
	}
	e := got[0]
	if e["level"] != "error" || e["error"] != "connection refused" || e["logger"] != "kubeletplugin.registrar" || e["driver"] != "gpu.example.com" || e["lone"] != "(MISSING)" {
		t.Errorf("error line %v", e)
	}
	if o := got[1]; o["7"] != "seven" || !strings.HasPrefix(o["ref"].(string), "(PANIC=") || o["driver"] != "gpu.example.com" {
		t.Errorf("odd line %v", o)
	}
}
