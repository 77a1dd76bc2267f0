package options

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/dra/endpoint"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/podresources"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Defaults and limits of the serve flags.
const (
	// DefaultDevices is the default of -devices.
	DefaultDevices = 4
	// MaxDevices bounds -devices: the kubelet's 4 MiB ListAndWatch limit
	// allows far more, but no node has more GPUs than this.
	MaxDevices = 1024
	// DefaultResourceName is the default of -resource-name.
	DefaultResourceName = "unicore.mcyou.cc/gpu"
	// DefaultSocketName is the default of -socket-name.
	DefaultSocketName = "virtual-gpu.sock"
	// DefaultStatePath is the default of -state.
	DefaultStatePath = "/var/lib/virtual-gpu/state.db"
	// AdminSocketName is the admin socket's file name next to the state
	// file, the default of -admin-socket.
	AdminSocketName = "admin.sock"
	// DefaultSysfsRoot is the default of -sysfs-root.
	DefaultSysfsRoot = "/sys"
	// DefaultHistoryMaxRecords is the default of -history-max-records.
	DefaultHistoryMaxRecords = 100000
	// DefaultHistoryMaxAge is the default of -history-max-age (90 days).
	DefaultHistoryMaxAge = 90 * 24 * time.Hour
	// DefaultHistoryMaxBytes is the default of -history-max-bytes (64Mi).
	DefaultHistoryMaxBytes = 64 << 20
	// DefaultReplicas is the default of -replicas: GPUs are not shared.
	DefaultReplicas = 1
	// ToolsDirName is the tools directory's name next to the state file,
	// the default of -tools-dir: the host directory the plugin installs its
	// nvidia-smi into.
	ToolsDirName = "bin"
	// StatusDirName is the status directory's name next to the state file:
	// the GPU status files containers read (plugin/view/status).
	StatusDirName = "status"
	// LoadSocketDirName is the directory next to the state file that holds
	// the per-allocation load sockets of -telemetry-writable:
	// <seq>/load.sock per allocation record (loadsock).
	LoadSocketDirName = "load"
	// DefaultDeviceNodeSource is the default of -device-node-source.
	DefaultDeviceNodeSource = cdi.DefaultNodeSource
	// DefaultCDISpecDir is the default of -cdi-spec-dir.
	DefaultCDISpecDir = cdi.DefaultSpecDir
	// EnvPrefix starts the environment twin of every flag:
	// -device-plugin-path is VGPU_DEVICE_PLUGIN_PATH.
	EnvPrefix = "VGPU_"

	// longestLoadSocket is the longest path of a load socket in its
	// directory: that of the largest record sequence number.
	longestLoadSocket = "18446744073709551615/load.sock"
	// maxSocketPath is the longest unix socket path Linux accepts
	// (sun_path is 108 bytes including the terminating NUL).
	maxSocketPath = 107
	// minHistoryMaxBytes is the least non-zero -history-max-bytes: a few
	// hundred records.
	minHistoryMaxBytes = 64 << 10
	// maxAdvertised bounds the devices advertised (GPUs, or replicas of
	// shared GPUs): a ListAndWatch answer must fit the kubelet's 4 MiB
	// gRPC message limit, and 65536 devices of at most 40 bytes each do.
	maxAdvertised = 1 << 16
)

// DefaultDevicePluginPath is the kubelet's device-plugin directory, the
// default of -device-plugin-path.
var DefaultDevicePluginPath = filepath.Clean(pluginapi.DevicePluginPath)

