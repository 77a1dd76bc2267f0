package plugintest

import (
	"strings"
	"testing"
)

// Fields returns the cells (whitespace-separated) of the line of out that
// starts with prefix, failing the test when there is none: the columns of a
// table a command printed.
func Fields(t testing.TB, out, prefix string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return strings.Fields(line)
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", prefix, out)
	return nil
}
