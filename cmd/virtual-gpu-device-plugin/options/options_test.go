package options_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// load parses args and kv as serve does and loads the configuration.
func load(args []string, kv map[string]string) (*options.Config, error) {
	o, err := options.Parse(args, env(kv))
	if err != nil {
		return nil, err
	}
	c, _, err := o.Load()
	return c, err
}

func mustLoad(t *testing.T, args []string, kv map[string]string) *options.Config {
	t.Helper()
	c, err := load(args, kv)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkInvalid checks that err is one line wrapping ErrInvalid and
// containing want.
func checkInvalid(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case !strings.Contains(err.Error(), want):
		t.Errorf("err = %v\nwant it to contain %q", err, want)
	case !errors.Is(err, options.ErrInvalid):
		t.Errorf("err %v does not wrap ErrInvalid (exit code 2)", err)
	case strings.Contains(err.Error(), "\n"):
		t.Errorf("error is not one line: %q", err)
	}
}

func TestLoad_Defaults(t *testing.T) {
	c := mustLoad(t, nil, nil)
	want := options.Config{
		Config: agent.Config{GPUs: gpuset.Config{
			ResourceName:     "unicore.mcyou.cc/gpu",
			NUMAReport:       topology.NUMAReportAuto,
			SysfsRoot:        "/sys",
			AllocationPolicy: "best-connected",
		}},
		DevicePluginPath:   "/var/lib/kubelet/device-plugins",
		SocketName:         "virtual-gpu.sock",
		LogLevel:           zerolog.InfoLevel,
		LogFormat:          options.LogJSON,
		StatePath:          "/var/lib/virtual-gpu/state.db",
		History:            store.PruneOptions{MaxRecords: 100000, MaxAge: 90 * 24 * time.Hour, MaxBytes: 64 << 20},
		AdminSocket:        "/var/lib/virtual-gpu/admin.sock",
		PodResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock",
		ReconcileInterval:  5 * time.Second,
		AbandonAfter:       time.Minute,
	}
	got := *c
	if got.GPUs.ResourceName != want.GPUs.ResourceName || got.DevicePluginPath != want.DevicePluginPath || got.SocketName != want.SocketName ||
		got.LogLevel != want.LogLevel || got.LogFormat != want.LogFormat || got.GPUs.NUMAReport != want.GPUs.NUMAReport || got.GPUs.SysfsRoot != want.GPUs.SysfsRoot ||
		got.GPUs.AllocationPolicy != want.GPUs.AllocationPolicy || got.StatePath != want.StatePath || got.StateMoveAside ||
		got.History.MaxRecords != want.History.MaxRecords || got.History.MaxAge != want.History.MaxAge || got.History.MaxBytes != want.History.MaxBytes ||
		got.AdminSocket != want.AdminSocket || got.PodResourcesSocket != want.PodResourcesSocket || got.ReconcileInterval != want.ReconcileInterval ||
		got.AbandonAfter != want.AbandonAfter || got.MetricsAddress != "" || got.Faults.Text != "" || got.Faults.Faults != nil || got.GPUs.Topology != "" ||
		got.TelemetryAddress != "" || got.Telemetry.Model != telemetry.ModelSteady || got.Telemetry.Seed != 0 || got.Telemetry.PerPod ||
		got.Telemetry.Writable || got.View.LoadSocketDir != "/var/lib/virtual-gpu/load" {
		t.Errorf("defaults = %+v", got)
	}
	if c.GPUs.Machine.Len() != 4 || c.GPUs.Machine.FixedSize() {
		t.Errorf("machine %v (fixed %v): want the generic 4 GPUs", c.GPUs.Machine.Len(), c.GPUs.Machine.FixedSize())
	}
	if s := c.GPUs.Sharing; s.Enabled() || s.Replicas != 1 || s.ResourceName != want.GPUs.ResourceName || s.PolicyName != "distributed" {
		t.Errorf("sharing = %+v", s)
	}
	if !slices.Equal(c.View.DeviceListStrategies, []view.DeviceListStrategy{view.DeviceListEnvVar}) {
		t.Errorf("device list strategies = %v", c.View.DeviceListStrategies)
	}
	if c.Source("devices") != options.SourceDefault || c.File != "" || c.Profile != "" || c.Ignored != nil {
		t.Errorf("source %v, file %q, profile %q, ignored %v", c.Source("devices"), c.File, c.Profile, c.Ignored)
	}
}