// Settings are the values of the serve flags that a -config file or a
// profile may set too, as given: before validation, after the precedence
// (command line > VGPU_* variable > file or profile > default) has been
// applied. Settings.Validate checks them whole into a Config. A Settings is
// a plain value; it remembers where each value came from (Source).
type Settings struct {
	// Devices is the number of GPUs of the generic layout (-devices,
	// default 4).
	Devices int
	// ResourceName is registered with the kubelet (-resource-name, default
	// unicore.mcyou.cc/gpu).
	ResourceName string
	// KubeletAPI is device-plugin or dra (-kubelet-api, default
	// device-plugin).
	KubeletAPI string
	// DRADriverName is the DRA driver's name (-dra-driver-name, default
	// gpu.unicore.mcyou.cc).
	DRADriverName string
	// KubeletRegistryDir is the kubelet's plugin registration directory
	// (-kubelet-registry-dir, default /var/lib/kubelet/plugins_registry).
	KubeletRegistryDir string
	// KubeletPluginsDir is the kubelet's plugins directory
	// (-kubelet-plugins-dir, default /var/lib/kubelet/plugins).
	KubeletPluginsDir string
	// DevicePluginPath is the kubelet's device-plugin directory
	// (-device-plugin-path, default /var/lib/kubelet/device-plugins).
	DevicePluginPath string
	// SocketName is the plugin's socket in DevicePluginPath (-socket-name,
	// default virtual-gpu.sock).
	SocketName string
	// LogLevel is trace, debug, info, warn or error (-log-level, default
	// info).
	LogLevel string
	// LogFormat is json or console (-log-format, default json).
	LogFormat string
	// Topology is a preset name or a topology file; "" is the generic
	// layout of Devices GPUs (-topology, default ""). A relative path in
	// a file is already joined to the file's directory.
	Topology string
	// NUMAReport is auto, always or never (-numa-report, default auto).
	NUMAReport string
	// SysfsRoot is where the host's /sys is (-sysfs-root, default /sys).
	SysfsRoot string
	// AllocationPolicy names an allocator.Policies entry
	// (-allocation-policy, default best-connected).
	AllocationPolicy string
	// SharedDevicesAllocationPolicy names an allocator.SharedPolicies
	// entry (-shared-devices-allocation-policy, default distributed).
	SharedDevicesAllocationPolicy string
	// DeviceListStrategy is envvar, cdi-cri or both, comma-separated
	// (-device-list-strategy, default envvar).
	DeviceListStrategy string
	// Replicas is the number of devices advertised per shared GPU; 1 is no
	// sharing (-replicas, default 1).
	Replicas int
	// NvidiaSMI mounts the plugin's nvidia-smi into containers
	// (-nvidia-smi, default true).
	NvidiaSMI bool
	// VisibleDevicesEnv sets NVIDIA_VISIBLE_DEVICES in containers
	// (-visible-devices-env, default false).
	VisibleDevicesEnv bool
	// DeviceNodes gives containers device nodes for their GPUs
	// (-device-nodes, default false).
	DeviceNodes bool
	// DeviceNodeSource is the host device behind those device nodes
	// (-device-node-source, default /dev/null).
	DeviceNodeSource string
	// AllowUnsafeDeviceNodeSource accepts a DeviceNodeSource that is a
	// character device other than the harmless memory devices
	// (-allow-unsafe-device-node-source, default false).
	AllowUnsafeDeviceNodeSource bool
	// ToolsDir is where nvidia-smi is installed; "" is bin next to State
	// (-tools-dir, default "").
	ToolsDir string
	// CDISpecDir is where the CDI spec is written (-cdi-spec-dir, default
	// /var/run/cdi).
	CDISpecDir string
	// State is the bbolt state file (-state, default
	// /var/lib/virtual-gpu/state.db).
	State string
	// StateMoveAside moves a damaged state file aside (-state-move-aside,
	// default false).
	StateMoveAside bool
	// HistoryMaxRecords bounds the allocation history and the health
	// events, each (-history-max-records, default 100000).
	HistoryMaxRecords int
	// HistoryMaxAge drops older history; 0 keeps any age
	// (-history-max-age, default 2160h).
	HistoryMaxAge time.Duration
	// HistoryMaxBytes bounds the history in encoded bytes; 0 is no byte
	// limit (-history-max-bytes, default 64Mi).
	HistoryMaxBytes ByteSize
	// AdminSocket is the admin API socket; "" is admin.sock next to State
	// (-admin-socket, default "").
	AdminSocket string
	// Faults is a fault-injection plan (-faults, default none).
	Faults string
	// PodResourcesSocket is the kubelet's PodResources API
	// (-pod-resources-socket, default
	// /var/lib/kubelet/pod-resources/kubelet.sock).
	PodResourcesSocket string
	// ReconcileInterval is the PodResources poll period
	// (-reconcile-interval, default 5s).
	ReconcileInterval time.Duration
	// AbandonAfter marks allocations no pod claimed (-abandon-after,
	// default 1m).
	AbandonAfter time.Duration
	// MetricsAddress serves /metrics, /healthz and /readyz; "" is off
	// (-metrics-address, default "").
	MetricsAddress string
	// TelemetryAddress serves dcgm-exporter-compatible GPU telemetry on
	// /metrics; "" is off (-telemetry-address, default "").
	TelemetryAddress string
	// TelemetryCollectors is a collectors file in dcgm-exporter's format
	// choosing the telemetry's fields; "" serves dcgm-exporter's default
	// counters (-telemetry-collectors, default "").
	TelemetryCollectors string
	// TelemetryModel is the load model: idle, steady, wave or random-walk
	// (-telemetry-model, default steady).
	TelemetryModel string
	// TelemetrySeed seeds the load model, 0 or more (-telemetry-seed,
	// default 0).
	TelemetrySeed int
	// TelemetryPerPod gives a shared GPU one series per holder
	// (-telemetry-per-pod, default false).
	TelemetryPerPod bool
	// TelemetryWritable lets containers set their GPUs' load through a
	// per-allocation socket (-telemetry-writable, default false).
	TelemetryWritable bool
	// MIGStrategy is how the device plugin advertises MIG devices: none,
	// single or mixed (-mig-strategy, default none).
	MIGStrategy string
	// MIGConfig names the MIG layout (a mig-parted configuration's, such
	// as all-1g.10gb); "" none (-mig-config, default "").
	MIGConfig string
	// MIGConfigFile is a mig-parted configuration file whose layouts add
	// to or replace the built-in ones (-mig-config-file, default "").
	MIGConfigFile string

	// origins holds where each value not at its default came from, by
	// flag name.
	origins map[string]origin
	// file is the -config file or profile applied, or nil.
	file *File
}

