package mig

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// ConfigVersion is the only mig-parted config version there is.
const ConfigVersion = "v1"

// MaxConfigBytes bounds a configuration file ParseConfig reads.
const MaxConfigBytes = 4 << 20

//go:embed builtin-configs.yaml
var builtinYAML []byte

// Config is a mig-parted configuration: named layouts (its mig-configs),
// each a list of entries applied to the GPUs they match. A Config from
// ParseConfig, BuiltinConfig or Merge is not shared with anything else;
// it is not safe for concurrent modification.
type Config struct {
	// Version is "v1".
	Version string
	// Layouts are the mig-configs by name; each has at least one entry.
	Layouts map[string]Layout
}

// Layout is one named MIG configuration: its entries in file order. On a
// GPU the last entry that matches it applies, as mig-parted applies the
// entries one after the other.
type Layout []Entry

// Entry is one element of a layout (mig-parted's MigConfigSpec).
type Entry struct {
	// DeviceFilter lists the PCI ids ("0x233010DE", or with the subsystem
	// "0x233010DE:0x16C110DE") of the products the entry applies to; empty
	// means every product.
	DeviceFilter []string
	// AllDevices is devices: all.
	AllDevices bool
	// Devices are the GPU indexes of devices: [0, 1] (nil with AllDevices).
	Devices []int
	// MIGEnabled is mig-enabled.
	MIGEnabled bool
	// MIGDevices is mig-devices: profile name to count. Empty with MIG
	// disabled, or enabled with no MIG devices (mig-devices: {}).
	MIGDevices map[string]int
}

// ConfigError is the error of a configuration that cannot be used. It
// names the source (the file), the line, the layout (mig-config) and entry,
// and the field; it unwraps to ErrInvalidConfig.
type ConfigError struct {
	// Source is the name given to ParseConfig (usually the file path).
	Source string
	// Line is the 1-based line of the problem, 0 if none.
	Line int
	// Layout is the mig-config's name, "" if the problem is outside one.
	Layout string
	// Entry is the 0-based index of the entry in the layout, -1 if none.
	Entry int
	// Field is the field ("devices", "mig-devices.1g.10gb"), "" if none.
	Field string
	// Msg says what is wrong and what was expected.
	Msg string
}

// Error formats the error as
// `source:line: mig-configs["name"][entry].field: msg`.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	path := ""
	if e.Layout != "" {
		path = "mig-configs[" + strconv.Quote(e.Layout) + "]"
		if e.Entry >= 0 {
			path += "[" + strconv.Itoa(e.Entry) + "]"
		}
	}
	if e.Field != "" {
		if path != "" {
			path += "."
		}
		path += e.Field
	}
	if path != "" {
		b.WriteString(path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// parser walks the YAML tree of one config.
type parser struct {
	source string
	budget int // nodes left to visit (aliases can multiply a small file)
}

func (p *parser) errf(n *yaml.Node, layout string, entry int, field, format string, args ...any) *ConfigError {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ConfigError{Source: p.source, Line: line, Layout: layout, Entry: entry, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// resolve follows an alias and charges the visit to the budget.
func (p *parser) resolve(n *yaml.Node) (*yaml.Node, error) {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode; depth++ {
		if depth > 100 {
			return nil, p.errf(n, "", -1, "", "alias chain too deep")
		}
		n = n.Alias
	}
	p.budget--
	if p.budget < 0 {
		return nil, p.errf(n, "", -1, "", "document too large once its aliases are expanded")
	}
	if n == nil {
		return nil, p.errf(nil, "", -1, "", "empty node")
	}
	return n, nil
}

// mapping returns the key/value pairs of a mapping node, refusing
// duplicate and non-string keys.
func (p *parser) mapping(n *yaml.Node, layout string, entry int, field string) ([][2]*yaml.Node, error) {
	n, err := p.resolve(n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, layout, entry, field, "want a mapping, got %s", describe(n))
	}
	seen := map[string]bool{}
	var pairs [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := p.resolve(n.Content[i])
		if err != nil {
			return nil, err
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			return nil, p.errf(k, layout, entry, field, "keys must be plain strings (no merge keys)")
		}
		if seen[k.Value] {
			return nil, p.errf(k, layout, entry, joinField(field, k.Value), "defined twice")
		}
		seen[k.Value] = true
		pairs = append(pairs, [2]*yaml.Node{k, n.Content[i+1]})
	}
	return pairs, nil
}

func joinField(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// describe names a node's kind for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return strconv.Quote(n.Value)
		}
		return n.Value
	}
	return "nothing"
}

// ParseConfig parses a mig-parted configuration (version: v1, mig-configs)
// strictly: unknown fields, duplicate keys, wrong types, a missing version,
// devices or mig-enabled, mig-devices with MIG disabled or missing with
// MIG enabled, malformed profile names, negative counts, all-zero counts
// and malformed device filters are *ConfigError values naming the source,
// the line, the layout, the entry and the field. What the YAML means is
// mig-parted's (api/spec/v1 of github.com/NVIDIA/mig-parted): devices is
// "all" or a list of GPU indexes; device-filter one PCI id or a list.
// Whether a layout fits a product is Resolve's to say.
func ParseConfig(source string, r io.Reader) (*Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read mig-parted config %s: %w", source, err)
	}
	if len(data) > MaxConfigBytes {
		return nil, &ConfigError{Source: source, Entry: -1, Msg: fmt.Sprintf("larger than %d bytes", MaxConfigBytes)}
	}
	return parseConfigBytes(source, data)
}

