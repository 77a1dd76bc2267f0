package options

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// The file format, version v1, as Go types. The strict decoder (file.go)
// reads a file into them and the JSON Schema (schema.go) is generated from
// them, so the two cannot disagree. Every field is a pointer or a slice:
// nil is "not in the file". Struct tags:
//
//	yaml:"key"        the key in the file
//	flag:"name"       the serve flag the field sets (its usage is the
//	                  field's description, its default the default)
//	profile:"…"       for flag fields: allow (a profile may set it), path
//	                  (a path or address: refused in a profile) or process
//	                  (a setting of the process: refused in a profile)
//	nvidia:"…"        a field of NVIDIA's device plugin that has no effect
//	                  here, and why; the parser reports it in Ignored
//	doc:"…"           the description of a field that is not a flag
//	enum:"a,b"        the values a string field that is not a flag takes
//	required:"true"   the key must be there
//	min, max          the range of an integer (for flags, Validate applies it)
//	minItems, maxItems the length of a list

// Version is the only version of the file format.
const Version = "v1"

// fileSpec is a whole file.
type fileSpec struct {
	Version   *string      `yaml:"version" enum:"v1" doc:"The version of the file format: v1 (as in NVIDIA's device plugin); a file without one is read as v1, as NVIDIA's plugin reads it."`
	Flags     *flagsSpec   `yaml:"flags" doc:"The serve flags, named in camelCase (-resource-name is resourceName), and NVIDIA's device plugin flags."`
	Resources *nvResources `yaml:"resources" nvidia:"NVIDIA renames GPUs and MIG devices by pattern; here the resource is -resource-name"`
	Sharing   *sharingSpec `yaml:"sharing" doc:"How GPUs are shared: time-slicing (NVIDIA's format)."`
	Imex      *nvImexSpec  `yaml:"imex" nvidia:"IMEX channels of NVLink-connected systems are not modelled"`
}

