package options

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// maxFileBytes bounds a configuration file.
const maxFileBytes = 1 << 20

// File is one parsed configuration file: the -config file or one profile.
// It holds the values it gives the serve flags and its sharing section,
// checked for syntax, types and known fields; the rules between values are
// checked when it is resolved with the command line (Options.Resolve). A
// File is immutable and safe for concurrent use.
type File struct {
	// Path is the file's name as given to ParseFile or LoadFile.
	Path string
	// Profile is the profile's name (the file's base name without .yaml)
	// for a profile, "" for a -config file.
	Profile string
	// Ignored lists the fields known from NVIDIA's device plugin that have
	// no effect here, in the order of the file.
	Ignored []Note

	values layer
	spec   fileSpec
	// shared is the path of the sharing.timeSlicing.resources entry in
	// force, spec's Resources[0] (MIG entries before it are dropped).
	shared string
	// lines holds the line of every key, by path.
	lines map[string]int
}

// at returns "file:line" of the key at path.
func (f *File) at(path string) string { return fileLine(f.Path, f.lines[path]) }

// FileError is an error in a file: it names the file, the line (0 when the
// problem is the whole file) and, where there is one, the field. It
// unwraps to ErrInvalid and to the underlying error, if any.
type FileError struct {
	// File is the file's name.
	File string
	// Line is the 1-based line, or 0.
	Line int
	// Field is the key's path, e.g. flags.devices, or "".
	Field string
	// Msg says what is wrong and what was expected.
	Msg string
	// Err is an underlying error, or nil.
	Err error

	// cause is an error Msg already tells, for errors.Is only.
	cause error
}

// Error returns "file:line: field: msg".
func (e *FileError) Error() string {
	s := fileLine(e.File, e.Line) + ": "
	if e.Field != "" {
		s += e.Field + ": "
	}
	s += e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrInvalid and the underlying error, if any.
func (e *FileError) Unwrap() []error {
	errs := []error{ErrInvalid}
	for _, err := range []error{e.Err, e.cause} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// fileLine returns "file:line", or "file" for line 0.
func fileLine(file string, line int) string {
	if line > 0 {
		return file + ":" + strconv.Itoa(line)
	}
	return file
}

// LoadFile reads the configuration file at path: a regular file (a
// symbolic link to one is fine, as a ConfigMap mounts its keys); a FIFO,
// device or directory is refused before it is opened, so it cannot block.
func LoadFile(path string) (*File, error) {
	data, err := readRegular(path)
	if err != nil {
		return nil, err
	}
	return parseFile(path, data)
}

// readRegular reads the regular file at path, at most maxFileBytes.
func readRegular(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, &FileError{File: path, Msg: "cannot read", Err: err}
	}
	if !fi.Mode().IsRegular() {
		return nil, &FileError{File: path, Msg: fmt.Sprintf("not a regular file (%s)", fi.Mode().Type())}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &FileError{File: path, Msg: "cannot open", Err: err}
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, &FileError{File: path, Msg: "not a regular file", Err: err}
	}
	return readAll(path, f)
}

func readAll(name string, r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, &FileError{File: name, Msg: "cannot read", Err: err}
	}
	if len(data) > maxFileBytes {
		return nil, &FileError{File: name, Msg: fmt.Sprintf("larger than %d bytes", maxFileBytes)}
	}
	return data, nil
}

// ParseFile reads a configuration file (see the package documentation for
// the format) strictly: an unknown or misspelled field, a value of the
// wrong type, a missing or unknown version are errors naming the field and
// the line. name is the file's name in errors; a relative topology path in
// the file is taken relative to the directory of name. Every error is a
// *FileError.
func ParseFile(name string, r io.Reader) (*File, error) {
	data, err := readAll(name, r)
	if err != nil {
		return nil, err
	}
	return parseFile(name, data)
}

