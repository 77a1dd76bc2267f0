package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeletSocket is the name of the kubelet's Registration socket in the device-plugin directory.
const KubeletSocket = "kubelet.sock"

func (n *Node) writeKubeletConfig() error {
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The API server reaches the kubelet (logs, exec) at the node's InternalIP, which must not be loopback.
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
staticPodPath: %s
podLogsDir: %s
volumePluginDir: %s
# cgroup v1 host without systemd, root without CAP_SYS_RESOURCE.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
# Fast feedback: node status (capacity/allocatable) computed every 200 ms (posted only on change), so
# a health change reaches the Node object well within the 1 s the plugin's health issue allows; static
# pods checked every second.
nodeStatusUpdateFrequency: 200ms
fileCheckFrequency: 1s
syncFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
serializeImagePulls: false
# Leave the host's iptables alone (the harness adds only its own DNAT chain): no KUBE-FIREWALL,
# KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY chains.
makeIPTablesUtilChains: false
`, n.c.hostIP, n.ports.kubelet, n.ports.kubeletHealthz, n.c.kubeletCA, n.containerdSock,
		n.StaticPodDir(), filepath.Join(n.Dir, "pod-logs"), filepath.Join(n.Dir, "volume-plugins"))
	if len(n.c.FeatureGates) > 0 {
		config += "featureGates:\n"
		for _, g := range strings.Split(featureGatesFlag(n.c.FeatureGates), ",") {
			name, val, _ := strings.Cut(g, "=")
			config += fmt.Sprintf("  %s: %s\n", name, val)
		}
	}
	for _, d := range []string{"static-pods", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(n.kubeletConfig, []byte(config), 0o644); err != nil {
		return fmt.Errorf("write kubelet config: %w", err)
	}
	return nil
}

// StaticPodDir is the node's kubelet's staticPodPath.
func (n *Node) StaticPodDir() string { return filepath.Join(n.Dir, "static-pods") }

func (n *Node) startKubeletAndWait(ctx context.Context) error {
	if err := n.writeKubeletConfig(); err != nil {
		return err
	}
	if err := n.StartKubelet(ctx); err != nil {
		return err
	}
	return poll(ctx, 2*time.Minute, 200*time.Millisecond, func() (bool, string, error) {
		if k := n.Kubelet(); k == nil || k.Exited() {
			return false, "", errors.New("kubelet exited")
		}
		node, err := n.c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		ok, why := nodeReady(node)
		return ok, why, nil
	})
}

// Kubelet returns the node's current kubelet process (nil if it is stopped).
func (n *Node) Kubelet() *Process {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.kubelet
}

// StartKubelet starts the node's kubelet in the node's mount namespace and its own empty working
// directory (the kubelet may delete files in its working directory) and waits until its healthz
// answers. Its log goes to logs/node-<index>.kubelet.<n>.log, n counting starts from 1.
func (n *Node) StartKubelet(ctx context.Context) error {
	n.c.mu.Lock()
	if n.kubelet != nil && !n.kubelet.Exited() {
		n.c.mu.Unlock()
		return fmt.Errorf("node %s: kubelet already running", n.Name)
	}
	n.kubeletStarts++
	starts := n.kubeletStarts
	n.c.mu.Unlock()
	argv := []string{n.c.Binaries.Kubelet,
		"--config=" + n.kubeletConfig,
		"--kubeconfig=" + n.c.Kubeconfig,
		"--root-dir=" + n.KubeletRootDir,
		"--cert-dir=" + filepath.Join(n.KubeletRootDir, "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.c.hostIP,
		"-v=2"}
	if len(n.Labels) > 0 {
		var labels []string
		for k, v := range n.Labels {
			labels = append(labels, k+"="+v)
		}
		slices.Sort(labels)
		argv = append(argv, "--node-labels="+strings.Join(labels, ","))
	}
	p, err := n.c.reg.start(processSpec{
		name:    "kubelet " + n.Name,
		argv:    n.inNamespace(n.kubeletWorkDir, argv...),
		dir:     n.kubeletWorkDir,
		logPath: n.logPath(fmt.Sprintf("kubelet.%d", starts)),
	})
	if err != nil {
		return err
	}
	n.c.mu.Lock()
	n.kubelet = p
	n.c.mu.Unlock()
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.ports.kubeletHealthz)
	return poll(ctx, 60*time.Second, 50*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("kubelet exited: %w (log %s)", p.ExitErr(), p.LogPath)
		}
		resp, err := httpClient.Get(healthz)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
}

// StopKubelet stops the node's kubelet with SIGTERM (SIGKILL after 15 s). Its containers keep running.
func (n *Node) StopKubelet() error {
	n.c.mu.Lock()
	k := n.kubelet
	n.kubelet = nil
	n.c.mu.Unlock()
	if k == nil {
		return nil
	}
	return k.Stop(15 * time.Second)
}

// KubeletRestart describes one kubelet restart.
type KubeletRestart struct {
	// Stopped is when the old kubelet had exited.
	Stopped time.Time
	// Started is when the new kubelet process was started.
	Started time.Time
	// SocketCreated is the modification time of the new kubelet's Registration socket (when it was
	// bound).
	SocketCreated time.Time
	// LogPath is the new kubelet's log file.
	LogPath string
}

// RestartKubelet stops the node's kubelet, starts a new one and waits until the new kubelet.sock
// exists in DevicePluginDir (at most 30 s).
func (n *Node) RestartKubelet(ctx context.Context) (KubeletRestart, error) {
	var r KubeletRestart
	sock := filepath.Join(n.DevicePluginDir, KubeletSocket)
	if err := n.StopKubelet(); err != nil {
		return r, err
	}
	r.Stopped = time.Now()
	if err := n.StartKubelet(ctx); err != nil {
		return r, err
	}
	k := n.Kubelet()
	r.Started, r.LogPath = k.Started, k.LogPath
	err := poll(ctx, 30*time.Second, 10*time.Millisecond, func() (bool, string, error) {
		fi, err := os.Stat(sock)
		if err != nil {
			return false, err.Error(), nil
		}
		// Not the inode: the filesystem may reuse the old socket's inode number.
		if fi.ModTime().Before(r.Stopped) {
			return false, "old socket", nil
		}
		r.SocketCreated = fi.ModTime()
		return true, "", nil
	})
	return r, err
}

// KubeletLogLine is one klog line of the kubelet's log.
type KubeletLogLine struct {
	Time time.Time
	Text string
}

var klogHeader = regexp.MustCompile(`^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6})\s`)

// FindKubeletLog returns the klog lines of the node's current kubelet's log that contain substr.
func (n *Node) FindKubeletLog(substr string) ([]KubeletLogLine, error) {
	k := n.Kubelet()
	if k == nil {
		return nil, fmt.Errorf("node %s: kubelet not running", n.Name)
	}
	return findKlog(k.LogPath, substr)
}

func findKlog(path, substr string) ([]KubeletLogLine, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	var out []KubeletLogLine
	now := time.Now()
	for _, l := range lines {
		if !strings.Contains(l, substr) {
			continue
		}
		m := klogHeader.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var v [6]int
		for i := range v {
			v[i], _ = strconv.Atoi(m[i+1])
		}
		t := time.Date(now.Year(), time.Month(v[0]), v[1], v[2], v[3], v[4], v[5]*1000, time.Local)
		out = append(out, KubeletLogLine{Time: t, Text: l})
	}
	return out, nil
}

// WaitKubeletLog waits until the node's current kubelet's log has a line containing substr stamped at
// or after since, and returns the first such line.
func (n *Node) WaitKubeletLog(ctx context.Context, timeout time.Duration, substr string, since time.Time) (KubeletLogLine, error) {
	var found KubeletLogLine
	since = since.Truncate(time.Microsecond) // klog's resolution
	err := poll(ctx, timeout, 20*time.Millisecond, func() (bool, string, error) {
		lines, err := n.FindKubeletLog(substr)
		if err != nil {
			return false, "", err
		}
		for _, l := range lines {
			if !l.Time.Before(since) {
				found = l
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("no line with %q since %s", substr, since.Format("15:04:05.000000")), nil
	})
	return found, err
}
