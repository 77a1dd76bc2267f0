package options

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// logLevelNames are the accepted -log-level values.
var logLevelNames = []string{"trace", "debug", "info", "warn", "error"}

// logFormatNames are the accepted -log-format values.
var logFormatNames = []string{string(LogJSON), string(LogConsole)}

// numaReportNames are the accepted -numa-report values.
var numaReportNames = []string{"auto", "always", "never"}

// enums are the values a flag accepts, where they are a fixed list: the
// rules Validate applies and the enums of the JSON Schema.
func enums(flagName string) []string {
	switch flagName {
	case "kubelet-api":
		return kubeletAPINames()
	case "log-level":
		return logLevelNames
	case "log-format":
		return logFormatNames
	case "numa-report":
		return numaReportNames
	case "allocation-policy":
		return allocator.PolicyNames()
	case "shared-devices-allocation-policy":
		return allocator.SharedPolicyNames()
	case "device-list-strategy":
		return deviceListStrategies
	case "telemetry-model":
		return modelNames()
	}
	return nil
}

// bad returns the error for the named flag's value v breaking a rule:
// "invalid -devices=0: must be …", naming the variable or the file, field
// and line the value came from.
func (s *Settings) bad(flagName string, v any, format string, args ...any) error {
	prefix, what := s.origins[flagName].where(flagName)
	var val string
	switch x := v.(type) {
	case string:
		val = strconv.Quote(x)
	case fmt.Stringer:
		val = x.String()
	default:
		val = fmt.Sprint(x)
	}
	return invalidf("%sinvalid %s=%s: %w", prefix, what, val, fmt.Errorf(format, args...))
}

// name returns how errors name the flag: -devices, VGPU_DEVICES or
// "flags.devices (file:line)".
func (s *Settings) name(flagName string) string {
	prefix, what := s.origins[flagName].where(flagName)
	if prefix != "" {
		return what + " (" + strings.TrimSuffix(prefix, ": ") + ")"
	}
	return what
}