func parseFile(name string, data []byte) (*File, error) {
	root, err := yamlRoot(name, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: name, lines: map[string]int{}, values: layer{}}
	f := &File{Path: name}
	if err := d.decode("", root, reflect.ValueOf(&f.spec).Elem()); err != nil {
		return nil, err
	}
	if f.spec.Version == nil {
		// NVIDIA's plugin reads a file without a version as v1; so do we,
		// and say so.
		v := Version
		f.spec.Version = &v
		d.notes = append(d.notes, Note{Field: "version", File: name, Line: d.lines["version"], Why: "missing: read as " + Version + ", as NVIDIA's device plugin reads a file without one"})
	}
	if v := *f.spec.Version; v != Version {
		return nil, &FileError{File: name, Line: d.lines["version"], Field: "version", Msg: fmt.Sprintf("%q is not supported: this plugin reads version %s", v, Version)}
	}
	if f.spec.Sharing != nil && f.spec.Sharing.TimeSlicing != nil {
		ts := f.spec.Sharing.TimeSlicing
		if err := d.dropMIG(ts); err != nil {
			return nil, err
		}
		f.shared = d.sharedPath
		r := ts.Resources[0]
		path := f.shared + ".replicas"
		if v, ok := d.values["replicas"]; ok {
			return nil, &FileError{File: name, Line: d.lines[path], Field: path,
				Msg: fmt.Sprintf("the replicas are also set by %s at line %d: set them in one place", v.at.field, v.at.line)}
		}
		if err := d.set("replicas", path, strconv.Itoa(*r.Replicas), d.lines[path]); err != nil {
			return nil, err
		}
	}
	if v, ok := d.values["topology"]; ok && v.raw != "" && !filepath.IsAbs(v.raw) && !slices.Contains(topology.PresetNames(), v.raw) {
		v.raw = filepath.Join(filepath.Dir(name), v.raw)
		d.values["topology"] = v
	}
	for _, flag := range []string{"telemetry-collectors", "mig-config-file"} { // next to the file, as topology
		if v, ok := d.values[flag]; ok && v.raw != "" && !filepath.IsAbs(v.raw) {
			v.raw = filepath.Join(filepath.Dir(name), v.raw)
			d.values[flag] = v
		}
	}
	f.values, f.Ignored, f.lines = d.values, d.notes, d.lines
	return f, nil
}

// dropMIG keeps the one entry of ts.Resources that is not a MIG
// resource: NVIDIA's files list MIG profiles (nvidia.com/mig-1g.5gb) next
// to the GPUs; virtual GPUs have none, so those entries are noted and
// ignored. One other entry must remain; d.sharedPath becomes its path.
func (d *decoder) dropMIG(ts *timeSlicingSpec) error {
	const list = "sharing.timeSlicing.resources"
	var kept []replicatedResource
	for i, r := range ts.Resources {
		path := list + "[" + strconv.Itoa(i) + "]"
		if isMIGResource(*r.Name) {
			d.notes = append(d.notes, Note{Field: path, File: d.file, Line: d.lines[path+".name"], Why: "a field of NVIDIA's device plugin, ignored: " + *r.Name + ": virtual GPUs have no MIG devices"})
			continue
		}
		if len(kept) == 1 {
			return &FileError{File: d.file, Line: d.lines[path+".name"], Field: path + ".name",
				Msg: fmt.Sprintf("%q is a second resource to share, after %q at line %d: the plugin serves one resource (-resource-name), list it once", *r.Name, *kept[0].Name, d.lines[d.sharedPath+".name"])}
		}
		kept, d.sharedPath = append(kept, r), path
	}
	if len(kept) == 0 {
		return &FileError{File: d.file, Line: d.lines[list], Field: list,
			Msg: "only MIG resources, which virtual GPUs do not have: list the plugin's resource (-resource-name)"}
	}
	ts.Resources = kept
	return nil
}

// isMIGResource reports whether name is a MIG resource of NVIDIA's plugin:
// mig-<profile>, with or without a domain.
func isMIGResource(name string) bool {
	_, local, _ := strings.Cut(name, "/")
	if !strings.Contains(name, "/") {
		local = name
	}
	return strings.HasPrefix(local, "mig-")
}

