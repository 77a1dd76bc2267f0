package topology

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
)

//go:embed presets/*.yaml
var presetFS embed.FS

// PresetNames returns the names of the built-in machines, sorted. Each is
// documented, with its source, in topology/presets/<name>.yaml.
func PresetNames() []string {
	entries, err := fs.ReadDir(presetFS, "presets")
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	slices.Sort(names)
	return names
}

// Preset returns the built-in machine called name (see PresetNames). It
// returns an error wrapping ErrUnknownTopology if there is none.
func Preset(name string) (*Machine, error) {
	if !slices.Contains(PresetNames(), name) {
		return nil, fmt.Errorf("preset %q (known: %s): %w", name, strings.Join(PresetNames(), ", "), ErrUnknownTopology)
	}
	data, err := presetFS.ReadFile("presets/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("read preset %q: %w", name, err)
	}
	return parseYAML("presets/"+name+".yaml", data)
}

// PresetSource returns the YAML text of the built-in machine called name,
// with its documentation comments, or false if there is none.
func PresetSource(name string) ([]byte, bool) {
	if !slices.Contains(PresetNames(), name) {
		return nil, false
	}
	data, err := presetFS.ReadFile("presets/" + name + ".yaml")
	return data, err == nil
}

// Resolve chooses the machine from the plugin's flags:
//
//   - spec "" → Generic(devices);
//   - spec a preset name (PresetNames) → that preset;
//   - otherwise spec is a file path, read with Parse.
//
// devicesSet reports whether -devices was given explicitly. With a preset or
// a file the GPU count is fixed: an explicit devices that differs from it is
// an error wrapping ErrDevicesMismatch; an unset one is ignored.
func Resolve(spec string, devices int, devicesSet bool) (*Machine, error) {
	if spec == "" {
		return Generic(devices)
	}
	var m *Machine
	if slices.Contains(PresetNames(), spec) {
		var err error
		if m, err = Preset(spec); err != nil {
			return nil, err
		}
	} else {
		f, err := os.Open(spec)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("topology %q is neither a preset (%s) nor an existing file: %w: %w",
					spec, strings.Join(PresetNames(), ", "), ErrUnknownTopology, err)
			}
			return nil, fmt.Errorf("open topology file: %w", err)
		}
		defer f.Close()
		if m, err = Parse(spec, f); err != nil {
			return nil, err
		}
	}
	if devicesSet && devices != m.Len() {
		return nil, fmt.Errorf("-devices=%d but topology %q has %d GPUs (leave -devices unset): %w",
			devices, m.Name(), m.Len(), ErrDevicesMismatch)
	}
	return m, nil
}

// Format is a topology file format.
type Format int

// Formats recognised by DetectFormat.
const (
	// FormatYAML is the versioned YAML topology format.
	FormatYAML Format = iota
	// FormatNvidiaSMI is the text `nvidia-smi topo -m` prints.
	FormatNvidiaSMI
)

// String returns "yaml" or "nvidia-smi".
func (f Format) String() string {
	if f == FormatNvidiaSMI {
		return "nvidia-smi"
	}
	return "yaml"
}

var yamlKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*:(\s|$)`)

// DetectFormat tells the format of a topology file from its content: the
// first line that decides is either a header row whose first field is GPU0
// (nvidia-smi) or a top-level YAML key such as "apiVersion:" (YAML). Blank
// lines, comments and anything else (a pasted shell prompt) are skipped.
// Content with neither is taken as YAML, whose parser then says what it
// expected.
func DetectFormat(data []byte) Format {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), maxFileBytes)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(stripANSI(line))
		if len(f) > 0 && f[0] == "GPU0" {
			return FormatNvidiaSMI
		}
		if yamlKeyRE.MatchString(line) {
			return FormatYAML
		}
	}
	return FormatYAML
}

// Parse reads a topology file in either format, detected by content with
// DetectFormat: the YAML format (ParseYAML) or `nvidia-smi topo -m` output
// (ParseNvidiaSMI). name is used in errors ("name:line: what was expected")
// and as the default machine name (its base name without extension). Every
// error is a *ParseError, which unwraps to ErrInvalidTopology.
func Parse(name string, r io.Reader) (*Machine, error) {
	data, err := readAll(name, r)
	if err != nil {
		return nil, err
	}
	if DetectFormat(data) == FormatNvidiaSMI {
		return parseNvidiaSMI(name, data)
	}
	return parseYAML(name, data)
}
