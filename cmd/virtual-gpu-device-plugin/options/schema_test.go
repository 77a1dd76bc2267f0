package options_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
)

var update = flag.Bool("update", false, "write deploy/config/config.schema.json from the Go types")

// configDir is deploy/config, where the schema and the example are published.
var configDir = filepath.Join("..", "..", "..", "deploy", "config")

// schemaDoc is the generated schema, decoded.
func schemaDoc(t testing.TB) map[string]any {
	t.Helper()
	b, err := options.Schema()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestSchema_MatchesCommitted: the published schema is the one generated
// from the types the parser reads (go test -run TestSchema -update writes it).
func TestSchema_MatchesCommitted(t *testing.T) {
	want, err := options.Schema()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(configDir, "config.schema.json")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what the Go types generate: run go test ./cmd/virtual-gpu-device-plugin/options -run TestSchema -update", path)
	}
}

// TestSchema_EveryFlag: every serve flag but those that choose the file
// and the node is a field of flags, named in camelCase, with its flag's
// default.
func TestSchema_EveryFlag(t *testing.T) {
	props := schemaDoc(t)["properties"].(map[string]any)["flags"].(map[string]any)["properties"].(map[string]any)
	var usage bytes.Buffer
	options.PrintUsage(&usage)
	flagRE := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	notInFile := []string{"config", "config-default", "node-name", "kubeconfig", "label-node", "version"}
	n := 0
	for _, m := range flagRE.FindAllStringSubmatch(usage.String(), -1) {
		name := m[1]
		if slices.Contains(notInFile, name) {
			continue
		}
		n++
		found := false
		for key, p := range props {
			if kebab(key) == name {
				found = true
				desc, _ := p.(map[string]any)["description"].(string)
				if !strings.Contains(desc, "(the flag -"+name+", the variable "+options.EnvName(name)+")") {
					t.Errorf("flags.%s: description %q does not name -%s", key, desc, name)
				}
				if _, ok := p.(map[string]any)["default"]; !ok {
					t.Errorf("flags.%s: no default", key)
				}
			}
		}
		if !found {
			t.Errorf("-%s is no field of flags in the schema", name)
		}
	}
	if n < 20 {
		t.Errorf("found %d flags in the usage, want every serve flag", n)
	}
}

// TestExample_ParsesAndResolves: the published example is read by the
// parser, validates against the schema and resolves to the defaults.
func TestExample_ParsesAndResolves(t *testing.T) {
	path := filepath.Join(configDir, "example.yaml")
	f, err := options.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Ignored != nil {
		t.Errorf("the example sets fields without effect: %v", f.Ignored)
	}
	validateFile(t, path)
	c := mustLoad(t, []string{"-config=" + path}, nil)
	d := mustLoad(t, nil, nil)
	if c.GPUs.Machine.Len() != d.GPUs.Machine.Len() || c.GPUs.ResourceName != d.GPUs.ResourceName || c.StatePath != d.StatePath || c.History.MaxBytes != d.History.MaxBytes ||
		c.History.MaxAge != d.History.MaxAge || c.AbandonAfter != d.AbandonAfter || c.GPUs.Sharing.Replicas != 1 || c.Source("devices") != options.SourceFile {
		t.Errorf("the example does not give the defaults: %+v", c)
	}
}