// yamlRoot parses data into its one document's root mapping.
func yamlRoot(name string, data []byte) (_ *yaml.Node, err error) {
	defer func() {
		// The YAML library is not ours; never let a bug in it crash the plugin.
		if r := recover(); r != nil {
			err = &FileError{File: name, Line: 1, Msg: fmt.Sprintf("not valid YAML: the decoder failed: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root *yaml.Node
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, yamlError(name, err)
		}
		n := &doc
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			n = n.Content[0]
		}
		if emptyDocument(n) {
			continue // a stray --- or a document of comments only
		}
		if root != nil {
			return nil, &FileError{File: name, Line: max(n.Line, 1), Msg: "expected a single YAML document, found another"}
		}
		root = n
	}
	if root == nil {
		// An empty file is the empty configuration, as NVIDIA's plugin
		// reads one: version v1, nothing set.
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, &FileError{File: name, Line: max(root.Line, 1), Msg: "expected a mapping with version: " + Version}
	}
	return root, nil
}

// emptyDocument reports whether n, a document's root, holds nothing: an
// empty document or a bare null.
func emptyDocument(n *yaml.Node) bool {
	switch n.Kind {
	case yaml.DocumentNode:
		return len(n.Content) == 0
	case yaml.ScalarNode:
		return n.Tag == "!!null" && (n.Value == "" || n.Value == "~" || n.Value == "null")
	}
	return false
}

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError turns an error of the YAML library into a *FileError with the
// line taken out of the message (line 1 when it names none).
func yamlError(file string, err error) *FileError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return &FileError{File: file, Line: line, Msg: "not valid YAML: " + msg}
}

// decoder reads YAML nodes into the spec types strictly, remembering the
// line of every key, the values of flag fields and the NVIDIA fields met.
type decoder struct {
	file   string
	lines  map[string]int
	values layer
	notes  []Note
	// nodes counts the nodes visited, against maxNodes.
	nodes int
	// sharedPath is the path of the shared resource's entry (dropMIG).
	sharedPath string
}

// maxNodes bounds the nodes of a file: far more than any configuration
// has, few enough to read fast.
const maxNodes = 20000

func (d *decoder) errorf(path string, n *yaml.Node, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &FileError{File: d.file, Line: max(n.Line, 1), Field: path, Msg: err.Error(), cause: errors.Unwrap(err)}
}

// expected reports a value of the wrong kind.
func (d *decoder) expected(path string, n *yaml.Node, what string) error {
	return d.errorf(path, n, "expected %s, found %s", what, describe(n))
}

// describe names what a node holds: `string "abc"`, `integer 4`, `a list`.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	switch n.Tag {
	case "!!null":
		return "no value"
	case "!!str":
		return "string " + strconv.Quote(v)
	case "!!int":
		return "integer " + v
	case "!!bool":
		return v
	case "!!float":
		return "number " + v
	}
	return n.Tag + " " + strconv.Quote(v)
}