func TestLoad_FlagsAndEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		devices int
		dir     string
		src     options.Source
	}{
		{"seed spelling", []string{"-devices=4"}, nil, 4, "/var/lib/kubelet/device-plugins", options.SourceFlag},
		{"double dash", []string{"--devices=8"}, nil, 8, "/var/lib/kubelet/device-plugins", options.SourceFlag},
		{"separate value", []string{"-devices", "2", "-device-plugin-path", "/tmp/dp/"}, nil, 2, "/tmp/dp", options.SourceFlag},
		{"env twin", nil, map[string]string{"VGPU_DEVICES": "16", "VGPU_DEVICE_PLUGIN_PATH": "/x"}, 16, "/x", options.SourceEnv},
		{"flag wins over env", []string{"-devices=3"}, map[string]string{"VGPU_DEVICES": "16"}, 3, "/var/lib/kubelet/device-plugins", options.SourceFlag},
		{"bad env ignored under a flag", []string{"-devices=3"}, map[string]string{"VGPU_DEVICES": "x"}, 3, "/var/lib/kubelet/device-plugins", options.SourceFlag},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, tt.args, tt.env)
			if c.GPUs.Machine.Len() != tt.devices || c.DevicePluginPath != tt.dir || c.Source("devices") != tt.src {
				t.Errorf("devices=%d dir=%q source %v, want %d %q %v", c.GPUs.Machine.Len(), c.DevicePluginPath, c.Source("devices"), tt.devices, tt.dir, tt.src)
			}
		})
	}
}

