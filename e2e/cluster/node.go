package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/validation"
	criv1 "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultNodeName is the name of the first node when NodeOptions.Name is empty; node i > 0 is called
// DefaultNodeName-<i>.
const DefaultNodeName = "vgpu-e2e-node"

// NodeOptions configure one node of the cluster. The zero value is a node with a default name.
type NodeOptions struct {
	// Name is the Node's name: the kubelet's --hostname-override and so also its kubernetes.io/hostname
	// label. Default: DefaultNodeName for the first node, DefaultNodeName-<i> for node i > 0.
	Name string
	// Labels are set on the Node when the kubelet registers it (--node-labels). The kubelet refuses
	// labels under kubernetes.io and k8s.io other than its own few; set those with SetNodeLabel.
	Labels map[string]string
	// Runtime is the node's container runtime. Default (empty): RuntimeContainerd, Debian's
	// containerd 1.6. RuntimeContainerd2 runs containerd 2 with CDI (built on first use).
	Runtime Runtime
}

// CDISpecDirInNode is where a node's CDISpecDir appears in its mount namespace: the CDI spec dir
// (cdi_spec_dirs) of a RuntimeContainerd2 node's containerd, and the path of the DaemonSet's hostPath
// for CDI specs (the CDI library's dynamic spec dir).
const CDISpecDirInNode = "/var/run/cdi"

// Where a node's kubelet plugin directories appear in its mount namespace (bind mounts of the
// kubelet's real ones, Node.PluginsRegistryDir and Node.PluginsDir): the default paths a containerized
// DRA driver's hostPaths name (its -kubelet-registry-dir and -kubelet-plugins-dir defaults).
const (
	PluginsRegistryDirInNode = "/var/lib/kubelet/plugins_registry"
	PluginsDirInNode         = "/var/lib/kubelet/plugins"
)

// Node is one node of the cluster: a kubelet and its own containerd in a private mount namespace of
// their own, with their own directories and ports. All nodes share the host's network namespace (pods
// use hostNetwork), the API server and etcd. A Node belongs to its Cluster and is safe for concurrent
// use like it.
type Node struct {
	// Name is the Node's name (the kubelet's --hostname-override).
	Name string
	// Index is the node's position in Cluster.Nodes.
	Index int
	// Labels are the labels the kubelet registered the Node with (NodeOptions.Labels).
	Labels map[string]string
	// Dir holds the node's directories and configs: <cluster dir>/node-<index>.
	Dir string
	// DevicePluginDir is bind-mounted on /var/lib/kubelet/device-plugins in the node's mount namespace:
	// device plugins outside that namespace put their sockets here.
	DevicePluginDir string
	// KubeletRootDir is the kubelet's --root-dir (the same path inside and outside the mount namespace).
	KubeletRootDir string
	// PodResourcesSocket is the kubelet's PodResources API socket, <KubeletRootDir>/pod-resources/
	// kubelet.sock. Its directory is also bind-mounted on /var/lib/kubelet/pod-resources in the mount
	// namespace, where a containerized plugin's hostPath finds it.
	PodResourcesSocket string
	// PluginsRegistryDir is the kubelet's plugin registration directory, <KubeletRootDir>/plugins_registry
	// (the same path inside and outside the mount namespace): the kubelet's plugin watcher watches it and
	// dials the socket path a registration socket here reports. A DRA driver outside the namespace puts
	// its <driver>-reg.sock here (-kubelet-registry-dir). It exists before the kubelet starts, and is also
	// bind-mounted on PluginsRegistryDirInNode in the mount namespace.
	PluginsRegistryDir string
	// PluginsDir is the kubelet's plugins directory, <KubeletRootDir>/plugins: a DRA driver's socket
	// directory is <PluginsDir>/<driver name>, which the driver creates itself (-kubelet-plugins-dir). It
	// exists before the kubelet starts, and is also bind-mounted on PluginsDirInNode in the mount
	// namespace.
	PluginsDir string
	// VirtualGPUDir is bind-mounted on /var/lib/virtual-gpu in the mount namespace: the host side of the
	// DaemonSet's state hostPath on this node.
	VirtualGPUDir string
	// CDISpecDir is bind-mounted on CDISpecDirInNode (/var/run/cdi) in the mount namespace: a plugin
	// outside the namespace writes its CDI spec here, and a RuntimeContainerd2 node's containerd reads it
	// there. (Containerd 1.6 nodes have the dir too but ignore it.)
	CDISpecDir string
	// Runtime is the node's container runtime (NodeOptions.Runtime, defaulted).
	Runtime Runtime

	c              *Cluster
	containerd2    Containerd2Binaries // the cluster's, for a RuntimeContainerd2 node
	containerdSock string
	kubeletConfig  string
	kubeletWorkDir string
	ports          struct{ kubelet, kubeletHealthz, containerdStream int }
	holder         *Process // owns the node's private mount namespace
	containerd     *Process
	kubelet        *Process // guarded by c.mu
	kubeletStarts  int      // guarded by c.mu
}

