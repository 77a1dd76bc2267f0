package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Defaults of the plugin under test (its CLI contract).
const (
	// ResourceName is the extended resource the plugin advertises.
	ResourceName = "unicore.mcyou.cc/gpu"
	// PluginSocket is the plugin's socket name in the device-plugin directory.
	PluginSocket = "virtual-gpu.sock"
	// EnvIDs is the environment variable the plugin injects into containers.
	EnvIDs = "VIRTUAL_GPU_IDS"
	// DRADriverName is the plugin's DRA driver name (its -dra-driver-name default): the driver of its
	// ResourceSlices and the prefix of its registration socket.
	DRADriverName = "gpu.unicore.mcyou.cc"
)

// KubeletAPI is the kubelet API a plugin process serves: its -kubelet-api flag.
type KubeletAPI string

// The plugin's kubelet APIs.
const (
	// KubeletAPIDevicePlugin is the device-plugin API (Registration, ListAndWatch, Allocate): the
	// plugin's default.
	KubeletAPIDevicePlugin KubeletAPI = "device-plugin"
	// KubeletAPIDRA is Dynamic Resource Allocation: ResourceSlices published through the API server,
	// claims prepared through the kubelet's DRA gRPC service, containers given their devices by CDI
	// (so the node must run RuntimeContainerd2 for pods to start).
	KubeletAPIDRA KubeletAPI = "dra"
)

// PluginOptions configure StartPlugin.
type PluginOptions struct {
	// Binary is the plugin executable. Required.
	Binary string
	// Devices is the -devices flag. Default 4, or not passed when Topology is set; negative: not
	// passed (a -config profile decides).
	Devices int
	// Topology is the -topology flag (a preset name or a file); empty: not passed.
	Topology string
	// StatePath is the -state flag. Default: <cluster dir>/plugin-<n>/state.db (n counts the
	// cluster's plugin starts), a fresh one per start; pass the previous Plugin's StatePath to keep
	// the state across a restart.
	StatePath string
	// AdminSocket is the -admin-socket flag. Default: admin.sock next to StatePath.
	AdminSocket string
	// KubeletAPI selects the kubelet API. Default (empty): the device-plugin API, without passing
	// -kubelet-api. KubeletAPIDRA passes -kubelet-api=dra and the flags a DRA driver on this node needs
	// (see StartPlugin) instead of the device-plugin directory, socket and resource names.
	KubeletAPI KubeletAPI
	// DriverName is the -dra-driver-name flag of a DRA plugin. Default: not passed, the plugin's own
	// default DRADriverName.
	DriverName string
	// Args are appended after the harness's flags (a repeated flag overrides the earlier one).
	Args []string
}

// Plugin is a running (or exited) device plugin process started by StartPlugin.
type Plugin struct {
	*Process
	// Node is the node whose kubelet the plugin serves.
	Node *Node
	// Binary is the plugin executable.
	Binary string
	// StatePath is the plugin's state file.
	StatePath string
	// AdminSocket is the plugin's admin API socket (dump, health).
	AdminSocket string
	// KubeletAPI is the kubelet API it serves (PluginOptions.KubeletAPI, defaulted).
	KubeletAPI KubeletAPI
	// DriverName is a DRA plugin's driver name (PluginOptions.DriverName, defaulted); empty for a
	// device plugin.
	DriverName string
}

// RegistrationSocket is where a DRA plugin's registration socket appears: <driver>-reg.sock in the
// node's PluginsRegistryDir (the kubeletplugin library's name for it). Empty for a device plugin.
func (p *Plugin) RegistrationSocket() string {
	if p.KubeletAPI != KubeletAPIDRA {
		return ""
	}
	return filepath.Join(p.Node.PluginsRegistryDir, p.DriverName+"-reg.sock")
}