// Validate checks every value and the rules between them, names the first
// that breaks its rule, and returns the typed configuration: it reads the
// topology file or preset into a machine and checks the fault plan and the
// shared GPUs against it. Besides the topology file it reads nothing: it
// checks, without blocking, that the state file and the host's NUMA
// directory, where they exist, are what they should be (a FIFO there would
// block the start-up read beyond any signal). Every error wraps ErrInvalid.
func (s Settings) Validate() (*Config, error) {
	c := &Config{sources: map[string]Source{}}
	for name, o := range s.origins {
		c.sources[name] = o.src
	}
	if s.Devices < 1 || s.Devices > MaxDevices {
		return nil, s.bad("devices", s.Devices, "must be between 1 and %d", MaxDevices)
	}
	if err := validateResourceName(s.ResourceName); err != nil {
		return nil, s.bad("resource-name", s.ResourceName, "%w", err)
	}
	c.GPUs.ResourceName = s.ResourceName
	if err := s.validateKubeletAPI(c); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(s.DevicePluginPath) {
		return nil, s.bad("device-plugin-path", s.DevicePluginPath, "must be an absolute path")
	}
	c.DevicePluginPath = filepath.Clean(s.DevicePluginPath)
	if s.SocketName == "" || strings.ContainsRune(s.SocketName, '/') || s.SocketName == "." || s.SocketName == ".." {
		return nil, s.bad("socket-name", s.SocketName, "must be a plain file name")
	}
	if s.SocketName == "kubelet.sock" {
		return nil, s.bad("socket-name", s.SocketName, "that is the kubelet's own socket")
	}
	c.SocketName = s.SocketName
	if p := filepath.Join(c.DevicePluginPath, c.SocketName); len(p) > maxSocketPath {
		return nil, invalidf("invalid %s/%s: socket path %q is %d bytes, unix sockets allow %d",
			s.name("device-plugin-path"), s.name("socket-name"), p, len(p), maxSocketPath)
	}
	if !slices.Contains(logLevelNames, s.LogLevel) {
		return nil, s.bad("log-level", s.LogLevel, "must be one of %s", strings.Join(logLevelNames, ", "))
	}
	c.LogLevel, _ = zerolog.ParseLevel(s.LogLevel) // one of logLevelNames
	if !slices.Contains(logFormatNames, s.LogFormat) {
		return nil, s.bad("log-format", s.LogFormat, "must be json or console")
	}
	c.LogFormat = LogFormat(s.LogFormat)
	mode, err := topology.ParseNUMAReport(s.NUMAReport)
	if err != nil {
		return nil, s.bad("numa-report", s.NUMAReport, "must be auto, always or never")
	}
	c.GPUs.NUMAReport = mode
	if !filepath.IsAbs(s.SysfsRoot) {
		return nil, s.bad("sysfs-root", s.SysfsRoot, "must be an absolute path")
	}
	c.GPUs.SysfsRoot = filepath.Clean(s.SysfsRoot)
	if mode == topology.NUMAReportAuto {
		if err := checkKind(filepath.Join(c.GPUs.SysfsRoot, topology.SysfsNodeDir), os.ModeDir); err != nil {
			return nil, s.bad("sysfs-root", s.SysfsRoot, "%w", err)
		}
	}
	if _, ok := allocator.Policies[s.AllocationPolicy]; !ok {
		return nil, s.bad("allocation-policy", s.AllocationPolicy, "must be one of %s", strings.Join(allocator.PolicyNames(), ", "))
	}
	c.GPUs.AllocationPolicy = s.AllocationPolicy
	if _, ok := allocator.SharedPolicies[s.SharedDevicesAllocationPolicy]; !ok {
		return nil, s.bad("shared-devices-allocation-policy", s.SharedDevicesAllocationPolicy, "must be one of %s", strings.Join(allocator.SharedPolicyNames(), ", "))
	}
	if c.View.DeviceListStrategies, err = parseDeviceListStrategies(s.DeviceListStrategy); err != nil {
		return nil, s.bad("device-list-strategy", s.DeviceListStrategy, "%w", err)
	}
	if s.Replicas < 1 || s.Replicas > topology.MaxReplicas {
		return nil, s.bad("replicas", s.Replicas, "must be between 1 (no sharing) and %d", topology.MaxReplicas)
	}
	if !filepath.IsAbs(s.State) || strings.HasSuffix(s.State, "/") {
		return nil, s.bad("state", s.State, "must be an absolute file path")
	}
	c.StatePath = filepath.Clean(s.State)
	c.View.Owner = c.StatePath
	if err := store.CheckPath(c.StatePath); err != nil {
		return nil, s.bad("state", s.State, "%w", err)
	}
	c.StateMoveAside = s.StateMoveAside
	if err := s.validateContainerView(c); err != nil {
		return nil, err
	}
	if s.HistoryMaxRecords < 1 {
		return nil, s.bad("history-max-records", s.HistoryMaxRecords, "must be at least 1 (the history is always bounded)")
	}
	c.History.MaxRecords = s.HistoryMaxRecords
	if s.HistoryMaxAge < 0 {
		return nil, s.bad("history-max-age", s.HistoryMaxAge, "must be 0 (any age) or positive")
	}
	c.History.MaxAge = s.HistoryMaxAge
	if s.HistoryMaxBytes != 0 && s.HistoryMaxBytes < minHistoryMaxBytes {
		return nil, s.bad("history-max-bytes", s.HistoryMaxBytes, "must be 0 (no byte limit) or at least %s", ByteSize(minHistoryMaxBytes))
	}
	c.History.MaxBytes = int64(s.HistoryMaxBytes)
	if c.AdminSocket, err = AdminSocketPath(s.AdminSocket, c.StatePath); err != nil {
		return nil, s.bad("admin-socket", s.AdminSocket, "%w", err)
	}
	if sameDir(filepath.Dir(c.AdminSocket), c.DevicePluginPath) {
		what := fmt.Sprintf("%s=%q", s.name("admin-socket"), c.AdminSocket)
		if s.AdminSocket == "" {
			what = fmt.Sprintf("-admin-socket (default %s, next to %s)", c.AdminSocket, s.name("state"))
		}
		return nil, invalidf("invalid %s: must not be in -device-plugin-path %s: the kubelet deletes the sockets there when it restarts", what, c.DevicePluginPath)
	}
	if !filepath.IsAbs(s.PodResourcesSocket) || len(s.PodResourcesSocket) > maxSocketPath {
		return nil, s.bad("pod-resources-socket", s.PodResourcesSocket, "must be an absolute path of at most %d bytes", maxSocketPath)
	}
	c.PodResourcesSocket = s.PodResourcesSocket
	if s.ReconcileInterval < 100*time.Millisecond {
		return nil, s.bad("reconcile-interval", s.ReconcileInterval, "must be at least 100ms (the kubelet rate-limits the PodResources API)")
	}
	c.ReconcileInterval = s.ReconcileInterval
	if s.MetricsAddress != "" {
		if err := validateListenAddress(s.MetricsAddress); err != nil {
			return nil, s.bad("metrics-address", s.MetricsAddress, "%w", err)
		}
	}
	c.MetricsAddress = s.MetricsAddress
	if err := s.validateTelemetry(c); err != nil {
		return nil, err
	}
	if err := s.validateDirs(c); err != nil {
		return nil, err
	}
	if s.AbandonAfter < s.ReconcileInterval {
		return nil, s.bad("abandon-after", s.AbandonAfter, "must be at least -reconcile-interval (%s)", s.ReconcileInterval)
	}
	c.AbandonAfter = s.AbandonAfter
	plan, err := faults.Parse(s.Faults)
	if err != nil {
		prefix, what := s.origins["faults"].where("faults")
		return nil, invalidf("%sinvalid %s: %w", prefix, what, err)
	}
	c.Faults = faults.Plan{Text: s.Faults, Faults: plan}

	// What the values name: the machine, then what refers to its GPUs.
	c.GPUs.Topology = s.Topology
	if c.GPUs.Machine, err = topology.Resolve(s.Topology, s.Devices, s.Source("devices") != SourceDefault); err != nil {
		return nil, s.bad("topology", s.Topology, "%w", err)
	}
	ids := make([]string, c.GPUs.Machine.Len())
	for i := range ids {
		ids[i] = c.GPUs.Machine.ID(i)
	}
	if c.View.Uses(view.DeviceListCDICRI) {
		if c.View.CDIKind, err = cdi.KindOf(c.GPUs.ResourceName); err != nil {
			return nil, s.bad("resource-name", s.ResourceName, "must make a valid CDI kind with the cdi-cri strategy (%s): %w", s.name("device-list-strategy"), err)
		}
	}
	if c.View.Uses(view.DeviceListCDICRI) && c.GPUs.Machine.Len() > cdi.MaxMinor+1 {
		return nil, s.bad("device-list-strategy", s.DeviceListStrategy, "cdi-cri gives each GPU its device node /dev/nvidia<minor>, minors 0–%d: at most %d GPUs, the machine has %d",
			cdi.MaxMinor, cdi.MaxMinor+1, c.GPUs.Machine.Len())
	}
	if err := faults.Check(c.Faults.Faults, ids); err != nil {
		prefix, what := s.origins["faults"].where("faults")
		return nil, invalidf("%sinvalid %s: %w", prefix, what, err)
	}
	if c.GPUs.Sharing, err = s.sharing(c); err != nil {
		return nil, err
	}
	advertised := c.GPUs.Machine.Len()
	if c.GPUs.Sharing.Enabled() {
		n := c.GPUs.Machine.Len()
		if c.GPUs.Sharing.GPUs != nil {
			n = len(c.GPUs.Sharing.GPUs)
		}
		advertised += n * (c.GPUs.Sharing.Replicas - 1)
	}
	if advertised > maxAdvertised {
		return nil, s.bad("replicas", s.Replicas, "%d GPUs shared %d ways are %d devices; at most %d fit the kubelet's ListAndWatch message",
			c.GPUs.Machine.Len(), c.GPUs.Sharing.Replicas, advertised, maxAdvertised)
	}
	if err := s.validateMIG(c); err != nil {
		return nil, err
	}
	if err := s.checkDRA(c); err != nil {
		return nil, err
	}
	if f := s.file; f != nil {
		c.Profile, c.File, c.Ignored = f.Profile, f.Path, f.Ignored
		for name, v := range f.values {
			if src := s.Source(name); src > SourceFile {
				c.Overridden = append(c.Overridden, fmt.Sprintf("%s (%s) by %s", v.at.field, fileLine(v.at.file, v.at.line), s.name(name)))
			}
		}
		slices.Sort(c.Overridden)
	}
	return c, nil
}

