package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/mattn/go-isatty"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/lifecycle"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Defaults of the flags.
const (
	defaultDevices      = 4
	defaultResourceName = "unicore.mcyou.cc/gpu"
	defaultSocketName   = "virtual-gpu.sock"
	// maxDevices bounds -devices: the kubelet's 4 MiB ListAndWatch limit
	// allows far more, but no node has more GPUs than this.
	maxDevices = 1024
	// maxSocketPath is the longest unix socket path Linux accepts
	// (sun_path is 108 bytes including the terminating NUL).
	maxSocketPath = 107
	envPrefix     = "VGPU_"

	defaultStatePath         = "/var/lib/virtual-gpu/state.db"
	adminSocketName          = "admin.sock"
	defaultSysfsRoot         = "/sys"
	defaultHistoryMaxRecords = 100000
	defaultHistoryMaxAge     = 90 * 24 * time.Hour
	defaultHistoryMaxBytes   = 64 << 20
	// minHistoryMaxBytes is the least non-zero -history-max-bytes: a few
	// hundred records.
	minHistoryMaxBytes = 64 << 10
)

// defaultDevicePluginPath is the kubelet's device-plugin directory.
var defaultDevicePluginPath = filepath.Clean(pluginapi.DevicePluginPath)

// config is the whole configuration of the serve job, from flags and their
// environment twins. parseConfig validates it whole.
type config struct {
	// devices is the number of GPUs, fake-0 … fake-N-1 (default 4).
	devices int
	// resourceName is registered with the kubelet (default unicore.mcyou.cc/gpu).
	resourceName string
	// devicePluginPath is the kubelet's device-plugin directory (default
	// /var/lib/kubelet/device-plugins).
	devicePluginPath string
	// socketName is the plugin's socket in devicePluginPath (default virtual-gpu.sock).
	socketName string
	// logLevel is one of logLevels (default info).
	logLevel string
	// logFormat is json or console, coloured only on a terminal (default json).
	logFormat string

	// topology is a preset name or a topology file; "" is the generic
	// layout of -devices GPUs (default "").
	topology string
	// numaReport is auto, always or never (default auto).
	numaReport string
	// sysfsRoot is where the host's /sys is, for -numa-report=auto
	// (default /sys).
	sysfsRoot string
	// allocationPolicy names an allocator.Policies entry (default best-connected).
	allocationPolicy string

	// statePath is the bbolt state file (default /var/lib/virtual-gpu/state.db).
	statePath string
	// stateMoveAside moves a damaged state file aside and starts fresh
	// (default false).
	stateMoveAside bool
	// historyMaxRecords bounds the allocation history and the health
	// events, each (default 100000).
	historyMaxRecords int
	// historyMaxAge drops older history; 0 keeps any age (default 90 days).
	historyMaxAge time.Duration
	// historyMaxBytes bounds the allocation history and the health events
	// together, in encoded bytes; 0 is no byte limit (default 64 MiB).
	historyMaxBytes byteSize
	// adminSocket is the local admin API (default admin.sock next to the
	// state file).
	adminSocket string
	// faults is a fault-injection plan (default none).
	faults string

	// podResourcesSocket is the kubelet's PodResources API (default
	// /var/lib/kubelet/pod-resources/kubelet.sock).
	podResourcesSocket string
	// reconcileInterval is the PodResources poll period (default 5 s).
	reconcileInterval time.Duration
	// abandonAfter marks allocations no pod claimed (default 1 m).
	abandonAfter time.Duration
	// metricsAddress serves /metrics, /healthz and /readyz; "" is off
	// (default off).
	metricsAddress string

	showVersion bool
	showHelp    bool
	// set holds the flags given explicitly, on the command line or by
	// environment.
	set map[string]bool
}