// TestExample_ShowsEveryField: every field of the schema is in the example,
// set or in a comment.
func TestExample_ShowsEveryField(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(configDir, "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	example := string(b)
	var walk func(path string, s map[string]any)
	walk = func(path string, s map[string]any) {
		if items, ok := s["items"].(map[string]any); ok {
			walk(path+"[]", items)
		}
		props, _ := s["properties"].(map[string]any)
		for key, p := range props {
			if !regexp.MustCompile(`(?m)^[ #-]*` + regexp.QuoteMeta(key) + `:`).MatchString(example) {
				t.Errorf("%s.%s is not in the example", path, key)
			}
			walk(path+"."+key, p.(map[string]any))
		}
	}
	walk("", schemaDoc(t))
}

// TestSchema_AgreesWithParser: the files the parser reads validate against
// the schema, and those it refuses for their shape (unknown fields, wrong
// types, missing fields, list lengths) do not.
func TestSchema_AgreesWithParser(t *testing.T) {
	good, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if len(good) < 4 {
		t.Fatalf("testdata: %v", good)
	}
	for _, p := range good {
		if _, err := options.LoadFile(p); err != nil {
			t.Errorf("parser: %v", err)
		}
		validateFile(t, p)
	}
	for _, tc := range shapeErrors {
		t.Run(tc.name, func(t *testing.T) {
			_, perr := options.ParseFile("c.yaml", strings.NewReader(tc.file))
			var doc any
			if err := yaml.Unmarshal([]byte(tc.file), &doc); err != nil {
				t.Fatalf("not YAML: %v", err)
			}
			serr := validate(schemaDoc(t), doc, "")
			if perr == nil || serr == nil {
				t.Errorf("parser: %v; schema: %v; want both to refuse", perr, serr)
			}
		})
	}
}

// validateFile checks a YAML file against the schema.
func validateFile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if err := validate(schemaDoc(t), doc, ""); err != nil {
		t.Errorf("%s does not validate against the schema: %v", path, err)
	}
}

// validate checks v against the subset of JSON Schema the generator
// writes: type, properties, additionalProperties false, required, items,
// minItems, maxItems, enum, const, minimum, maximum, pattern, anyOf, not.
func validate(s map[string]any, v any, path string) error {
	if not, ok := s["not"].(map[string]any); ok {
		if validate(not, v, path) == nil {
			return fmt.Errorf("%s: must not be there", path)
		}
	}
	if alts, ok := s["anyOf"].([]any); ok {
		var errs []string
		for _, alt := range alts {
			err := validate(alt.(map[string]any), v, path)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			return fmt.Errorf("%s: no alternative matches: %s", path, strings.Join(errs, "; "))
		}
	}
	if c, ok := s["const"]; ok && !equal(c, v) {
		return fmt.Errorf("%s: %v is not %v", path, v, c)
	}
	if e, ok := s["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return equal(x, v) }) {
		return fmt.Errorf("%s: %v is not one of %v", path, v, e)
	}
	if t, ok := s["type"]; ok {
		types, _ := t.([]any)
		if str, ok := t.(string); ok {
			types = []any{str}
		}
		if !slices.ContainsFunc(types, func(x any) bool { return typeOf(v) == x || x == "number" && typeOf(v) == "integer" }) {
			return fmt.Errorf("%s: %s, want %v", path, typeOf(v), types)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for _, r := range asSlice(s["required"]) {
			if _, ok := x[r.(string)]; !ok {
				return fmt.Errorf("%s: %s is required", path, r)
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p, ok := props[k].(map[string]any)
			if !ok {
				if s["additionalProperties"] == false {
					return fmt.Errorf("%s.%s: unknown field", path, k)
				}
				continue
			}
			if err := validate(p, x[k], path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		if n, ok := s["minItems"].(float64); ok && float64(len(x)) < n {
			return fmt.Errorf("%s: %d items, want at least %v", path, len(x), n)
		}
		if n, ok := s["maxItems"].(float64); ok && float64(len(x)) > n {
			return fmt.Errorf("%s: %d items, want at most %v", path, len(x), n)
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, item := range x {
				if err := validate(items, item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case string:
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
			return fmt.Errorf("%s: %q does not match %s", path, x, p)
		}
	case int:
		if n, ok := s["minimum"].(float64); ok && float64(x) < n {
			return fmt.Errorf("%s: %d is less than %v", path, x, n)
		}
		if n, ok := s["maximum"].(float64); ok && float64(x) > n {
			return fmt.Errorf("%s: %d is more than %v", path, x, n)
		}
	}
	return nil
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// typeOf is the JSON type of a value decoded from YAML.
func typeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case int, int64, uint64:
		return "integer"
	case float64:
		if x == math.Trunc(x) {
			return "integer"
		}
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// equal compares a JSON value from the schema with one decoded from YAML.
func equal(a, b any) bool {
	if fa, ok := a.(float64); ok {
		if ib, ok := b.(int); ok {
			return fa == float64(ib)
		}
	}
	return a == b
}
