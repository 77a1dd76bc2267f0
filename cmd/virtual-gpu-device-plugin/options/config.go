package options

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra/endpoint"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// Config is the whole validated configuration of serve, every value typed,
// so nothing is parsed again. Options.Resolve and Settings.Validate make
// one; it is immutable and safe for concurrent use afterwards. The zero
// value is not a valid Config.
type Config struct {
	// Config is what the agent serves, the settings a profile may change:
	// the profile's name, the GPUs (GPUs), what containers get (View), the
	// telemetry's load model (Telemetry) and the fault plan (Faults).
	agent.Config

	// DRA is the DRA driver's name and the kubelet's directories it
	// registers and serves in (-kubelet-api=dra).
	DRA endpoint.Config
	// DevicePluginPath is the kubelet's device-plugin directory, clean
	// (default /var/lib/kubelet/device-plugins).
	DevicePluginPath string
	// SocketName is the plugin's socket in DevicePluginPath (default
	// virtual-gpu.sock).
	SocketName string
	// LogLevel is the root logger's level (default zerolog.InfoLevel).
	LogLevel zerolog.Level
	// LogFormat is json or console (default json).
	LogFormat LogFormat

	// StatePath is the bbolt state file, clean (default
	// /var/lib/virtual-gpu/state.db).
	StatePath string
	// StateMoveAside moves a damaged state file aside (default false).
	StateMoveAside bool
	// History bounds the history: MaxRecords at least 1 (default 100000),
	// MaxAge 0 keeps any age (default 90 days), MaxBytes 0 is no byte
	// limit (default 64 MiB).
	History store.PruneOptions
	// AdminSocket is the admin API socket, absolute and clean (default
	// admin.sock next to StatePath).
	AdminSocket string
	// PodResourcesSocket is the kubelet's PodResources API.
	PodResourcesSocket string
	// ReconcileInterval is the PodResources poll period, at least 100ms
	// (default 5s).
	ReconcileInterval time.Duration
	// AbandonAfter marks allocations no pod claimed, at least
	// ReconcileInterval (default 1m).
	AbandonAfter time.Duration
	// MetricsAddress serves /metrics, /healthz and /readyz; "" is off.
	MetricsAddress string
	// TelemetryAddress serves the GPU telemetry in dcgm-exporter's format
	// (plugin/telemetry) on /metrics; "" is off (default off). It is never
	// MetricsAddress.
	TelemetryAddress string
	// TelemetryCollectors are the telemetry's fields, from the
	// -telemetry-collectors file (dcgm-exporter's -f format); nil is
	// dcgm-exporter's default counters.
	TelemetryCollectors []telemetry.Collector
	// TelemetryCollectorsFile is the file they came from; "" without one.
	TelemetryCollectorsFile string

	// File is the -config file or the profile's file the values came
	// from; "" without one.
	File string
	// Ignored lists the fields of the file, known from NVIDIA's device
	// plugin, that have no effect here. The caller logs them once.
	Ignored []Note
	// Warnings are what the configuration allows that is unsafe or will
	// not do all it says, one sentence each (an acknowledged
	// -device-node-source, a telemetry collector not simulated). The caller logs
	// each once, at warn.
	Warnings []string
	// Overridden lists the fields of the file whose value the command
	// line or the environment replaced, e.g. "flags.devices
	// (a100.yaml:3) by -devices". The caller may log them.
	Overridden []string

	sources map[string]Source
}

// Source returns where the named flag's value came from, e.g.
// c.Source("devices").
func (c *Config) Source(flagName string) Source { return c.sources[flagName] }

// LogFormat is the log's format.
type LogFormat string

// Log formats.
const (
	// LogJSON is one JSON object per line, the default.
	LogJSON LogFormat = "json"
	// LogConsole is for people: coloured only on a terminal.
	LogConsole LogFormat = "console"
)

// deviceListStrategies are the accepted strategies.
var deviceListStrategies = []string{string(view.DeviceListEnvVar), string(view.DeviceListCDICRI)}

// parseDeviceListStrategies reads a comma-separated list of strategies,
// each once.
func parseDeviceListStrategies(s string) ([]view.DeviceListStrategy, error) {
	var out []view.DeviceListStrategy
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "volume-mounts" || item == "cdi-annotations":
			return nil, fmt.Errorf("NVIDIA's %s is not supported here: want %s", item, strings.Join(deviceListStrategies, " or "))
		case item == "" && s != "":
			return nil, fmt.Errorf("an empty entry (a stray comma?): want %s, or both comma-separated", strings.Join(deviceListStrategies, " or "))
		case !slices.Contains(deviceListStrategies, item):
			return nil, fmt.Errorf("%q: want %s, or both comma-separated", item, strings.Join(deviceListStrategies, " or "))
		case slices.Contains(out, view.DeviceListStrategy(item)):
			return nil, fmt.Errorf("%s is listed twice: list each strategy once", item)
		}
		out = append(out, view.DeviceListStrategy(item))
	}
	return out, nil
}

// Note is a field of a file that is accepted and has no effect, with
// where it is and why.
type Note struct {
	// Field is the key's path, e.g. flags.migStrategy.
	Field string
	// File and Line locate the key.
	File string
	Line int
	// Why says what the field does in NVIDIA's plugin and why not here.
	Why string
}

// String returns "file:line: field: why".
func (n Note) String() string {
	return fmt.Sprintf("%s: %s: %s", fileLine(n.File, n.Line), n.Field, n.Why)
}