// bootstrap are the flags that choose the configuration file and the node:
// the command line and the environment only, never a file.
type bootstrap struct {
	config        string
	configDefault string
	nodeName      string
	kubeconfig    string
	labelNode     bool
	version       bool
}

// Flags that are not Settings: they choose the file and the node, so no
// file may set them.
var bootstrapFlags = map[string]bool{
	"config": true, "config-default": true, "node-name": true, "kubeconfig": true, "label-node": true, "version": true,
}

// noEnvTwin are the flags without an environment twin: a VGPU_VERSION left
// in a DaemonSet must not turn the plugin into a version printer.
var noEnvTwin = map[string]bool{"version": true}

// envFallbacks are further variables read, in order, when a flag's own
// twin is unset: NODE_NAME as a DaemonSet sets it from the downward API.
var envFallbacks = map[string][]string{"node-name": {"NODE_NAME"}}

// newFlagSet declares every serve flag, bound to s and b, with its default.
// A backquoted word in a usage string is the value's name in -h
// (flag.UnquoteUsage).
func newFlagSet(s *Settings, b *bootstrap) *flag.FlagSet {
	fs := flag.NewFlagSet("virtual-gpu-device-plugin", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&b.config, "config", "", "configuration `file`, or directory of profiles <name>.yaml (a mounted ConfigMap); see deploy/config/example.yaml")
	fs.StringVar(&b.configDefault, "config-default", "", "the profile (`name`) of the -config directory for a node without the label "+ProfileLabel+"; empty: none")
	fs.StringVar(&b.nodeName, "node-name", "", "this node's `name`, to read its profile label and write its GPU labels (default: $NODE_NAME, as the downward API sets it)")
	fs.StringVar(&b.kubeconfig, "kubeconfig", "", "kubeconfig `file` to reach the API server (default: $KUBECONFIG as kubectl reads it, else ~/.kube/config, else the pod's service account)")
	fs.BoolVar(&b.labelNode, "label-node", false, "keep this node's GPU labels (unicore.mcyou.cc/gpu.*) up to date, as NVIDIA's GPU feature discovery does; needs -node-name")
	fs.IntVar(&s.Devices, "devices", DefaultDevices, "number of virtual GPUs, named fake-0 … fake-N-1 (1–1024)")
	fs.StringVar(&s.ResourceName, "resource-name", DefaultResourceName, "extended resource `name` registered with the kubelet (<domain>/<name>)")
	fs.StringVar(&s.KubeletAPI, "kubelet-api", string(agent.KubeletAPIDevicePlugin), "the kubelet `API` the GPUs are served through: device-plugin (an extended resource, Allocate) or dra (ResourceSlices and ResourceClaims; needs -node-name and API access)")
	fs.StringVar(&s.DRADriverName, "dra-driver-name", endpoint.DefaultDriverName, "the DRA driver's `name` (-kubelet-api=dra): the domain of its attributes, DeviceClass and device taints")
	fs.StringVar(&s.KubeletRegistryDir, "kubelet-registry-dir", endpoint.DefaultRegistryDir, "the kubelet's plugin registration `directory` (-kubelet-api=dra)")
	fs.StringVar(&s.KubeletPluginsDir, "kubelet-plugins-dir", endpoint.DefaultPluginsDir, "the kubelet's plugins `directory`; the DRA driver's socket is in <dir>/<driver-name> (-kubelet-api=dra)")
	fs.StringVar(&s.DevicePluginPath, "device-plugin-path", DefaultDevicePluginPath, "kubelet device-plugin `directory` (holds kubelet.sock and the plugin's socket)")
	fs.StringVar(&s.SocketName, "socket-name", DefaultSocketName, "file `name` of the plugin's socket in -device-plugin-path")
	fs.StringVar(&s.LogLevel, "log-level", "info", "log `level`: "+strings.Join(logLevelNames, ", "))
	fs.StringVar(&s.LogFormat, "log-format", "json", "log `format`: json, or console (coloured only on a terminal)")
	fs.StringVar(&s.Topology, "topology", "", "the `preset|file` to model: one of "+strings.Join(topology.PresetNames(), ", ")+
		", or a file in YAML or as 'nvidia-smi topo -m' prints it; empty: a generic layout of -devices GPUs")
	fs.StringVar(&s.NUMAReport, "numa-report", "auto", "which NUMA nodes to report to the kubelet (`mode`): auto (only nodes this host has), always, never")
	fs.StringVar(&s.SysfsRoot, "sysfs-root", DefaultSysfsRoot, "the host's sysfs `directory`, read for its NUMA nodes")
	fs.StringVar(&s.AllocationPolicy, "allocation-policy", allocator.PolicyBestConnected, "preferred-allocation `policy`: "+strings.Join(allocator.PolicyNames(), ", "))
	fs.StringVar(&s.SharedDevicesAllocationPolicy, "shared-devices-allocation-policy", allocator.SharedPolicyDistributed,
		"how to place requests for replicas of shared GPUs (`policy`): "+strings.Join(allocator.SharedPolicyNames(), ", "))
	fs.StringVar(&s.DeviceListStrategy, "device-list-strategy", string(view.DeviceListEnvVar),
		"how containers are told their devices (`strategy`): envvar (variables, mounts and device nodes in the Allocate answer), cdi-cri (CDI device names; mounts and device nodes from the CDI spec in -cdi-spec-dir), or both comma-separated (NVIDIA's names)")
	fs.IntVar(&s.Replicas, "replicas", DefaultReplicas, "share each GPU as this many devices by time-slicing (1–1024; 1: no sharing)")
	fs.BoolVar(&s.NvidiaSMI, "nvidia-smi", true, "mount the plugin's own nvidia-smi read-only at /usr/bin/nvidia-smi in containers that get GPUs; it shows exactly their GPUs")
	fs.BoolVar(&s.VisibleDevicesEnv, "visible-devices-env", false, "also set NVIDIA_VISIBLE_DEVICES to the containers' GPU UUIDs (off by default: on a node that runs NVIDIA's container runtime, its hook would act on it)")
	fs.BoolVar(&s.DeviceNodes, "device-nodes", false, "give containers /dev/nvidia<minor> per GPU, /dev/nvidiactl and /dev/nvidia-uvm, backed by -device-node-source, so existence checks pass")
	fs.StringVar(&s.DeviceNodeSource, "device-node-source", DefaultDeviceNodeSource, "the host character `device` behind the containers' GPU device nodes (-device-nodes, CDI): /dev/null, /dev/zero, /dev/full, /dev/random or /dev/urandom (by device number), never a block device")
	fs.BoolVar(&s.AllowUnsafeDeviceNodeSource, "allow-unsafe-device-node-source", false, "accept another character device as -device-node-source (every GPU container gets it read-write as its GPU device nodes); warned at start")
	fs.StringVar(&s.ToolsDir, "tools-dir", "", "host `directory` the plugin installs its nvidia-smi into, mounted into containers from there (default: bin next to -state)")
	fs.StringVar(&s.CDISpecDir, "cdi-spec-dir", DefaultCDISpecDir, "host `directory` the CDI spec is written into with -device-list-strategy=cdi-cri (the container runtime's spec directory)")
	fs.StringVar(&s.State, "state", DefaultStatePath, "bbolt state `file`: device health and allocation history")
	fs.BoolVar(&s.StateMoveAside, "state-move-aside", false, "if the state file is damaged, rename it to <file>.corrupt-<time> and start fresh")
	fs.IntVar(&s.HistoryMaxRecords, "history-max-records", DefaultHistoryMaxRecords, "keep at most this many allocation records (and as many health events)")
	fs.DurationVar(&s.HistoryMaxAge, "history-max-age", DefaultHistoryMaxAge, "drop history older than this; 0 keeps any age")
	s.HistoryMaxBytes = DefaultHistoryMaxBytes
	fs.Var(&s.HistoryMaxBytes, "history-max-bytes", "keep the allocation records and health events together at most this `size`, encoded (bytes, or with Ki, Mi, Gi); 0: no byte limit")
	fs.StringVar(&s.AdminSocket, "admin-socket", "", "local admin API socket `path`, used by dump and health; not in -device-plugin-path (default: admin.sock next to -state)")
	fs.StringVar(&s.Faults, "faults", "", "fault-injection `plan`, e.g. \"down:fake-1:after=30s;flap:fake-2:period=10s;random:mtbf=1h:repair=5m\"")
	fs.StringVar(&s.PodResourcesSocket, "pod-resources-socket", podresources.DefaultSocket, "the kubelet's PodResources API `socket`, to follow allocations to pods")
	fs.DurationVar(&s.ReconcileInterval, "reconcile-interval", podresources.DefaultInterval, "how often to ask the PodResources API who holds which devices")
	fs.DurationVar(&s.AbandonAfter, "abandon-after", podresources.DefaultAbandonAfter, "mark an allocation abandoned when no pod claimed it this long")
	fs.StringVar(&s.MetricsAddress, "metrics-address", "", "serve /metrics, /healthz and /readyz on this `host:port` (e.g. :9400 or 127.0.0.1:9400); empty: off")
	fs.StringVar(&s.TelemetryAddress, "telemetry-address", "", "serve dcgm-exporter-compatible GPU telemetry (DCGM_FI_DEV_* series) on /metrics at this `host:port` (dcgm-exporter's is :9400); empty: off")
	fs.StringVar(&s.TelemetryCollectors, "telemetry-collectors", "", "the telemetry's fields: a `file` in dcgm-exporter's collectors format (its -f: \"DCGM field, type, help\" lines); empty: dcgm-exporter's default counters")
	fs.StringVar(&s.TelemetryModel, "telemetry-model", string(telemetry.ModelSteady), "the load a container puts on the GPUs it holds (`model`): "+strings.Join(modelNames(), ", "))
	fs.IntVar(&s.TelemetrySeed, "telemetry-seed", 0, "seed of the load model: the same seed and clock give the same values")
	fs.BoolVar(&s.TelemetryPerPod, "telemetry-per-pod", false, "a GPU shared by several containers has one telemetry series per container (dcgm-exporter's --kubernetes-virtual-gpus), not one for its newest holder")
	fs.BoolVar(&s.TelemetryWritable, "telemetry-writable", false, "let containers set their GPUs' utilization and memory used (nvidia-smi --set-load) over a per-allocation socket; needs -telemetry-address")
	fs.StringVar(&s.MIGStrategy, "mig-strategy", string(gpuset.MIGStrategyNone), "how the device plugin advertises MIG devices (`strategy`), as NVIDIA's: none (every GPU whole), single (the MIG devices as the GPU resource; one profile on every GPU) or mixed (a resource mig-<profile> per profile)")
	fs.StringVar(&s.MIGConfig, "mig-config", "", "the MIG `layout`: a name of GPU Operator's default mig-parted configuration (all-disabled, all-enabled, all-1g.10gb, all-balanced, …) or of -mig-config-file; empty: MIG off")
	fs.StringVar(&s.MIGConfigFile, "mig-config-file", "", "a mig-parted configuration `file` (version: v1, mig-configs: …) whose layouts add to or replace the built-in ones")
	fs.BoolVar(&b.version, "version", false, "print the version, commit and Go version and exit")
	return fs
}