// defaultNodes fills in default names and runtimes and checks that the names are distinct DNS
// subdomains, the labels valid and the runtimes known.
func defaultNodes(opts []NodeOptions) ([]NodeOptions, error) {
	if len(opts) == 0 {
		opts = []NodeOptions{{}}
	}
	opts = slices.Clone(opts)
	seen := map[string]bool{}
	for i := range opts {
		if err := defaultNode(&opts[i], i, seen); err != nil {
			return nil, err
		}
	}
	return opts, nil
}

// defaultNode fills in the default name (by index i) and runtime of o and checks it; seen holds the
// names already taken, and gets o's.
func defaultNode(o *NodeOptions, i int, seen map[string]bool) error {
	if o.Name == "" {
		o.Name = DefaultNodeName
		if i > 0 {
			o.Name = fmt.Sprintf("%s-%d", DefaultNodeName, i)
		}
	}
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		return fmt.Errorf("node %d: name %q: %s", i, o.Name, strings.Join(errs, "; "))
	}
	if seen[o.Name] {
		return fmt.Errorf("node %d: name %q used twice", i, o.Name)
	}
	seen[o.Name] = true
	for k, v := range o.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("node %s: label key %q: %s", o.Name, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("node %s: label %s value %q: %s", o.Name, k, v, strings.Join(errs, "; "))
		}
	}
	switch o.Runtime {
	case "":
		o.Runtime = RuntimeContainerd
	case RuntimeContainerd, RuntimeContainerd2:
	default:
		return fmt.Errorf("node %s: runtime %q: want %q or %q", o.Name, o.Runtime, RuntimeContainerd, RuntimeContainerd2)
	}
	return nil
}

func newNode(c *Cluster, i int, o NodeOptions) *Node {
	dir := filepath.Join(c.Dir, fmt.Sprintf("node-%d", i))
	return &Node{
		Name:               o.Name,
		Index:              i,
		Labels:             o.Labels,
		Dir:                dir,
		DevicePluginDir:    filepath.Join(dir, "device-plugins"),
		KubeletRootDir:     filepath.Join(dir, "kubelet"),
		PodResourcesSocket: filepath.Join(dir, "kubelet", "pod-resources", "kubelet.sock"),
		PluginsRegistryDir: filepath.Join(dir, "kubelet", "plugins_registry"),
		PluginsDir:         filepath.Join(dir, "kubelet", "plugins"),
		VirtualGPUDir:      filepath.Join(dir, "virtual-gpu"),
		CDISpecDir:         filepath.Join(dir, "cdi"),
		Runtime:            o.Runtime,
		c:                  c,
		containerd2:        c.containerd2,
		containerdSock:     filepath.Join(dir, "containerd", "containerd.sock"),
		kubeletConfig:      filepath.Join(dir, "kubelet-config.yaml"),
		kubeletWorkDir:     filepath.Join(dir, "kubelet-wd"),
	}
}

// logName names a log file of this node's process: "node-<index>.<what>".
func (n *Node) logPath(what string) string {
	return n.c.logPath(fmt.Sprintf("node-%d.%s", n.Index, what))
}