// decode reads n into v, the value at path (dotted keys, [i] for items).
func (d *decoder) decode(path string, n *yaml.Node, v reflect.Value) error {
	if d.nodes++; d.nodes > maxNodes {
		return d.errorf(path, n, "more than %d YAML nodes", maxNodes)
	}
	if n.Kind == yaml.AliasNode {
		return d.errorf(path, n, "YAML aliases (*%s) are not supported: write the value out", n.Value)
	}
	if _, ok := d.lines[path]; !ok && path != "" {
		d.lines[path] = n.Line // a list item; a key's line is set by decodeStruct
	}
	if v.CanAddr() {
		if nd, ok := v.Addr().Interface().(nodeDecoder); ok {
			return nd.decodeNode(d, path, n)
		}
	}
	null := n.Kind == yaml.ScalarNode && n.Tag == "!!null"
	switch v.Kind() {
	case reflect.Pointer:
		if null {
			// No value: not set, as a Kubernetes object reads a null field
			// (and NVIDIA's plugin logs its configuration with nulls). A
			// section with everything under it commented out is one too.
			return nil
		}
		p := reflect.New(v.Type().Elem())
		if err := d.decode(path, n, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Struct:
		return d.decodeStruct(path, n, v)
	case reflect.Slice:
		if null {
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			return d.expected(path, n, "a list")
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := d.decode(path+"["+strconv.Itoa(i)+"]", item, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			return d.expected(path, n, "a string")
		}
		v.SetString(n.Value)
		return nil
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
			return d.expected(path, n, "true or false")
		}
		v.SetBool(b)
		return nil
	case reflect.Int:
		var i int64
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil || int64(int(i)) != i {
			return d.expected(path, n, "an integer")
		}
		v.SetInt(i)
		return nil
	}
	return d.errorf(path, n, "internal error: no decoder for %s", v.Type())
}

// decodeStruct reads a mapping into a spec struct: every key must be a
// field; required fields must be there; flag fields feed the flag layer.
func (d *decoder) decodeStruct(path string, n *yaml.Node, v reflect.Value) error {
	if n.Kind != yaml.MappingNode {
		return d.expected(path, n, "a mapping")
	}
	t := v.Type()
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return d.expected(path, k, "a field name")
		}
		key := k.Value
		fpath := join(path, key)
		if line, dup := seen[key]; dup {
			return d.errorf(fpath, k, "repeated: already set at line %d", line)
		}
		seen[key] = k.Line
		sf, ok := fieldByKey(t, key)
		if !ok {
			return d.unknown(path, k, t)
		}
		fv := v.FieldByIndex(sf.Index)
		d.lines[fpath] = k.Line
		if err := d.decode(fpath, val, fv); err != nil {
			return err
		}
		if why := sf.Tag.Get("nvidia"); why != "" {
			d.notes = append(d.notes, Note{Field: fpath, File: d.file, Line: k.Line, Why: "a field of NVIDIA's device plugin, ignored: " + why})
		}
		if err := d.checkLength(fpath, k, sf, fv); err != nil {
			return err
		}
		if name := sf.Tag.Get("flag"); name != "" && !fv.IsNil() {
			if err := d.set(name, fpath, rawText(fv), k.Line); err != nil {
				return err
			}
		} else if err := d.checkRange(fpath, val, sf, fv); err != nil {
			return err
		}
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		key := yamlKey(sf)
		if sf.Tag.Get("required") != "true" || !v.Field(i).IsNil() {
			continue
		}
		if line, ok := seen[key]; ok {
			return &FileError{File: d.file, Line: line, Field: join(path, key), Msg: "no value: this field is required"}
		}
		line := n.Line
		if l, ok := d.lines[path]; ok {
			line = l // the section's key
		}
		return &FileError{File: d.file, Line: max(line, 1), Field: join(path, key), Msg: "missing: this field is required"}
	}
	return nil
}

// set records a flag's value from the file, after checking that the flag
// reads it; the same flag set twice (flags.deviceListStrategy and
// flags.plugin.deviceListStrategy) must agree.
func (d *decoder) set(flagName, path, raw string, line int) error {
	if prev, ok := d.values[flagName]; ok && prev.raw != raw {
		return &FileError{File: d.file, Line: line, Field: path,
			Msg: fmt.Sprintf("%q disagrees with %s %q at line %d: set one", raw, prev.at.field, prev.raw, prev.at.line)}
	}
	if err := setFlag(newFlagSet(&Settings{}, &bootstrap{}), flagName, raw); err != nil {
		return &FileError{File: d.file, Line: line, Field: path, Msg: fmt.Sprintf("%q", raw), Err: err}
	}
	d.values[flagName] = layerValue{raw: raw, at: origin{src: SourceFile, file: d.file, line: line, field: path}}
	return nil
}

// rawText is a flag field's value (a non-nil pointer) as flag.Value.Set
// reads it.
func rawText(v reflect.Value) string {
	e := v.Elem()
	if s, ok := e.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	switch e.Kind() {
	case reflect.Int:
		return strconv.FormatInt(e.Int(), 10)
	case reflect.Bool:
		return strconv.FormatBool(e.Bool())
	}
	return e.String()
}

// checkRange applies the min and max tags of an integer field.
func (d *decoder) checkRange(path string, n *yaml.Node, sf reflect.StructField, v reflect.Value) error {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Int {
		return nil
	}
	x := v.Int()
	if lo, err := strconv.ParseInt(sf.Tag.Get("min"), 10, 64); err == nil && x < lo {
		return d.errorf(path, n, "%d is less than %d", x, lo)
	}
	if hi, err := strconv.ParseInt(sf.Tag.Get("max"), 10, 64); err == nil && x > hi {
		return d.errorf(path, n, "%d is more than %d", x, hi)
	}
	return nil
}