func parseConfigBytes(source string, data []byte) (*Config, error) {
	p := &parser{source: source, budget: 1 << 20}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ConfigError{Source: source, Entry: -1, Msg: "empty document, want version and mig-configs"}
		}
		return nil, &ConfigError{Source: source, Entry: -1, Msg: "not YAML: " + err.Error()}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &ConfigError{Source: source, Line: extra.Line, Entry: -1, Msg: "more than one YAML document"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &ConfigError{Source: source, Entry: -1, Msg: "empty document, want version and mig-configs"}
	}
	pairs, err := p.mapping(doc.Content[0], "", -1, "")
	if err != nil {
		return nil, err
	}
	cfg := &Config{}
	var configsNode *yaml.Node
	for _, kv := range pairs {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "version":
			s, err := p.str(v, "", -1, "version")
			if err != nil {
				return nil, err
			}
			if s != ConfigVersion {
				return nil, p.errf(v, "", -1, "version", "%q, want %q", s, ConfigVersion)
			}
			cfg.Version = s
		case "mig-configs":
			configsNode = v
		default:
			return nil, p.errf(k, "", -1, k.Value, "unknown field (want version, mig-configs)")
		}
	}
	if cfg.Version == "" {
		return nil, p.errf(doc.Content[0], "", -1, "version", "missing, want %q", ConfigVersion)
	}
	if configsNode == nil {
		return nil, p.errf(doc.Content[0], "", -1, "mig-configs", "missing")
	}
	layouts, err := p.mapping(configsNode, "", -1, "mig-configs")
	if err != nil {
		return nil, err
	}
	if len(layouts) == 0 {
		return nil, p.errf(configsNode, "", -1, "mig-configs", "want at least one layout")
	}
	cfg.Layouts = make(map[string]Layout, len(layouts))
	for _, kv := range layouts {
		name := kv[0].Value
		if name == "" {
			return nil, p.errf(kv[0], "", -1, "mig-configs", "empty layout name")
		}
		l, err := p.layout(name, kv[1])
		if err != nil {
			return nil, err
		}
		cfg.Layouts[name] = l
	}
	return cfg, nil
}

// layout parses one mig-config: a non-empty list of entries.
func (p *parser) layout(name string, n *yaml.Node) (Layout, error) {
	n, err := p.resolve(n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, name, -1, "", "want a list of entries, got %s", describe(n))
	}
	if len(n.Content) == 0 {
		return nil, p.errf(n, name, -1, "", "want at least one entry")
	}
	l := make(Layout, 0, len(n.Content))
	for i, en := range n.Content {
		e, err := p.entry(name, i, en)
		if err != nil {
			return nil, err
		}
		l = append(l, e)
	}
	return l, nil
}