// start brings the node up: mount namespace, containerd, local images, kubelet, and waits until the
// Node is Ready.
func (n *Node) start(ctx context.Context) error {
	for _, d := range []string{n.DevicePluginDir, n.KubeletRootDir, filepath.Dir(n.PodResourcesSocket), n.PluginsRegistryDir, n.PluginsDir, n.VirtualGPUDir, n.CDISpecDir, n.kubeletWorkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	for _, s := range []struct {
		name string
		fn   func(context.Context) error
	}{
		{"mount namespace", n.startNamespace},
		{"containerd", n.startContainerd},
		{"images", n.importImages},
		{"kubelet", n.startKubeletAndWait},
	} {
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("start %s: %w", s.name, err)
		}
	}
	return nil
}

// startNamespace starts the process that holds the node's private mount namespace and mounts, inside
// it, overlays on /var/lib, /var/log and /run (upper layers in the node's dir), and binds
// DevicePluginDir on /var/lib/kubelet/device-plugins (hard-coded in the kubelet), the kubelet's
// PodResources directory on /var/lib/kubelet/pod-resources, its plugin registry and plugins dirs on
// /var/lib/kubelet/plugins_registry and /var/lib/kubelet/plugins, VirtualGPUDir on /var/lib/virtual-gpu
// and CDISpecDir on /var/run/cdi (the DaemonSet's hostPaths, which containerd resolves in this namespace;
// /var/run is /run's symbolic link, so the last one lands in the /run overlay).
func (n *Node) startNamespace(ctx context.Context) error {
	p, err := n.c.reg.start(processSpec{
		name:    "mount-namespace " + n.Name,
		argv:    []string{"unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity"},
		dir:     n.Dir,
		logPath: n.logPath("mount-namespace"),
	})
	if err != nil {
		return err
	}
	n.holder = p
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read own mount namespace: %w", err)
	}
	// Never mount anything before the holder is really in a namespace of its own.
	err = poll(ctx, 10*time.Second, 5*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("unshare exited: %w", p.ExitErr())
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p.PID()))
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID()))
		return err == nil && ns != hostNS && filepath.Base(exe) == "sleep", "holder namespace " + ns, nil
	})
	if err != nil {
		return err
	}
	var script strings.Builder
	fmt.Fprintf(&script, "set -eu\n[ \"$(readlink /proc/self/ns/mnt)\" != %q ] || { echo 'in the host mount namespace: refusing to mount'; exit 1; }\n", hostNS)
	for _, d := range []string{"/var/lib", "/var/log", "/run"} {
		base := filepath.Join(n.Dir, "ns", strings.ReplaceAll(strings.TrimPrefix(d, "/"), "/", "-"))
		upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
		if err := os.MkdirAll(upper, 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(work, 0o755); err != nil {
			return err
		}
		fmt.Fprintf(&script, "mount -t overlay overlay -o lowerdir=%s,upperdir=%s,workdir=%s %s\n", d, upper, work, d)
	}
	for _, b := range []struct{ src, dst string }{
		{n.DevicePluginDir, "/var/lib/kubelet/device-plugins"},
		{filepath.Dir(n.PodResourcesSocket), "/var/lib/kubelet/pod-resources"},
		{n.PluginsRegistryDir, PluginsRegistryDirInNode},
		{n.PluginsDir, PluginsDirInNode},
		{n.VirtualGPUDir, "/var/lib/virtual-gpu"},
		{n.CDISpecDir, CDISpecDirInNode},
	} {
		fmt.Fprintf(&script, "mkdir -p %[2]s\nmount --bind %[1]s %[2]s\n", b.src, b.dst)
	}
	if out, err := run(n.Dir, nil, "nsenter", "-t", strconv.Itoa(p.PID()), "-m", "--", "sh", "-c", script.String()); err != nil {
		return fmt.Errorf("mount in namespace: %w: %s", err, out)
	}
	return nil
}

// inNamespace prefixes argv so that it runs in the node's mount namespace with working dir wd.
func (n *Node) inNamespace(wd string, argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(n.holder.PID()), "-m", "--wd=" + wd, "--"}, argv...)
}

func (n *Node) containerdStateDir() string { return filepath.Join(n.Dir, "containerd", "state") }

