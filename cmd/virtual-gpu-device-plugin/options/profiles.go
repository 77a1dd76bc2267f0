package options

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// ProfileLabel is the Node label that names a node's profile, as
// nvidia.com/device-plugin.config names the configuration of NVIDIA's
// device plugin. It is plugin/kube's, the package that reads it.
const ProfileLabel = kube.ConfigLabel

// profileSuffixes end the names of profile files; a name without a dot
// is a profile too, as NVIDIA's ConfigMaps name their keys (any, tesla-t4).
var profileSuffixes = []string{".yaml", ".yml"}

// profileName returns the profile a directory entry's name holds: <name>
// of <name>.yaml, <name>.yml or a name without a dot.
func profileName(file string) (string, bool) {
	for _, suffix := range profileSuffixes {
		if name, ok := strings.CutSuffix(file, suffix); ok {
			return name, true
		}
	}
	return file, !strings.Contains(file, ".")
}

// Profiles are the profiles of a -config directory, by name, each parsed
// and checked. A Profiles is immutable and safe for concurrent use.
type Profiles struct {
	// Dir is the directory they were read from.
	Dir string
	// Skipped lists the files of Dir with a profile's name that are
	// topology files (kind: Topology, or nvidia-smi topo -m output), not
	// profiles.
	Skipped []string
	// Fingerprint is Dir's agent.Fingerprint taken before the profiles
	// were read: a watch started later compares with it, so a change in
	// between is not missed.
	Fingerprint string

	files map[string]*File
}

