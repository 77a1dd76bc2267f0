package options

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// SchemaID is where the JSON Schema of the file is published.
const SchemaID = "https://github.com/unicore/virtual-gpu-device-plugin/blob/main/deploy/config/config.schema.json"

// Schema returns the JSON Schema (draft 2020-12) of the configuration file,
// generated from the Go types the parser reads, the flags' usage, defaults
// and accepted values: deploy/config/config.schema.json is its output
// (a test keeps them equal). A file the parser accepts validates against
// it, except for the rules between values, which Options.Resolve checks.
func Schema() ([]byte, error) {
	s := schemaOf(reflect.TypeFor[fileSpec](), reflect.StructField{})
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	s["$id"] = SchemaID
	s["title"] = "virtual-gpu-device-plugin configuration file"
	s["description"] = "The -config file of virtual-gpu-device-plugin serve, or one profile of a -config directory, " +
		"in the shape of NVIDIA's device plugin configuration (version v1). Precedence: command line > VGPU_* variable > this file > default."
	s["type"] = "object" // the root is never null
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// schemaOf returns the schema of a value of type t, the type of the struct
// field sf (zero for the root).
func schemaOf(t reflect.Type, sf reflect.StructField) map[string]any {
	var s map[string]any
	if t.Kind() == reflect.Pointer {
		s = schemaOf(t.Elem(), sf)
		if sf.Tag.Get("required") == "true" {
			return s
		}
		return nullable(s) // null is not set, as the parser reads it
	}
	if x, ok := reflect.New(t).Elem().Interface().(schemaer); ok {
		s = x.jsonSchema()
	} else {
		s = map[string]any{}
		switch t.Kind() {
		case reflect.Struct:
			props := map[string]any{}
			var required []any
			for i := range t.NumField() {
				f := t.Field(i)
				key := yamlKey(f)
				props[key] = fieldSchema(f)
				if f.Tag.Get("required") == "true" {
					required = append(required, key)
				}
			}
			s["type"] = "object"
			s["additionalProperties"] = false
			s["properties"] = props
			if len(required) > 0 {
				s["required"] = required
			}
		case reflect.Slice:
			s["type"] = []any{"array", "null"}
			s["items"] = schemaOf(t.Elem(), reflect.StructField{})
			for _, k := range []string{"minItems", "maxItems"} {
				if n, err := strconv.Atoi(sf.Tag.Get(k)); err == nil {
					s[k] = n
				}
			}
		case reflect.String:
			s["type"] = "string"
		case reflect.Int:
			s["type"] = "integer"
		case reflect.Bool:
			s["type"] = "boolean"
		}
	}
	return s
}

// nullable returns s allowing null as well.
func nullable(s map[string]any) map[string]any {
	switch typ := s["type"].(type) {
	case string:
		s["type"] = []any{typ, "null"}
		return s
	case []any:
		if !slices.Contains(typ, any("null")) {
			s["type"] = append(typ, "null")
		}
		return s
	}
	if alts, ok := s["anyOf"].([]any); ok {
		s["anyOf"] = append(alts, map[string]any{"type": "null"})
		return s
	}
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}

// fieldSchema is the schema of a struct field: its type's, with the
// field's description, default, accepted values and range.
func fieldSchema(f reflect.StructField) map[string]any {
	s := schemaOf(f.Type, f)
	for _, k := range []string{"minimum", "maximum"} {
		if n, err := strconv.Atoi(f.Tag.Get(k[:3])); err == nil {
			s[k] = n
		}
	}
	switch name := f.Tag.Get("flag"); {
	case name != "":
		usage, def, _ := flagUsage(name)
		desc := usage + " (the flag -" + name + ", the variable " + EnvName(name) + ")."
		switch f.Tag.Get("profile") {
		case "path":
			desc += " A path or address: not in a profile."
		case "process":
			desc += " Holds for the whole process: not in a profile."
		}
		s["description"] = desc
		s["default"] = typedDefault(f.Type, def)
		if e := enums(name); e != nil && f.Type.Elem().Kind() == reflect.String {
			vals := make([]any, len(e))
			for i, v := range e {
				vals[i] = v
			}
			if f.Tag.Get("required") != "true" {
				vals = append(vals, nil)
			}
			s["enum"] = vals
		}
	case f.Tag.Get("nvidia") != "":
		s["description"] = "A field of NVIDIA's device plugin, accepted and ignored: " + f.Tag.Get("nvidia") + "."
	default:
		s["description"] = f.Tag.Get("doc")
		if e := f.Tag.Get("enum"); e != "" {
			var vals []any
			for _, v := range strings.Split(e, ",") {
				vals = append(vals, v)
			}
			if f.Tag.Get("required") != "true" {
				vals = append(vals, nil)
			}
			s["enum"] = vals
		}
	}
	return s
}

// typedDefault is a flag's default as a JSON value of the field's type.
func typedDefault(t reflect.Type, def string) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case reflect.TypeFor[duration](), reflect.TypeFor[ByteSize](), reflect.TypeFor[stringList]():
		return def
	}
	switch t.Kind() {
	case reflect.Int:
		n, _ := strconv.Atoi(def)
		return n
	case reflect.Bool:
		return def == "true"
	}
	return strings.TrimSpace(def)
}