func (n *Node) startContainerd(ctx context.Context) error {
	dir := filepath.Join(n.Dir, "containerd")
	cniConf := filepath.Join(dir, "cni", "conf")
	for _, d := range []string{dir, cniConf, filepath.Join(dir, "cni", "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Pods use hostNetwork, so no CNI plugin ever runs; this config only makes the CRI report the
	// network as ready, so the Node becomes Ready.
	if err := os.WriteFile(filepath.Join(cniConf, "10-vgpu-e2e.conflist"), []byte(`{"cniVersion":"0.4.0","name":"vgpu-e2e-host-network-only","plugins":[{"type":"loopback"}]}`), 0o644); err != nil {
		return err
	}
	containerd, config := "containerd", n.containerd16Config(dir, cniConf)
	if n.Runtime == RuntimeContainerd2 {
		containerd, config = n.containerd2.Containerd, n.containerd2Config(dir, cniConf)
	}
	configFile := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return err
	}
	p, err := n.c.reg.start(processSpec{
		name:    "containerd " + n.Name,
		argv:    n.inNamespace(dir, containerd, "--config", configFile),
		dir:     dir,
		logPath: n.logPath("containerd"),
	})
	if err != nil {
		return err
	}
	n.containerd = p
	return poll(ctx, 30*time.Second, 50*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("containerd exited: %w", p.ExitErr())
		}
		out, err := run(dir, nil, n.ctr(), "--address", n.containerdSock, "version")
		return err == nil, out, nil
	})
}

// ctr returns the containerd client matching the node's runtime.
func (n *Node) ctr() string {
	if n.Runtime == RuntimeContainerd2 {
		return n.containerd2.Ctr
	}
	return "ctr"
}