// newFlagSet declares every flag of cfg, with its default. A backquoted
// word in a usage string is the value's name in -h (flag.UnquoteUsage).
func newFlagSet(cfg *config) *flag.FlagSet {
	fs := flag.NewFlagSet("virtual-gpu-device-plugin", flag.ContinueOnError)
	fs.IntVar(&cfg.devices, "devices", defaultDevices, "number of virtual GPUs, named fake-0 … fake-N-1 (1–1024)")
	fs.StringVar(&cfg.resourceName, "resource-name", defaultResourceName, "extended resource `name` registered with the kubelet (<domain>/<name>)")
	fs.StringVar(&cfg.devicePluginPath, "device-plugin-path", defaultDevicePluginPath, "kubelet device-plugin `directory` (holds kubelet.sock and the plugin's socket)")
	fs.StringVar(&cfg.socketName, "socket-name", defaultSocketName, "file `name` of the plugin's socket in -device-plugin-path")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log `level`: "+strings.Join(logLevels, ", "))
	fs.StringVar(&cfg.logFormat, "log-format", "json", "log `format`: json, or console (coloured only on a terminal)")
	fs.StringVar(&cfg.topology, "topology", "", "the `preset|file` to model: one of "+strings.Join(topology.PresetNames(), ", ")+
		", or a file in YAML or as 'nvidia-smi topo -m' prints it; empty: a generic layout of -devices GPUs")
	fs.StringVar(&cfg.numaReport, "numa-report", "auto", "which NUMA nodes to report to the kubelet (`mode`): auto (only nodes this host has), always, never")
	fs.StringVar(&cfg.sysfsRoot, "sysfs-root", defaultSysfsRoot, "the host's sysfs `directory`, read for its NUMA nodes")
	fs.StringVar(&cfg.allocationPolicy, "allocation-policy", allocator.PolicyBestConnected, "preferred-allocation `policy`: "+strings.Join(allocator.PolicyNames(), ", "))
	fs.StringVar(&cfg.statePath, "state", defaultStatePath, "bbolt state `file`: device health and allocation history")
	fs.BoolVar(&cfg.stateMoveAside, "state-move-aside", false, "if the state file is damaged, rename it to <file>.corrupt-<time> and start fresh")
	fs.IntVar(&cfg.historyMaxRecords, "history-max-records", defaultHistoryMaxRecords, "keep at most this many allocation records (and as many health events)")
	fs.DurationVar(&cfg.historyMaxAge, "history-max-age", defaultHistoryMaxAge, "drop history older than this; 0 keeps any age")
	cfg.historyMaxBytes = defaultHistoryMaxBytes
	fs.Var(&cfg.historyMaxBytes, "history-max-bytes", "keep the allocation records and health events together at most this `size`, encoded (bytes, or with Ki, Mi, Gi); 0: no byte limit")
	fs.StringVar(&cfg.adminSocket, "admin-socket", "", "local admin API socket `path`, used by dump and health; not in -device-plugin-path (default: admin.sock next to -state)")
	fs.StringVar(&cfg.faults, "faults", "", "fault-injection `plan`, e.g. \"down:fake-1:after=30s;flap:fake-2:period=10s;random:mtbf=1h:repair=5m\"")
	fs.StringVar(&cfg.podResourcesSocket, "pod-resources-socket", lifecycle.DefaultSocket, "the kubelet's PodResources API `socket`, to follow allocations to pods")
	fs.DurationVar(&cfg.reconcileInterval, "reconcile-interval", lifecycle.DefaultInterval, "how often to ask the PodResources API who holds which devices")
	fs.DurationVar(&cfg.abandonAfter, "abandon-after", lifecycle.DefaultAbandonAfter, "mark an allocation abandoned when no pod claimed it this long")
	fs.StringVar(&cfg.metricsAddress, "metrics-address", "", "serve /metrics, /healthz and /readyz on this `host:port` (e.g. :9400 or 127.0.0.1:9400); empty: off")
	fs.BoolVar(&cfg.showVersion, "version", false, "print the version, commit and Go version and exit")
	return fs
}

// noEnvTwin are the flags without an environment twin: a VGPU_VERSION left
// in a DaemonSet must not turn the plugin into a version printer.
var noEnvTwin = map[string]bool{"version": true}

// envName is the environment twin of a flag: -device-plugin-path is
// VGPU_DEVICE_PLUGIN_PATH.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// printHelp prints the commands, one line each, then the serve flags.
func printHelp(w io.Writer) {
	fmt.Fprintln(w, "Usage: virtual-gpu-device-plugin [command] [flags]")
	fmt.Fprintln(w, "\nA Kubernetes device plugin that advertises virtual GPUs with a realistic NUMA/NVLink/PCIe topology.")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'virtual-gpu-device-plugin help <command>' for the flags of dump and health.")
	fmt.Fprintln(w, "\nServe flags (each has an environment twin VGPU_<NAME>, e.g. VGPU_DEVICES; the command line wins):")
	fs := newFlagSet(&config{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseConfig parses args, then fills every flag not given on the command
// line from its environment twin, then validates the whole. -h prints the
// usage to stdout; -version skips the environment and the validation, so a
// bad VGPU_* variable cannot make it fail.
func parseConfig(args []string, getenv func(string) string, stdout io.Writer) (config, error) {
	var cfg config
	fs := newFlagSet(&cfg)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout)
			cfg.showHelp = true
			return cfg, nil
		}
		return cfg, usagef("%w", err)
	}
	if cfg.showVersion {
		return cfg, nil
	}
	if fs.NArg() > 0 {
		return cfg, usagef("unexpected argument %q", fs.Arg(0))
	}
	cfg.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cfg.set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if cfg.set[f.Name] || noEnvTwin[f.Name] || envErr != nil {
			return
		}
		v := getenv(envName(f.Name))
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			envErr = usagef("invalid %s=%q: %w", envName(f.Name), v, err)
			return
		}
		cfg.set[f.Name] = true
	})
	if envErr != nil {
		return cfg, envErr
	}
	return cfg, cfg.validate()
}

