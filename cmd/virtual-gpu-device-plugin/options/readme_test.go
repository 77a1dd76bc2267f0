package options_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
)

// readmeFlags returns the Flags section of README.md, up to the next
// top-level section.
func readmeFlags(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## Flags\n")
	if start < 0 {
		t.Fatal("README.md has no Flags section")
	}
	s = s[start+1:]
	if end := strings.Index(s[3:], "\n## "); end >= 0 {
		s = s[:end+3]
	}
	return s
}

// TestREADME_FlagsTable: every serve flag has a row in the README's table,
// with its default, and the precedence is stated.
func TestREADME_FlagsTable(t *testing.T) {
	readme := readmeFlags(t)
	var usage bytes.Buffer
	options.PrintUsage(&usage)
	lines := regexp.MustCompile(`(?m)^  -([a-z-]+).*(?:\n    .*)*`).FindAllStringSubmatch(usage.String(), -1)
	if len(lines) < 25 {
		t.Fatalf("found %d flags in the usage", len(lines))
	}
	for _, m := range lines {
		row := regexp.MustCompile("(?m)^\\| `-" + regexp.QuoteMeta(m[1]) + "` \\|([^|]*)\\|").FindStringSubmatch(readme)
		if row == nil {
			t.Errorf("README.md: no row for -%s", m[1])
			continue
		}
		def := regexp.MustCompile(`\(default "?([^")]*)"?\)`).FindStringSubmatch(m[0])
		if def == nil || strings.Contains(def[1], " ") {
			continue // no default, or one in words
		}
		shown := strings.Trim(strings.Fields(row[1] + " -")[0], "`")
		if d1, err1 := time.ParseDuration(def[1]); err1 == nil {
			if d2, err2 := time.ParseDuration(shown); err2 != nil || d1 != d2 {
				t.Errorf("README.md: -%s default %q, the flag's is %s", m[1], row[1], def[1])
			}
		} else if shown != def[1] {
			t.Errorf("README.md: -%s default %q, the flag's is %q", m[1], row[1], def[1])
		}
	}
	if !strings.Contains(readme, "command-line flag  >  VGPU_* variable  >  -config file or profile  >  default") {
		t.Error("README.md does not state the precedence")
	}
}

// TestREADME_YAMLExamples: the README's configuration examples are read by
// the parser.
func TestREADME_YAMLExamples(t *testing.T) {
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(readmeFlags(t), -1)
	if len(blocks) < 3 {
		t.Fatalf("found %d YAML examples in the Flags section, want 3", len(blocks))
	}
	o, err := options.Parse(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks {
		f, err := options.ParseFile("README.md example", strings.NewReader(b[1]))
		if err != nil {
			t.Errorf("example %d: %v", i+1, err)
			continue
		}
		if _, err := o.Resolve(f); err != nil {
			t.Errorf("example %d: %v", i+1, err)
		}
	}
}