// containerd16Config is the node's config for Debian's containerd 1.6 (format version 2).
func (n *Node) containerd16Config(dir, cniConf string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # Without CAP_SYS_RESOURCE every sandbox fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "%[9]d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
`, filepath.Join(dir, "root"), n.containerdStateDir(), n.containerdSock, n.containerdSock+".ttrpc",
		filepath.Join(dir, "opt"), PauseImage, filepath.Join(dir, "cni", "bin"), cniConf, n.ports.containerdStream)
}

// stopContainerd removes every pod sandbox (which kills the pods' containers) and stops containerd.
func (n *Node) stopContainerd() {
	if n.containerd == nil || n.containerd.Exited() {
		return
	}
	if err := n.removeAllSandboxes(); err != nil {
		n.c.log.Logf("node %s: removing pod sandboxes: %v", n.Name, err)
	}
	_ = n.containerd.Stop(15 * time.Second)
}

// removeAllSandboxes stops and removes every pod sandbox through the CRI, which kills the pods'
// containers.
func (n *Node) removeAllSandboxes() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+n.containerdSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial containerd: %w", err)
	}
	defer conn.Close()
	rt := criv1.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &criv1.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &criv1.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox %s: %w", s.Metadata.GetName(), err))
		}
		if _, err := rt.RemovePodSandbox(ctx, &criv1.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", s.Metadata.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

func (n *Node) importImages(ctx context.Context) error {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox-static: %w", err)
	}
	if !isStatic(busybox) {
		return fmt.Errorf("%s is not statically linked: install busybox-static", busybox)
	}
	for _, spec := range []imageSpec{
		{name: ShellImage, cmd: []string{"sh"}},
		{name: PauseImage, entrypoint: []string{"/bin/sleep", "infinity"}},
	} {
		var archive bytes.Buffer
		if err := writeBusyboxImage(&archive, busybox, spec); err != nil {
			return fmt.Errorf("build image %s: %w", spec.name, err)
		}
		file, err := n.c.writeArchive(spec.name, archive.Bytes())
		if err != nil {
			return err
		}
		if err := n.importArchive(spec.name, file); err != nil {
			return err
		}
	}
	out, err := run(n.Dir, nil, n.ctr(), "--address", n.containerdSock, "-n", "k8s.io", "images", "ls", "-q")
	if err != nil {
		return err
	}
	for _, want := range []string{ShellImage, PauseImage} {
		if !strings.Contains(out, want) {
			return fmt.Errorf("image %s missing after import; containerd has: %s", want, out)
		}
	}
	return nil
}

// writeArchive writes an OCI archive of image name into the cluster's images dir and returns its path.
func (c *Cluster) writeArchive(name string, archive []byte) (string, error) {
	// Nodes write their (identical) base images concurrently: each writes a temp file and renames it.
	file := filepath.Join(c.Dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".image-*")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(archive)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), file)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write image %s: %w", name, werr)
	}
	return file, nil
}

// importArchive imports the OCI archive file of image name into the node's containerd (k8s.io
// namespace).
func (n *Node) importArchive(name, file string) error {
	if out, err := run(n.Dir, nil, n.ctr(), "--address", n.containerdSock, "-n", "k8s.io", "images", "import", file); err != nil {
		return fmt.Errorf("node %s: import %s: %w: %s", n.Name, name, err, out)
	}
	return nil
}

// ImportBinaryImage builds a single-layer image named name holding the static executable hostBinary at
// pathInImage (plus /bin, /dev, /etc, /proc, /sys, /tmp, /var, /root) with the given entrypoint, and
// imports it into every node's containerd, where pods can use it with imagePullPolicy Never or
// IfNotPresent.
func (c *Cluster) ImportBinaryImage(name, hostBinary, pathInImage string, entrypoint []string) error {
	if !isStatic(hostBinary) {
		return fmt.Errorf("image %s: %s is not a static executable", name, hostBinary)
	}
	var archive bytes.Buffer
	if err := writeBinaryImage(&archive, hostBinary, pathInImage, imageSpec{name: name, entrypoint: entrypoint}); err != nil {
		return fmt.Errorf("build image %s: %w", name, err)
	}
	file, err := c.writeArchive(name, archive.Bytes())
	if err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := n.importArchive(name, file); err != nil {
			return err
		}
	}
	return nil
}

// KillContainer sends SIGKILL to a container's task through the containerd of the node that runs it
// (as `crictl stop` with no grace would); the kubelet then sees it exit and applies the pod's restart
// policy.
func (c *Cluster) KillContainer(ctx context.Context, id string) error {
	if !containerIDPattern.MatchString(id) {
		return fmt.Errorf("kill container: bad id %q", id)
	}
	var errs []error
	for _, n := range c.Nodes {
		if out, err := run(n.Dir, nil, n.ctr(), "--address", n.containerdSock, "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w: %s", n.Name, err, out))
			continue
		}
		return nil
	}
	return fmt.Errorf("kill container %s: %w", id, errors.Join(errs...))
}

var containerIDPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ContainerCreatedAt returns when the node's container runtime created the container with this id
// (CRI ContainerStatus, nanosecond precision; the pod status's times have whole seconds only).
func (n *Node) ContainerCreatedAt(ctx context.Context, id string) (time.Time, error) {
	conn, err := grpc.NewClient("unix://"+n.containerdSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return time.Time{}, fmt.Errorf("dial containerd: %w", err)
	}
	defer conn.Close()
	st, err := criv1.NewRuntimeServiceClient(conn).ContainerStatus(ctx, &criv1.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return time.Time{}, fmt.Errorf("container %s status: %w", id, err)
	}
	return time.Unix(0, st.GetStatus().GetCreatedAt()), nil
}

// KubeletMetric returns the sum of the samples of a counter or gauge on the node's kubelet /metrics
// (read through the API server's node proxy) whose labels include every labels pair; an error if there
// is no such sample.
func (n *Node) KubeletMetric(ctx context.Context, name string, labels map[string]string) (float64, error) {
	raw, err := n.c.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.Name, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("kubelet metrics of %s: %w", n.Name, err)
	}
	sum, ok := sumMetric(string(raw), name, labels)
	if !ok {
		return 0, fmt.Errorf("kubelet metrics of %s: no sample of %s%v", n.Name, name, labels)
	}
	return sum, nil
}

// sumMetric adds the values of the Prometheus text-format samples of name that carry every labels pair,
// and reports whether there was one.
func sumMetric(text, name string, labels map[string]string) (sum float64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		match := true
		for k, v := range labels {
			if !strings.Contains(rest, k+`="`+v+`"`) {
				match = false
			}
		}
		fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if !match || len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}
