package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
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
	// logLevel is a zerolog level (default info).
	logLevel string
	// logFormat is json or console (default json).
	logFormat string

	showVersion bool
	showHelp    bool
	// set holds the flags given explicitly, on the command line or by
	// environment.
	set map[string]bool
}

// newFlagSet declares every flag of cfg, with its default.
func newFlagSet(cfg *config) *flag.FlagSet {
	fs := flag.NewFlagSet("virtual-gpu-device-plugin", flag.ContinueOnError)
	fs.IntVar(&cfg.devices, "devices", defaultDevices, "number of virtual GPUs, named fake-0 … fake-N-1")
	fs.StringVar(&cfg.resourceName, "resource-name", defaultResourceName, "extended resource name registered with the kubelet")
	fs.StringVar(&cfg.devicePluginPath, "device-plugin-path", defaultDevicePluginPath, "kubelet device-plugin directory (holds kubelet.sock and the plugin's socket)")
	fs.StringVar(&cfg.socketName, "socket-name", defaultSocketName, "file name of the plugin's socket in -device-plugin-path")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.StringVar(&cfg.logFormat, "log-format", "json", "log format: json or console")
	fs.BoolVar(&cfg.showVersion, "version", false, "print the version and exit")
	return fs
}

// envName is the environment twin of a flag: -device-plugin-path is
// VGPU_DEVICE_PLUGIN_PATH.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig parses args, then fills every flag not given on the command
// line from its environment twin, then validates the whole. -h prints the
// usage to stdout.
func parseConfig(args []string, getenv func(string) string, stdout io.Writer) (config, error) {
	var cfg config
	fs := newFlagSet(&cfg)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "Usage: virtual-gpu-device-plugin [flags]")
			fmt.Fprintln(stdout, "Every flag has an environment twin VGPU_<NAME> (e.g. VGPU_DEVICES); the command line wins.")
			fs.PrintDefaults()
			cfg.showHelp = true
			return cfg, nil
		}
		return cfg, usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return cfg, usagef("unexpected argument %q", fs.Arg(0))
	}
	cfg.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cfg.set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if cfg.set[f.Name] || envErr != nil {
			return
		}
		v := getenv(envName(f.Name))
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			envErr = usagef("invalid %s=%q: %v", envName(f.Name), v, err)
			return
		}
		cfg.set[f.Name] = true
	})
	if envErr != nil {
		return cfg, envErr
	}
	if cfg.showVersion {
		return cfg, nil
	}
	return cfg, cfg.validate()
}

// validate checks every value and names the first flag that breaks its rule.
func (c *config) validate() error {
	if c.devices < 1 || c.devices > maxDevices {
		return usagef("invalid -devices=%d: must be between 1 and %d", c.devices, maxDevices)
	}
	if err := validateResourceName(c.resourceName); err != nil {
		return usagef("invalid -resource-name=%q: %v", c.resourceName, err)
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
	if _, err := zerolog.ParseLevel(c.logLevel); err != nil || c.logLevel == "" {
		return usagef("invalid -log-level=%q: must be one of trace, debug, info, warn, error", c.logLevel)
	}
	if c.logFormat != "json" && c.logFormat != "console" {
		return usagef("invalid -log-format=%q: must be json or console", c.logFormat)
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
