package plugintest

import (
	"regexp"
	"strings"
	"testing"
)

// Sample is one line of a Prometheus text exposition.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  string
}

var (
	sampleRE = regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$`)
	labelRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// ParseExposition returns the samples of a text exposition, failing the
// test on a line that does not parse.
func ParseExposition(t testing.TB, body string) []Sample {
	t.Helper()
	var out []Sample
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("exposition line %q does not parse", line)
		}
		s := Sample{Name: m[1], Labels: map[string]string{}, Value: m[3]}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			s.Labels[l[1]] = l[2]
		}
		out = append(out, s)
	}
	return out
}

// Values returns, by gpu label, the value of the samples of name without
// pod labels or with any (one per GPU is expected).
func Values(samples []Sample, name string) map[string]string {
	out := map[string]string{}
	for _, s := range samples {
		if s.Name == name {
			out[s.Labels["gpu"]] = s.Value
		}
	}
	return out
}