// StartPlugin starts the plugin binary for this node, outside the node's mount namespace, with JSON
// logs, the state file and admin socket under the cluster's temp dir and the node's kubelet's real
// PodResources socket; the environment is the harness's minus VGPU_* variables. As a device plugin (the
// default) it gets -device-plugin-path=DevicePluginDir and the default resource and socket names. As a
// DRA driver (KubeletAPI: KubeletAPIDRA) it gets -kubelet-api=dra, -node-name=<node>, the cluster's
// admin -kubeconfig, -kubelet-registry-dir=PluginsRegistryDir, -kubelet-plugins-dir=PluginsDir and
// -cdi-spec-dir=CDISpecDir (which containerd 2 reads; see RuntimeContainerd2). It does not wait for
// the registration: use WaitPluginReady or Plugin.WaitLog. The cluster stops it on Stop.
func (n *Node) StartPlugin(ctx context.Context, opts PluginOptions) (*Plugin, error) {
	c := n.c
	c.mu.Lock()
	c.pluginStarts++
	num := c.pluginStarts
	c.mu.Unlock()
	if opts.StatePath == "" {
		opts.StatePath = filepath.Join(c.Dir, fmt.Sprintf("plugin-%d", num), "state.db")
	}
	argv, api, driver, err := n.pluginArgs(opts)
	if err != nil {
		return nil, fmt.Errorf("start plugin: %w", err)
	}
	if opts.AdminSocket == "" {
		opts.AdminSocket = filepath.Join(filepath.Dir(opts.StatePath), "admin.sock")
	}
	if err := mkdirFor(opts.StatePath); err != nil {
		return nil, err
	}
	p, err := c.reg.start(processSpec{
		name:    fmt.Sprintf("plugin %s (%s)", n.Name, api),
		argv:    argv,
		dir:     filepath.Dir(opts.StatePath),
		env:     pluginEnv(),
		logPath: c.logPath(fmt.Sprintf("plugin.%d", num)),
	})
	if err != nil {
		return nil, err
	}
	pl := &Plugin{Process: p, Node: n, Binary: opts.Binary, StatePath: opts.StatePath, AdminSocket: opts.AdminSocket, KubeletAPI: api, DriverName: driver}
	c.mu.Lock()
	c.plugins = append(c.plugins, pl)
	c.mu.Unlock()
	return pl, nil
}

// pluginArgs returns the command line StartPlugin runs for opts (StatePath set), the kubelet API it
// serves and, for a DRA plugin, its driver name.
func (n *Node) pluginArgs(opts PluginOptions) (argv []string, api KubeletAPI, driver string, err error) {
	if opts.Binary == "" {
		return nil, "", "", errors.New("no binary")
	}
	if opts.AdminSocket == "" {
		opts.AdminSocket = filepath.Join(filepath.Dir(opts.StatePath), "admin.sock")
	}
	argv = []string{opts.Binary}
	switch opts.KubeletAPI {
	case "", KubeletAPIDevicePlugin:
		if opts.DriverName != "" {
			return nil, "", "", fmt.Errorf("driver name %q for a device plugin: only with kubelet API %q", opts.DriverName, KubeletAPIDRA)
		}
		api = KubeletAPIDevicePlugin
		if opts.KubeletAPI != "" {
			argv = append(argv, "-kubelet-api="+string(opts.KubeletAPI))
		}
		argv = append(argv,
			"-device-plugin-path="+n.DevicePluginDir,
			"-socket-name="+PluginSocket,
			"-resource-name="+ResourceName,
		)
	case KubeletAPIDRA:
		api, driver = KubeletAPIDRA, DRADriverName
		argv = append(argv,
			"-kubelet-api="+string(KubeletAPIDRA),
			"-node-name="+n.Name,
			"-kubeconfig="+n.c.Kubeconfig,
			"-kubelet-registry-dir="+n.PluginsRegistryDir,
			"-kubelet-plugins-dir="+n.PluginsDir,
			"-cdi-spec-dir="+n.CDISpecDir,
		)
		if opts.DriverName != "" {
			driver = opts.DriverName
			argv = append(argv, "-dra-driver-name="+driver)
		}
	default:
		return nil, "", "", fmt.Errorf("kubelet API %q: want %q or %q", opts.KubeletAPI, KubeletAPIDevicePlugin, KubeletAPIDRA)
	}
	argv = append(argv,
		"-state="+opts.StatePath,
		"-admin-socket="+opts.AdminSocket,
		"-pod-resources-socket="+n.PodResourcesSocket,
		"-log-format=json",
		"-log-level=info",
	)
	switch {
	case opts.Devices < 0:
	case opts.Devices != 0:
		argv = append(argv, "-devices="+strconv.Itoa(opts.Devices))
	case opts.Topology == "":
		argv = append(argv, "-devices=4")
	}
	if opts.Topology != "" {
		argv = append(argv, "-topology="+opts.Topology)
	}
	return append(argv, opts.Args...), api, driver, nil
}

// pluginEnv is the harness's environment without VGPU_* variables: the plugin reads VGPU_<FLAG>
// twins of its flags, and its configuration must come from the harness's flags alone.
func pluginEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VGPU_") {
			env = append(env, kv)
		}
	}
	return env
}