// logLevels are the accepted -log-level values.
var logLevels = []string{"trace", "debug", "info", "warn", "error"}

// validate checks every value and names the first flag that breaks its rule.
// Besides the values it checks, without blocking, that the state file and
// the host's NUMA directory, where they exist, are what they should be: a
// FIFO there would block the start-up read beyond any signal.
func (c *config) validate() error {
	if c.devices < 1 || c.devices > maxDevices {
		return usagef("invalid -devices=%d: must be between 1 and %d", c.devices, maxDevices)
	}
	if err := validateResourceName(c.resourceName); err != nil {
		return usagef("invalid -resource-name=%q: %w", c.resourceName, err)
	}
	if !filepath.IsAbs(c.devicePluginPath) {
		return usagef("invalid -device-plugin-path=%q: must be an absolute path", c.devicePluginPath)
	}
	c.devicePluginPath = filepath.Clean(c.devicePluginPath)
	if c.socketName == "" || strings.ContainsRune(c.socketName, '/') || c.socketName == "." || c.socketName == ".." {
		return usagef("invalid -socket-name=%q: must be a plain file name", c.socketName)
	}
	if c.socketName == "kubelet.sock" {
		return usagef("invalid -socket-name=%q: that is the kubelet's own socket", c.socketName)
	}
	if p := filepath.Join(c.devicePluginPath, c.socketName); len(p) > maxSocketPath {
		return usagef("invalid -device-plugin-path/-socket-name: socket path %q is %d bytes, unix sockets allow %d", p, len(p), maxSocketPath)
	}
	if !slices.Contains(logLevels, c.logLevel) {
		return usagef("invalid -log-level=%q: must be one of %s", c.logLevel, strings.Join(logLevels, ", "))
	}
	if c.logFormat != "json" && c.logFormat != "console" {
		return usagef("invalid -log-format=%q: must be json or console", c.logFormat)
	}
	switch c.numaReport {
	case "auto", "always", "never":
	default:
		return usagef("invalid -numa-report=%q: must be auto, always or never", c.numaReport)
	}
	if !filepath.IsAbs(c.sysfsRoot) {
		return usagef("invalid -sysfs-root=%q: must be an absolute path", c.sysfsRoot)
	}
	if c.numaReport == "auto" {
		if err := checkKind(filepath.Join(c.sysfsRoot, topology.SysfsNodeDir), os.ModeDir); err != nil {
			return usagef("invalid -sysfs-root=%q: %w", c.sysfsRoot, err)
		}
	}
	if _, ok := allocator.Policies[c.allocationPolicy]; !ok {
		return usagef("invalid -allocation-policy=%q: must be one of %s", c.allocationPolicy, strings.Join(allocator.PolicyNames(), ", "))
	}
	if !filepath.IsAbs(c.statePath) || strings.HasSuffix(c.statePath, "/") {
		return usagef("invalid -state=%q: must be an absolute file path", c.statePath)
	}
	if err := checkKind(c.statePath, 0); err != nil {
		return usagef("invalid -state=%q: %w", c.statePath, err)
	}
	if c.historyMaxRecords < 1 {
		return usagef("invalid -history-max-records=%d: must be at least 1 (the history is always bounded)", c.historyMaxRecords)
	}
	if c.historyMaxAge < 0 {
		return usagef("invalid -history-max-age=%s: must be 0 (any age) or positive", c.historyMaxAge)
	}
	if c.historyMaxBytes != 0 && c.historyMaxBytes < minHistoryMaxBytes {
		return usagef("invalid -history-max-bytes=%s: must be 0 (no byte limit) or at least %s", c.historyMaxBytes, byteSize(minHistoryMaxBytes))
	}
	given := c.adminSocket
	var err error
	if c.adminSocket, err = adminSocketPath(c.adminSocket, c.statePath); err != nil {
		return err
	}
	if filepath.Dir(c.adminSocket) == c.devicePluginPath {
		what := fmt.Sprintf("-admin-socket=%q", c.adminSocket)
		if given == "" {
			what = fmt.Sprintf("-admin-socket (default %s, next to -state)", c.adminSocket)
		}
		return usagef("invalid %s: must not be in -device-plugin-path %s: the kubelet deletes the sockets there when it restarts", what, c.devicePluginPath)
	}
	if !filepath.IsAbs(c.podResourcesSocket) || len(c.podResourcesSocket) > maxSocketPath {
		return usagef("invalid -pod-resources-socket=%q: must be an absolute path of at most %d bytes", c.podResourcesSocket, maxSocketPath)
	}
	if c.reconcileInterval < 100*time.Millisecond {
		return usagef("invalid -reconcile-interval=%s: must be at least 100ms (the kubelet rate-limits the PodResources API)", c.reconcileInterval)
	}
	if c.metricsAddress != "" {
		if err := validateListenAddress(c.metricsAddress); err != nil {
			return usagef("invalid -metrics-address=%q: %w", c.metricsAddress, err)
		}
	}
	if c.abandonAfter < c.reconcileInterval {
		return usagef("invalid -abandon-after=%s: must be at least -reconcile-interval (%s)", c.abandonAfter, c.reconcileInterval)
	}
	if _, err := faults.Parse(c.faults); err != nil {
		return usagef("invalid -faults: %w", err)
	}
	return nil
}