// flagsSpec is the flags section: every serve flag a file may set, then
// NVIDIA's flags.
type flagsSpec struct {
	Devices                       *int        `yaml:"devices" flag:"devices" profile:"allow" min:"1" max:"1024"`
	Topology                      *string     `yaml:"topology" flag:"topology" profile:"allow"`
	ResourceName                  *string     `yaml:"resourceName" flag:"resource-name" profile:"allow"`
	KubeletAPI                    *string     `yaml:"kubeletAPI" flag:"kubelet-api" profile:"allow"`
	DRADriverName                 *string     `yaml:"draDriverName" flag:"dra-driver-name" profile:"path"`
	KubeletRegistryDir            *string     `yaml:"kubeletRegistryDir" flag:"kubelet-registry-dir" profile:"path"`
	KubeletPluginsDir             *string     `yaml:"kubeletPluginsDir" flag:"kubelet-plugins-dir" profile:"path"`
	AllocationPolicy              *string     `yaml:"allocationPolicy" flag:"allocation-policy" profile:"allow"`
	SharedDevicesAllocationPolicy *string     `yaml:"sharedDevicesAllocationPolicy" flag:"shared-devices-allocation-policy" profile:"allow"`
	DeviceListStrategy            *stringList `yaml:"deviceListStrategy" flag:"device-list-strategy" profile:"allow"`
	Replicas                      *int        `yaml:"replicas" flag:"replicas" profile:"allow" min:"1" max:"1024"`
	NUMAReport                    *string     `yaml:"numaReport" flag:"numa-report" profile:"allow"`
	Faults                        *string     `yaml:"faults" flag:"faults" profile:"allow"`
	NvidiaSMI                     *bool       `yaml:"nvidiaSmi" flag:"nvidia-smi" profile:"allow"`
	VisibleDevicesEnv             *bool       `yaml:"visibleDevicesEnv" flag:"visible-devices-env" profile:"allow"`
	DeviceNodes                   *bool       `yaml:"deviceNodes" flag:"device-nodes" profile:"allow"`
	SysfsRoot                     *string     `yaml:"sysfsRoot" flag:"sysfs-root" profile:"path"`
	DevicePluginPath              *string     `yaml:"devicePluginPath" flag:"device-plugin-path" profile:"path"`
	SocketName                    *string     `yaml:"socketName" flag:"socket-name" profile:"path"`
	DeviceNodeSource              *string     `yaml:"deviceNodeSource" flag:"device-node-source" profile:"path"`
	AllowUnsafeDeviceNodeSource   *bool       `yaml:"allowUnsafeDeviceNodeSource" flag:"allow-unsafe-device-node-source" profile:"process"`
	ToolsDir                      *string     `yaml:"toolsDir" flag:"tools-dir" profile:"path"`
	CDISpecDir                    *string     `yaml:"cdiSpecDir" flag:"cdi-spec-dir" profile:"path"`
	State                         *string     `yaml:"state" flag:"state" profile:"path"`
	AdminSocket                   *string     `yaml:"adminSocket" flag:"admin-socket" profile:"path"`
	PodResourcesSocket            *string     `yaml:"podResourcesSocket" flag:"pod-resources-socket" profile:"path"`
	MetricsAddress                *string     `yaml:"metricsAddress" flag:"metrics-address" profile:"path"`
	TelemetryAddress              *string     `yaml:"telemetryAddress" flag:"telemetry-address" profile:"path"`
	TelemetryCollectors           *string     `yaml:"telemetryCollectors" flag:"telemetry-collectors" profile:"path"`
	TelemetryModel                *string     `yaml:"telemetryModel" flag:"telemetry-model" profile:"allow"`
	TelemetrySeed                 *int        `yaml:"telemetrySeed" flag:"telemetry-seed" profile:"allow" min:"0"`
	TelemetryPerPod               *bool       `yaml:"telemetryPerPod" flag:"telemetry-per-pod" profile:"allow"`
	TelemetryWritable             *bool       `yaml:"telemetryWritable" flag:"telemetry-writable" profile:"allow"`
	MigStrategy                   *string     `yaml:"migStrategy" flag:"mig-strategy" profile:"allow"`
	MigConfig                     *string     `yaml:"migConfig" flag:"mig-config" profile:"allow"`
	MigConfigFile                 *string     `yaml:"migConfigFile" flag:"mig-config-file" profile:"path"`
	StateMoveAside                *bool       `yaml:"stateMoveAside" flag:"state-move-aside" profile:"process"`
	HistoryMaxRecords             *int        `yaml:"historyMaxRecords" flag:"history-max-records" profile:"process" min:"1"`
	HistoryMaxAge                 *duration   `yaml:"historyMaxAge" flag:"history-max-age" profile:"process"`
	HistoryMaxBytes               *ByteSize   `yaml:"historyMaxBytes" flag:"history-max-bytes" profile:"process"`
	ReconcileInterval             *duration   `yaml:"reconcileInterval" flag:"reconcile-interval" profile:"process"`
	AbandonAfter                  *duration   `yaml:"abandonAfter" flag:"abandon-after" profile:"process"`
	LogLevel                      *string     `yaml:"logLevel" flag:"log-level" profile:"process"`
	LogFormat                     *string     `yaml:"logFormat" flag:"log-format" profile:"process"`

	// NVIDIA's flags (api/config/v1 CommandLineFlags).
	FailOnInitError         *bool          `yaml:"failOnInitError" nvidia:"a configuration or start-up error always ends the plugin (exit 2 or 1), as failOnInitError true"`
	MpsRoot                 *string        `yaml:"mpsRoot" nvidia:"MPS is not supported"`
	NvidiaDriverRoot        *string        `yaml:"nvidiaDriverRoot" nvidia:"there is no driver: the GPUs are virtual"`
	NvidiaDevRoot           *string        `yaml:"nvidiaDevRoot" nvidia:"there is no driver: containers' device nodes (-device-nodes) are backed by -device-node-source"`
	GDRCopyEnabled          *bool          `yaml:"gdrcopyEnabled" nvidia:"there are no device nodes to pass: the GPUs are virtual"`
	GDSEnabled              *bool          `yaml:"gdsEnabled" nvidia:"there are no device nodes to pass: the GPUs are virtual"`
	MOFEDEnabled            *bool          `yaml:"mofedEnabled" nvidia:"there are no device nodes to pass: the GPUs are virtual"`
	UseNodeFeatureAPI       *bool          `yaml:"useNodeFeatureAPI" nvidia:"GPU feature discovery is -label-node here, which patches the Node's labels"`
	DeviceDiscoveryStrategy *string        `yaml:"deviceDiscoveryStrategy" nvidia:"there is nothing to discover: the GPUs are -devices or -topology"`
	Plugin                  *nvPluginFlags `yaml:"plugin" doc:"NVIDIA's device plugin flags: sharedDevicesAllocationPolicy and deviceListStrategy are the flags of the same names here; the rest have no effect."`
	GFD                     *nvGFDFlags    `yaml:"gfd" nvidia:"GPU feature discovery is -label-node here"`
}