// modelNames are the accepted -telemetry-model values.
func modelNames() []string {
	out := make([]string, len(telemetry.Models))
	for i, m := range telemetry.Models {
		out[i] = string(m)
	}
	return out
}

// EnvName is the environment twin of a flag: -device-plugin-path is
// VGPU_DEVICE_PLUGIN_PATH.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// envNames are the variables read for a flag, in order.
func envNames(flagName string) []string {
	if noEnvTwin[flagName] {
		return nil
	}
	return append([]string{EnvName(flagName)}, envFallbacks[flagName]...)
}

// UnknownVariables returns, sorted, the variables of environ (as
// os.Environ lists them, NAME=value) that start with EnvPrefix and that no
// flag reads, each with the nearest one a flag reads if it is near enough
// to be a misspelling: "VGPU_DEVICE (did you mean VGPU_DEVICES?)". They
// are ignored, as a file's unknown field is not: the environment of a pod
// holds what others set too. The caller logs them.
func UnknownVariables(environ []string) []string {
	var known []string
	newFlagSet(&Settings{}, &bootstrap{}).VisitAll(func(f *flag.Flag) {
		if !noEnvTwin[f.Name] {
			known = append(known, EnvName(f.Name))
		}
	})
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || slices.Contains(known, name) {
			continue
		}
		switch s := suggest(name, known); {
		case noEnvTwin[strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, EnvPrefix), "_", "-"))]:
			name += " (its flag has no environment twin)"
		case s != "":
			name += " (did you mean " + s + "?)"
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// PrintUsage prints the precedence rule and every serve flag with its
// default, for -h.
func PrintUsage(w io.Writer) {
	fmt.Fprintln(w, "Serve flags. Each has an environment twin VGPU_<NAME> (-devices is VGPU_DEVICES). A value on the command")
	fmt.Fprintln(w, "line wins over its variable, a variable over the -config file or the node's profile, and that over the")
	fmt.Fprintln(w, "default; a flag given on the command line so overrides every profile. A file may set every flag but")
	fmt.Fprintln(w, "-config, -config-default, -node-name, -kubeconfig, -label-node and -version (camelCase, under flags:).")
	fs := newFlagSet(&Settings{}, &bootstrap{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// Source says where a setting's value came from.
type Source uint8

// Sources, from the weakest to the strongest.
const (
	// SourceDefault is the flag's default.
	SourceDefault Source = iota
	// SourceFile is the -config file or the profile in force.
	SourceFile
	// SourceEnv is the flag's environment variable.
	SourceEnv
	// SourceFlag is the command line.
	SourceFlag
	// SourceLabel is a label of the node (kube.MIGConfigLabel), stronger
	// than the command line as GPU Operator's nvidia.com/mig.config is.
	SourceLabel
)

var sourceNames = [...]string{SourceDefault: "default", SourceFile: "file", SourceEnv: "environment", SourceFlag: "command line", SourceLabel: "node label"}

// String returns "default", "file", "environment" or "command line".
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("Source(%d)", s)
}

// origin is where one value came from, for errors that name it.
type origin struct {
	src Source
	// env is the variable (SourceEnv).
	env string
	// file, line and field locate it in a file (SourceFile): field is the
	// path of the key, e.g. flags.devices; of a label (SourceLabel) field
	// is its key.
	file  string
	line  int
	field string
}

// where returns the prefix and the name an error about the value uses:
// ("", "-devices"), ("", "VGPU_DEVICES") or ("config.yaml:3: ", "flags.devices").
func (o origin) where(flagName string) (prefix, name string) {
	switch o.src {
	case SourceEnv:
		return "", o.env
	case SourceFile:
		return fileLine(o.file, o.line) + ": ", o.field
	case SourceLabel:
		return "", "node label " + o.field
	}
	return "", "-" + flagName
}

// layer is the values one source gives, by flag name, as text for
// flag.Value.Set.
type layer map[string]layerValue

type layerValue struct {
	raw string
	at  origin
}

// Options is the parsed command line and environment of serve: the flags
// that choose the configuration file and the node, and the values every
// resolution applies over a file or profile. An Options is immutable after
// Parse and safe for concurrent use.
type Options struct {
	// Help is set by -h: the caller prints the usage and exits 0.
	Help bool
	// Version is set by -version: the caller prints the version and
	// exits 0. The environment is not read then.
	Version bool
	// ConfigPath is -config made absolute: a file, or a directory of
	// profiles; "" is none (default "").
	ConfigPath string
	// ConfigDefault is -config-default: the profile of a node without the
	// label ProfileLabel; "" is none (default "").
	ConfigDefault string
	// NodeName is -node-name, else $VGPU_NODE_NAME, else $NODE_NAME; ""
	// when none is set.
	NodeName string
	// Kubeconfig is -kubeconfig or $VGPU_KUBECONFIG; "" leaves the choice
	// to the client: $KUBECONFIG as kubectl reads it, ~/.kube/config, or
	// the pod's service account.
	Kubeconfig string
	// LabelNode is -label-node: keep the node's GPU labels up to date
	// (default false).
	LabelNode bool

	// flags and env are the command line and the environment, applied
	// over any file by every resolution.
	flags, env layer
}

// Parse reads the serve command's args and the environment (getenv) into
// Options: the command line first, then, for every flag not given there,
// its environment twin. It reads no file: Load does. -h sets Help and
// -version sets Version, and neither reads the environment. Every error
// wraps ErrInvalid and names the flag or variable.
func Parse(args []string, getenv func(string) string) (*Options, error) {
	var (
		s Settings
		b bootstrap
	)
	fs := newFlagSet(&s, &b)
	fs.VisitAll(func(f *flag.Flag) { f.Value = explained{f.Value} })
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &Options{Help: true}, nil
		}
		return nil, invalidf("%w", err)
	}
	if fs.NArg() > 0 {
		return nil, invalidf("unexpected argument %q", fs.Arg(0))
	}
	if b.version {
		return &Options{Version: true}, nil
	}
	o := &Options{flags: layer{}, env: layer{}}
	fs.Visit(func(f *flag.Flag) {
		o.flags[f.Name] = layerValue{raw: f.Value.String(), at: origin{src: SourceFlag}}
	})
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if _, given := o.flags[f.Name]; given || envErr != nil {
			return
		}
		for _, name := range envNames(f.Name) {
			v := getenv(name)
			if v == "" {
				continue
			}
			// Set on a scratch flag set: the value must parse.
			if err := setFlag(newFlagSet(&Settings{}, &bootstrap{}), f.Name, v); err != nil {
				envErr = invalidf("invalid %s=%q: %w", name, v, err)
				return
			}
			o.env[f.Name] = layerValue{raw: v, at: origin{src: SourceEnv, env: name}}
			return
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := o.bootstrap(); err != nil {
		return nil, err
	}
	return o, nil
}

// setFlag sets the named flag of fs to raw. A value the flag package's
// own types do not read is an error saying what they want, not their bare
// "parse error".
func setFlag(fs *flag.FlagSet, name, raw string) error {
	err := fs.Set(name, raw)
	if f := fs.Lookup(name); err != nil && f != nil {
		return explainSet(f.Value, raw, err)
	}
	return err
}

// explained is a flag.Value whose Set says what the value should be, for
// the command line: the flag package then writes `invalid value " 3" for
// flag -devices: want an integer …`.
type explained struct{ flag.Value }

func (e explained) Set(raw string) error {
	if err := e.Value.Set(raw); err != nil {
		return explainSet(e.Value, raw, err)
	}
	return nil
}

func (e explained) String() string {
	if e.Value == nil { // the flag package's zero-value probe
		return ""
	}
	return e.Value.String()
}

// IsBoolFlag keeps -flag without =value working for bool flags.
func (e explained) IsBoolFlag() bool {
	b, ok := e.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// explainSet turns err, the error of v.Set(raw), into what v wants, when v
// is one of the flag package's bool, int or duration values (whose errors
// are a bare "parse error" or "value out of range"); any other error is
// returned as it is.
func explainSet(v flag.Value, raw string, err error) error {
	g, ok := v.(flag.Getter)
	if !ok {
		return err
	}
	var want string
	switch g.Get().(type) {
	case bool:
		want = "want true or false"
	case int:
		want = "want an integer"
		if _, perr := strconv.ParseInt(strings.TrimSpace(raw), 0, strconv.IntSize); errors.Is(perr, strconv.ErrRange) {
			return fmt.Errorf("out of range: %s from %d to %d", want, math.MinInt, math.MaxInt)
		}
	case time.Duration:
		want = "want a duration such as 90s, 5m or 1h30m"
	default:
		return err
	}
	if strings.TrimSpace(raw) != raw {
		want += ", without spaces around it"
	}
	return errors.New(want)
}

// bootstrap fills the Options fields from the command line and the
// environment, and checks them.
func (o *Options) bootstrap() error {
	var b bootstrap
	fs := newFlagSet(&Settings{}, &b)
	for _, l := range []layer{o.env, o.flags} {
		for name, v := range l {
			if bootstrapFlags[name] {
				_ = fs.Set(name, v.raw) // parsed before
			}
		}
	}
	name := o.name
	o.ConfigDefault, o.NodeName, o.Kubeconfig, o.LabelNode = b.configDefault, b.nodeName, b.kubeconfig, b.labelNode
	if b.config != "" {
		abs, err := filepath.Abs(b.config)
		if err != nil {
			return invalidf("invalid %s=%q: %w", name("config"), b.config, err)
		}
		o.ConfigPath = abs
	}
	switch {
	case o.ConfigDefault != "" && o.ConfigPath == "":
		return invalidf("invalid %s=%q: needs -config naming a directory of profiles", name("config-default"), o.ConfigDefault)
	case o.ConfigDefault != "":
		if err := checkProfileName(o.ConfigDefault); err != nil {
			return invalidf("invalid %s=%q: %w", name("config-default"), o.ConfigDefault, err)
		}
	}
	if o.NodeName != "" && (len(o.NodeName) > 253 || !dnsSubdomain.MatchString(o.NodeName)) {
		return invalidf("invalid %s=%q: a node name is a lowercase DNS subdomain", name("node-name"), o.NodeName)
	}
	if o.LabelNode && o.NodeName == "" {
		return invalidf("invalid %s: needs -node-name (or NODE_NAME set from the downward API: fieldRef spec.nodeName)", name("label-node"))
	}
	return nil
}

// Settings merges, for the file or profile f (nil: none), the values of
// every source by precedence: command line > environment > f > default.
// It checks that each value parses, not the rules: Validate does.
func (o *Options) Settings(f *File) (Settings, error) {
	var s Settings
	fs := newFlagSet(&s, &bootstrap{})
	s.origins = map[string]origin{}
	s.file = f
	layers := []layer{o.env, o.flags}
	if f != nil {
		layers = append([]layer{f.values}, layers...)
	}
	for _, l := range layers {
		for name, v := range l {
			if bootstrapFlags[name] {
				continue
			}
			if err := setFlag(fs, name, v.raw); err != nil {
				prefix, what := v.at.where(name)
				return s, invalidf("%sinvalid %s=%q: %w", prefix, what, v.raw, err)
			}
			s.origins[name] = v.at
		}
	}
	return s, nil
}

// Source returns where the value of the named flag came from.
func (s *Settings) Source(flagName string) Source {
	return s.origins[flagName].src
}

// migConfigFromLabel sets -mig-config to v from the node's label key
// (SourceLabel), over every other source.
func (s *Settings) migConfigFromLabel(key, v string) {
	s.MIGConfig = v
	origins := maps.Clone(s.origins)
	if origins == nil {
		origins = map[string]origin{}
	}
	origins["mig-config"] = origin{src: SourceLabel, field: key}
	s.origins = origins
}