// checkKind checks that path, if it can be seen, is a file of the given
// type (0: a regular file). It never opens path, so it cannot block.
func checkKind(path string, want os.FileMode) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil // missing, or not ours to see: the real open says why
	case fi.Mode().Type() == want:
		return nil
	case want == os.ModeDir:
		return fmt.Errorf("%s is not a directory", path)
	}
	return fmt.Errorf("%s is not a regular file", path)
}

// validateListenAddress checks a TCP listen address: host:port, the host
// empty (every address), an IP address or a DNS name, the port a number
// 0–65535 or a service name from /etc/services.
func validateListenAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port, e.g. :9400 or 127.0.0.1:9400")
	}
	if port == "" {
		return errors.New("no port: want host:port, e.g. :9400")
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 0 || n > 65535 {
			return fmt.Errorf("port %d is out of range 0–65535", n)
		}
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q is neither a number 0–65535 nor a known service name", port)
	}
	if host == "" {
		return nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if len(host) > 253 || !dnsSubdomain.MatchString(strings.ToLower(host)) {
		return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	return nil
}

var (
	// dnsSubdomain is a DNS-1123 subdomain (RFC 1123), at most 253 bytes.
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// qualifiedName is the name part of a qualified name, at most 63 bytes.
	qualifiedName = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
)

// validateResourceName applies the rules the kubelet and API server apply to
// a device plugin's extended resource name: domain/name, a DNS subdomain
// outside kubernetes.io, a qualified name that also fits behind "requests.".
func validateResourceName(name string) error {
	domain, short, ok := strings.Cut(name, "/")
	switch {
	case !ok:
		return errors.New(`must be <domain>/<name>, e.g. "unicore.mcyou.cc/gpu"`)
	case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io"):
		return errors.New("the kubernetes.io domain is reserved")
	case len(domain) > 253 || !dnsSubdomain.MatchString(domain):
		return fmt.Errorf("domain %q is not a lowercase DNS subdomain", domain)
	case len("requests."+short) > 63 || !qualifiedName.MatchString(short):
		return fmt.Errorf("name %q must be at most 54 characters of [A-Za-z0-9-_.], starting and ending alphanumeric", short)
	}
	return nil
}

// adminSocketPath checks the admin socket flag; empty means admin.sock next
// to the state file.
func adminSocketPath(flagValue, statePath string) (string, error) {
	p := flagValue
	if p == "" {
		p = filepath.Join(filepath.Dir(statePath), adminSocketName)
	}
	if !filepath.IsAbs(p) {
		return "", usagef("invalid -admin-socket=%q: must be an absolute path", p)
	}
	p = filepath.Clean(p)
	if len(p) > maxSocketPath {
		return "", usagef("invalid -admin-socket=%q: %d bytes, unix sockets allow %d", p, len(p), maxSocketPath)
	}
	return p, nil
}

// isTerminal reports whether w is a terminal, for colour in console logs.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}