// sharing builds the typed sharing configuration: the replica count by
// precedence (-replicas, or the file's), the rest from the file's
// sharing.timeSlicing.
func (s *Settings) sharing(c *Config) (gpuset.Sharing, error) {
	sh := gpuset.Sharing{Replicas: s.Replicas, ResourceName: c.GPUs.ResourceName, PolicyName: s.SharedDevicesAllocationPolicy}
	var ts *timeSlicingSpec
	if s.file != nil && s.file.spec.Sharing != nil {
		ts = s.file.spec.Sharing.TimeSlicing
	}
	if ts == nil {
		return sh, nil
	}
	f := s.file
	res := f.shared
	r := &ts.Resources[0] // the parser keeps exactly one
	if withDomain(*r.Name, c.GPUs.ResourceName) != c.GPUs.ResourceName {
		return sh, invalidf("%s: invalid %s.name=%q: the plugin serves %s (%s), the one resource it can share",
			f.at(res+".name"), res, *r.Name, c.GPUs.ResourceName, s.name("resource-name"))
	}
	if !sh.Enabled() {
		return sh, nil // -replicas=1 given: no sharing, whatever the file says
	}
	sh.FailRequestsGreaterThanOne = ts.FailRequestsGreaterThanOne != nil && *ts.FailRequestsGreaterThanOne
	switch {
	case r.Rename != nil:
		name := withDomain(*r.Rename, c.GPUs.ResourceName)
		if err := validateResourceName(name); err != nil {
			return sh, invalidf("%s: invalid %s.rename=%q: %w", f.at(res+".rename"), res, *r.Rename, err)
		}
		sh.ResourceName = name
	case ts.RenameByDefault != nil && *ts.RenameByDefault:
		name := c.GPUs.ResourceName + sharedSuffix
		if err := validateResourceName(name); err != nil {
			return sh, invalidf("%s: invalid sharing.timeSlicing.renameByDefault: %s: %w", f.at("sharing.timeSlicing.renameByDefault"), name, err)
		}
		sh.ResourceName = name
	}
	sh.Renamed = sh.ResourceName != c.GPUs.ResourceName
	if r.Devices != nil && !r.Devices.All {
		for _, d := range r.Devices.List {
			i, err := d.index(c.GPUs.Machine)
			if err != nil {
				return sh, invalidf("%s: invalid %s.devices: %w", fileLine(f.Path, d.Line), res, err)
			}
			if slices.Contains(sh.GPUs, i) {
				return sh, invalidf("%s: invalid %s.devices: GPU %d listed twice", fileLine(f.Path, d.Line), res, i)
			}
			sh.GPUs = append(sh.GPUs, i)
		}
		slices.Sort(sh.GPUs)
	}
	return sh, nil
}

