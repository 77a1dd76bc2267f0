package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Runtime is the container runtime of a node.
type Runtime string

// The runtimes a node can run on.
const (
	// RuntimeContainerd is Debian's containerd 1.6 (package containerd) with runc: the default (the zero
	// Runtime means it). It has no CDI support.
	RuntimeContainerd Runtime = "containerd"
	// RuntimeContainerd2 is containerd Containerd2Version, built from the Go module proxy
	// (EnsureContainerd2), with Debian's runc, its config in format version 3 and CDI enabled: it reads
	// CDI specs from /var/run/cdi in the node's mount namespace, which is the node's CDISpecDir.
	RuntimeContainerd2 Runtime = "containerd2"
)

// Containerd2Version is the containerd 2 release RuntimeContainerd2 nodes run
// (github.com/containerd/containerd/v2 on the Go module proxy). Its CRI plugin injects the CDI devices
// the kubelet passes from a device plugin's Allocate answer.
const Containerd2Version = "v2.2.9"

// Containerd2Binaries are the containerd 2 executables a RuntimeContainerd2 node runs.
type Containerd2Binaries struct {
	// Version is Containerd2Version.
	Version string
	// Containerd is the daemon, Shim the runc shim (the runtime's runtime_path), Ctr its client.
	Containerd, Shim, Ctr string
	// BuildTaken is how long building took: zero when they came from the cache.
	BuildTaken time.Duration
}

// EnsureContainerd2 returns containerd, containerd-shim-runc-v2 and ctr of Containerd2Version, building
// them (all three, with one `go install pkg@version` that uses containerd's own go.mod, so this
// module's Kubernetes pins do not matter) into <cacheDir>/bin/containerd-<version>-<go version>-<arch>/
// unless all are there. They are static (CGO_ENABLED=0; the btrfs, devmapper and zfs snapshotters left
// out) and report Containerd2Version.
func EnsureContainerd2(ctx context.Context, cacheDir string, log Logger) (Containerd2Binaries, error) {
	binDir, err := cacheBinDir(ctx, cacheDir, "containerd-"+Containerd2Version)
	if err != nil {
		return Containerd2Binaries{}, err
	}
	bins := Containerd2Binaries{
		Version:    Containerd2Version,
		Containerd: filepath.Join(binDir, "containerd"),
		Shim:       filepath.Join(binDir, "containerd-shim-runc-v2"),
		Ctr:        filepath.Join(binDir, "ctr"),
	}
	missing := false
	for _, p := range []string{bins.Containerd, bins.Shim, bins.Ctr} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
			missing = true
		}
	}
	if !missing {
		return bins, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return Containerd2Binaries{}, fmt.Errorf("create %s: %w", binDir, err)
	}
	tmp, err := os.MkdirTemp(binDir, ".build-")
	if err != nil {
		return Containerd2Binaries{}, err
	}
	defer os.RemoveAll(tmp)
	const mod = "github.com/containerd/containerd/v2"
	log.Logf("building containerd %s (containerd, containerd-shim-runc-v2, ctr) into %s (cold: a few minutes)", Containerd2Version, binDir)
	start := time.Now()
	args := []string{"install", "-trimpath", "-tags", "no_btrfs,no_devmapper,no_zfs",
		"-ldflags", "-s -w -X " + mod + "/version.Version=" + Containerd2Version}
	for _, cmd := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		args = append(args, mod+"/cmd/"+cmd+"@"+Containerd2Version)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = tmp // outside any module: pkg@version builds with containerd's go.mod
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Containerd2Binaries{}, fmt.Errorf("build containerd %s: %w: %s", Containerd2Version, err, lastLines(string(out), 30))
	}
	for _, p := range []string{bins.Containerd, bins.Shim, bins.Ctr} {
		if err := os.Rename(filepath.Join(tmp, filepath.Base(p)), p); err != nil {
			return Containerd2Binaries{}, fmt.Errorf("install %s: %w", p, err)
		}
	}
	bins.BuildTaken = time.Since(start)
	log.Logf("built containerd %s in %s", Containerd2Version, bins.BuildTaken.Round(time.Second))
	return bins, nil
}

// containerd2Config is the node's containerd 2 configuration (format version 3): every path under the
// node's dir, no imports of the host's /etc/containerd/conf.d, the overlayfs snapshotter, the local
// pause image pinned as the sandbox image, runc through the built shim with cgroupfs, CDI on with the
// spec dir /var/run/cdi of the node's mount namespace (bound from CDISpecDir), NRI off.
func (n *Node) containerd2Config(dir, cniConf string) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
imports = []
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %[5]q

  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = %[6]q

  [plugins."io.containerd.cri.v1.runtime"]
    # Without CAP_SYS_RESOURCE every sandbox fails with "can't get final child's PID from pipe: EOF".
    restrict_oom_score_adj = true
    enable_cdi = true
    cdi_spec_dirs = [%[10]q]
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = %[11]q
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = [%[7]q]
      conf_dir = %[8]q

  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "%[9]d"

  [plugins."io.containerd.nri.v1.nri"]
    disable = true
