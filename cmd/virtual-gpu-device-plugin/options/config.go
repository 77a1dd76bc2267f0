package options

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Config is the whole validated configuration of serve, every value typed,
// so nothing is parsed again. Options.Resolve and Settings.Validate make
// one; it is immutable and safe for concurrent use afterwards. The zero
// value is not a valid Config.
type Config struct {
	// ResourceName is registered with the kubelet (default
	// unicore.mcyou.cc/gpu). Shared GPUs may be advertised under
	// Sharing.ResourceName instead.
	ResourceName string
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

	// Topology is the -topology value the machine came from: "" for the
	// generic layout, a preset name, or a file path (relative ones in a
	// file joined to its directory).
	Topology string
	// Machine is the modelled machine: its GPU count is Machine.Len().
	Machine *topology.Machine
	// NUMAReport is the NUMA report mode (default auto).
	NUMAReport topology.NUMAReport
	// SysfsRoot is the host's sysfs (default /sys).
	SysfsRoot string
	// AllocationPolicy is the name of Policy (default best-connected).
	AllocationPolicy string
	// Policy is the preferred-allocation policy of whole GPUs.
	Policy allocator.Policy
	// Sharing is how GPUs are shared; Sharing.Replicas is 1 when they are
	// not.
	Sharing Sharing
	// DeviceListStrategies says how containers are told their devices, in
	// the order given, without repeats (default [envvar]).
	DeviceListStrategies []DeviceListStrategy
	// NvidiaSMI mounts the plugin's nvidia-smi (installed in ToolsDir)
	// read-only at /usr/bin/nvidia-smi in containers (default true).
	NvidiaSMI bool
	// VisibleDevicesEnv sets NVIDIA_VISIBLE_DEVICES to the containers' GPU
	// UUIDs (default false).
	VisibleDevicesEnv bool
	// DeviceNodes gives containers /dev/nvidia<minor> per GPU,
	// /dev/nvidiactl and /dev/nvidia-uvm in the Allocate answer (default
	// false).
	DeviceNodes bool
	// DeviceNodeSource is the host device node behind every container
	// device node, absolute and clean (default /dev/null); with
	// DeviceNodes or the cdi-cri strategy, one of the harmless character
	// devices (HarmlessDeviceNodes), or with -allow-unsafe-device-node-source
	// another character device; never a block device.
	DeviceNodeSource string
	// ToolsDir is the host directory nvidia-smi is installed into,
	// absolute and clean (default bin next to StatePath).
	ToolsDir string
	// StatusDir is the host directory of the GPU status files, status next
	// to StatePath (not a flag).
	StatusDir string
	// CDISpecDir is the CDI spec directory, absolute and clean (default
	// /var/run/cdi); written only with the cdi-cri strategy.
	CDISpecDir string
	// CDIKind is the CDI kind of the spec and of the device names in the
	// Allocate answer with the cdi-cri strategy: ResourceName's (cdi.KindOf;
	// cdi.DefaultKind for the default resource), whatever the sharing
	// renames. The zero Kind without cdi-cri.
	CDIKind cdi.Kind

	// StatePath is the bbolt state file, clean (default
	// /var/lib/virtual-gpu/state.db).
	StatePath string
	// StateMoveAside moves a damaged state file aside (default false).
	StateMoveAside bool
	// HistoryMaxRecords bounds the history, at least 1 (default 100000).
	HistoryMaxRecords int
	// HistoryMaxAge drops older history; 0 keeps any age (default 90 days).
	HistoryMaxAge time.Duration
	// HistoryMaxBytes bounds the history in encoded bytes; 0 is no byte
	// limit (default 64 MiB).
	HistoryMaxBytes int64
	// AdminSocket is the admin API socket, absolute and clean (default
	// admin.sock next to StatePath).
	AdminSocket string
	// FaultPlan is the fault-injection plan as given; "" is none.
	FaultPlan string
	// Faults is FaultPlan parsed and checked against Machine's devices.
	Faults []faults.Fault
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
	// TelemetryModel is the load model of held GPUs (default steady).
	TelemetryModel telemetry.Model
	// TelemetrySeed seeds the load model (default 0).
	TelemetrySeed uint64
	// TelemetryPerPod gives a GPU several containers share one series per
	// holder (default false).
	TelemetryPerPod bool
	// TelemetryWritable lets containers set their GPUs' load over a
	// per-allocation socket in LoadSocketDir (default false); only with
	// TelemetryAddress.
	TelemetryWritable bool
	// LoadSocketDir is the host directory of the per-allocation load
	// sockets, load next to StatePath (not a flag).
	LoadSocketDir string

	// Profile is the name of the profile in force; "" without one.
	Profile string
	// File is the -config file or the profile's file the values came
	// from; "" without one.
	File string
	// Ignored lists the fields of the file, known from NVIDIA's device
	// plugin, that have no effect here. The caller logs them once.
	Ignored []Note
	// Warnings are what the configuration allows that is unsafe, one
	// sentence each (an acknowledged -device-node-source). The caller logs
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

// Sharing is the configuration of time-sliced GPUs: each shared GPU is
// advertised as Replicas devices. The zero value shares nothing; so does
// Replicas 1.
type Sharing struct {
	// Replicas is the number of devices advertised per shared GPU; 1 means
	// no sharing (default 1).
	Replicas int
	// ResourceName is the resource the shared GPUs are advertised as:
	// Config.ResourceName, or "<resource>.shared" with renameByDefault, or
	// the resource's rename.
	ResourceName string
	// Renamed reports that ResourceName is not Config.ResourceName.
	Renamed bool
	// FailRequestsGreaterThanOne refuses a container that asks for more
	// than one shared device (default false).
	FailRequestsGreaterThanOne bool
	// GPUs are the indices of the shared GPUs, ascending; nil means every
	// GPU (devices: all, the default).
	GPUs []int
	// PolicyName is the name of Policy (default distributed).
	PolicyName string
	// Policy places requests for replicas.
	Policy allocator.SharedPolicy
}

// Enabled reports whether GPUs are shared.
func (s Sharing) Enabled() bool { return s.Replicas > 1 }

// Shares reports whether GPU index i is shared.
func (s Sharing) Shares(i int) bool {
	return s.Enabled() && (s.GPUs == nil || slices.Contains(s.GPUs, i))
}

// DeviceListStrategy is how the plugin tells a container its devices, by
// NVIDIA's names.
type DeviceListStrategy string

// Uses reports whether the strategies include s.
func (c *Config) Uses(s DeviceListStrategy) bool { return slices.Contains(c.DeviceListStrategies, s) }

// Device list strategies. NVIDIA's volume-mounts and cdi-annotations are
// not supported.
const (
	// DeviceListEnvVar passes the devices in environment variables, the
	// default.
	DeviceListEnvVar DeviceListStrategy = "envvar"
	// DeviceListCDICRI passes CDI device names in the CRI's CDIDevices
	// field.
	DeviceListCDICRI DeviceListStrategy = "cdi-cri"
)

// deviceListStrategies are the accepted strategies.
var deviceListStrategies = []string{string(DeviceListEnvVar), string(DeviceListCDICRI)}

// parseDeviceListStrategies reads a comma-separated list of strategies,
// each once.
func parseDeviceListStrategies(s string) ([]DeviceListStrategy, error) {
	var out []DeviceListStrategy
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "volume-mounts" || item == "cdi-annotations":
			return nil, fmt.Errorf("NVIDIA's %s is not supported here: want %s", item, strings.Join(deviceListStrategies, " or "))
		case item == "" && s != "":
			return nil, fmt.Errorf("an empty entry (a stray comma?): want %s, or both comma-separated", strings.Join(deviceListStrategies, " or "))
		case !slices.Contains(deviceListStrategies, item):
			return nil, fmt.Errorf("%q: want %s, or both comma-separated", item, strings.Join(deviceListStrategies, " or "))
		case slices.Contains(out, DeviceListStrategy(item)):
			return nil, fmt.Errorf("%s is listed twice: list each strategy once", item)
		}
		out = append(out, DeviceListStrategy(item))
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