// withDomain returns name with the domain of resource when it has none:
// NVIDIA's rule, by which gpu is nvidia.com/gpu.
func withDomain(name, resource string) string {
	if strings.Contains(name, "/") {
		return name
	}
	domain, _, _ := strings.Cut(resource, "/")
	return domain + "/" + name
}

// validateContainerView checks the settings of what a container sees:
// the tools, status and CDI directories and the device node source. It
// needs c's StatePath and DeviceListStrategies.
func (s *Settings) validateContainerView(c *Config) error {
	c.View.NvidiaSMI, c.View.VisibleDevicesEnv, c.View.DeviceNodes = s.NvidiaSMI, s.VisibleDevicesEnv, s.DeviceNodes
	dir := filepath.Dir(c.StatePath)
	c.View.StatusDir = filepath.Join(dir, StatusDirName)
	c.View.ToolsDir = filepath.Join(dir, ToolsDirName)
	if s.ToolsDir != "" {
		if !filepath.IsAbs(s.ToolsDir) {
			return s.bad("tools-dir", s.ToolsDir, "must be an absolute path")
		}
		c.View.ToolsDir = filepath.Clean(s.ToolsDir)
	}
	if err := checkKind(c.View.ToolsDir, os.ModeDir); err != nil {
		return s.bad("tools-dir", s.ToolsDir, "%w", err)
	}
	if !filepath.IsAbs(s.CDISpecDir) {
		return s.bad("cdi-spec-dir", s.CDISpecDir, "must be an absolute path")
	}
	c.View.CDISpecDir = filepath.Clean(s.CDISpecDir)
	if err := checkKind(c.View.CDISpecDir, os.ModeDir); err != nil {
		return s.bad("cdi-spec-dir", s.CDISpecDir, "%w", err)
	}
	if !filepath.IsAbs(s.DeviceNodeSource) {
		return s.bad("device-node-source", s.DeviceNodeSource, "must be an absolute path")
	}
	c.View.DeviceNodeSource = filepath.Clean(s.DeviceNodeSource)
	if c.View.DeviceNodes || c.View.Uses(view.DeviceListCDICRI) {
		return s.validateDeviceNodeSource(c)
	}
	return nil
}

