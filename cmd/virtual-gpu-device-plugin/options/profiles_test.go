package options_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
)

// mustConfigMapDir builds dir as the kubelet mounts a ConfigMap: the keys
// in a ..<timestamp> directory, ..data a symbolic link to it, and each key
// a symbolic link to ..data/<key>. It returns dir.
func mustConfigMapDir(t *testing.T, dir string, keys map[string]string) string {
	t.Helper()
	ts := "..2026_01_30_10_00_00.000000001"
	for k, v := range keys {
		writeFile(t, filepath.Join(dir, ts), k, v)
	}
	if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// swapConfigMapDir updates a ConfigMap mount as the kubelet does: a new
// timestamped directory, ..data switched to it with a rename.
func swapConfigMapDir(t *testing.T, dir string, keys map[string]string) {
	t.Helper()
	ts := "..2026_01_30_10_05_00.000000002"
	for k, v := range keys {
		writeFile(t, filepath.Join(dir, ts), k, v)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

const wsTopology = `apiVersion: virtual-gpu.unicore.mcyou.cc/v1
kind: Topology
name: two-gpus
numaNodes:
  - id: 0
    cpus: 0-7
    hostBridges:
      - gpus: 2
`

func TestLoadProfiles_ConfigMapMount(t *testing.T) {
	dir := mustConfigMapDir(t, t.TempDir(), map[string]string{
		"a100.yaml":     "version: v1\nflags:\n  topology: dgx-a100\n",
		"small.yaml":    "version: v1\nflags:\n  topology: machine.yaml\n  allocationPolicy: lowest-index\n",
		"machine.yaml":  wsTopology,
		"README.md":     "not a profile",
		"machine.txt":   "\tGPU0\nGPU0\t X \n",
		"shared-4.yaml": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: unicore.mcyou.cc/gpu\n      replicas: 4\n",
		// NVIDIA's ConfigMaps name their keys without a suffix.
		"any":          "version: v1\nflags:\n  migStrategy: none\n",
		"tesla-t4.yml": "version: v1\nflags:\n  devices: 2\n",
		"dgx-topo":     "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV1\t0-7\t0\nGPU1\tNV1\t X \t0-7\t0\n",
	})
	// Entries a mount may hold besides: a dot file, a directory.
	writeFile(t, dir, ".hidden.yaml", "not: a profile")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	ps, err := options.LoadProfiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ps.Names(), []string{"a100", "any", "shared-4", "small", "tesla-t4"}; !slices.Equal(got, want) {
		t.Errorf("profiles %v, want %v", got, want)
	}
	if !slices.Equal(ps.Skipped, []string{filepath.Join(dir, "dgx-topo"), filepath.Join(dir, "machine.yaml")}) {
		t.Errorf("skipped %v, want the topology files", ps.Skipped)
	}
	o, err := options.Parse([]string{"-config=" + dir, "-config-default=small"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	configs, err := o.ResolveAll(ps)
	if err != nil {
		t.Fatal(err)
	}
	if c := configs["small"]; c.GPUs.Machine.Len() != 2 || c.GPUs.Machine.Name() != "two-gpus" || c.GPUs.AllocationPolicy != "lowest-index" ||
		c.Profile != "small" || c.File != filepath.Join(dir, "small.yaml") {
		t.Errorf("small: %d GPUs of %s, policy %s, profile %q, file %q", c.GPUs.Machine.Len(), c.GPUs.Machine.Name(), c.GPUs.AllocationPolicy, c.Profile, c.File)
	}
	if c := configs["a100"]; c.GPUs.Machine.Len() != 8 {
		t.Errorf("a100: %d GPUs", c.GPUs.Machine.Len())
	}
	if c := configs["shared-4"]; c.GPUs.Sharing.Replicas != 4 || c.GPUs.Machine.Len() != 4 {
		t.Errorf("shared-4: %+v", c.GPUs.Sharing)
	}

	// Load: every profile checked, the default one in force.
	c, loaded, err := o.Load()
	if err != nil || loaded == nil || c.Profile != "small" {
		t.Fatalf("Load: %v, profiles %v, profile %q", err, loaded, c.Profile)
	}
	// Select: the label, else the default, else none.
	for _, tc := range []struct {
		label, want string
		noDefault   bool
	}{
		{"a100", "a100", false},
		{"", "small", false},
		{"", "", true},
		{"shared-4", "shared-4", true},
	} {
		oo := o
		if tc.noDefault {
			oo, _ = options.Parse([]string{"-config=" + dir}, env(nil))
		}
		f, err := oo.Select(ps, tc.label)
		if err != nil {
			t.Fatalf("Select(%q): %v", tc.label, err)
		}
		got := ""
		if f != nil {
			got = f.Profile
		}
		if got != tc.want {
			t.Errorf("Select(%q) = %q, want %q", tc.label, got, tc.want)
		}
	}
	_, err = o.Select(ps, "h100")
	if !errors.Is(err, options.ErrUnknownProfile) || !errors.Is(err, options.ErrInvalid) ||
		!strings.Contains(err.Error(), `node label unicore.mcyou.cc/device-plugin.config=h100: profile "h100": no h100.yaml in `+dir+" (profiles: a100, any, shared-4, small, tesla-t4)") {
		t.Errorf("unknown label: %v", err)
	}

	// The kubelet swaps the mount: reading again sees the new profiles.
	swapConfigMapDir(t, dir, map[string]string{
		"a100.yaml":     "version: v1\nflags:\n  topology: dgx-a100\n  numaReport: never\n",
		"small.yaml":    "version: v1\nflags:\n  devices: 1\n",
		"machine.yaml":  wsTopology,
		"README.md":     "",
		"machine.txt":   "",
		"shared-4.yaml": "version: v1\n",
		"any":           "",
		"tesla-t4.yml":  "",
		"dgx-topo":      "",
	})
	ps2, err := options.LoadProfiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := ps2.Lookup("small")
	if c, err := o.Resolve(f); err != nil || c.GPUs.Machine.Len() != 1 {
		t.Errorf("after the swap: %v, %+v", err, c)
	}
}

func TestLoadProfiles_Errors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		link  [2]string // a symbolic link to add: name, target
		want  string    // after the directory and "/"
	}{
		{"no profiles", map[string]string{"README.md": "x"}, [2]string{}, ": no profiles: expected <name>.yaml files"},
		{"invalid profile", map[string]string{"a.yaml": "version: v1\nflags:\n  devicez: 4\n"}, [2]string{}, `/a.yaml:3: flags.devicez: unknown field "devicez" (did you mean "devices"?)`},
		{"name not a label value", map[string]string{"A B.yaml": "version: v1\n"}, [2]string{}, `/A B.yaml: profile name "A B": want at most 63 characters`},
		{"name too long", map[string]string{strings.Repeat("p", 64) + ".yaml": "version: v1\n"}, [2]string{}, "/" + strings.Repeat("p", 64) + `.yaml: profile name "ppp`},
		{"dangling link", map[string]string{"a.yaml": "version: v1\n"}, [2]string{"b.yaml", "..data/b.yaml"}, "/b.yaml: cannot read: stat "},
		{"one profile twice", map[string]string{"a": "version: v1\n", "a.yaml": "version: v1\n"}, [2]string{}, `/a.yaml: profile "a" is also a: keep one`},
		{"a key that is no YAML", map[string]string{"notes": "GPU pools: see the wiki\n  - a100: x\n"}, [2]string{}, "/notes:2: not valid YAML"},
		{"link to a directory", map[string]string{"a.yaml": "version: v1\n", "d/x": ""}, [2]string{"b.yaml", "d"}, "/b.yaml: not a regular file (d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for k, v := range tc.files {
				writeFile(t, dir, k, v)
			}
			if tc.link[0] != "" {
				if err := os.Symlink(tc.link[1], filepath.Join(dir, tc.link[0])); err != nil {
					t.Fatal(err)
				}
			}
			_, err := options.LoadProfiles(dir)
			checkInvalid(t, err, dir+tc.want)
		})
	}
	_, err := options.LoadProfiles(filepath.Join(t.TempDir(), "none"))
	checkInvalid(t, err, "none: cannot read the profiles directory")
}

// TestLoadProfiles_RefusesPathsAndProcessSettings: a profile holds the
// machine's shape and behaviour; paths, addresses and settings of the
// whole process are refused, naming the field, the file and the line.
func TestLoadProfiles_RefusesPathsAndProcessSettings(t *testing.T) {
	refused := map[string]string{
		"sysfsRoot: /host/sys":             "path",
		"devicePluginPath: /dp":            "path",
		"socketName: x.sock":               "path",
		"state: /var/lib/x/state.db":       "path",
		"adminSocket: /run/a.sock":         "path",
		"podResourcesSocket: /run/pr.sock": "path",
		"metricsAddress: \":9400\"":        "path",
		"telemetryAddress: \":9400\"":      "path",
		"stateMoveAside: true":             "process",
		"historyMaxRecords: 10":            "process",
		"historyMaxAge: 1h":                "process",
		"historyMaxBytes: 1Mi":             "process",
		"reconcileInterval: 1s":            "process",
		"abandonAfter: 1m":                 "process",
		"logLevel: debug":                  "process",
		"logFormat: console":               "process",
	}
	for line, kind := range refused {
		key, _, _ := strings.Cut(line, ":")
		t.Run(key, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "ok.yaml", "version: v1\n")
			p := writeFile(t, dir, "bad.yaml", "version: v1\nflags:\n  devices: 2\n  "+line+"\n")
			_, err := options.LoadProfiles(dir)
			want := p + ":4: flags." + key + ": a profile may not set a path or address"
			if kind == "process" {
				want = p + ":4: flags." + key + ": a profile may not set what holds for the whole process"
			}
			checkInvalid(t, err, want)
			// The same file as a -config file is fine.
			if _, err := options.LoadFile(p); err != nil {
				t.Errorf("as a -config file: %v", err)
			}
		})
	}
	// Everything of the machine's shape and behaviour is allowed.
	dir := t.TempDir()
	writeFile(t, dir, "full.yaml", `version: v1
flags:
  devices: 8
  resourceName: unicore.mcyou.cc/gpu
  allocationPolicy: lowest-index
  sharedDevicesAllocationPolicy: packed
  deviceListStrategy: envvar
  numaReport: always
  faults: "flap:fake-2:period=10s"
  migStrategy: none
  plugin:
    deviceListStrategy: envvar
    passDeviceSpecs: false
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: unicore.mcyou.cc/gpu
      replicas: 2
`)
	ps, err := options.LoadProfiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := options.Parse(nil, env(nil))
	f, _ := ps.Lookup("full")
	c, err := o.Resolve(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.GPUs.Machine.Len() != 8 || c.GPUs.Sharing.ResourceName != "unicore.mcyou.cc/gpu.shared" || c.GPUs.NUMAReport.String() != "always" || len(c.Ignored) != 1 {
		t.Errorf("full profile: %+v", c)
	}
}

