package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	criv1 "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Options configure Start. The zero value is usable.
type Options struct {
	// CacheDir holds built binaries and the process registry. Default: CacheDir().
	CacheDir string
	// ModuleDir is the e2e module's directory. Default: ModuleDir().
	ModuleDir string
	// NodeName is the kubelet's node name. Default: "vgpu-e2e-node".
	NodeName string
	// Keep keeps the temporary directory after Stop. Default: $VGPU_E2E_KEEP == "1".
	Keep bool
	// SkipPackageInstall skips EnsureHostPackages.
	SkipPackageInstall bool
	// Log receives progress messages. Default: StderrLogger.
	Log Logger
}

// Cluster is a running one-node cluster. Create it with Start and release it with Stop.
type Cluster struct {
	// Dir is the temporary directory holding all state, configs and logs.
	Dir string
	// LogDir holds one log file per started process.
	LogDir string
	// NodeName is the name of the kubelet's Node.
	NodeName string
	// DevicePluginDir is bind-mounted on /var/lib/kubelet/device-plugins in the kubelet's mount
	// namespace: device plugins outside that namespace put their sockets here.
	DevicePluginDir string
	// KubeletRootDir is the kubelet's --root-dir (the same path inside and outside the mount namespace).
	KubeletRootDir string
	// PodResourcesSocket is the kubelet's PodResources API socket, <KubeletRootDir>/pod-resources/
	// kubelet.sock. Its directory is also bind-mounted on /var/lib/kubelet/pod-resources in the mount
	// namespace, where a containerized plugin's hostPath finds it.
	PodResourcesSocket string
	// VirtualGPUDir is bind-mounted on /var/lib/virtual-gpu in the mount namespace: the host side of the
	// DaemonSet's state hostPath.
	VirtualGPUDir string
	// Kubeconfig is a kubeconfig file for the API server (token auth, TLS verification off).
	Kubeconfig string
	// RESTConfig and Client talk to the API server.
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	// Binaries are the Kubernetes binaries in use.
	Binaries Binaries

	moduleDir      string
	log            Logger
	keep           bool
	reg            *registry
	token          string
	containerdSock string
	kubeletConfig  string
	kubeletWorkDir string
	kubeletCA      string // CA of the API server's client certificate for the kubelet
	nodeIP         string
	ports          struct{ etcdClient, etcdPeer, apiserver, kubelet, kubeletHealthz, containerdStream int }

	mu            sync.Mutex
	holder        *Process // owns the private mount namespace
	etcd          *Process
	apiserver     *Process
	containerd    *Process
	kubelet       *Process
	kubeletStarts int
	plugins       []*Plugin
	pluginStarts  int
	stopped       bool
}

