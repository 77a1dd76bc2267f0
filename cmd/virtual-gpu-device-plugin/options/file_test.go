package options_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
)

// shapeErrors are files the parser refuses for their shape: the schema
// refuses them too (TestSchema_AgreesWithParser). want is the error, after
// "c.yaml:".
var shapeErrors = []struct {
	name, file, want string
}{
	{"misspelled section", "version: v1\nflag:\n  devices: 4\n", `2: flag: unknown field "flag" (did you mean "flags"?)`},
	{"misspelled flag", "version: v1\nflags:\n  devices: 4\n  topolgy: dgx-a100\n", `4: flags.topolgy: unknown field "topolgy" (did you mean "topology"?)`},
	{"flag in kebab case", "version: v1\nflags:\n  resource-name: a.b/c\n", `3: flags.resource-name: unknown field "resource-name" (did you mean "resourceName"?)`},
	{"flag in another case", "version: v1\nflags:\n  LogLevel: info\n", `3: flags.LogLevel: unknown field "LogLevel" (did you mean "logLevel"?)`},
	{"unknown flag", "version: v1\nflags:\n  gpus: 4\n", `3: flags.gpus: unknown field "gpus" (the fields are in deploy/config/config.schema.json)`},
	{"unknown nested field", "version: v1\nflags:\n  plugin:\n    passDeviceSpec: true\n", `4: flags.plugin.passDeviceSpec: unknown field "passDeviceSpec" (did you mean "passDeviceSpecs"?)`},
	{"unknown sharing field", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: unicore.mcyou.cc/gpu\n      replica: 2\n",
		`6: sharing.timeSlicing.resources[0].replica: unknown field "replica" (did you mean "replicas"?)`},
	{"string for an integer", "version: v1\nflags:\n  devices: four\n", `3: flags.devices: expected an integer, found string "four"`},
	{"quoted integer", "version: v1\nflags:\n  devices: \"4\"\n", `3: flags.devices: expected an integer, found string "4"`},
	{"float for an integer", "version: v1\nflags:\n  devices: 1.5\n", `3: flags.devices: expected an integer, found number 1.5`},
	{"string for a bool", "version: v1\nflags:\n  stateMoveAside: \"true\"\n", `3: flags.stateMoveAside: expected true or false, found string "true"`},
	{"integer for a string", "version: v1\nflags:\n  socketName: 42\n", `3: flags.socketName: expected a string, found integer 42`},
	{"list for a string", "version: v1\nflags:\n  topology: [dgx-a100]\n", `3: flags.topology: expected a string, found a list`},
	{"no value in a required field", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: unicore.mcyou.cc/gpu\n      replicas:\n", `6: sharing.timeSlicing.resources[0].replicas: no value: this field is required`},
	{"mapping for flags", "version: v1\nflags: 4\n", `2: flags: expected a mapping, found integer 4`},
	{"bad duration", "version: v1\nflags:\n  historyMaxAge: 90\n", `3: flags.historyMaxAge: expected a duration such as "90s" or "1h30m", found integer 90`},
	{"bad byte size", "version: v1\nflags:\n  historyMaxBytes: true\n", `3: flags.historyMaxBytes: expected a byte count`},
	{"version not a string", "version: 1\n", `1: version: expected a string, found integer 1`},
	{"not a mapping", "- version: v1\n", `1: expected a mapping with version: v1`},
	{"mps", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: unicore.mcyou.cc/gpu\n      replicas: 2\n",
		`4: sharing.mps: sharing by MPS is not supported: this plugin shares GPUs by time-slicing only (sharing.timeSlicing)`},
	{"time-slicing without resources", "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n", `3: sharing.timeSlicing.resources: missing: this field is required`},
	{"time-slicing with no resource", "version: v1\nsharing:\n  timeSlicing:\n    resources: []\n", `4: sharing.timeSlicing.resources: 0 entries, want at least 1`},
	{"one replica", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: a.b/gpu\n      replicas: 1\n",
		`6: sharing.timeSlicing.resources[0].replicas: 1 is less than 2`},
	{"no replicas", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: a.b/gpu\n", `5: sharing.timeSlicing.resources[0].replicas: missing`},
	{"devices by count", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: a.b/gpu\n      replicas: 2\n      devices: 2\n",
		`7: sharing.timeSlicing.resources[0].devices: a count of GPUs (2) is not supported: list the GPUs, e.g. [0, 1], or write all`},
	{"devices an empty list", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: a.b/gpu\n      replicas: 2\n      devices: []\n",
		`7: sharing.timeSlicing.resources[0].devices: an empty list: list at least one GPU, e.g. [0, 1], or write all`},
	{"devices by UUID", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: a.b/gpu\n      replicas: 2\n      devices: [GPU-8f1bde0a-3e2c-4b5f-9a1d-2c3e4f5a6b7c]\n",
		`7: sharing.timeSlicing.resources[0].devices[0]: "GPU-8f1bde0a-3e2c-4b5f-9a1d-2c3e4f5a6b7c": UUIDs are not supported`},
	{"NVIDIA resources without a pattern", "version: v1\nresources:\n  gpus:\n  - name: gpu\n", `4: resources.gpus[0].pattern: missing`},
	{"NVIDIA imex channel not an integer", "version: v1\nimex:\n  channelIDs: [zero]\n", `3: imex.channelIDs[0]: expected an integer, found string "zero"`},
}

// TestParseFile_Strict: an unknown or misspelled field, a value of the
// wrong type, a missing field is an error naming the file, the line and
// the field.
func TestParseFile_Strict(t *testing.T) {
	for _, tc := range shapeErrors {
		t.Run(tc.name, func(t *testing.T) {
			_, err := options.ParseFile("c.yaml", strings.NewReader(tc.file))
			checkFileError(t, err, "c.yaml:"+tc.want)
		})
	}
}

func checkFileError(t *testing.T, err error, want string) {
	t.Helper()
	var fe *options.FileError
	switch {
	case err == nil:
		t.Fatalf("no error, want %q", want)
	case !errors.As(err, &fe):
		t.Errorf("err %v is not a *FileError", err)
	case !errors.Is(err, options.ErrInvalid):
		t.Errorf("err %v does not wrap ErrInvalid", err)
	case !strings.HasPrefix(err.Error(), want):
		t.Errorf("err = %v\nwant    %s…", err, want)
	case strings.Count(err.Error(), ": want") > 1 || strings.Contains(err.Error(), "\n"):
		t.Errorf("err repeats itself or is not one line: %q", err)
	}
}

// TestParseFile_Errors: what is refused beyond the shape: the version,
// YAML itself, flags the file spells right with values the flag refuses,
// the same setting in two places.
func TestParseFile_Errors(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"version 2", "version: v2\nflags:\n  devices: 4\n", `c.yaml:1: version: "v2" is not supported: this plugin reads version v1`},
		{"not YAML", "version: v1\nflags:\n  devices: [4\n", "c.yaml:2: not valid YAML: did not find expected ',' or ']'"},
		{"tab indentation", "version: v1\nflags:\n\tdevices: 4\n", "c.yaml:3: not valid YAML: found character that cannot start any token"},
		{"two documents", "version: v1\n---\nversion: v1\n", "c.yaml:3: expected a single YAML document, found another"},
		{"repeated key", "version: v1\nflags:\n  devices: 4\n  devices: 8\n", "c.yaml:4: flags.devices: repeated: already set at line 3"},
		{"alias", "version: v1\nflags:\n  socketName: &s a.sock\n  state: *s\n", "c.yaml:4: flags.state: YAML aliases (*s) are not supported"},
		{"merge key", "version: v1\nflags:\n  <<: {devices: 4}\n", `c.yaml:3: flags.<<: unknown field "<<"`},
		{"devices too big for an int", "version: v1\nflags:\n  devices: 99999999999999999999\n", "c.yaml:3: flags.devices: expected an integer"},
		{"duration the flag refuses", "version: v1\nflags:\n  reconcileInterval: 5 minutes\n", `c.yaml:3: flags.reconcileInterval: "5 minutes" is not a duration`},
		{"byte size the flag refuses", "version: v1\nflags:\n  historyMaxBytes: 64MB\n",
			`c.yaml:3: flags.historyMaxBytes: "64MB": want a byte count, optionally with a binary suffix Ki, Mi or Gi (e.g. 67108864 or 64Mi)`},
		{"replicas twice", "version: v1\nflags:\n  replicas: 2\nsharing:\n  timeSlicing:\n    resources:\n    - name: a.b/gpu\n      replicas: 4\n",
			"c.yaml:8: sharing.timeSlicing.resources[0].replicas: the replicas are also set by flags.replicas at line 3: set them in one place"},
		{"NVIDIA and our flag disagree", "version: v1\nflags:\n  sharedDevicesAllocationPolicy: packed\n  plugin:\n    sharedDevicesAllocationPolicy: distributed\n",
			`c.yaml:5: flags.plugin.sharedDevicesAllocationPolicy: "distributed" disagrees with flags.sharedDevicesAllocationPolicy "packed" at line 3: set one`},
		{"two resources to share", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: a.b/gpu\n      replicas: 2\n    - name: a.b/other\n      replicas: 2\n",
			`c.yaml:7: sharing.timeSlicing.resources[1].name: "a.b/other" is a second resource to share, after "a.b/gpu" at line 5: the plugin serves one resource (-resource-name), list it once`},
		{"only MIG resources to share", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.5gb\n      replicas: 2\n",
			`c.yaml:4: sharing.timeSlicing.resources: only MIG resources, which virtual GPUs do not have: list the plugin's resource (-resource-name)`},
		{"empty strategy list", "version: v1\nflags:\n  deviceListStrategy: []\n", `c.yaml:3: flags.deviceListStrategy: an empty list: name at least one strategy, e.g. envvar`},
		{"device list strategy item with a comma", "version: v1\nflags:\n  deviceListStrategy: [\"envvar,cdi-cri\"]\n", "c.yaml:3: flags.deviceListStrategy[0]: expected a strategy name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := options.ParseFile("c.yaml", strings.NewReader(tc.file))
			checkFileError(t, err, tc.want)
		})
	}
	big := "version: v1\n# " + strings.Repeat("x", 1<<20) + "\n"
	_, err := options.ParseFile("c.yaml", strings.NewReader(big))
	checkFileError(t, err, "c.yaml: larger than 1048576 bytes")
}