// LoadProfiles reads every profile of dir: each regular file (a symbolic
// link to one is fine) named <name>.yaml, <name>.yml, or <name> without a
// dot (as NVIDIA's ConfigMaps name their keys), <name> a valid label
// value. Entries whose names start with a dot (a mounted ConfigMap's
// ..data and ..<timestamp> directories), other files and directories are
// skipped, as are topology files (kind: Topology, or nvidia-smi topo -m
// output), so a ConfigMap may carry a topology next to the profiles. Each
// profile is parsed strictly (ParseFile) and refused if it sets a path or
// address, or a setting of the whole process; the errors name the file,
// field and line. Two files of one profile, or a directory without
// profiles, is an error. Every error wraps ErrInvalid.
func LoadProfiles(dir string) (*Profiles, error) {
	fingerprint := agent.Fingerprint(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &FileError{File: dir, Msg: "cannot read the profiles directory", Err: err}
	}
	ps := &Profiles{Dir: dir, Fingerprint: fingerprint, files: map[string]*File{}}
	for _, e := range entries {
		name := e.Name()
		profile, ok := profileName(name)
		if strings.HasPrefix(name, ".") || !ok {
			continue
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err == nil && fi.IsDir() && profile == name {
			continue // a directory without a suffix: not a profile (one named .yaml is an error)
		}
		if err := checkProfileName(profile); err != nil {
			return nil, &FileError{File: path, Msg: fmt.Sprintf("profile name %q: %v; a node label names the profile", profile, err)}
		}
		if prev, dup := ps.files[profile]; dup {
			return nil, &FileError{File: path, Msg: fmt.Sprintf("profile %q is also %s: keep one", profile, filepath.Base(prev.Path))}
		}
		data, err := readRegular(path)
		if err != nil {
			return nil, err
		}
		if isTopologyFile(data) {
			ps.Skipped = append(ps.Skipped, path)
			continue
		}
		f, err := parseFile(path, data)
		if err != nil {
			return nil, err
		}
		f.Profile = profile
		if err := checkProfile(f); err != nil {
			return nil, err
		}
		ps.files[profile] = f
	}
	if len(ps.files) == 0 {
		return nil, &FileError{File: dir, Msg: "no profiles: expected <name>.yaml files (or <name>, as NVIDIA's ConfigMaps name them), as a mounted ConfigMap holds them"}
	}
	return ps, nil
}

// Names returns the profile names, sorted.
func (ps *Profiles) Names() []string {
	return slices.Sorted(maps.Keys(ps.files))
}

// Lookup returns the profile called name, or an error wrapping
// ErrUnknownProfile and ErrInvalid that lists the known names.
func (ps *Profiles) Lookup(name string) (*File, error) {
	if f, ok := ps.files[name]; ok {
		return f, nil
	}
	return nil, &invalidError{fmt.Errorf("profile %q: no %s.yaml in %s (profiles: %s): %w",
		name, name, ps.Dir, strings.Join(ps.Names(), ", "), ErrUnknownProfile)}
}

// checkProfileName checks that name is a valid label value, so that a
// node label can name the profile: at most 63 characters of
// [A-Za-z0-9-_.], starting and ending alphanumeric.
func checkProfileName(name string) error {
	if len(name) > 63 || !qualifiedName.MatchString(name) {
		return errors.New("want at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric (a label value)")
	}
	return nil
}

// checkProfile refuses a profile that sets a flag it may not: a path or
// address, or a setting of the whole process. A profile holds the
// machine's shape and behaviour only.
func checkProfile(f *File) error {
	scopes := map[string]string{}
	for _, sfs := range specFlags() {
		for _, sf := range sfs {
			scopes[sf.path] = sf.profile
		}
	}
	// The file's order, so the first offending field is named.
	vals := slices.SortedFunc(maps.Values(f.values), func(a, b layerValue) int { return a.at.line - b.at.line })
	for _, v := range vals {
		switch scopes[v.at.field] {
		case "path":
			return &FileError{File: f.Path, Line: v.at.line, Field: v.at.field,
				Msg: "a profile may not set a path or address (state, sockets, directories, metrics): they belong to the DaemonSet, as flags or VGPU_* variables"}
		case "process":
			return &FileError{File: f.Path, Line: v.at.line, Field: v.at.field,
				Msg: "a profile may not set what holds for the whole process (logging, state file, history, intervals): set it as a flag or VGPU_* variable"}
		}
	}
	return nil
}

// isTopologyFile reports whether data is a topology file, not a profile:
// YAML of kind Topology, or nvidia-smi topo -m output.
func isTopologyFile(data []byte) bool {
	if topology.DetectFormat(data) == topology.FormatNvidiaSMI {
		return true
	}
	root, err := yamlRoot("", data)
	if err != nil {
		return false
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value == "kind" && v.Kind == yaml.ScalarNode && v.Value == topology.Kind {
			return true
		}
	}
	return false
}

// Resolve returns the configuration in force with the file or profile f
// (nil: none): every flag's value by precedence, command line >
// environment > f > default, validated whole (Settings.Validate). It
// reads the topology file, if one is named, and nothing else; it is safe
// to call again at run time, when a node label or a file changes: it
// returns a Config or an error wrapping ErrInvalid, and never exits.
func (o *Options) Resolve(f *File) (*Config, error) {
	s, err := o.Settings(f)
	if err != nil {
		return nil, err
	}
	return s.Validate()
}

// ResolveAll resolves every profile of ps with the command line and the
// environment, as the start does: one that breaks a rule is an error
// naming it. It returns the configurations by profile name.
func (o *Options) ResolveAll(ps *Profiles) (map[string]*Config, error) {
	out := make(map[string]*Config, len(ps.files))
	for _, name := range ps.Names() {
		c, err := o.Resolve(ps.files[name])
		if err != nil {
			return nil, fmt.Errorf("profile %q: %w", name, err)
		}
		out[name] = c
	}
	return out, nil
}

// Select returns the profile of ps a node gets whose ProfileLabel has the
// value label: that profile, or, when label is "", the -config-default
// profile, or, without one, none (nil, nil). A name that is not a profile
// is an error wrapping ErrUnknownProfile.
func (o *Options) Select(ps *Profiles, label string) (*File, error) {
	name := label
	if name == "" {
		name = o.ConfigDefault
	}
	if name == "" {
		return nil, nil
	}
	f, err := ps.Lookup(name)
	if err != nil && label == "" {
		return nil, invalidf("invalid %s=%q: %w", o.name("config-default"), name, err)
	}
	if err != nil {
		return nil, invalidf("node label %s=%s: %w", ProfileLabel, label, err)
	}
	return f, nil
}

// Load reads the -config file or directory and returns the configuration
// in force at start, and the profiles when -config is a directory (nil
// otherwise). A -config file is resolved with the command line and the
// environment. In a directory every profile must resolve; the one in
// force at start is the -config-default profile, or none (the node's
// label is not known yet: the caller selects again once it is). Without
// -config the configuration is the command line, the environment and the
// defaults. Every error wraps ErrInvalid.
func (o *Options) Load() (*Config, *Profiles, error) {
	if o.ConfigPath == "" {
		c, err := o.Resolve(nil)
		return c, nil, err
	}
	fi, err := os.Stat(o.ConfigPath)
	if err != nil {
		return nil, nil, invalidf("invalid %s=%q: %w", o.name("config"), o.ConfigPath, err)
	}
	if !fi.IsDir() {
		if o.ConfigDefault != "" {
			return nil, nil, invalidf("invalid %s=%q: -config %s is a file, not a directory of profiles", o.name("config-default"), o.ConfigDefault, o.ConfigPath)
		}
		f, err := LoadFile(o.ConfigPath)
		if err != nil {
			return nil, nil, err
		}
		c, err := o.Resolve(f)
		return c, nil, err
	}
	ps, err := LoadProfiles(o.ConfigPath)
	if err != nil {
		return nil, nil, err
	}
	configs, err := o.ResolveAll(ps)
	if err != nil {
		return nil, nil, err
	}
	f, err := o.Select(ps, "")
	switch {
	case err != nil:
		return nil, nil, err
	case f != nil:
		return configs[f.Profile], ps, nil
	}
	c, err := o.Resolve(nil)
	return c, ps, err
}

// name returns how errors name a flag of Options: -config, or the
// variable that set it.
func (o *Options) name(flagName string) string {
	if v, ok := o.flags[flagName]; ok {
		_, n := v.at.where(flagName)
		return n
	}
	if v, ok := o.env[flagName]; ok {
		_, n := v.at.where(flagName)
		return n
	}
	return "-" + flagName
}