// TestResolve_ProfileVersusFlags: a flag or variable overrides every
// profile; resolving again at run time returns an error, never exits.
func TestResolve_ProfileVersusFlags(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "eight.yaml", "version: v1\nflags:\n  devices: 8\n  numaReport: never\n")
	writeFile(t, dir, "dgx.yaml", "version: v1\nflags:\n  topology: dgx-a100\n")
	ps, err := options.LoadProfiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	eight, _ := ps.Lookup("eight")
	dgx, _ := ps.Lookup("dgx")
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		profile *options.File
		devices int
		src     options.Source
		err     string
	}{
		{"profile", nil, nil, eight, 8, options.SourceFile, ""},
		{"no profile", nil, nil, nil, 4, options.SourceDefault, ""},
		{"flag over profile", []string{"-devices=2"}, nil, eight, 2, options.SourceFlag, ""},
		{"variable over profile", nil, map[string]string{"VGPU_DEVICES": "3"}, eight, 3, options.SourceEnv, ""},
		{"flag against a profile's topology", []string{"-devices=4"}, nil, dgx, 0, 0,
			dir + `/dgx.yaml:3: invalid flags.topology="dgx-a100": -devices=4 but topology "dgx-a100" has 8 GPUs (leave -devices unset)`},
		{"profile's topology", nil, nil, dgx, 8, options.SourceDefault, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := options.Parse(tc.args, env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			c, err := o.Resolve(tc.profile)
			if tc.err != "" {
				checkInvalid(t, err, tc.err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.GPUs.Machine.Len() != tc.devices || c.Source("devices") != tc.src {
				t.Errorf("%d devices from %v, want %d from %v", c.GPUs.Machine.Len(), c.Source("devices"), tc.devices, tc.src)
			}
		})
	}
	// At start, every profile must resolve with the command line.
	_, err = load([]string{"-config=" + dir, "-devices=4"}, nil)
	checkInvalid(t, err, `profile "dgx": `+dir+`/dgx.yaml:3: invalid flags.topology="dgx-a100": -devices=4 but topology`)
	_, err = load([]string{"-config=" + dir, "-config-default=h100"}, nil)
	checkInvalid(t, err, `invalid -config-default="h100": profile "h100": no h100.yaml in `+dir+" (profiles: dgx, eight)")
	if !errors.Is(err, options.ErrUnknownProfile) {
		t.Errorf("%v does not wrap ErrUnknownProfile", err)
	}
	file := writeFile(t, t.TempDir(), "c.yaml", "version: v1\n")
	_, err = load([]string{"-config=" + file, "-config-default=eight"}, nil)
	checkInvalid(t, err, `invalid -config-default="eight": -config `+file+" is a file, not a directory of profiles")
	c := mustLoad(t, []string{"-config=" + dir, "-config-default=eight"}, nil)
	if c.GPUs.Machine.Len() != 8 || c.Profile != "eight" {
		t.Errorf("-config-default=eight: %d GPUs, profile %q", c.GPUs.Machine.Len(), c.Profile)
	}
	// Without -config-default, no profile is in force until a label says.
	o, err := options.Parse([]string{"-config=" + dir}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	c, ps2, err := o.Load()
	if err != nil || ps2 == nil || c.Profile != "" || c.File != "" || c.GPUs.Machine.Len() != 4 {
		t.Errorf("no default: %v, profiles %v, config %+v", err, ps2, c)
	}
}

// TestResolve_TelemetryProfile: a profile sets the load model, its seed,
// per-pod series and writable loads; writable needs the process's
// -telemetry-address, which a profile may not set.
func TestResolve_TelemetryProfile(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "busy.yaml", "version: v1\nflags:\n  telemetryModel: random-walk\n  telemetrySeed: 7\n  telemetryPerPod: true\n  telemetryWritable: true\n")
	_, err := load([]string{"-config=" + dir}, nil)
	checkInvalid(t, err, `profile "busy": `+file+":6: invalid flags.telemetryWritable=true: needs -telemetry-address")
	c := mustLoad(t, []string{"-config=" + dir, "-config-default=busy", "-telemetry-address=:9400"}, nil)
	if c.Telemetry.Model != telemetry.ModelRandomWalk || c.Telemetry.Seed != 7 || !c.Telemetry.PerPod || !c.Telemetry.Writable || c.TelemetryAddress != ":9400" {
		t.Errorf("telemetry of the profile: %+v", c)
	}
	writeFile(t, dir, "addr.yaml", "version: v1\nflags:\n  telemetryAddress: \":9400\"\n")
	if _, err := options.LoadProfiles(dir); err == nil || !strings.Contains(err.Error(), "telemetryAddress") {
		t.Errorf("a profile setting telemetryAddress: %v, want it refused", err)
	}
}