// TestParseFile_Accepts: what the parser reads besides the plain forms.
func TestParseFile_Accepts(t *testing.T) {
	for _, tc := range []struct{ name, file string }{
		{"version only", "version: v1\n"},
		{"empty sections", "version: v1\nflags:\nsharing:\nresources:\nimex:\n"},
		{"flow style", "{version: v1, flags: {devices: 2, logLevel: debug}}"},
		{"document marker and comments", "---\n# a comment\nversion: v1 # trailing\nflags:\n  devices: 0x8\n"},
		{"byte size as a number", "version: v1\nflags:\n  historyMaxBytes: 0\n"},
		{"duration zero as a number", "version: v1\nflags:\n  historyMaxAge: 0\n"},
		{"empty file", ""},
		{"comments only", "# nothing yet\n"},
		{"no value is not set", "version: v1\nflags:\n  devices:\n  topology: null\n  migStrategy: ~\n  plugin:\n    deviceListStrategy:\nsharing:\n  mps:\n"},
		{"a stray document marker", "version: v1\nflags:\n  devices: 2\n---\n"},
		{"empty documents around", "---\n---\nversion: v1\n---\n# end\n"},
		{"the same value in NVIDIA's and our field", "version: v1\nflags:\n  deviceListStrategy: envvar\n  plugin:\n    deviceListStrategy: [envvar]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := options.ParseFile("c.yaml", strings.NewReader(tc.file)); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestParseFile_RelativeTopology: a relative topology path is taken
// relative to the file's directory; a preset name and an absolute path
// are kept.
func TestParseFile_RelativeTopology(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "conf/machines/ws.txt", "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-7\t0\nGPU1\tPHB\t X \t0-7\t0\n")
	for _, tc := range []struct {
		topology, want string
		gpus           int
	}{
		{"machines/ws.txt", filepath.Join(dir, "conf/machines/ws.txt"), 2},
		{"./machines/../machines/ws.txt", filepath.Join(dir, "conf/machines/ws.txt"), 2},
		{filepath.Join(dir, "conf/machines/ws.txt"), filepath.Join(dir, "conf/machines/ws.txt"), 2},
		{"dgx-a100", "dgx-a100", 8},
	} {
		file := writeFile(t, dir, "conf/c.yaml", "version: v1\nflags:\n  topology: "+tc.topology+"\n")
		// The working directory is not the file's: the path must not depend on it.
		c := mustLoad(t, []string{"-config=" + file}, nil)
		if c.GPUs.Topology != tc.want || c.GPUs.Machine.Len() != tc.gpus {
			t.Errorf("topology: %s in %s = %q (%d GPUs), want %q (%d)", tc.topology, file, c.GPUs.Topology, c.GPUs.Machine.Len(), tc.want, tc.gpus)
		}
	}
	// A relative -config is made absolute first.
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, filepath.Join(dir, "conf/c.yaml"))
	if err != nil {
		t.Skip(err)
	}
	writeFile(t, dir, "conf/c.yaml", "version: v1\nflags:\n  topology: machines/ws.txt\n")
	if c := mustLoad(t, []string{"-config=" + rel}, nil); c.GPUs.Topology != filepath.Join(dir, "conf/machines/ws.txt") {
		t.Errorf("-config=%s: topology %q", rel, c.GPUs.Topology)
	}
}

// TestParseFile_RelativeTelemetryCollectors: a relative collectors file is
// taken relative to the configuration file's directory, as topology is.
func TestParseFile_RelativeTelemetryCollectors(t *testing.T) {
	dir := t.TempDir()
	want := writeFile(t, dir, "conf/counters.csv", "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n")
	file := writeFile(t, dir, "conf/c.yaml", "version: v1\nflags:\n  telemetryCollectors: counters.csv\n")
	c := mustLoad(t, []string{"-config=" + file}, nil)
	if c.TelemetryCollectorsFile != want || len(c.TelemetryCollectors) != 1 {
		t.Errorf("telemetryCollectors: counters.csv in %s = %q (%d collectors), want %q", file, c.TelemetryCollectorsFile, len(c.TelemetryCollectors), want)
	}
}

// FuzzParseFile: the parser never panics; every error is a *FileError
// naming a line, but for the few about the whole file; a file it accepts
// resolves to a Config or an ErrInvalid error.
func FuzzParseFile(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	seeds = append(seeds, filepath.Join(configDir, "example.yaml"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, tc := range shapeErrors {
		f.Add(tc.file)
	}
	f.Add("version: v1\nflags: {devices: 2, topology: dgx-a100}\n")
	f.Add("version: v1\na: &a [*a, *a]\n")
	o, err := options.Parse([]string{"-state=" + filepath.Join(f.TempDir(), "s.db")}, func(string) string { return "" })
	if err != nil {
		f.Fatal(err)
	}
	wholeFile := regexp.MustCompile(`^fuzz\.yaml: (empty file|larger than)`)
	f.Fuzz(func(t *testing.T, s string) {
		file, err := options.ParseFile("fuzz.yaml", strings.NewReader(s))
		if err != nil {
			var fe *options.FileError
			if !errors.As(err, &fe) || !errors.Is(err, options.ErrInvalid) {
				t.Fatalf("error %v (%T) is not a *FileError wrapping ErrInvalid", err, err)
			}
			if fe.Line < 1 && !wholeFile.MatchString(err.Error()) {
				t.Fatalf("error names no line: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if _, err := o.Resolve(file); err != nil && !errors.Is(err, options.ErrInvalid) {
			t.Fatalf("resolve: %v does not wrap ErrInvalid", err)
		}
	})
}

// TestParseFile_ReadAsNVIDIADoes: what NVIDIA's plugin reads in its own
// files is read the same way: a file without a version is v1 (and the
// note says so), null is not set (the default holds), a bare resource
// name takes the resource's domain.
func TestParseFile_ReadAsNVIDIADoes(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "c.yaml", "flags:\n  devices:\n  topology: dgx-a100\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 3\n")
	c := mustLoad(t, []string{"-config=" + file}, nil)
	if c.GPUs.Machine.Len() != 8 || c.GPUs.Sharing.Replicas != 3 || c.GPUs.Sharing.ResourceName != "unicore.mcyou.cc/gpu" {
		t.Errorf("%d GPUs, sharing %+v; want the preset's 8, 3 replicas of unicore.mcyou.cc/gpu", c.GPUs.Machine.Len(), c.GPUs.Sharing)
	}
	if len(c.Ignored) != 1 || c.Ignored[0].Field != "version" || !strings.Contains(c.Ignored[0].Why, "read as v1") {
		t.Errorf("notes %v, want one saying the missing version is read as v1", c.Ignored)
	}
	writeFile(t, dir, "c.yaml", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: tpu\n      replicas: 3\n")
	_, err := load([]string{"-config=" + file}, nil)
	if err == nil || !strings.Contains(err.Error(), `name="tpu": the plugin serves unicore.mcyou.cc/gpu`) {
		t.Errorf("another bare name: %v", err)
	}
}
