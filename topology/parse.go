package topology

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
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
//   - otherwise spec is a file path, read with Parse. It must be a regular
//     file (a symbolic link to one is fine); a directory, named pipe, device
//     or socket is refused with an error wrapping ErrNotRegularFile.
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
		f, err := openRegular(spec)
		if err != nil {
			return nil, err
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

// openRegular opens the topology file at path for reading if it is a
// regular file, following symbolic links (a ConfigMap mounts its keys as
// links). Anything else is refused before it is opened, with an error
// naming the path and what it is: opening a named pipe would block start-up
// until a writer comes (and ignore SIGTERM meanwhile), a device may act on
// open. The file is opened non-blocking and checked again, in case the path
// changed in between.
func openRegular(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("topology %q is neither a preset (%s) nor an existing file: %w: %w",
			path, strings.Join(PresetNames(), ", "), ErrUnknownTopology, err)
	case err != nil:
		return nil, fmt.Errorf("topology file: %w", err)
	case !fi.Mode().IsRegular():
		return nil, notRegular(path, fi.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open topology file: %w", err)
	}
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("topology file: %w", err)
		}
		return nil, notRegular(path, fi.Mode())
	}
	return f, nil
}

func notRegular(path string, mode fs.FileMode) error {
	var what string
	switch {
	case mode&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case mode.IsDir():
		what = "a directory"
	case mode&fs.ModeCharDevice != 0:
		what = "a character device"
	case mode&fs.ModeDevice != 0:
		what = "a block device"
	case mode&fs.ModeSocket != 0:
		what = "a socket"
	default:
		what = "of mode " + mode.String()
	}
	return fmt.Errorf("topology %q is %s: %w (expected a YAML or nvidia-smi text file)", path, what, ErrNotRegularFile)
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

var (
	// yamlKeyRE matches a line that starts with a top-level YAML key.
	yamlKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*:(\s|$)`)
	// yamlIdentityRE matches the top-level key that names the YAML topology
	// format: apiVersion or kind, maybe quoted.
	yamlIdentityRE = regexp.MustCompile(`^(apiVersion|kind|"apiVersion"|"kind"|'apiVersion'|'kind')\s*:(\s|$)`)
)

// DetectFormat tells the format of a topology file from its content, in
// this order:
//
//  1. a YAML topology: a line (not indented, anywhere in the file, comments
//     and other keys around it) with the key apiVersion or kind;
//  2. nvidia-smi: the text holds the matrix of `nvidia-smi topo -m`, a
//     header row (GPU0 GPU1 … CPU Affinity) followed by the GPU0 row, with
//     anything before it (a shell prompt, other keys: values of an
//     environment report such as `python3 -m sglang.check_env`, the legend);
//  3. otherwise the first line that is either a header row whose first
//     field is GPU0 (nvidia-smi) or a top-level YAML key (YAML) decides;
//     with neither, YAML.
//
// In case 3 the file is neither format for sure: Parse then says what each
// format expects, with what the one it tried found wrong.
func DetectFormat(data []byte) Format {
	lines, _ := textLines(data)
	f, _ := detectFormat(lines)
	return f
}

// detectFormat implements DetectFormat on the lines of a file (from
// textLines); sure is false in case 3.
func detectFormat(lines []string) (f Format, sure bool) {
	if slices.ContainsFunc(lines, yamlIdentityRE.MatchString) {
		return FormatYAML, true
	}
	if _, matrix, _ := findSMIHeader(lines); matrix {
		return FormatNvidiaSMI, true
	}
	for _, line := range lines {
		if smiHeaderStart(strings.Fields(line)) {
			return FormatNvidiaSMI, false
		}
		if yamlKeyRE.MatchString(line) {
			return FormatYAML, false
		}
	}
	return FormatYAML, false
}

// Parse reads a topology file in either format, detected by content with
// DetectFormat: the YAML format (ParseYAML) or `nvidia-smi topo -m` output
// (ParseNvidiaSMI). name is used in errors ("name:line: what was expected")
// and as the default machine name (its base name without extension). A file
// that is neither a YAML topology nor holds an nvidia-smi matrix is read in
// the format DetectFormat guesses; if that fails, the error says what both
// formats expect and what was wrong as the guessed one. Every error is a
// *ParseError, which unwraps to ErrInvalidTopology.
func Parse(name string, r io.Reader) (*Machine, error) {
	data, err := readAll(name, r)
	if err != nil {
		return nil, err
	}
	lines, _ := textLines(data) // parseNvidiaSMI reports a read error
	format, sure := detectFormat(lines)
	var m *Machine
	if format == FormatNvidiaSMI {
		m, err = parseNvidiaSMI(name, data)
	} else {
		m, err = parseYAML(name, data)
	}
	if err != nil && !sure {
		return nil, notTopology(name, format, err)
	}
	return m, err
}

// notTopology is the error for a file that is neither format for sure:
// what each expects, then err, the error of reading it as format.
func notTopology(name string, format Format, err error) error {
	var pe *ParseError
	if !errors.As(err, &pe) {
		return err
	}
	as := "YAML"
	if format == FormatNvidiaSMI {
		as = "nvidia-smi output"
	}
	found := pe.Msg
	if pe.Line > 0 {
		found = fmt.Sprintf("line %d: %s", pe.Line, pe.Msg)
	}
	return &ParseError{File: name, Err: pe.Err, Msg: fmt.Sprintf("neither a YAML topology "+
		"(expected the keys apiVersion: %s, kind: %s and numaNodes) nor nvidia-smi topo -m output "+
		"(expected a header row GPU0 GPU1 … CPU Affinity followed by a row per GPU, GPU0 first); read as %s: %s",
		APIVersion, Kind, as, found)}
}
