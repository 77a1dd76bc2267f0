package scope

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Selector picks the Nodes to simulate: a selector in label-selector
// syntax ("a=b,c in (d),!e") matched against a node's labels and
// annotations together, a label winning over an annotation of the same
// key. So KWOK's annotation kwok.x-k8s.io/node=fake selects as well as a
// label such as type=kwok. The zero value selects nothing.
type Selector struct {
	sel  labels.Selector
	text string
}

// ParseSelector parses s. An empty selector is refused: it would make
// every node of the cluster a simulated one, the real nodes too.
func ParseSelector(s string) (Selector, error) {
	if strings.TrimSpace(s) == "" {
		return Selector{}, fmt.Errorf("empty node selector: it would simulate every node, the real ones too (default %s)", DefaultSelector)
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return Selector{}, fmt.Errorf("node selector %q: %w", s, err)
	}
	if sel.Empty() {
		return Selector{}, fmt.Errorf("node selector %q selects every node, the real ones too", s)
	}
	return Selector{sel: sel, text: s}, nil
}

// Matches reports whether a node with these labels and annotations is
// selected.
func (s Selector) Matches(nodeLabels, annotations map[string]string) bool {
	if s.sel == nil {
		return false
	}
	set := make(labels.Set, len(nodeLabels)+len(annotations))
	for k, v := range annotations {
		set[k] = v
	}
	for k, v := range nodeLabels {
		set[k] = v
	}
	return s.sel.Matches(set)
}

// IsZero reports whether s is the zero Selector, which selects nothing.
func (s Selector) IsZero() bool { return s.sel == nil }

// String returns the selector as given.
func (s Selector) String() string { return s.text }