// harmlessNodes are the character devices -device-node-source may be
// without -allow-unsafe-device-node-source, by device number, so that a
// renamed or bind-mounted /dev/null is one and a node named /dev/null with
// other numbers is not: the kernel's memory devices (major 1) that reach
// no memory, disk, port or log. Reads give nothing, zeros or random bytes;
// writes go nowhere (/dev/full refuses them; one to /dev/random mixes into
// the pool, as any user may).
var harmlessNodes = []struct {
	name         string
	major, minor uint32
}{{"/dev/null", 1, 3}, {"/dev/zero", 1, 5}, {"/dev/full", 1, 7}, {"/dev/random", 1, 8}, {"/dev/urandom", 1, 9}}

// validateDeviceNodeSource checks the host node behind the containers'
// device nodes, which every GPU container gets read-write as
// /dev/nvidia<minor>, /dev/nvidiactl and /dev/nvidia-uvm: a harmless
// memory device; another character device only with
// -allow-unsafe-device-node-source (and a warning in c.Warnings); a block
// device never. It looks at the node itself (Lstat), as the runtime does,
// so a symlink is refused.
func (s *Settings) validateDeviceNodeSource(c *Config) error {
	fi, err := os.Lstat(c.View.DeviceNodeSource)
	switch {
	case err != nil:
		return s.bad("device-node-source", s.DeviceNodeSource, "device nodes (-device-nodes or the cdi-cri strategy) need it: %w", err)
	case fi.Mode()&os.ModeDevice == 0:
		return s.bad("device-node-source", s.DeviceNodeSource, "is not a character device (-device-nodes and the cdi-cri strategy need one, such as /dev/null)")
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return s.bad("device-node-source", s.DeviceNodeSource, "its device number cannot be read")
	}
	major, minor := unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))
	if fi.Mode()&os.ModeCharDevice == 0 {
		return s.bad("device-node-source", s.DeviceNodeSource, "is block device %d:%d: every GPU container would get it read-write as its GPU device nodes; a block device is never accepted, use a character device such as /dev/null", major, minor)
	}
	names := make([]string, len(harmlessNodes))
	for i, h := range harmlessNodes {
		if h.major == major && h.minor == minor {
			return nil
		}
		names[i] = fmt.Sprintf("%s %d:%d", h.name, h.major, h.minor)
	}
	if !s.AllowUnsafeDeviceNodeSource {
		return s.bad("device-node-source", s.DeviceNodeSource, "is character device %d:%d, not one of the harmless ones (%s): every GPU container would get it read-write as its GPU device nodes; %s accepts it anyway",
			major, minor, strings.Join(names, ", "), s.name("allow-unsafe-device-node-source"))
	}
	c.Warnings = append(c.Warnings, fmt.Sprintf("%s %s is character device %d:%d, not a harmless one (%s); accepted by %s: every GPU container gets it read-write as /dev/nvidia<minor>, /dev/nvidiactl and /dev/nvidia-uvm",
		s.name("device-node-source"), c.View.DeviceNodeSource, major, minor, strings.Join(names, ", "), s.name("allow-unsafe-device-node-source")))
	return nil
}

