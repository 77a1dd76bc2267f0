package scope_test

import (
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate/scope"
)

// TestParseSelector: KWOK's annotation and a label selector select by
// labels and annotations alike, a label winning over an annotation of the
// same key; an empty selector, or one that selects every node, is refused
// with an error that names it.
func TestParseSelector(t *testing.T) {
	sel, err := scope.ParseSelector(scope.DefaultSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		labels, annotations map[string]string
		want                bool
	}{
		{nil, map[string]string{"kwok.x-k8s.io/node": "fake"}, true},
		{map[string]string{"kwok.x-k8s.io/node": "fake"}, nil, true},
		{map[string]string{"kwok.x-k8s.io/node": "real"}, map[string]string{"kwok.x-k8s.io/node": "fake"}, false},
		{map[string]string{"type": "kwok"}, nil, false},
		{nil, nil, false},
	} {
		if got := sel.Matches(c.labels, c.annotations); got != c.want {
			t.Errorf("Matches(labels %v, annotations %v) = %v, want %v", c.labels, c.annotations, got, c.want)
		}
	}
	if sel.String() != scope.DefaultSelector || sel.IsZero() {
		t.Errorf("selector %q (zero %v), want %q", sel.String(), sel.IsZero(), scope.DefaultSelector)
	}
	if (scope.Selector{}).Matches(map[string]string{"a": "b"}, nil) || !(scope.Selector{}).IsZero() {
		t.Error("the zero Selector selects, or is not zero")
	}
	for in, want := range map[string]string{
		"":       "empty node selector",
		"  ":     "empty node selector",
		"a in (": `node selector "a in ("`,
	} {
		if _, err := scope.ParseSelector(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSelector(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestStatePath(t *testing.T) {
	if got, want := scope.StatePath("/var/lib/x", "kwok-1"), "/var/lib/x/nodes/kwok-1.db"; got != want {
		t.Errorf("StatePath = %q, want %q", got, want)
	}
}

func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{scope.DefaultSelector, "type=kwok,!gpu", "a in (b,c)", "", "=", "a!=b,", "x==y"} {
		f.Add(s, "kwok.x-k8s.io/node", "fake")
	}
	f.Fuzz(func(t *testing.T, s, k, v string) {
		sel, err := scope.ParseSelector(s)
		if err != nil {
			if sel.String() != "" || sel.Matches(map[string]string{k: v}, nil) {
				t.Fatalf("a refused selector %q selects", s)
			}
			return
		}
		// A label and an annotation of the same key and value select alike.
		if sel.Matches(map[string]string{k: v}, nil) != sel.Matches(nil, map[string]string{k: v}) {
			t.Fatalf("%q: label and annotation %s=%s differ", s, k, v)
		}
	})
}