// nvPluginFlags is NVIDIA's flags.plugin section.
type nvPluginFlags struct {
	PassDeviceSpecs               *bool       `yaml:"passDeviceSpecs" nvidia:"device nodes in the Allocate answer are -device-nodes here"`
	DeviceListStrategy            *stringList `yaml:"deviceListStrategy" flag:"device-list-strategy" profile:"allow"`
	DeviceIDStrategy              *string     `yaml:"deviceIDStrategy" nvidia:"device ids are fake-<index> (fake-<index>::<replica> when shared)"`
	CDIAnnotationPrefix           *string     `yaml:"cdiAnnotationPrefix" nvidia:"the cdi-annotations strategy is not supported"`
	NvidiaCTKPath                 *string     `yaml:"nvidiaCTKPath" nvidia:"no CDI specification is generated with nvidia-ctk"`
	ContainerDriverRoot           *string     `yaml:"containerDriverRoot" nvidia:"there is no driver: the GPUs are virtual"`
	SharedDevicesAllocationPolicy *string     `yaml:"sharedDevicesAllocationPolicy" flag:"shared-devices-allocation-policy" profile:"allow"`
}

// nvGFDFlags is NVIDIA's flags.gfd section (GPU feature discovery).
type nvGFDFlags struct {
	Oneshot         *bool       `yaml:"oneshot" doc:"NVIDIA GPU feature discovery: label once and exit."`
	NoTimestamp     *bool       `yaml:"noTimestamp" doc:"NVIDIA GPU feature discovery: leave out the timestamp label."`
	SleepInterval   *nvDuration `yaml:"sleepInterval" doc:"NVIDIA GPU feature discovery: time between labellings."`
	OutputFile      *string     `yaml:"outputFile" doc:"NVIDIA GPU feature discovery: the labels file."`
	MachineTypeFile *string     `yaml:"machineTypeFile" doc:"NVIDIA GPU feature discovery: the file with the machine type."`
}

// nvResources is NVIDIA's resources section.
type nvResources struct {
	GPUs []nvResource `yaml:"gpus" doc:"Full GPUs to advertise under a name, by product pattern."`
	MIG  []nvResource `yaml:"mig" doc:"MIG devices to advertise under a name, by profile pattern."`
}

// nvResource is one entry of resources.gpus or resources.mig.
type nvResource struct {
	Pattern *string `yaml:"pattern" required:"true" doc:"A product or MIG profile pattern, * a wildcard."`
	Name    *string `yaml:"name" required:"true" doc:"The resource name."`
}

// nvImexSpec is NVIDIA's imex section.
type nvImexSpec struct {
	ChannelIDs []int `yaml:"channelIDs" doc:"IMEX channels to inject: [] or [0]."`
	Required   *bool `yaml:"required" doc:"Whether the channels must exist."`
}

// sharingSpec is the sharing section.
type sharingSpec struct {
	TimeSlicing *timeSlicingSpec `yaml:"timeSlicing" doc:"Share GPUs by time-slicing: each GPU is advertised as replicas devices."`
	MPS         *refused         `yaml:"mps" doc:"Not supported: sharing by MPS (NVIDIA's sharing.mps) is refused; use timeSlicing."`
}

// timeSlicingSpec is sharing.timeSlicing, as NVIDIA's plugin reads it.
type timeSlicingSpec struct {
	RenameByDefault            *bool                `yaml:"renameByDefault" doc:"Advertise shared GPUs as <resource>.shared instead of <resource> (default false)."`
	FailRequestsGreaterThanOne *bool                `yaml:"failRequestsGreaterThanOne" doc:"Refuse a container that asks for more than one shared device (default false)."`
	Resources                  []replicatedResource `yaml:"resources" required:"true" minItems:"1" doc:"The resource to share: the plugin's one resource (-resource-name), listed once. Entries for NVIDIA's MIG resources (<domain>/mig-…) are ignored: virtual GPUs have no MIG devices."`
}