func TestLoad_BadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"zero devices", []string{"-devices=0"}, nil, "invalid -devices=0: must be between 1 and 1024"},
		{"zero devices by env", nil, map[string]string{"VGPU_DEVICES": "0"}, "invalid VGPU_DEVICES=0: must be between 1 and 1024"},
		{"negative devices", []string{"-devices=-1"}, nil, "invalid -devices=-1"},
		{"absurd devices", []string{"-devices=100000"}, nil, "invalid -devices=100000"},
		{"devices not a number", []string{"-devices=four"}, nil, `invalid value "four" for flag -devices`},
		{"bad env", nil, map[string]string{"VGPU_DEVICES": "x"}, `invalid VGPU_DEVICES="x"`},
		{"unknown flag", []string{"-gpus=4"}, nil, "flag provided but not defined: -gpus"},
		{"stray argument", []string{"serve-now"}, nil, `unexpected argument "serve-now"`},
		{"resource without domain", []string{"-resource-name=gpu"}, nil, "invalid -resource-name=\"gpu\": must be <domain>/<name>"},
		{"resource in kubernetes.io", []string{"-resource-name=kubernetes.io/gpu"}, nil, "kubernetes.io domain is reserved"},
		{"resource in sub.kubernetes.io", []string{"-resource-name=x.kubernetes.io/gpu"}, nil, "kubernetes.io domain is reserved"},
		{"resource uppercase domain", []string{"-resource-name=Unicore.io/gpu"}, nil, "not a lowercase DNS subdomain"},
		{"resource bad name", []string{"-resource-name=unicore.io/-gpu"}, nil, `name "-gpu" must be`},
		{"resource name too long", []string{"-resource-name=unicore.io/" + strings.Repeat("g", 55)}, nil, "at most 54 characters"},
		{"relative dir", []string{"-device-plugin-path=var/lib"}, nil, "must be an absolute path"},
		{"socket with slash", []string{"-socket-name=a/b.sock"}, nil, "must be a plain file name"},
		{"kubelet socket", []string{"-socket-name=kubelet.sock"}, nil, "the kubelet's own socket"},
		{"socket path too long", []string{"-device-plugin-path=/" + strings.Repeat("d", 120)}, nil, "unix sockets allow 107"},
		{"log level", []string{"-log-level=loud"}, nil, `invalid -log-level="loud"`},
		{"log format", []string{"-log-format=xml"}, nil, `invalid -log-format="xml": must be json or console`},
		{"log level fatal", []string{"-log-level=fatal"}, nil, `invalid -log-level="fatal": must be one of trace, debug, info, warn, error`},
		{"log level panic", []string{"-log-level=panic"}, nil, `invalid -log-level="panic"`},
		{"log level disabled", []string{"-log-level=disabled"}, nil, `invalid -log-level="disabled"`},
		{"log level number", []string{"-log-level=5"}, nil, `invalid -log-level="5"`},
		{"log level uppercase", []string{"-log-level=INFO"}, nil, `invalid -log-level="INFO"`},
		{"numa report", []string{"-numa-report=sometimes"}, nil, `invalid -numa-report="sometimes": must be auto, always or never`},
		{"allocation policy", []string{"-allocation-policy=random"}, nil, `invalid -allocation-policy="random": must be one of best-connected, lowest-index`},
		{"shared policy", []string{"-shared-devices-allocation-policy=spread"}, nil,
			`invalid -shared-devices-allocation-policy="spread": must be one of distributed, lowest-index, packed`},
		{"device list strategy", []string{"-device-list-strategy=volume-mounts"}, nil, `invalid -device-list-strategy="volume-mounts": NVIDIA's volume-mounts is not supported here`},
		{"device list strategy typo", []string{"-device-list-strategy=envvar,cdi"}, nil, `invalid -device-list-strategy="envvar,cdi": "cdi": want envvar or cdi-cri`},
		{"device list strategy twice", []string{"-device-list-strategy=envvar,envvar"}, nil, `invalid -device-list-strategy="envvar,envvar": envvar is listed twice: list each strategy once`},
		{"device list strategy twice by env", nil, map[string]string{"VGPU_DEVICE_LIST_STRATEGY": "cdi-cri, envvar,cdi-cri"}, `invalid VGPU_DEVICE_LIST_STRATEGY="cdi-cri, envvar,cdi-cri": cdi-cri is listed twice`},
		{"device list strategy stray comma", []string{"-device-list-strategy=envvar,"}, nil, `invalid -device-list-strategy="envvar,": an empty entry (a stray comma?): want envvar or cdi-cri`},
		// Issue #20 item 12: the flag package's bare "parse error" says
		// what the value should be, from every source.
		{"devices with a space by env", nil, map[string]string{"VGPU_DEVICES": " 3"}, `invalid VGPU_DEVICES=" 3": want an integer, without spaces around it`},
		{"devices not a number by env", nil, map[string]string{"VGPU_DEVICES": "four"}, `invalid VGPU_DEVICES="four": want an integer`},
		{"devices out of range by env", nil, map[string]string{"VGPU_DEVICES": "99999999999999999999"}, `invalid VGPU_DEVICES="99999999999999999999": out of range: want an integer from`},
		{"bool by env", nil, map[string]string{"VGPU_DEVICE_NODES": "yes"}, `invalid VGPU_DEVICE_NODES="yes": want true or false`},
		{"duration by env", nil, map[string]string{"VGPU_RECONCILE_INTERVAL": "5"}, `invalid VGPU_RECONCILE_INTERVAL="5": want a duration such as 90s, 5m or 1h30m`},
		{"bootstrap bool by env", nil, map[string]string{"VGPU_LABEL_NODE": "on"}, `invalid VGPU_LABEL_NODE="on": want true or false`},
		{"devices with a space", []string{"-devices= 3"}, nil, `invalid value " 3" for flag -devices: want an integer, without spaces around it`},
		{"bool on the command line", []string{"-device-nodes=yes"}, nil, `invalid boolean value "yes" for -device-nodes: want true or false`},
		{"duration on the command line", []string{"-abandon-after=1 minute"}, nil, `invalid value "1 minute" for flag -abandon-after: want a duration such as 90s, 5m or 1h30m`},
		{"zero replicas", []string{"-replicas=0"}, nil, "invalid -replicas=0: must be between 1 (no sharing) and 1024"},
		{"too many replicas", nil, map[string]string{"VGPU_REPLICAS": "1025"}, "invalid VGPU_REPLICAS=1025: must be between 1 (no sharing) and 1024"},
		{"too many devices advertised", []string{"-devices=1024", "-replicas=1024"}, nil, "1024 GPUs shared 1024 ways are 1048576 devices; at most 65536"},
		{"relative state", []string{"-state=state.db"}, nil, `invalid -state="state.db": must be an absolute file path`},
		{"history records", []string{"-history-max-records=0"}, nil, "invalid -history-max-records=0: must be at least 1"},
		{"history age", []string{"-history-max-age=-1s"}, nil, "invalid -history-max-age=-1s: must be 0 (any age) or positive"},
		{"reconcile too fast", []string{"-reconcile-interval=10ms"}, nil, "invalid -reconcile-interval=10ms: must be at least 100ms"},
		{"abandon before reconcile", []string{"-abandon-after=1s"}, nil, "invalid -abandon-after=1s: must be at least -reconcile-interval (5s)"},
		{"relative pod resources", []string{"-pod-resources-socket=kubelet.sock"}, nil, `invalid -pod-resources-socket="kubelet.sock": must be an absolute path`},
		{"metrics port too big", []string{"-metrics-address=:99999"}, nil, `invalid -metrics-address=":99999": port 99999 is out of range 0–65535`},
		{"metrics port negative", []string{"-metrics-address=:-1"}, nil, `port -1 is out of range`},
		{"metrics port unknown service", []string{"-metrics-address=:no-such-service"}, nil, `port "no-such-service" is neither a number`},
		{"metrics no port", []string{"-metrics-address=127.0.0.1:"}, nil, "no port"},
		{"metrics no colon", []string{"-metrics-address=9400"}, nil, "want host:port"},
		{"metrics bad host", []string{"-metrics-address=bad_host!:9400"}, nil, `host "bad_host!" is neither an IP address nor a DNS name`},
		{"metrics url", []string{"-metrics-address=http://x:9400"}, nil, "want host:port"},
		{"metrics bad host with port", []string{"-metrics-address=x/y:9400"}, nil, `host "x/y" is neither`},
		{"telemetry bad port", []string{"-telemetry-address=:99999"}, nil, `invalid -telemetry-address=":99999": port 99999 is out of range 0–65535`},
		{"telemetry on the metrics address", []string{"-metrics-address=:9400", "-telemetry-address=:9400"}, nil,
			`invalid -telemetry-address=":9400": is -metrics-address too: the telemetry and the plugin's metrics are two listeners`},
		{"telemetry model", []string{"-telemetry-model=busy"}, nil, `invalid -telemetry-model="busy": must be one of idle, steady, wave, random-walk`},
		{"telemetry model empty", nil, map[string]string{"VGPU_TELEMETRY_MODEL": " "}, `invalid VGPU_TELEMETRY_MODEL=" ": must be one of`},
		{"telemetry seed negative", []string{"-telemetry-seed=-1"}, nil, "invalid -telemetry-seed=-1: must be 0 or more"},
		{"telemetry seed not a number", []string{"-telemetry-seed=x"}, nil, `invalid value "x" for flag -telemetry-seed`},
		{"writable without telemetry", []string{"-telemetry-writable"}, nil, "invalid -telemetry-writable=true: needs -telemetry-address"},
		{"writable sockets too long", []string{"-telemetry-address=:9400", "-telemetry-writable", "-state=/" + strings.Repeat("s", 80) + "/state.db"}, nil,
			"invalid -telemetry-writable=true: the per-allocation sockets next to -state"},
		{"admin socket relative", []string{"-admin-socket=admin.sock"}, nil, `invalid -admin-socket="admin.sock": must be an absolute path`},
		{"admin socket in the device-plugin dir", []string{"-device-plugin-path=/dp", "-admin-socket=/dp/admin.sock"}, nil,
			`invalid -admin-socket="/dp/admin.sock": must not be in -device-plugin-path /dp: the kubelet deletes the sockets there when it restarts`},
		{"admin socket is kubelet.sock", []string{"-admin-socket=/var/lib/kubelet/device-plugins/kubelet.sock"}, nil, "must not be in -device-plugin-path"},
		{"admin socket unclean path", []string{"-device-plugin-path=/dp", "-admin-socket=/dp/x/../a.sock"}, nil, "must not be in -device-plugin-path"},
		{"default admin socket in the device-plugin dir", []string{"-device-plugin-path=/dp", "-state=/dp/state.db"}, nil,
			"invalid -admin-socket (default /dp/admin.sock, next to -state): must not be in -device-plugin-path /dp"},
		{"faults", []string{"-faults=down:fake-1"}, nil, `invalid -faults: bad fault plan: fault 1 "down:fake-1"`},
		{"faults name a device the machine lacks", []string{"-faults=down:fake-9:after=1s"}, nil, "invalid -faults"},
		{"topology", []string{"-topology=no-such-preset"}, nil, `invalid -topology="no-such-preset": topology "no-such-preset" is neither a preset`},
		{"topology and devices", []string{"-topology=dgx-a100", "-devices=4"}, nil, "-devices=4 but topology"},
		{"node name", []string{"-node-name=Node_1"}, nil, `invalid -node-name="Node_1": a node name is a lowercase DNS subdomain`},
		{"label node without a name", []string{"-label-node"}, nil, "invalid -label-node: needs -node-name"},
		{"config default without config", []string{"-config-default=a100"}, nil, `invalid -config-default="a100": needs -config naming a directory of profiles`},
		{"config default not a label value", []string{"-config=/x", "-config-default=a b"}, nil, `invalid -config-default="a b": want at most 63 characters`},
		{"config missing", []string{"-config=/no/such/config.yaml"}, nil, `invalid -config="/no/such/config.yaml": stat /no/such/config.yaml: no such file or directory`},
		{"config missing by env", nil, map[string]string{"VGPU_CONFIG": "/no/such"}, `invalid VGPU_CONFIG="/no/such"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(tt.args, tt.env)
			checkInvalid(t, err, tt.want)
		})
	}
}

// Paths are looked at for what they are, through symlinks: a state file
// that is a symlink to /dev/null is named as such, and an admin socket whose
// directory is a symlink to the device-plugin directory is refused.
func TestLoad_PathsThroughSymlinks(t *testing.T) {
	dir := t.TempDir()
	devnull := filepath.Join(dir, "state.db")
	if err := os.Symlink(os.DevNull, devnull); err != nil {
		t.Fatal(err)
	}
	_, err := load([]string{"-state=" + devnull}, nil)
	checkInvalid(t, err, `a symlink to "`+os.DevNull+`", which is a character device`)

	dp := filepath.Join(dir, "dp")
	if err := os.Mkdir(dp, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dp, link); err != nil {
		t.Fatal(err)
	}
	_, err = load([]string{"-device-plugin-path=" + dp, "-state=" + filepath.Join(dir, "s", "state.db"), "-admin-socket=" + filepath.Join(link, "kubelet.sock")}, nil)
	checkInvalid(t, err, "must not be in -device-plugin-path")
}

// TestLoad_WrapsCauses: errors.Is reaches the cause through ErrInvalid.
func TestLoad_WrapsCauses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		is   error
	}{
		{[]string{"-faults=down:fake-1"}, faults.ErrBadPlan},
		{[]string{"-faults=down:fake-9:after=1s"}, store.ErrUnknownDevice},
		{[]string{"-topology=no-such-preset"}, topology.ErrUnknownTopology},
		{[]string{"-topology=dgx-a100", "-devices=4"}, topology.ErrDevicesMismatch},
	} {
		_, err := load(tc.args, nil)
		if !errors.Is(err, tc.is) || !errors.Is(err, options.ErrInvalid) {
			t.Errorf("%v: %v does not wrap %v and ErrInvalid", tc.args, err, tc.is)
		}
	}
}

func TestLoad_GoodAddresses(t *testing.T) {
	for _, addr := range []string{":9400", "127.0.0.1:9400", "[::1]:9400", "[fe80::1%eth0]:9400", "localhost:9400", "node-1.example.com:0", ":65535", ":http"} {
		if _, err := load([]string{"-metrics-address=" + addr}, nil); err != nil {
			t.Errorf("-metrics-address=%s: %v", addr, err)
		}
		if _, err := load([]string{"-telemetry-address=" + addr}, nil); err != nil {
			t.Errorf("-telemetry-address=%s: %v", addr, err)
		}
	}
	// An admin socket below the device-plugin dir, not in it, is safe: the
	// kubelet only deletes the sockets directly in the dir.
	if _, err := load([]string{"-device-plugin-path=/dp", "-state=/dp/state/state.db"}, nil); err != nil {
		t.Errorf("state and admin socket in a subdirectory: %v", err)
	}
}

// TestLoad_NonBlockingInputs: a FIFO where the state file, the host's NUMA
// directory or the config file should be would block the start-up read;
// it is refused before anything starts.
func TestLoad_NonBlockingInputs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "state.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sysfs := filepath.Join(dir, "sys")
	if err := os.MkdirAll(filepath.Join(sysfs, "devices", "system"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(sysfs, "devices", "system", "node"), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(dir, "profiles")
	writeFile(t, profiles, "good.yaml", "version: v1\n")
	if err := syscall.Mkfifo(filepath.Join(profiles, "pipe.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"state is a FIFO", []string{"-state=" + fifo}, "a named pipe: not a regular file"},
		{"state is a directory", []string{"-state=" + dir}, "a directory: not a regular file"},
		{"NUMA dir is a FIFO", []string{"-sysfs-root=" + sysfs}, "devices/system/node is not a directory"},
		{"config is a FIFO", []string{"-config=" + fifo}, fifo + ": not a regular file"},
		{"profile is a FIFO", []string{"-config=" + profiles}, filepath.Join(profiles, "pipe.yaml") + ": not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(tt.args, nil)
			checkInvalid(t, err, tt.want)
		})
	}
	if _, err := load([]string{"-sysfs-root=" + sysfs, "-numa-report=never"}, nil); err != nil {
		t.Errorf("-numa-report=never does not read sysfs: %v", err)
	}
}

func TestParse_VersionAndHelp(t *testing.T) {
	o, err := options.Parse([]string{"-version"}, env(map[string]string{"VGPU_DEVICES": "x", "VGPU_FAULTS": "nonsense", "VGPU_CONFIG": "/no/such"}))
	if err != nil || !o.Version {
		t.Errorf("-version with bad VGPU_* variables: %v, version %v", err, o)
	}
	c, err := load(nil, map[string]string{"VGPU_VERSION": "true"})
	if err != nil || c == nil {
		t.Errorf("VGPU_VERSION=true: %v", err)
	}
	o, err = options.Parse([]string{"-h"}, env(map[string]string{"VGPU_DEVICES": "x"}))
	if err != nil || !o.Help {
		t.Errorf("-h: %v, help %v", err, o)
	}
}

func TestParse_NodeFlags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		env        map[string]string
		node, kube string
		label      bool
	}{
		{"none", nil, nil, "", "", false},
		{"flags", []string{"-node-name=n1", "-kubeconfig=/k", "-label-node"}, nil, "n1", "/k", true},
		{"downward API", nil, map[string]string{"NODE_NAME": "n2", "KUBECONFIG": "/a:/b"}, "n2", "", false},
		{"our variables first", nil, map[string]string{"NODE_NAME": "n2", "VGPU_NODE_NAME": "n3", "VGPU_KUBECONFIG": "/k", "VGPU_LABEL_NODE": "true"}, "n3", "/k", true},
		{"flag first", []string{"-node-name=n4"}, map[string]string{"NODE_NAME": "n2", "VGPU_NODE_NAME": "n3"}, "n4", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := options.Parse(tc.args, env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if o.NodeName != tc.node || o.Kubeconfig != tc.kube || o.LabelNode != tc.label {
				t.Errorf("node %q kubeconfig %q label %v, want %q %q %v", o.NodeName, o.Kubeconfig, o.LabelNode, tc.node, tc.kube, tc.label)
			}
		})
	}
}

// TestLoad_Precedence: command line > environment > file > default, for
// each kind of value.
func TestLoad_Precedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "config.yaml", `version: v1
flags:
  devices: 2
  logLevel: debug
  historyMaxAge: 1h
  stateMoveAside: true
  historyMaxBytes: 1Mi
`)
	type want struct {
		devices  int
		level    zerolog.Level
		age      time.Duration
		aside    bool
		bytes    int64
		devicesS options.Source
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want want
	}{
		{"default", nil, nil, want{4, zerolog.InfoLevel, 90 * 24 * time.Hour, false, 64 << 20, options.SourceDefault}},
		{"file", []string{"-config=" + file}, nil, want{2, zerolog.DebugLevel, time.Hour, true, 1 << 20, options.SourceFile}},
		{"file by env", nil, map[string]string{"VGPU_CONFIG": file}, want{2, zerolog.DebugLevel, time.Hour, true, 1 << 20, options.SourceFile}},
		{"env over file", []string{"-config=" + file}, map[string]string{"VGPU_DEVICES": "3", "VGPU_LOG_LEVEL": "warn", "VGPU_HISTORY_MAX_AGE": "2h",
			"VGPU_STATE_MOVE_ASIDE": "false", "VGPU_HISTORY_MAX_BYTES": "2Mi"}, want{3, zerolog.WarnLevel, 2 * time.Hour, false, 2 << 20, options.SourceEnv}},
		{"env over default", nil, map[string]string{"VGPU_DEVICES": "3"}, want{3, zerolog.InfoLevel, 90 * 24 * time.Hour, false, 64 << 20, options.SourceEnv}},
		{"flag over env over file", []string{"-config=" + file, "-devices=5", "-log-level=error", "-history-max-age=0", "-state-move-aside=false", "-history-max-bytes=0"},
			map[string]string{"VGPU_DEVICES": "3", "VGPU_LOG_LEVEL": "warn"}, want{5, zerolog.ErrorLevel, 0, false, 0, options.SourceFlag}},
		{"flag over file, env unset", []string{"-config=" + file, "-devices=6"}, nil, want{6, zerolog.DebugLevel, time.Hour, true, 1 << 20, options.SourceFlag}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustLoad(t, tc.args, tc.env)
			got := want{c.GPUs.Machine.Len(), c.LogLevel, c.History.MaxAge, c.StateMoveAside, c.History.MaxBytes, c.Source("devices")}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	c := mustLoad(t, []string{"-config=" + file, "-devices=6"}, map[string]string{"VGPU_LOG_LEVEL": "warn"})
	overridden := []string{"flags.devices (" + file + ":3) by -devices", "flags.logLevel (" + file + ":4) by VGPU_LOG_LEVEL"}
	if !slices.Equal(c.Overridden, overridden) {
		t.Errorf("overridden = %q, want %q", c.Overridden, overridden)
	}
}

// TestLoad_FileSetsEveryFlag: every flag a file may set reaches the
// configuration, typed, and its source is the file.
func TestLoad_FileSetsEveryFlag(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "machines/box.txt", "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t0-7\t0\nGPU1\tNV4\t X \t0-7\t0\n")
	file := writeFile(t, dir, "config.yaml", `version: v1
flags:
  topology: machines/box.txt
  resourceName: example.com/vgpu
  allocationPolicy: lowest-index
  sharedDevicesAllocationPolicy: packed
  deviceListStrategy: [envvar, cdi-cri]
  replicas: 3
  numaReport: never
  faults: "down:fake-1:after=30s"
  sysfsRoot: `+dir+`/sys
  devicePluginPath: `+dir+`/dp
  socketName: vgpu.sock
  state: `+dir+`/state/state.db
  adminSocket: `+dir+`/admin/a.sock
  podResourcesSocket: `+dir+`/pr.sock
  metricsAddress: "127.0.0.1:9401"
  telemetryAddress: "127.0.0.1:9400"
  telemetryModel: wave
  telemetrySeed: 42
  telemetryPerPod: true
  telemetryWritable: true
  stateMoveAside: true
  historyMaxRecords: 10
  historyMaxAge: 0
  historyMaxBytes: 134217728
  reconcileInterval: 2s
  abandonAfter: 3m
  logLevel: trace
  logFormat: console
`)
	c := mustLoad(t, []string{"-config=" + file}, nil)
	checks := []struct {
		flag string
		ok   bool
	}{
		{"topology", c.GPUs.Topology == filepath.Join(dir, "machines/box.txt") && c.GPUs.Machine.Len() == 2 && c.GPUs.Machine.FixedSize()},
		{"resource-name", c.GPUs.ResourceName == "example.com/vgpu"},
		{"allocation-policy", c.GPUs.AllocationPolicy == "lowest-index"},
		{"shared-devices-allocation-policy", c.GPUs.Sharing.PolicyName == "packed"},
		{"device-list-strategy", slices.Equal(c.View.DeviceListStrategies, []view.DeviceListStrategy{"envvar", "cdi-cri"})},
		{"replicas", c.GPUs.Sharing.Replicas == 3 && c.GPUs.Sharing.Enabled() && c.GPUs.Sharing.ResourceName == "example.com/vgpu" && !c.GPUs.Sharing.Renamed && c.GPUs.Sharing.GPUs == nil},
		{"numa-report", c.GPUs.NUMAReport == topology.NUMAReportNever},
		{"faults", c.Faults.Text == "down:fake-1:after=30s" && len(c.Faults.Faults) == 1 && c.Faults.Faults[0].Device == "fake-1"},
		{"sysfs-root", c.GPUs.SysfsRoot == dir+"/sys"},
		{"device-plugin-path", c.DevicePluginPath == dir+"/dp"},
		{"socket-name", c.SocketName == "vgpu.sock"},
		{"state", c.StatePath == dir+"/state/state.db"},
		{"admin-socket", c.AdminSocket == dir+"/admin/a.sock"},
		{"pod-resources-socket", c.PodResourcesSocket == dir+"/pr.sock"},
		{"metrics-address", c.MetricsAddress == "127.0.0.1:9401"},
		{"telemetry-address", c.TelemetryAddress == "127.0.0.1:9400"},
		{"telemetry-model", c.Telemetry.Model == telemetry.ModelWave},
		{"telemetry-seed", c.Telemetry.Seed == 42},
		{"telemetry-per-pod", c.Telemetry.PerPod},
		{"telemetry-writable", c.Telemetry.Writable && c.View.LoadSocketDir == dir+"/state/load"},
		{"state-move-aside", c.StateMoveAside},
		{"history-max-records", c.History.MaxRecords == 10},
		{"history-max-age", c.History.MaxAge == 0},
		{"history-max-bytes", c.History.MaxBytes == 128<<20},
		{"reconcile-interval", c.ReconcileInterval == 2*time.Second},
		{"abandon-after", c.AbandonAfter == 3*time.Minute},
		{"log-level", c.LogLevel == zerolog.TraceLevel},
		{"log-format", c.LogFormat == options.LogConsole},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("%s: not as in the file: %+v", ch.flag, c)
		}
		if c.Source(ch.flag) != options.SourceFile {
			t.Errorf("%s: source %v, want file", ch.flag, c.Source(ch.flag))
		}
	}
	if c.File != file || c.Profile != "" || c.Ignored != nil || c.Overridden != nil {
		t.Errorf("file %q profile %q ignored %v overridden %v", c.File, c.Profile, c.Ignored, c.Overridden)
	}
}

// TestLoad_FileRulesNameTheLine: a rule broken by a value from the file
// names the file, the line and the field; one broken by a value from the
// command line names the flag, even when a file is in use.
func TestLoad_FileRulesNameTheLine(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "c.yaml", "version: v1\nflags:\n  logLevel: info\n  abandonAfter: 1s\n  devices: 2000\n")
	_, err := load([]string{"-config=" + file}, nil)
	checkInvalid(t, err, file+":5: invalid flags.devices=2000: must be between 1 and 1024")
	_, err = load([]string{"-config=" + file, "-devices=2"}, nil)
	checkInvalid(t, err, file+":4: invalid flags.abandonAfter=1s: must be at least -reconcile-interval (5s)")
	_, err = load([]string{"-config=" + file, "-devices=2", "-abandon-after=2s"}, nil)
	checkInvalid(t, err, "invalid -abandon-after=2s: must be at least -reconcile-interval (5s)")
	_, err = load([]string{"-config=" + file, "-devices=2"}, map[string]string{"VGPU_ABANDON_AFTER": "1m", "VGPU_RECONCILE_INTERVAL": "2m"})
	checkInvalid(t, err, "invalid VGPU_ABANDON_AFTER=1m0s: must be at least -reconcile-interval (2m0s)")
	// A file that names a preset of another size than -devices.
	file = writeFile(t, dir, "p.yaml", "version: v1\nflags:\n  topology: dgx-a100\n")
	_, err = load([]string{"-config=" + file, "-devices=4"}, nil)
	checkInvalid(t, err, file+`:3: invalid flags.topology="dgx-a100": -devices=4 but topology "dgx-a100" has 8 GPUs`)
	if c := mustLoad(t, []string{"-config=" + file}, nil); c.GPUs.Machine.Len() != 8 || c.GPUs.Topology != "dgx-a100" {
		t.Errorf("preset from a file: %d GPUs, topology %q", c.GPUs.Machine.Len(), c.GPUs.Topology)
	}
}

// TestSchema_BoundsAreValidatesBounds: the ranges the schema publishes
// for the integer flags are those Validate applies.
func TestSchema_BoundsAreValidatesBounds(t *testing.T) {
	flags := schemaDoc(t)["properties"].(map[string]any)["flags"].(map[string]any)["properties"].(map[string]any)
	checked := 0
	for key, p := range flags {
		prop := p.(map[string]any)
		if typ, _ := prop["type"].([]any); !slices.Contains(typ, any("integer")) {
			continue
		}
		name := kebab(key)
		extra := []string{"-devices=8"} // room for -replicas=1024
		if name == "devices" {
			extra = nil
		}
		ok := func(v float64) bool {
			_, err := load(append([]string{"-" + name + "=" + strconv.Itoa(int(v))}, extra...), nil)
			return err == nil
		}
		lo, hasLo := prop["minimum"].(float64)
		hi, hasHi := prop["maximum"].(float64)
		if !hasLo {
			t.Errorf("flags.%s: the schema gives no minimum", key)
			continue
		}
		if !ok(lo) || ok(lo-1) {
			t.Errorf("-%s: Validate's lower bound is not the schema's %v", name, lo)
		}
		if hasHi && (!ok(hi) || ok(hi+1)) {
			t.Errorf("-%s: Validate's upper bound is not the schema's %v", name, hi)
		}
		checked++
	}
	if checked != 4 {
		t.Errorf("checked %d integer flags, want 4 (devices, replicas, historyMaxRecords, telemetrySeed)", checked)
	}
}

// kebab turns a file key into its flag's name: resourceName → resource-name.
func kebab(key string) string {
	var b strings.Builder
	upper := func(i int) bool { return i < len(key) && key[i] >= 'A' && key[i] <= 'Z' }
	for i := range len(key) {
		r := key[i]
		if upper(i) {
			// A capital starts a word, unless it continues an acronym
			// (kubeletAPI is kubelet-api).
			if i > 0 && !upper(i-1) {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteByte(r)
	}
	return b.String()
}

// TestUnknownVariables: a VGPU_* variable no flag reads is reported, with
// the nearest one as the file's unknown fields are; the others are not.
func TestUnknownVariables(t *testing.T) {
	got := options.UnknownVariables([]string{
		"PATH=/bin", "VGPU_DEVICES=4", "VGPU_DEVICE=4", "VGPU_LOGLEVEL=debug", "VGPU_VERSION=1",
		"VGPU_ZZZ=1", "VGPU_NODE_NAME=n", "NODE_NAME=n", "VGPU_DEVICE=8", "vgpu_devices=2", "VGPU_",
	})
	want := []string{
		"VGPU_",
		"VGPU_DEVICE (did you mean VGPU_DEVICES?)",
		"VGPU_LOGLEVEL (did you mean VGPU_LOG_LEVEL?)",
		"VGPU_VERSION (its flag has no environment twin)",
		"VGPU_ZZZ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("UnknownVariables = %q\nwant %q", got, want)
	}
	if got := options.UnknownVariables(nil); len(got) != 0 {
		t.Errorf("no environment: %q", got)
	}
}

// -telemetry-collectors reads a dcgm-exporter collectors file: its fields
// reach the configuration, what is not simulated is a warning naming the
// file and line, a bad line an error naming the flag, the file and the line.
func TestLoad_TelemetryCollectors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "counters.csv")
	if err := os.WriteFile(good, []byte("# mine\nDCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"+
		"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := load([]string{"-telemetry-collectors=" + good}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.TelemetryCollectors) != 1 || c.TelemetryCollectors[0].Field != "DCGM_FI_DEV_GPU_UTIL" || c.TelemetryCollectorsFile != good {
		t.Errorf("collectors %+v from %q", c.TelemetryCollectors, c.TelemetryCollectorsFile)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], good+": collectors line 3: DCGM_FI_DEV_ECC_DBE_VOL_TOTAL is not simulated") {
		t.Errorf("warnings %q", c.Warnings)
	}
	if c, err := load(nil, nil); err != nil || c.TelemetryCollectors != nil {
		t.Errorf("default: collectors %+v, %v; want none (the default counters)", c.TelemetryCollectors, err)
	}
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("DCGM_FI_DEV_GPU_UTIL, gauge\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = load([]string{"-telemetry-collectors=" + bad}, nil)
	checkInvalid(t, err, `invalid -telemetry-collectors="`+bad+`": collectors line 1: "DCGM_FI_DEV_GPU_UTIL,gauge": want 3 values`)
	_, err = load(nil, map[string]string{"VGPU_TELEMETRY_COLLECTORS": filepath.Join(dir, "none.csv")})
	checkInvalid(t, err, `invalid VGPU_TELEMETRY_COLLECTORS="`+filepath.Join(dir, "none.csv")+`": open `)
}