// entry parses one element of a layout.
func (p *parser) entry(layout string, idx int, n *yaml.Node) (Entry, error) {
	pairs, err := p.mapping(n, layout, idx, "")
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	var haveDevices, haveEnabled bool
	for _, kv := range pairs {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "device-filter":
			if e.DeviceFilter, err = p.deviceFilter(layout, idx, v); err != nil {
				return Entry{}, err
			}
		case "devices":
			haveDevices = true
			if e.AllDevices, e.Devices, err = p.devices(layout, idx, v); err != nil {
				return Entry{}, err
			}
		case "mig-enabled":
			haveEnabled = true
			if e.MIGEnabled, err = p.boolean(v, layout, idx, "mig-enabled"); err != nil {
				return Entry{}, err
			}
		case "mig-devices":
			if e.MIGDevices, err = p.migDevices(layout, idx, v); err != nil {
				return Entry{}, err
			}
		default:
			return Entry{}, p.errf(k, layout, idx, k.Value, "unknown field (want device-filter, devices, mig-enabled, mig-devices)")
		}
	}
	switch {
	case !haveDevices:
		return Entry{}, p.errf(n, layout, idx, "devices", "missing (want all or a list of GPU indexes)")
	case !haveEnabled:
		return Entry{}, p.errf(n, layout, idx, "mig-enabled", "missing (want true or false)")
	case e.MIGEnabled && e.MIGDevices == nil:
		return Entry{}, p.errf(n, layout, idx, "mig-devices", "missing with mig-enabled: true (mig-devices: {} for none)")
	case !e.MIGEnabled && len(e.MIGDevices) > 0:
		return Entry{}, p.errf(n, layout, idx, "mig-devices", "MIG devices with mig-enabled: false")
	}
	return e, nil
}

// str reads a string scalar.
func (p *parser) str(n *yaml.Node, layout string, entry int, field string) (string, error) {
	n, err := p.resolve(n)
	if err != nil {
		return "", err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", p.errf(n, layout, entry, field, "want a string, got %s", describe(n))
	}
	return n.Value, nil
}

// boolean reads true or false.
func (p *parser) boolean(n *yaml.Node, layout string, entry int, field string) (bool, error) {
	n, err := p.resolve(n)
	if err != nil {
		return false, err
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		switch n.Value {
		case "true", "True", "TRUE":
			return true, nil
		case "false", "False", "FALSE":
			return false, nil
		}
	}
	return false, p.errf(n, layout, entry, field, "want true or false, got %s", describe(n))
}

// integer reads a decimal integer scalar.
func (p *parser) integer(n *yaml.Node, layout string, entry int, field string) (int, error) {
	n, err := p.resolve(n)
	if err != nil {
		return 0, err
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		if v, err := strconv.ParseInt(n.Value, 10, 32); err == nil {
			return int(v), nil
		}
	}
	return 0, p.errf(n, layout, entry, field, "want a decimal integer, got %s", describe(n))
}

// devices reads devices: all | [i, …].
func (p *parser) devices(layout string, entry int, n *yaml.Node) (bool, []int, error) {
	n, err := p.resolve(n)
	if err != nil {
		return false, nil, err
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" && n.Value == "all" {
			return true, nil, nil
		}
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			return false, nil, p.errf(n, layout, entry, "devices", "empty list (want all or GPU indexes)")
		}
		seen := map[int]bool{}
		idx := make([]int, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := p.integer(c, layout, entry, "devices")
			if err != nil {
				return false, nil, err
			}
			if v < 0 {
				return false, nil, p.errf(c, layout, entry, "devices", "negative GPU index %d", v)
			}
			if seen[v] {
				return false, nil, p.errf(c, layout, entry, "devices", "GPU index %d listed twice", v)
			}
			seen[v] = true
			idx = append(idx, v)
		}
		return false, idx, nil
	}
	return false, nil, p.errf(n, layout, entry, "devices", "want all or a list of GPU indexes, got %s", describe(n))
}

// deviceFilter reads device-filter: "0x…" | ["0x…", …].
func (p *parser) deviceFilter(layout string, entry int, n *yaml.Node) ([]string, error) {
	n, err := p.resolve(n)
	if err != nil {
		return nil, err
	}
	var items []*yaml.Node
	switch n.Kind {
	case yaml.ScalarNode:
		items = []*yaml.Node{n}
	case yaml.SequenceNode:
		items = n.Content
	default:
		return nil, p.errf(n, layout, entry, "device-filter", "want a PCI id or a list of them, got %s", describe(n))
	}
	if len(items) == 0 {
		return nil, p.errf(n, layout, entry, "device-filter", "empty list (leave the field out for every product)")
	}
	out := make([]string, 0, len(items))
	for _, c := range items {
		if c.Kind == yaml.ScalarNode && c.ShortTag() == "!!int" {
			return nil, p.errf(c, layout, entry, "device-filter", "want a string, got %s (YAML reads it unquoted as a number: write %q)", c.Value, c.Value)
		}
		s, err := p.str(c, layout, entry, "device-filter")
		if err != nil {
			return nil, err
		}
		if _, _, err := parseFilter(s); err != nil {
			return nil, p.errf(c, layout, entry, "device-filter", "%v", err)
		}
		out = append(out, s)
	}
	return out, nil
}