// replicatedResource is one entry of sharing.timeSlicing.resources.
type replicatedResource struct {
	Name     *string            `yaml:"name" required:"true" doc:"The resource to share: the plugin's -resource-name (a name without a domain takes the resource's, as NVIDIA's plugin reads gpu as nvidia.com/gpu)."`
	Rename   *string            `yaml:"rename" doc:"Advertise the shared GPUs under this name; a name without a domain takes the resource's (default: the resource name, or <resource>.shared with renameByDefault)."`
	Devices  *replicatedDevices `yaml:"devices" doc:"The GPUs to share: all (the default), or a list of GPU indices (0, 1 …) or ids (fake-0 …)."`
	Replicas *int               `yaml:"replicas" required:"true" min:"2" max:"1024" doc:"The devices advertised per shared GPU: 2–1024 (-replicas overrides it)."`
}

// nodeDecoder is a type that reads itself from a YAML node; d reports
// errors at the node's line.
type nodeDecoder interface {
	decodeNode(d *decoder, path string, n *yaml.Node) error
}

// schemaer is a type that gives its own JSON Schema.
type schemaer interface {
	jsonSchema() map[string]any
}

// durationPattern matches what time.ParseDuration reads, unsigned.
const durationPattern = `^(0|([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+$`

// duration is a Go duration: "90s", "1h30m"; 0 may be a bare integer.
type duration time.Duration

func (v *duration) decodeNode(d *decoder, path string, n *yaml.Node) error {
	if n.Tag == "!!int" && n.Value == "0" {
		*v = 0
		return nil
	}
	if n.Tag != "!!str" {
		return d.expected(path, n, `a duration such as "90s" or "1h30m"`)
	}
	x, err := time.ParseDuration(n.Value)
	if err != nil {
		return d.errorf(path, n, "%q is not a duration such as 90s or 1h30m", n.Value)
	}
	*v = duration(x)
	return nil
}

func (duration) jsonSchema() map[string]any {
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "string", "pattern": durationPattern},
		map[string]any{"const": 0},
	}}
}

// String is the duration as the flag reads it.
func (v duration) String() string { return time.Duration(v).String() }

// nvDuration is NVIDIA's duration: a Go duration, "infinite", or an
// integer of nanoseconds.
type nvDuration struct{}

func (v *nvDuration) decodeNode(d *decoder, path string, n *yaml.Node) error {
	switch {
	case n.Tag == "!!int":
		return nil
	case n.Tag == "!!str" && n.Value == "infinite":
		return nil
	case n.Tag == "!!str":
		if _, err := time.ParseDuration(n.Value); err == nil {
			return nil
		}
	}
	return d.expected(path, n, `a duration such as "60s", "infinite" or nanoseconds`)
}

func (nvDuration) jsonSchema() map[string]any {
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "string", "pattern": `^(infinite|-?(0|([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$`},
		map[string]any{"type": "integer"},
	}}
}

func (b *ByteSize) decodeNode(d *decoder, path string, n *yaml.Node) error {
	if n.Tag != "!!int" && n.Tag != "!!str" {
		return d.expected(path, n, `a byte count such as 67108864 or "64Mi"`)
	}
	if err := b.Set(n.Value); err != nil {
		return d.errorf(path, n, "%q: %w", n.Value, err)
	}
	return nil
}

func (ByteSize) jsonSchema() map[string]any {
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "integer", "minimum": 0},
		map[string]any{"type": "string", "pattern": `^[0-9]+(Ki|Mi|Gi)?$`},
	}}
}

// stringList is one string, or a list of them: NVIDIA's deviceListStrategy.
// As a flag value, the items are joined by commas.
type stringList []string