// validateTelemetry checks the telemetry settings. It needs c's
// StatePath and MetricsAddress.
func (s *Settings) validateTelemetry(c *Config) error {
	if s.TelemetryAddress != "" {
		if err := validateListenAddress(s.TelemetryAddress); err != nil {
			return s.bad("telemetry-address", s.TelemetryAddress, "%w", err)
		}
		if _, port, _ := net.SplitHostPort(s.TelemetryAddress); s.TelemetryAddress == c.MetricsAddress && port != "0" { // port 0: each its own
			return s.bad("telemetry-address", s.TelemetryAddress, "is %s too: the telemetry and the plugin's metrics are two listeners", s.name("metrics-address"))
		}
	}
	c.TelemetryAddress = s.TelemetryAddress
	if s.TelemetryCollectors != "" {
		cs, warnings, err := readCollectors(s.TelemetryCollectors)
		if err != nil {
			return s.bad("telemetry-collectors", s.TelemetryCollectors, "%w", err)
		}
		c.TelemetryCollectors, c.TelemetryCollectorsFile = cs, s.TelemetryCollectors
		c.Warnings = append(c.Warnings, warnings...)
	}
	model, err := telemetry.ParseModel(s.TelemetryModel)
	if err != nil || s.TelemetryModel == "" {
		return s.bad("telemetry-model", s.TelemetryModel, "must be one of %s", strings.Join(modelNames(), ", "))
	}
	c.Telemetry.Model = model
	if s.TelemetrySeed < 0 {
		return s.bad("telemetry-seed", s.TelemetrySeed, "must be 0 or more")
	}
	c.Telemetry.Seed = uint64(s.TelemetrySeed)
	c.Telemetry.PerPod = s.TelemetryPerPod
	if s.TelemetryWritable && s.TelemetryAddress == "" {
		return s.bad("telemetry-writable", s.TelemetryWritable, "needs -telemetry-address: the values a container sets show in the telemetry")
	}
	c.Telemetry.Writable, c.View.LoadSockets = s.TelemetryWritable, s.TelemetryWritable
	c.View.LoadSocketDir = filepath.Join(filepath.Dir(c.StatePath), LoadSocketDirName)
	if p := filepath.Join(c.View.LoadSocketDir, longestLoadSocket); c.Telemetry.Writable && len(p) > maxSocketPath {
		return s.bad("telemetry-writable", s.TelemetryWritable, "the per-allocation sockets next to %s (%s) would be up to %d bytes long, unix sockets allow %d",
			s.name("state"), p, len(p), maxSocketPath)
	}
	return nil
}

// sharedSuffix is what renameByDefault appends to the resource name, as
// NVIDIA's plugin does.
const sharedSuffix = ".shared"

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

// dirRef is one of the plugin's directories, as errors name it.
type dirRef struct {
	what string // e.g. `-tools-dir="/x"` or "the status directory /x (next to -state)"
	path string
}

// flagDir names the directory of the flag flagName: its value, or, when it
// is derived (the flag unset), its default next to -state.
func (s *Settings) flagDir(flagName, path string, derived bool) dirRef {
	if derived {
		return dirRef{fmt.Sprintf("-%s (default %s, next to %s)", flagName, path, s.name("state")), path}
	}
	return dirRef{fmt.Sprintf("%s=%q", s.name(flagName), path), path}
}

// validateDirs refuses the plugin's directories where one would break
// another (c's paths, after resolving symlinks and bind mounts):
//
//   - the status directory and the load socket directory (next to -state)
//     are mounted into containers (the status directory into every GPU
//     container, an allocation's load socket directory into its own) and
//     the plugin removes stale entries from them: the device-plugin
//     directory, -tools-dir, -cdi-spec-dir (with cdi-cri) and the admin
//     socket's directory must be neither of them nor inside them;
//   - the device-plugin directory is the kubelet's, for sockets: -tools-dir
//     and -cdi-spec-dir must not be it (directories below it are left
//     alone: the kubelet removes the sockets in it, not in its
//     subdirectories);
//   - -cdi-spec-dir is read by container runtimes: it must not be
//     -tools-dir, which holds the installed nvidia-smi.
//
// Other nestings (-tools-dir the state file's directory, say) are allowed:
// no directory's cleanup or mount reaches the other's files. It needs c's
// paths.
func (s *Settings) validateDirs(c *Config) error {
	dp := s.flagDir("device-plugin-path", c.DevicePluginPath, false)
	tools := s.flagDir("tools-dir", c.View.ToolsDir, s.ToolsDir == "")
	admin := dirRef{"the directory of " + s.flagDir("admin-socket", c.AdminSocket, s.AdminSocket == "").what, filepath.Dir(c.AdminSocket)}
	dirs := []dirRef{dp, tools, admin}
	cdiDir := s.flagDir("cdi-spec-dir", c.View.CDISpecDir, false)
	useCDI := c.View.Uses(view.DeviceListCDICRI)
	if useCDI {
		dirs = append(dirs, cdiDir)
	}
	for _, m := range []struct {
		dir dirRef
		why string
	}{
		{dirRef{fmt.Sprintf("the status directory %s (next to %s)", c.View.StatusDir, s.name("state")), c.View.StatusDir},
			"every GPU container gets it mounted, and the plugin removes stale status files from it"},
		{dirRef{fmt.Sprintf("the load socket directory %s (next to %s)", c.View.LoadSocketDir, s.name("state")), c.View.LoadSocketDir},
			"the plugin mounts its allocations' directories into containers and removes them when the allocations end"},
	} {
		for _, d := range dirs {
			if within(d.path, m.dir.path) {
				return invalidf("invalid %s: must be neither %s nor inside it: %s", d.what, m.dir.what, m.why)
			}
		}
	}
	if sameDir(c.View.ToolsDir, c.DevicePluginPath) {
		return invalidf("invalid %s: must not be %s: the kubelet's directory holds sockets, the tools directory the plugin's nvidia-smi", tools.what, dp.what)
	}
	if useCDI && sameDir(c.View.CDISpecDir, c.DevicePluginPath) {
		return invalidf("invalid %s: must not be %s: the kubelet's directory holds sockets, the spec directory CDI specs", cdiDir.what, dp.what)
	}
	if useCDI && sameDir(c.View.CDISpecDir, c.View.ToolsDir) {
		return invalidf("invalid %s: must not be %s: container runtimes read the spec directory, and the plugin installs its nvidia-smi into the tools directory", cdiDir.what, tools.what)
	}
	return nil
}