`, filepath.Join(dir, "root"), n.containerdStateDir(), n.containerdSock, n.containerdSock+".ttrpc",
		filepath.Join(dir, "opt"), PauseImage, filepath.Join(dir, "cni", "bin"), cniConf, n.ports.containerdStream,
		CDISpecDirInNode, n.containerd2.Shim)
}

// AddNode starts one more node with options o — its mount namespace, containerd (for
// RuntimeContainerd2 built first if the cache lacks it), local images and kubelet — waits until it is
// Ready without the node.kubernetes.io/not-ready taint and appends it to Nodes. A default name is
// DefaultNodeName-<Index>; indexes continue the cluster's numbering and are never reused, so the node's
// Dir is new. Call it from one goroutine, not while others use Nodes. On error whatever was started
// for the node is stopped again.
func (c *Cluster) AddNode(ctx context.Context, o NodeOptions) (*Node, error) {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil, errors.New("add node: the cluster is stopped")
	}
	index := c.nodeSeq
	c.nodeSeq++
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		seen[n.Name] = true
	}
	needBuild := o.Runtime == RuntimeContainerd2 && c.containerd2.Containerd == ""
	c.mu.Unlock()
	if err := defaultNode(&o, index, seen); err != nil {
		return nil, fmt.Errorf("add node: %w", err)
	}
	if needBuild {
		bins, err := EnsureContainerd2(ctx, c.cacheDir, c.log)
		if err != nil {
			return nil, fmt.Errorf("add node %s: %w", o.Name, err)
		}
		c.mu.Lock()
		c.containerd2 = bins
		c.mu.Unlock()
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, fmt.Errorf("add node %s: %w", o.Name, err)
	}
	c.mu.Lock()
	n := newNode(c, index, o)
	c.mu.Unlock()
	n.ports.kubelet, n.ports.kubeletHealthz, n.ports.containerdStream = ports[0], ports[1], ports[2]
	start := time.Now()
	var ready time.Duration
	err = n.start(ctx)
	if err == nil {
		ready = time.Since(start)
		err = poll(ctx, time.Minute, 100*time.Millisecond, func() (bool, string, error) {
			node, err := n.Get(ctx)
			if err != nil {
				return false, err.Error(), nil
			}
			for _, t := range node.Spec.Taints {
				if t.Key == corev1.TaintNodeNotReady {
					return false, "taint " + t.ToString(), nil
				}
			}
			return true, "", nil
		})
	}
	if err != nil {
		c.log.Logf("add node %s failed: %v", n.Name, err)
		if serr := n.shutdown(); serr != nil {
			c.log.Logf("stopping node %s: %v", n.Name, serr)
		}
		c.deleteNodeObject(n.Name)
		return nil, fmt.Errorf("add node %s: %w", n.Name, err)
	}
	c.mu.Lock()
	c.Nodes = append(c.Nodes, n)
	c.mu.Unlock()
	c.log.Logf("node %s (%s) added: Ready in %s, without the not-ready taint in %s", n.Name, n.Runtime,
		ready.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return n, nil
}

// RemoveNode takes node n out of the cluster: it stops n's kubelet, removes its pod sandboxes (which
// kills the pods' containers), stops its containerd, kills every process still naming n's directory
// (shims and containers, and a plugin process still pointed at the node), ends its mount namespace,
// deletes its Node object and drops it from Nodes. Its directory (logs) stays until Stop. The first
// node, which the Cluster embeds, cannot be removed. Call it from one goroutine, not while others use
// Nodes.
func (c *Cluster) RemoveNode(ctx context.Context, n *Node) error {
	c.mu.Lock()
	i := slices.Index(c.Nodes, n)
	switch {
	case i < 0:
		c.mu.Unlock()
		return fmt.Errorf("remove node %s: not a node of this cluster", n.Name)
	case i == 0:
		c.mu.Unlock()
		return fmt.Errorf("remove node %s: the first node cannot be removed", n.Name)
	}
	c.Nodes = slices.Delete(c.Nodes, i, i+1)
	c.mu.Unlock()
	err := n.shutdown()
	if derr := c.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
		err = errors.Join(err, fmt.Errorf("delete Node %s: %w", n.Name, derr))
	}
	if err != nil {
		return fmt.Errorf("remove node %s: %w", n.Name, err)
	}
	return nil
}

// shutdown stops everything of the node: kubelet, pods, containerd, leftover processes naming its
// directory, its containers' cgroups and the mount namespace holder.
func (n *Node) shutdown() error {
	var errs []error
	if err := n.StopKubelet(); err != nil && !errors.Is(err, ErrStopTimeout) {
		errs = append(errs, err)
	}
	n.stopContainerd()
	if k := killProcessesNaming(n.Dir + "/"); k > 0 {
		n.c.log.Logf("node %s: killed %d leftover processes naming %s", n.Name, k, n.Dir)
	}
	removeContainerCgroups(n.containerdStateDir())
	if n.holder != nil {
		n.holder.Kill()
	}
	return errors.Join(errs...)
}

// deleteNodeObject deletes the Node called name, if the API server has it (a failed AddNode).
func (c *Cluster) deleteNodeObject(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		c.log.Logf("delete Node %s: %v", name, err)
	}
}