// migDevices reads mig-devices: {profile: count, …}.
func (p *parser) migDevices(layout string, entry int, n *yaml.Node) (map[string]int, error) {
	if r, err := p.resolve(n); err == nil && r.Kind == yaml.ScalarNode && r.ShortTag() == "!!null" {
		return nil, p.errf(r, layout, entry, "mig-devices", "want a mapping of profile to count, got null")
	}
	pairs, err := p.mapping(n, layout, entry, "mig-devices")
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(pairs))
	positive := false
	for _, kv := range pairs {
		field := "mig-devices." + kv[0].Value
		if _, err := ParseProfileName(kv[0].Value); err != nil {
			return nil, p.errf(kv[0], layout, entry, field, "%v", err)
		}
		v, err := p.integer(kv[1], layout, entry, field)
		if err != nil {
			return nil, err
		}
		if v < 0 {
			return nil, p.errf(kv[1], layout, entry, field, "negative count %d", v)
		}
		positive = positive || v > 0
		out[kv[0].Value] = v
	}
	if len(out) > 0 && !positive {
		return nil, p.errf(n, layout, entry, "mig-devices", "every count is 0 (mig-devices: {} for none)")
	}
	return out, nil
}

// matchesFilter reports whether an entry's device filter admits product p
// (nil p: a product without MIG, which no filter names).
func (e Entry) matchesFilter(p *Product) bool {
	if len(e.DeviceFilter) == 0 {
		return true
	}
	if p == nil {
		return false
	}
	want, _ := parseDeviceID(p.PCIDeviceID)
	var wantSub uint32
	if p.PCISubsystemID != "" {
		wantSub, _ = parseDeviceID(p.PCISubsystemID)
	}
	for _, f := range e.DeviceFilter {
		id, sub, err := parseFilter(f)
		if err != nil || id != want {
			continue
		}
		if strings.Contains(f, ":") && (p.PCISubsystemID == "" || sub != wantSub) {
			continue
		}
		return true
	}
	return false
}

// matchesIndex reports whether the entry's devices include GPU i.
func (e Entry) matchesIndex(i int) bool {
	return e.AllDevices || slices.Contains(e.Devices, i)
}

// clone deep-copies the entry.
func (e Entry) clone() Entry {
	e.DeviceFilter = slices.Clone(e.DeviceFilter)
	e.Devices = slices.Clone(e.Devices)
	if e.MIGDevices != nil {
		e.MIGDevices = maps.Clone(e.MIGDevices)
	}
	return e
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	out := &Config{Version: c.Version, Layouts: make(map[string]Layout, len(c.Layouts))}
	for name, l := range c.Layouts {
		cl := make(Layout, len(l))
		for i, e := range l {
			cl[i] = e.clone()
		}
		out.Layouts[name] = cl
	}
	return out
}

// Names returns the layout names in sorted order.
func (c *Config) Names() []string {
	return slices.Sorted(maps.Keys(c.Layouts))
}

// Layout returns the named layout, or an error wrapping ErrUnknownLayout.
func (c *Config) Layout(name string) (Layout, error) {
	l, ok := c.Layouts[name]
	if !ok {
		return nil, fmt.Errorf("mig layout %q: %w (the config has %d layouts)", name, ErrUnknownLayout, len(c.Layouts))
	}
	return l, nil
}

// Merge returns base with the layouts of user added: a layout of user
// replaces base's layout of the same name whole, as a mig-parted config
// file given to GPU Operator replaces its default. Neither argument is
// modified; a nil argument counts as no layouts.
func Merge(base, user *Config) *Config {
	out := base.Clone()
	if out == nil {
		out = &Config{Version: ConfigVersion, Layouts: map[string]Layout{}}
	}
	if user != nil {
		maps.Copy(out.Layouts, user.Clone().Layouts)
	}
	return out
}

var loadBuiltin = sync.OnceValues(func() (*Config, error) {
	return parseConfigBytes("builtin-configs.yaml", builtinYAML)
})

// BuiltinConfig returns the layouts of GPU Operator's default mig-parted
// configuration (all-disabled, all-enabled, all-1g.10gb, …, all-balanced),
// a fresh copy on every call.
func BuiltinConfig() (*Config, error) {
	c, err := loadBuiltin()
	if err != nil {
		return nil, fmt.Errorf("built-in mig-parted config: %w", err)
	}
	return c.Clone(), nil
}