// checkLength applies the minItems and maxItems tags of a list field.
func (d *decoder) checkLength(path string, k *yaml.Node, sf reflect.StructField, v reflect.Value) error {
	if v.Kind() != reflect.Slice {
		return nil
	}
	if lo, err := strconv.Atoi(sf.Tag.Get("minItems")); err == nil && v.Len() < lo {
		return d.errorf(path, k, "%d entries, want at least %d", v.Len(), lo)
	}
	if hi, err := strconv.Atoi(sf.Tag.Get("maxItems")); err == nil && v.Len() > hi {
		return d.errorf(path, k, "%d entries, want at most %d: %s", v.Len(), hi, sf.Tag.Get("doc"))
	}
	return nil
}

// unknown reports a key that is no field of t, suggesting the nearest.
func (d *decoder) unknown(path string, k *yaml.Node, t reflect.Type) error {
	keys := fieldKeys(t)
	msg := fmt.Sprintf("unknown field %q", k.Value)
	if s := suggest(k.Value, keys); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	} else if path == "" || path == "flags" {
		msg += " (the fields are in deploy/config/config.schema.json)"
	} else {
		msg += " (known: " + strings.Join(keys, ", ") + ")"
	}
	return &FileError{File: d.file, Line: max(k.Line, 1), Field: join(path, k.Value), Msg: msg}
}

// suggest returns the key of keys nearest to s, if it is near enough to
// be a misspelling: the same letters but for case and - or _, or at most
// a third of them wrong.
func suggest(s string, keys []string) string {
	norm := func(x string) string { return strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(x)) }
	best, bestDist := "", len(s)/3+1
	for _, k := range keys {
		if norm(k) == norm(s) {
			return k
		}
		if dist := editDistance(strings.ToLower(s), strings.ToLower(k)); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlKey is a struct field's key in the file.
func yamlKey(sf reflect.StructField) string {
	k, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	return k
}

// fieldByKey finds the field of t with the given key.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if sf := t.Field(i); yamlKey(sf) == key && key != "" && key != "-" {
			return sf, true
		}
	}
	return reflect.StructField{}, false
}

// fieldKeys lists the keys of t's fields, in declaration order.
func fieldKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if k := yamlKey(t.Field(i)); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

// specFlags maps every flag a file may set to the field's path and its
// profile tag, from the spec types.
func specFlags() map[string][]specFlag {
	out := map[string][]specFlag{}
	var walk func(path string, t reflect.Type)
	walk = func(path string, t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[nodeDecoder]()) {
			return
		}
		for i := range t.NumField() {
			sf := t.Field(i)
			p := join(path, yamlKey(sf))
			if name := sf.Tag.Get("flag"); name != "" {
				out[name] = append(out[name], specFlag{path: p, profile: sf.Tag.Get("profile"), field: sf})
				continue
			}
			walk(p, sf.Type)
		}
	}
	walk("", reflect.TypeFor[fileSpec]())
	return out
}

// FileFlag is a serve flag a configuration file may set.
type FileFlag struct {
	// Name is the flag's name, e.g. resource-name.
	Name string
	// InProfile reports whether a profile may set it: the machine's shape
	// and behaviour, not a path, an address or a setting of the process.
	InProfile bool
}

// FileFlags lists the flags a configuration file may set, sorted by name,
// from the file's types (what the JSON Schema says of each field, too).
func FileFlags() []FileFlag {
	var out []FileFlag
	for name, sfs := range specFlags() {
		out = append(out, FileFlag{Name: name, InProfile: sfs[0].profile == "allow"})
	}
	slices.SortFunc(out, func(a, b FileFlag) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// specFlag is a field of the file that sets a flag.
type specFlag struct {
	path    string
	profile string
	field   reflect.StructField
}

// flagUsage returns a flag's usage with the value name's backquotes
// removed, and its default as text.
func flagUsage(name string) (usage, def string, ok bool) {
	f := newFlagSet(&Settings{}, &bootstrap{}).Lookup(name)
	if f == nil {
		return "", "", false
	}
	_, usage = flag.UnquoteUsage(f)
	return usage, f.DefValue, true
}