// Start brings up the cluster: it installs missing Debian packages, builds or reuses the Kubernetes
// binaries, starts etcd, the API server, containerd and the kubelet, imports the local images and waits
// for the Node to be Ready. On error everything started so far is stopped again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		return nil, ErrUnsupported
	}
	if opts.Log == nil {
		opts.Log = StderrLogger{}
	}
	if opts.CacheDir == "" {
		opts.CacheDir = CacheDir()
	}
	if opts.NodeName == "" {
		opts.NodeName = "vgpu-e2e-node"
	}
	if !opts.Keep {
		opts.Keep = os.Getenv(EnvKeep) == "1"
	}
	if opts.ModuleDir == "" {
		if opts.ModuleDir, err = ModuleDir(); err != nil {
			return nil, err
		}
	}
	log := opts.Log
	begin := time.Now()
	if !opts.SkipPackageInstall {
		if err := EnsureHostPackages(ctx, log); err != nil {
			return nil, err
		}
	}
	bins, err := EnsureKubeBinaries(ctx, opts.ModuleDir, opts.CacheDir, log)
	if err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp("", "vgpu-e2e-")
	if err != nil {
		return nil, fmt.Errorf("create temp dir: %w", err)
	}
	reg, err := openRegistry(filepath.Join(opts.CacheDir, "run"), dir, log)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c = &Cluster{
		Dir:                dir,
		LogDir:             filepath.Join(dir, "logs"),
		NodeName:           opts.NodeName,
		DevicePluginDir:    filepath.Join(dir, "device-plugins"),
		KubeletRootDir:     filepath.Join(dir, "kubelet"),
		PodResourcesSocket: filepath.Join(dir, "kubelet", "pod-resources", "kubelet.sock"),
		VirtualGPUDir:      filepath.Join(dir, "virtual-gpu"),
		Kubeconfig:         filepath.Join(dir, "kubeconfig"),
		Binaries:           bins,
		moduleDir:          opts.ModuleDir,
		log:                log,
		keep:               opts.Keep,
		reg:                reg,
		containerdSock:     filepath.Join(dir, "containerd", "containerd.sock"),
		kubeletConfig:      filepath.Join(dir, "kubelet-config.yaml"),
		kubeletWorkDir:     filepath.Join(dir, "kubelet-wd"),
	}
	defer func() {
		if err != nil {
			c.log.Logf("cluster start failed: %v", err)
			c.dumpLogTails()
			c.Stop()
			c = nil
		}
	}()
	log.Logf("starting cluster in %s (kubernetes %s)", dir, bins.Version)
	for _, d := range []string{c.LogDir, c.DevicePluginDir, c.KubeletRootDir, filepath.Dir(c.PodResourcesSocket), c.VirtualGPUDir, c.kubeletWorkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return c, fmt.Errorf("create %s: %w", d, err)
		}
	}
	ip, err := hostIP()
	if err != nil {
		return c, err
	}
	c.nodeIP = ip.String()
	ports, err := freePorts(6)
	if err != nil {
		return c, err
	}
	c.ports.etcdClient, c.ports.etcdPeer, c.ports.apiserver = ports[0], ports[1], ports[2]
	c.ports.kubelet, c.ports.kubeletHealthz, c.ports.containerdStream = ports[3], ports[4], ports[5]
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"mount namespace", c.startNamespace},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"containerd", c.startContainerd},
		{"images", c.importImages},
		{"kubelet", c.startKubeletAndWait},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.fn(ctx); err != nil {
			return c, fmt.Errorf("start %s: %w", s.name, err)
		}
		log.Logf("%s up in %s", s.name, time.Since(t).Round(time.Millisecond))
	}
	log.Logf("cluster ready in %s (node %s)", time.Since(begin).Round(time.Millisecond), c.NodeName)
	return c, nil
}

// freePorts returns n distinct TCP ports that are free on all addresses, chosen at random below the
// kernel's ephemeral port range, so that no outgoing connection and no listener on port 0 (containerd,
// the kubelet) takes one of them before its server binds it.
func freePorts(n int) ([]int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	const base = 10000
	if low <= base+1000 {
		return nil, fmt.Errorf("ephemeral port range starts at %d: no room for fixed ports", low)
	}
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		p := base + mrand.IntN(low-base)
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			continue
		}
		held = append(held, l)
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("found only %d free ports in [%d, %d)", len(ports), base, low)
	}
	return ports, nil
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.LogDir, name+".log") }

// startNamespace starts the process that holds the private mount namespace and mounts, inside it,
// overlays on /var/lib, /var/log and /run (upper layers in the temp dir), and binds DevicePluginDir on
// /var/lib/kubelet/device-plugins (hard-coded in the kubelet), the kubelet's PodResources directory on
// /var/lib/kubelet/pod-resources and VirtualGPUDir on /var/lib/virtual-gpu (the DaemonSet's hostPaths,
// which containerd resolves in this namespace).
func (c *Cluster) startNamespace(ctx context.Context) error {
	p, err := c.reg.start(processSpec{
		name:    "mount-namespace",
		argv:    []string{"unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity"},
		dir:     c.Dir,
		logPath: c.logPath("mount-namespace"),
	})
	if err != nil {
		return err
	}
	c.holder = p
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
		base := filepath.Join(c.Dir, "ns", strings.ReplaceAll(strings.TrimPrefix(d, "/"), "/", "-"))
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
		{c.DevicePluginDir, "/var/lib/kubelet/device-plugins"},
		{filepath.Dir(c.PodResourcesSocket), "/var/lib/kubelet/pod-resources"},
		{c.VirtualGPUDir, "/var/lib/virtual-gpu"},
	} {
		fmt.Fprintf(&script, "mkdir -p %[2]s\nmount --bind %[1]s %[2]s\n", b.src, b.dst)
	}
	if out, err := run(c.Dir, nil, "nsenter", "-t", strconv.Itoa(p.PID()), "-m", "--", "sh", "-c", script.String()); err != nil {
		return fmt.Errorf("mount in namespace: %w: %s", err, out)
	}
	return nil
}