// within reports whether directory a is b or inside it: by path, after
// resolving the symlinks in the part of each path that exists, or, where
// b exists, because a or one of its ancestors is the directory b (a bind
// mount of it, say). It only stats, so it cannot block.
func within(a, b string) bool {
	ra, rb := resolvePath(a), resolvePath(b)
	if ra == rb || strings.HasPrefix(ra, strings.TrimSuffix(rb, "/")+"/") {
		return true
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false
	}
	for p := ra; ; p = filepath.Dir(p) {
		if fp, err := os.Stat(p); err == nil && os.SameFile(fp, fb) {
			return true
		}
		if p == filepath.Dir(p) {
			return false
		}
	}
}

// resolvePath returns the absolute, clean path p with the symlinks in its
// longest existing prefix resolved; the rest, which does not exist yet, as
// it is.
func resolvePath(p string) string {
	rest := ""
	for q := p; ; q = filepath.Dir(q) {
		if r, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(r, rest)
		}
		if q == filepath.Dir(q) {
			return p
		}
		rest = filepath.Join(filepath.Base(q), rest)
	}
}

// sameDir reports whether a and b name the same directory: the same path
// after following the symlinks in the parts of both that exist, or, where
// both exist, the same directory (a bind mount): a symlink must not smuggle
// the admin socket into the device-plugin directory.
func sameDir(a, b string) bool {
	if a == b || resolvePath(a) == resolvePath(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
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
	// qualifiedName is the name part of a qualified name, at most 63
	// bytes; also the rule of a label value.
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

// AdminSocketPath returns the admin socket's path: flagValue, or, when it
// is empty, admin.sock next to the state file. The path must be absolute
// and fit a unix socket; it is returned clean.
func AdminSocketPath(flagValue, statePath string) (string, error) {
	p := flagValue
	if p == "" {
		p = filepath.Join(filepath.Dir(statePath), AdminSocketName)
	}
	if !filepath.IsAbs(p) {
		return "", errors.New("must be an absolute path")
	}
	p = filepath.Clean(p)
	if len(p) > maxSocketPath {
		return "", fmt.Errorf("%s is %d bytes, unix sockets allow %d", p, len(p), maxSocketPath)
	}
	return p, nil
}

// kubeletAPINames are the accepted -kubelet-api values.
func kubeletAPINames() []string {
	out := make([]string, len(agent.KubeletAPIs))
	for i, a := range agent.KubeletAPIs {
		out[i] = string(a)
	}
	return out
}

// checkDRA refuses, with -kubelet-api=dra, what only the device plugin
// serves: time-slicing replicas (a DRA device is a whole GPU or a MIG
// device; pods share one by sharing a claim) and the per-allocation load
// sockets of -telemetry-writable (a claim has no allocation record to name
// one). A MIG layout is served (validateMIG: partitionable devices).
func (s *Settings) checkDRA(c *Config) error {
	if c.KubeletAPI != agent.KubeletAPIDRA {
		return nil
	}
	if c.GPUs.Sharing.Enabled() {
		return s.bad("replicas", c.GPUs.Sharing.Replicas, "time-slicing replicas are served through the device plugin only, not while %s is dra: "+
			"through DRA, pods share a GPU by sharing a ResourceClaim", s.name("kubelet-api"))
	}
	if c.Telemetry.Writable {
		return s.bad("telemetry-writable", true, "the per-allocation load sockets are served through the device plugin only, not while %s is dra", s.name("kubelet-api"))
	}
	return nil
}

// validateKubeletAPI checks -kubelet-api and the DRA driver's name and
// directories (checked whatever the mode: a profile may turn DRA on).
func (s *Settings) validateKubeletAPI(c *Config) error {
	if !slices.Contains(kubeletAPINames(), s.KubeletAPI) {
		return s.bad("kubelet-api", s.KubeletAPI, "must be one of %s", strings.Join(kubeletAPINames(), ", "))
	}
	c.KubeletAPI = agent.KubeletAPI(s.KubeletAPI)
	if errs := validation.IsDNS1123Subdomain(s.DRADriverName); len(errs) > 0 {
		return s.bad("dra-driver-name", s.DRADriverName, "must be a DNS subdomain in lower case, as a DRA driver's name is (%s)", strings.Join(errs, "; "))
	}
	c.DRA.DriverName = s.DRADriverName
	for _, d := range []struct {
		flag, value string
		dst         *string
	}{{"kubelet-registry-dir", s.KubeletRegistryDir, &c.DRA.RegistryDir}, {"kubelet-plugins-dir", s.KubeletPluginsDir, &c.DRA.PluginsDir}} {
		if !filepath.IsAbs(d.value) {
			return s.bad(d.flag, d.value, "must be an absolute path")
		}
		*d.dst = filepath.Clean(d.value)
	}
	return nil
}

// readCollectors reads a collectors file (telemetry.ParseCollectors); the
// warnings name the file.
func readCollectors(path string) ([]telemetry.Collector, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	cs, warnings, err := telemetry.ParseCollectors(f)
	for i := range warnings {
		warnings[i] = path + ": " + warnings[i] + " (dcgm-exporter would serve it)"
	}
	return cs, warnings, err
}

// validateMIG checks the MIG strategy, reads the mig-parted file and
// resolves the layout on the machine: an unknown layout, a profile the
// product lacks or devices that do not fit a GPU are refused naming the
// GPU and the profile (mig.Resolve), and so is a layout the strategy
// cannot serve (gpuset.CheckMIG). With -kubelet-api=dra the MIG-enabled
// GPUs are published as partitionable devices, every placement of every
// profile (the layout's devices do not matter there: a claim chooses),
// and a strategy but none is refused: it is the device plugin's.
func (s *Settings) validateMIG(c *Config) error {
	st := gpuset.MIGStrategy(s.MIGStrategy)
	if !slices.Contains(gpuset.MIGStrategies, st) {
		return s.bad("mig-strategy", s.MIGStrategy, "must be one of none, single, mixed")
	}
	cfg, err := mig.BuiltinConfig()
	if err != nil {
		return err
	}
	if s.MIGConfigFile != "" {
		f, err := os.Open(s.MIGConfigFile)
		if err != nil {
			return s.bad("mig-config-file", s.MIGConfigFile, "%w", err)
		}
		user, err := mig.ParseConfig(s.MIGConfigFile, f)
		f.Close()
		if err != nil {
			return s.bad("mig-config-file", s.MIGConfigFile, "%w", err)
		}
		cfg = mig.Merge(cfg, user)
	}
	if c.KubeletAPI == agent.KubeletAPIDRA && st != gpuset.MIGStrategyNone {
		return s.bad("mig-strategy", s.MIGStrategy, "is how the device plugin advertises MIG devices, not while %s is dra: "+
			"through DRA every placement of every profile of a MIG-enabled GPU is published and a claim chooses one (leave it none)", s.name("kubelet-api"))
	}
	c.GPUs.MIG = gpuset.MIG{Strategy: st, Layout: s.MIGConfig, Partitionable: c.KubeletAPI == agent.KubeletAPIDRA}
	if s.MIGConfig == "" {
		return nil
	}
	m := c.GPUs.Machine
	if c.GPUs.MIG.GPUs, err = mig.Resolve(cfg, s.MIGConfig, m.GPUModel().Product, m.Len()); err != nil {
		return s.bad("mig-config", s.MIGConfig, "%w", err)
	}
	if err := gpuset.CheckMIG(c.GPUs); err != nil {
		return s.bad("mig-config", s.MIGConfig, "%w", err)
	}
	return nil
}
