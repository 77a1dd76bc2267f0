package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeletSocket is the name of the kubelet's Registration socket in the device-plugin directory.
const KubeletSocket = "kubelet.sock"

func (c *Cluster) writeKubeletConfig() error {
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
`, c.nodeIP, c.ports.kubelet, c.ports.kubeletHealthz, c.kubeletCA, c.containerdSock,
		filepath.Join(c.Dir, "static-pods"), filepath.Join(c.Dir, "pod-logs"), filepath.Join(c.Dir, "volume-plugins"))
	for _, d := range []string{"static-pods", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(c.kubeletConfig, []byte(config), 0o644); err != nil {
		return fmt.Errorf("write kubelet config: %w", err)
	}
	return nil
}

// StaticPodDir is the kubelet's staticPodPath.
func (c *Cluster) StaticPodDir() string { return filepath.Join(c.Dir, "static-pods") }

func (c *Cluster) startKubeletAndWait(ctx context.Context) error {
	if err := c.writeKubeletConfig(); err != nil {
		return err
	}
	if err := c.StartKubelet(ctx); err != nil {
		return err
	}
	return poll(ctx, 2*time.Minute, 200*time.Millisecond, func() (bool, string, error) {
		if k := c.Kubelet(); k == nil || k.Exited() {
			return false, "", errors.New("kubelet exited")
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		ok, why := nodeReady(node)
		return ok, why, nil
	})
}

// Kubelet returns the current kubelet process (nil if it is stopped).
func (c *Cluster) Kubelet() *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kubelet
}

// StartKubelet starts the kubelet in the cluster's mount namespace and its own empty working directory
// (the kubelet may delete files in its working directory) and waits until its healthz answers. Its log
// goes to logs/kubelet.<n>.log, n counting starts from 1.
func (c *Cluster) StartKubelet(ctx context.Context) error {
	c.mu.Lock()
	if c.kubelet != nil && !c.kubelet.Exited() {
		c.mu.Unlock()
		return errors.New("kubelet already running")
	}
	c.kubeletStarts++
	n := c.kubeletStarts
	c.mu.Unlock()
	p, err := c.reg.start(processSpec{
		name: "kubelet",
		argv: c.inNamespace(c.kubeletWorkDir, c.Binaries.Kubelet,
			"--config="+c.kubeletConfig,
			"--kubeconfig="+c.Kubeconfig,
			"--root-dir="+c.KubeletRootDir,
			"--cert-dir="+filepath.Join(c.KubeletRootDir, "pki"),
			"--hostname-override="+c.NodeName,
			"--node-ip="+c.nodeIP,
			"-v=2"),
		dir:     c.kubeletWorkDir,
		logPath: c.logPath(fmt.Sprintf("kubelet.%d", n)),
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.kubelet = p
	c.mu.Unlock()
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports.kubeletHealthz)
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

// StopKubelet stops the kubelet with SIGTERM (SIGKILL after 15 s). Its containers keep running.
func (c *Cluster) StopKubelet() error {
	c.mu.Lock()
	k := c.kubelet
	c.kubelet = nil
	c.mu.Unlock()
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

// RestartKubelet stops the kubelet, starts a new one and waits until the new kubelet.sock exists in
// DevicePluginDir (at most 30 s).
func (c *Cluster) RestartKubelet(ctx context.Context) (KubeletRestart, error) {
	var r KubeletRestart
	sock := filepath.Join(c.DevicePluginDir, KubeletSocket)
	if err := c.StopKubelet(); err != nil {
		return r, err
	}
	r.Stopped = time.Now()
	if err := c.StartKubelet(ctx); err != nil {
		return r, err
	}
	k := c.Kubelet()
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

// FindKubeletLog returns the klog lines of the current kubelet's log that contain substr.
func (c *Cluster) FindKubeletLog(substr string) ([]KubeletLogLine, error) {
	k := c.Kubelet()
	if k == nil {
		return nil, errors.New("kubelet not running")
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

// WaitKubeletLog waits until the current kubelet's log has a line containing substr stamped at or
// after since, and returns the first such line.
func (c *Cluster) WaitKubeletLog(ctx context.Context, timeout time.Duration, substr string, since time.Time) (KubeletLogLine, error) {
	var found KubeletLogLine
	since = since.Truncate(time.Microsecond) // klog's resolution
	err := poll(ctx, timeout, 20*time.Millisecond, func() (bool, string, error) {
		lines, err := c.FindKubeletLog(substr)
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