// Terminate sends SIGTERM and waits (10 s at most) for the plugin to exit; it is an error if the plugin
// does not exit with code 0.
func (p *Plugin) Terminate() error {
	if err := p.Stop(10 * time.Second); err != nil {
		return err
	}
	if err := p.ExitErr(); err != nil {
		return fmt.Errorf("plugin exit on SIGTERM: %w", err)
	}
	return nil
}

// KillHard sends SIGKILL and waits for the plugin to be reaped.
func (p *Plugin) KillHard() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.Done()
}

// PluginLogLine is one JSON log line of the plugin.
type PluginLogLine map[string]any

// Message returns the line's "message" field.
func (l PluginLogLine) Message() string { s, _ := l["message"].(string); return s }

// Strings returns the field key as a list of strings (nil if absent or not a list of strings).
func (l PluginLogLine) Strings(key string) []string {
	v, ok := l[key].([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(v))
	for _, x := range v {
		s, ok := x.(string)
		if !ok {
			return nil
		}
		out = append(out, s)
	}
	return out
}

// LogLines returns the plugin's JSON log lines (lines that are not JSON objects are skipped).
func (p *Plugin) LogLines() ([]PluginLogLine, error) {
	lines, err := readLines(p.LogPath)
	if err != nil {
		return nil, err
	}
	var out []PluginLogLine
	for _, l := range lines {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m PluginLogLine
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// FindLog returns the plugin's log lines whose message equals msg.
func (p *Plugin) FindLog(msg string) ([]PluginLogLine, error) {
	lines, err := p.LogLines()
	if err != nil {
		return nil, err
	}
	var out []PluginLogLine
	for _, l := range lines {
		if l.Message() == msg {
			out = append(out, l)
		}
	}
	return out, nil
}

// WaitLog waits until the plugin has logged at least n lines with message msg and returns them.
func (p *Plugin) WaitLog(ctx context.Context, timeout time.Duration, msg string, n int) ([]PluginLogLine, error) {
	var found []PluginLogLine
	err := poll(ctx, timeout, 20*time.Millisecond, func() (bool, string, error) {
		var err error
		if found, err = p.FindLog(msg); err != nil {
			return false, "", err
		}
		if len(found) >= n {
			return true, "", nil
		}
		if p.Exited() {
			return false, "", fmt.Errorf("plugin exited (%v) after %d %q lines; log %s", p.ExitErr(), len(found), msg, p.LogPath)
		}
		return false, fmt.Sprintf("%d lines %q", len(found), msg), nil
	})
	return found, err
}

// AssignedPrefix starts the line the demo pod prints: "assigned virtual gpus: <VIRTUAL_GPU_IDS>".
const AssignedPrefix = "assigned virtual gpus: "

// AssignedIDs returns the ids of the first "assigned virtual gpus: a,b" line in a container log, in
// the order printed. A line with no ids gives an empty, non-nil slice.
func AssignedIDs(log string) ([]string, error) {
	for _, line := range strings.Split(log, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), strings.TrimSpace(AssignedPrefix))
		if !ok {
			continue
		}
		if rest = strings.TrimSpace(rest); rest == "" {
			return []string{}, nil
		}
		return strings.Split(rest, ","), nil
	}
	return nil, fmt.Errorf("no %q line in log %q", AssignedPrefix, log)
}

// WaitPluginReady waits until the plugin serves devices devices to its node's kubelet; it fails at once
// if the plugin process exits meanwhile. A device plugin is ready when its Node shows devices in both
// capacity and allocatable of ResourceName; a DRA plugin when the kubelet has registered it (see
// WaitDRAPluginRegistered) and its pool for the node (ResourceSlices) is complete with devices devices
// (see WaitResourcePool).
func (c *Cluster) WaitPluginReady(ctx context.Context, p *Plugin, timeout time.Duration, devices int64) (time.Time, error) {
	if p.KubeletAPI == KubeletAPIDRA {
		return c.waitDRAPluginReady(ctx, p, timeout, devices)
	}
	n := p.Node
	var seenAt time.Time
	err := poll(ctx, timeout, 50*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("plugin exited (%v); last log lines:\n%s", p.ExitErr(), p.Tail(10))
		}
		capacity, alloc, err := n.NodeResource(ctx, ResourceName)
		if err != nil {
			return false, err.Error(), nil
		}
		seenAt = time.Now()
		return capacity == devices && alloc == devices, fmt.Sprintf("%s capacity %d allocatable %d", ResourceName, capacity, alloc), nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("wait for the plugin's %d devices on node %s (plugin log %s): %w", devices, n.Name, p.LogPath, err)
	}
	return seenAt, nil
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	lines, _ := readLines(p.LogPath)
	return lastLines(strings.Join(lines, "\n"), n)
}