func (l *stringList) decodeNode(d *decoder, path string, n *yaml.Node) error {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
		*l = stringList{n.Value}
		return nil
	case n.Kind == yaml.SequenceNode && len(n.Content) > 0:
		out := make(stringList, len(n.Content))
		for i, item := range n.Content {
			if item.Kind != yaml.ScalarNode || item.Tag != "!!str" || strings.Contains(item.Value, ",") {
				return d.expected(path+"["+strconv.Itoa(i)+"]", item, "a strategy name such as envvar")
			}
			out[i] = item.Value
		}
		*l = out
		return nil
	}
	if n.Kind == yaml.SequenceNode {
		return d.errorf(path, n, "an empty list: name at least one strategy, e.g. envvar")
	}
	return d.expected(path, n, "a strategy name, or a list of them")
}

func (stringList) jsonSchema() map[string]any {
	names := make([]any, len(deviceListStrategies))
	for i, s := range deviceListStrategies {
		names[i] = s
	}
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "string"},
		map[string]any{"type": "array", "minItems": 1, "items": map[string]any{"enum": names}},
	}}
}

// String is the list as the flag reads it.
func (l stringList) String() string { return strings.Join(l, ",") }

// replicatedDevices is NVIDIA's devices of a shared resource: "all", or a
// list of GPU indices or ids. NVIDIA's count and UUIDs are refused.
type replicatedDevices struct {
	All  bool
	List []deviceRef
}

// deviceRef is a GPU named in devices: an index or an id, with its line.
type deviceRef struct {
	V    string
	Line int
}

func (v *replicatedDevices) decodeNode(d *decoder, path string, n *yaml.Node) error {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Value == "all":
		v.All = true
		return nil
	case n.Kind == yaml.ScalarNode && n.Tag == "!!int":
		return d.errorf(path, n, "a count of GPUs (%s) is not supported: list the GPUs, e.g. [0, 1], or write all", n.Value)
	case n.Kind == yaml.SequenceNode && len(n.Content) == 0:
		return d.errorf(path, n, "an empty list: list at least one GPU, e.g. [0, 1], or write all")
	case n.Kind == yaml.SequenceNode && len(n.Content) > 0:
		for i, item := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			switch {
			case item.Kind != yaml.ScalarNode || (item.Tag != "!!int" && item.Tag != "!!str"):
				return d.expected(p, item, "a GPU index (0, 1 …) or id (fake-0 …)")
			case strings.HasPrefix(item.Value, "GPU-") || strings.HasPrefix(item.Value, "MIG-"):
				return d.errorf(p, item, "%q: UUIDs are not supported: name the GPU by index (0) or id (fake-0)", item.Value)
			}
			v.List = append(v.List, deviceRef{V: item.Value, Line: item.Line})
		}
		return nil
	}
	return d.expected(path, n, "all, or a list of GPU indices or ids")
}

func (replicatedDevices) jsonSchema() map[string]any {
	return map[string]any{"anyOf": []any{
		map[string]any{"const": "all"},
		map[string]any{"type": "array", "minItems": 1, "items": map[string]any{"anyOf": []any{
			map[string]any{"type": "integer", "minimum": 0},
			map[string]any{"type": "string", "pattern": `^([0-9]+|` + topology.IDPrefix + `[0-9]+)$`},
		}}},
	}}
}

// index returns the GPU index r names on machine m.
func (r deviceRef) index(m *topology.Machine) (int, error) {
	if i, err := strconv.Atoi(r.V); err == nil && strconv.Itoa(i) == r.V {
		if i < 0 || i >= m.Len() {
			return 0, fmt.Errorf("GPU %d: the machine has GPUs 0–%d", i, m.Len()-1)
		}
		return i, nil
	}
	if i, ok := m.Index(r.V); ok {
		return i, nil
	}
	return 0, fmt.Errorf("%q is neither a GPU index nor the id of a GPU (%s0–%s%d)", r.V, topology.IDPrefix, topology.IDPrefix, m.Len()-1)
}

// refused is a field that is known and refused whatever its value.
type refused struct{}

func (*refused) decodeNode(d *decoder, path string, n *yaml.Node) error {
	return d.errorf(path, n, "sharing by MPS is not supported: this plugin shares GPUs by time-slicing only (sharing.timeSlicing)")
}

func (refused) jsonSchema() map[string]any { return map[string]any{"not": map[string]any{}} }