// inNamespace prefixes argv so that it runs in the cluster's mount namespace with working dir wd.
func (c *Cluster) inNamespace(wd string, argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(c.holder.PID()), "-m", "--wd=" + wd, "--"}, argv...)
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer)
	p, err := c.reg.start(processSpec{
		name: "etcd",
		argv: []string{"etcd", "--name=vgpu-e2e", "--data-dir=" + filepath.Join(c.Dir, "etcd"),
			"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=vgpu-e2e=" + peer, "--logger=zap", "--log-level=warn"},
		dir:     c.Dir,
		logPath: c.logPath("etcd"),
	})
	if err != nil {
		return err
	}
	c.etcd = p
	return poll(ctx, 30*time.Second, 50*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("etcd exited: %w", p.ExitErr())
		}
		resp, err := httpClient.Get(client + "/health")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "apiserver")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	c.token = hex.EncodeToString(tok)
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(c.token+`,vgpu-e2e-admin,vgpu-e2e-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	ca, clientCert, clientKey, err := kubeletClientCerts(dir)
	if err != nil {
		return fmt.Errorf("kubelet client certificates: %w", err)
	}
	c.kubeletCA = ca
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	p, err := c.reg.start(processSpec{
		name: "kube-apiserver",
		argv: []string{c.Binaries.APIServer,
			fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.ports.etcdClient),
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", c.ports.apiserver),
			"--cert-dir=" + filepath.Join(dir, "certs"),
			"--token-auth-file=" + tokens,
			"--authorization-mode=AlwaysAllow", "--anonymous-auth=false",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + keyFile, "--service-account-signing-key-file=" + keyFile,
			"--service-cluster-ip-range=10.0.0.0/24",
			"--disable-admission-plugins=ServiceAccount",
			"--endpoint-reconciler-type=none",
			"--enable-priority-and-fairness=false",
			"--profiling=false",
			"--allow-privileged=true",
			"--kubelet-client-certificate=" + clientCert, "--kubelet-client-key=" + clientKey,
			"--kubelet-preferred-address-types=InternalIP",
		},
		dir:     dir,
		logPath: c.logPath("kube-apiserver"),
	})
	if err != nil {
		return err
	}
	c.apiserver = p
	c.RESTConfig = &rest.Config{
		Host:            fmt.Sprintf("https://127.0.0.1:%d", c.ports.apiserver),
		BearerToken:     c.token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             100,
		Burst:           200,
	}
	if c.Client, err = kubernetes.NewForConfig(c.RESTConfig); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: vgpu-e2e
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: vgpu-e2e-admin
  user:
    token: %s
contexts:
- name: vgpu-e2e
  context: {cluster: vgpu-e2e, user: vgpu-e2e-admin}
current-context: vgpu-e2e
`, c.RESTConfig.Host, c.token)
	if err := os.WriteFile(c.Kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	err = poll(ctx, 90*time.Second, 200*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("kube-apiserver exited: %w", p.ExitErr())
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		b, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return string(b) == "ok", string(b), nil
	})
	if err != nil {
		return err
	}
	// The system namespaces are created by the API server itself shortly after it is ready.
	return poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "containerd")
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
	config := fmt.Sprintf(`version = 2
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
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.containerdSock, c.containerdSock+".ttrpc",
		filepath.Join(dir, "opt"), PauseImage, filepath.Join(dir, "cni", "bin"), cniConf, c.ports.containerdStream)
	configFile := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return err
	}
	p, err := c.reg.start(processSpec{
		name:    "containerd",
		argv:    c.inNamespace(dir, "containerd", "--config", configFile),
		dir:     dir,
		logPath: c.logPath("containerd"),
	})
	if err != nil {
		return err
	}
	c.containerd = p
	return poll(ctx, 30*time.Second, 50*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("containerd exited: %w", p.ExitErr())
		}
		out, err := run(dir, nil, "ctr", "--address", c.containerdSock, "version")
		return err == nil, out, nil
	})
}

func (c *Cluster) importImages(ctx context.Context) error {
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
		if err := c.importArchive(spec.name, archive.Bytes()); err != nil {
			return err
		}
	}
	out, err := run(c.Dir, nil, "ctr", "--address", c.containerdSock, "-n", "k8s.io", "images", "ls", "-q")
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

// importArchive writes an OCI archive of image name into the temp dir and imports it into containerd's
// k8s.io namespace.
func (c *Cluster) importArchive(name string, archive []byte) error {
	file := filepath.Join(c.Dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(file, archive, 0o644); err != nil {
		return err
	}
	if out, err := run(c.Dir, nil, "ctr", "--address", c.containerdSock, "-n", "k8s.io", "images", "import", file); err != nil {
		return fmt.Errorf("import %s: %w: %s", name, err, out)
	}
	return nil
}

// ImportBinaryImage builds a single-layer image named name holding the static executable hostBinary at
// pathInImage (plus /bin, /dev, /etc, /proc, /sys, /tmp, /var, /root) with the given entrypoint, and
// imports it into containerd, where pods can use it with imagePullPolicy Never or IfNotPresent.
func (c *Cluster) ImportBinaryImage(name, hostBinary, pathInImage string, entrypoint []string) error {
	if !isStatic(hostBinary) {
		return fmt.Errorf("image %s: %s is not a static executable", name, hostBinary)
	}
	var archive bytes.Buffer
	if err := writeBinaryImage(&archive, hostBinary, pathInImage, imageSpec{name: name, entrypoint: entrypoint}); err != nil {
		return fmt.Errorf("build image %s: %w", name, err)
	}
	return c.importArchive(name, archive.Bytes())
}

// Stop stops every process the cluster started (plugins, kubelet, the pods' containers, containerd,
// the API server, etcd, the namespace holder), by process id, and removes the temporary directory
// unless Keep was set. It is safe to call more than once and on a partially started cluster.
func (c *Cluster) Stop() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped = true
	plugins := c.plugins
	c.mu.Unlock()
	for _, p := range plugins {
		if !p.Exited() {
			_ = p.Stop(5 * time.Second)
		}
	}
	if k := c.Kubelet(); k != nil {
		_ = k.Stop(15 * time.Second)
	}
	if c.containerd != nil && !c.containerd.Exited() {
		if err := c.removeAllSandboxes(); err != nil {
			c.log.Logf("removing pod sandboxes: %v", err)
		}
		_ = c.containerd.Stop(15 * time.Second)
	}
	if c.apiserver != nil {
		_ = c.apiserver.Stop(15 * time.Second)
	}
	if c.etcd != nil {
		_ = c.etcd.Stop(10 * time.Second)
	}
	// containerd shims name the containerd socket in their command line; containers are their
	// children. After a clean sandbox removal there are none left.
	if n := killProcessesNaming(c.Dir); n > 0 {
		c.log.Logf("killed %d leftover processes (shims, containers) naming %s", n, c.Dir)
		removeContainerCgroups(filepath.Join(c.Dir, "containerd", "state"))
	}
	if c.holder != nil {
		c.holder.Kill()
	}
	if c.keep {
		c.log.Logf("keeping %s (logs in %s)", c.Dir, c.LogDir)
	} else if err := removeTree(c.Dir); err != nil {
		c.log.Logf("leaving %s: %v", c.Dir, err)
	}
	c.reg.close()
}

// removeAllSandboxes stops and removes every pod sandbox through the CRI, which kills the pods'
// containers.
func (c *Cluster) removeAllSandboxes() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.containerdSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
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

// dumpLogTails logs the last lines of every process log (used when the start fails).
func (c *Cluster) dumpLogTails() {
	entries, _ := os.ReadDir(c.LogDir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(c.LogDir, e.Name()))
		if err == nil && len(b) > 0 {
			c.log.Logf("--- last lines of %s:\n%s", e.Name(), lastLines(string(b), 15))
		}
	}
}

// DumpLogTails logs the last n lines of each process log of the cluster, for failing tests.
func (c *Cluster) DumpLogTails(log Logger, n int) {
	entries, _ := os.ReadDir(c.LogDir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(c.LogDir, e.Name()))
		if err == nil && len(b) > 0 {
			log.Logf("--- last %d lines of %s:\n%s", n, e.Name(), lastLines(string(b), n))
		}
	}
}

// poll calls cond every interval until it reports done, returns an error, or timeout (or ctx) runs
// out. On timeout the error includes cond's last description of what it saw.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() (done bool, seen string, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	var seen string
	for {
		done, s, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		seen = s
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met within %s (last seen: %s): %w", timeout, seen, ctx.Err())
		case <-t.C:
		}
	}
}

// nodeReady reports the Ready condition of node.
func nodeReady(node *corev1.Node) (bool, string) {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue, cond.Reason + ": " + cond.Message
		}
	}
	return false, "no Ready condition"
}

// httpClient probes health endpoints; a probe never outlives its poll.
var httpClient = &http.Client{Timeout: 2 * time.Second}
