package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options configure Start. The zero value is usable: a one-node cluster.
type Options struct {
	// CacheDir holds built binaries and the process registry. Default: CacheDir().
	CacheDir string
	// ModuleDir is the e2e module's directory. Default: ModuleDir().
	ModuleDir string
	// KubernetesVersion is the version (v1.Y.Z) of the Kubernetes binaries, built when the cache lacks
	// them (see EnsureKubeBinariesVersion). Default: WantedKubernetesVersion(ModuleDir), i.e.
	// $VGPU_E2E_K8S_VERSION or the e2e go.mod's pin.
	KubernetesVersion string
	// FeatureGates are set on kube-apiserver, kube-scheduler, kube-controller-manager (--feature-gates)
	// and every kubelet (featureGates in its config), e.g. to turn on on an older version a DRA feature
	// that is off there by default. A gate the version does not know makes the component fail to start.
	// Default: ParseFeatureGates($VGPU_E2E_FEATURE_GATES); nil or empty: the version's defaults.
	FeatureGates map[string]bool
	// Nodes are the cluster's nodes, one kubelet (with its own containerd and mount namespace) each.
	// Default: one node named DefaultNodeName, or none with KWOK. make([]NodeOptions, n) gives n nodes
	// with default names.
	Nodes []NodeOptions
	// KWOK runs the kwok controller (KWOKVersion) after the control plane, to play the kubelet of fake
	// nodes (Cluster.AddKWOKNodes), and etcd EtcdVersion instead of Debian's (both built on first use:
	// EnsureKWOKBinaries). The controller manager and scheduler then get higher API rate limits, for
	// 1,000 nodes, and the controller manager also runs the pod garbage collector (pods of deleted
	// nodes go). With KWOK an empty Nodes means no kubelet node at all: the Cluster's embedded *Node is
	// nil then, and so are its promoted fields and methods.
	KWOK bool
	// Keep keeps the temporary directory after Stop. Default: $VGPU_E2E_KEEP == "1".
	Keep bool
	// SkipPackageInstall skips EnsureHostPackages.
	SkipPackageInstall bool
	// Log receives progress messages. Default: StderrLogger.
	Log Logger
}

// Cluster is a running cluster: etcd, a kube-apiserver, kube-scheduler and kube-controller-manager
// shared by one or more nodes. Create it with Start and release it with Stop.
//
// The first node is embedded: its fields and methods are the single-node API of the cluster, so
// c.DevicePluginDir, c.StartPlugin, c.CreatePod, c.RestartKubelet and c.WaitNodeAllocatable all mean
// Nodes[0] (c.Dir, though, is the cluster's directory, not the node's).
type Cluster struct {
	*Node
	// Nodes are the cluster's nodes, in the order of Options.Nodes.
	Nodes []*Node
	// Dir is the temporary directory holding all state, configs and logs.
	Dir string
	// LogDir holds one log file per started process.
	LogDir string
	// NodeName is the first node's name.
	NodeName string
	// Kubeconfig is a kubeconfig file for the API server (the admin token; the server verified with
	// CAFile).
	Kubeconfig string
	// CAFile is the PEM file of the CA that signed the API server's serving certificate. Pods get the
	// same CA as ca.crt in their service-account volume (the kube-root-ca.crt ConfigMap).
	CAFile string
	// ServiceHost and ServicePort are where in-cluster clients find the API server: the ClusterIP and
	// port of the default kubernetes Service, which the kubelet puts into every container's
	// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT. The harness makes that address reach the API
	// server with one DNAT rule (see startServiceProxy).
	ServiceHost string
	ServicePort int
	// RESTConfig and Client talk to the API server.
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	// Binaries are the Kubernetes binaries in use.
	Binaries Binaries
	// FeatureGates are the feature gates set on every component (Options.FeatureGates); nil: none.
	FeatureGates map[string]bool
	// KWOKBinaries are etcd and kwok of a KWOK cluster (Options.KWOK); zero otherwise.
	KWOKBinaries KWOKBinaries

	moduleDir   string
	cacheDir    string
	containerd2 Containerd2Binaries // built once a node needs them; guarded by mu after Start
	log         Logger
	keep        bool
	reg         *registry
	token       string
	kubeletCA   string // CA of the API server's client certificate for the kubelets
	saKey       string // the service-account signing key (API server and controller manager)
	servingCert string
	servingKey  string
	hostIP      string
	ports       struct{ etcdClient, etcdPeer, apiserver, scheduler, controllerManager int }

	mu                sync.Mutex
	etcd              *Process
	apiserverSpec     processSpec // how the API server was started, for RestartAPIServer
	kwok              *Process    // nil unless Options.KWOK
	apiserver         *Process
	scheduler         *Process
	controllerManager *Process
	serviceProxy      bool // the DNAT rule is installed
	plugins           []*Plugin
	pluginStarts      int
	nodeSeq           int // numbers nodes: the next node's Index
	stopped           bool
}

// Start brings up the cluster: it installs missing Debian packages, builds or reuses the Kubernetes
// binaries, starts etcd, the API server, the in-cluster route to it, kube-scheduler,
// kube-controller-manager and every node (mount namespace, containerd, local images, kubelet), and
// waits until every Node is Ready without the not-ready taint and the default ServiceAccounts and
// kube-root-ca.crt ConfigMaps exist. On error everything started so far is stopped again.
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
	if !opts.Keep {
		opts.Keep = os.Getenv(EnvKeep) == "1"
	}
	if opts.ModuleDir == "" {
		if opts.ModuleDir, err = ModuleDir(); err != nil {
			return nil, err
		}
	}
	var nodeOpts []NodeOptions
	if !opts.KWOK || len(opts.Nodes) > 0 {
		if nodeOpts, err = defaultNodes(opts.Nodes); err != nil {
			return nil, err
		}
	}
	if opts.FeatureGates == nil {
		if opts.FeatureGates, err = ParseFeatureGates(os.Getenv(EnvFeatureGates)); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvFeatureGates, err)
		}
	}
	log := opts.Log
	begin := time.Now()
	if !opts.SkipPackageInstall {
		if err := EnsureHostPackages(ctx, log); err != nil {
			return nil, err
		}
	}
	if opts.KubernetesVersion == "" {
		if opts.KubernetesVersion, err = WantedKubernetesVersion(opts.ModuleDir); err != nil {
			return nil, err
		}
	}
	bins, err := EnsureKubeBinariesVersion(ctx, opts.ModuleDir, opts.CacheDir, opts.KubernetesVersion, log)
	if err != nil {
		return nil, err
	}
	var kwokBins KWOKBinaries
	if opts.KWOK {
		if kwokBins, err = EnsureKWOKBinaries(ctx, opts.CacheDir, log); err != nil {
			return nil, err
		}
	}
	var containerd2 Containerd2Binaries
	if slices.ContainsFunc(nodeOpts, func(o NodeOptions) bool { return o.Runtime == RuntimeContainerd2 }) {
		if containerd2, err = EnsureContainerd2(ctx, opts.CacheDir, log); err != nil {
			return nil, err
		}
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
		Dir:          dir,
		LogDir:       filepath.Join(dir, "logs"),
		Kubeconfig:   filepath.Join(dir, "kubeconfig"),
		ServicePort:  kubernetesServicePort,
		Binaries:     bins,
		FeatureGates: maps.Clone(opts.FeatureGates),
		KWOKBinaries: kwokBins,
		moduleDir:    opts.ModuleDir,
		cacheDir:     opts.CacheDir,
		containerd2:  containerd2,
		log:          log,
		keep:         opts.Keep,
		reg:          reg,
	}
	for i, o := range nodeOpts {
		c.Nodes = append(c.Nodes, newNode(c, i, o))
	}
	c.nodeSeq = len(c.Nodes)
	if len(c.Nodes) > 0 {
		c.Node, c.NodeName = c.Nodes[0], c.Nodes[0].Name
	}
	defer func() {
		if err != nil {
			c.log.Logf("cluster start failed: %v", err)
			c.dumpLogTails()
			c.Stop()
			c = nil
		}
	}()
	// Under the registry's lock: no other cluster of this cache dir runs, so a rule left by an
	// interrupted run is stale.
	if removed, err := removeServiceProxy(); err != nil {
		return c, err
	} else if removed {
		log.Logf("removed the iptables chain %s of an earlier run", serviceChain)
	}
	gates := ""
	if len(c.FeatureGates) > 0 {
		gates = ", feature gates " + featureGatesFlag(c.FeatureGates)
	}
	if opts.KWOK {
		gates += ", etcd " + EtcdVersion + ", kwok " + KWOKVersion
	}
	log.Logf("starting cluster in %s (kubernetes %s%s, %d node(s))", dir, bins.Version, gates, len(c.Nodes))
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return c, fmt.Errorf("create %s: %w", c.LogDir, err)
	}
	ip, err := hostIP()
	if err != nil {
		return c, err
	}
	c.hostIP = ip.String()
	ports, err := freePorts(5 + 3*len(c.Nodes))
	if err != nil {
		return c, err
	}
	c.ports.etcdClient, c.ports.etcdPeer, c.ports.apiserver = ports[0], ports[1], ports[2]
	c.ports.scheduler, c.ports.controllerManager = ports[3], ports[4]
	for i, n := range c.Nodes {
		p := ports[5+3*i:]
		n.ports.kubelet, n.ports.kubeletHealthz, n.ports.containerdStream = p[0], p[1], p[2]
	}
	type step struct {
		name string
		fn   func(context.Context) error
	}
	steps := []step{
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"route to the kubernetes Service", c.startServiceProxy},
		{"kube-scheduler", c.startScheduler},
		{"kube-controller-manager", c.startControllerManager},
		{"nodes", c.startNodes},
		{"cluster settled", c.waitSettled},
	}
	if opts.KWOK {
		steps = append(steps, step{"kwok", c.startKWOK})
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.fn(ctx); err != nil {
			return c, fmt.Errorf("start %s: %w", s.name, err)
		}
		log.Logf("%s up in %s", s.name, time.Since(t).Round(time.Millisecond))
	}
	nodes := strings.Join(c.NodeNames(), ", ")
	if nodes == "" {
		nodes = "none"
	}
	log.Logf("cluster ready in %s (kubelet nodes: %s)", time.Since(begin).Round(time.Millisecond), nodes)
	return c, nil
}

// NodeNames returns the names of the cluster's nodes in order.
func (c *Cluster) NodeNames() []string {
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	return names
}

// NodeNamed returns the node called name, or nil.
func (c *Cluster) NodeNamed(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// startNodes starts every node concurrently and waits until each is Ready.
func (c *Cluster) startNodes(ctx context.Context) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			if err := n.start(ctx); err != nil {
				errs[i] = fmt.Errorf("node %s: %w", n.Name, err)
				return
			}
			c.log.Logf("node %s Ready in %s", n.Name, time.Since(t).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitSettled waits until what pods need is in place: every Node without the
// node.kubernetes.io/not-ready taint (the controller manager's node lifecycle controller lifts it once
// the node is Ready, and the scheduler does not place pods on a node that has it), and in the default
// and kube-system namespaces the default ServiceAccount (the ServiceAccount admission plugin refuses
// pods without it) and the kube-root-ca.crt ConfigMap (every pod's service-account volume needs it).
func (c *Cluster) waitSettled(ctx context.Context) error {
	return poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		for _, n := range c.Nodes {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			for _, t := range node.Spec.Taints {
				if t.Key == corev1.TaintNodeNotReady {
					return false, fmt.Sprintf("node %s has taint %s", n.Name, t.ToString()), nil
				}
			}
		}
		for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem} {
			if _, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return false, err.Error(), nil
			}
			if _, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
				return false, err.Error(), nil
			}
		}
		return true, "", nil
	})
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

// etcdBinary is the etcd the cluster runs: EtcdVersion in a KWOK cluster, else Debian's (etcd-server).
func (c *Cluster) etcdBinary() string {
	if c.KWOKBinaries.Etcd != "" {
		return c.KWOKBinaries.Etcd
	}
	return "etcd"
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer)
	p, err := c.reg.start(processSpec{
		name: "etcd",
		argv: []string{c.etcdBinary(), "--name=vgpu-e2e", "--data-dir=" + filepath.Join(c.Dir, "etcd"),
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

// featureGateArgs is the --feature-gates flag of the control-plane components (none without gates).
func (c *Cluster) featureGateArgs() []string {
	if len(c.FeatureGates) == 0 {
		return nil
	}
	return []string{"--feature-gates=" + featureGatesFlag(c.FeatureGates)}
}

// runtimeConfigArgs is the API server's --runtime-config flag for the API versions the cluster's
// feature gates need and the version does not serve by default (none: no flag): the kube-scheduler
// (and the controller manager) of a version with device taint rules on watches DeviceTaintRules, and
// waits for that watch before it schedules anything, so the API server must serve them. v1.34 watches
// resource.k8s.io/v1alpha3 when DRADeviceTaints is on; v1.36 resource.k8s.io/v1beta2 when
// DRADeviceTaintRules is on (beta, off by default there); v1.37 serves its v1 by default.
func runtimeConfigArgs(version string, gates map[string]bool) []string {
	var apis []string
	switch minor := KubeMinor(version); {
	case minor == 34 && gates["DRADeviceTaints"]:
		apis = append(apis, "resource.k8s.io/v1alpha3=true")
	case minor == 36 && gates["DRADeviceTaintRules"]:
		apis = append(apis, "resource.k8s.io/v1beta2=true")
	}
	if len(apis) == 0 {
		return nil
	}
	return []string{"--runtime-config=" + strings.Join(apis, ",")}
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
	c.ServiceHost = KubernetesServiceIP
	var caPEM []byte
	c.CAFile, c.servingCert, c.servingKey, caPEM, err = servingCerts(dir,
		[]net.IP{net.ParseIP(c.hostIP), net.ParseIP("127.0.0.1"), net.ParseIP(c.ServiceHost)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	c.saKey = filepath.Join(dir, "sa.key")
	if err := os.WriteFile(c.saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	// The API server listens on the host's address and advertises it, so the endpoint of the default
	// kubernetes Service is <host IP>:<port>, which hostNetwork pods reach (startServiceProxy routes
	// the Service's ClusterIP there).
	c.apiserverSpec = processSpec{
		name: "kube-apiserver",
		argv: append([]string{c.Binaries.APIServer,
			fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.ports.etcdClient),
			"--bind-address=" + c.hostIP, "--advertise-address=" + c.hostIP,
			fmt.Sprintf("--secure-port=%d", c.ports.apiserver),
			"--tls-cert-file=" + c.servingCert, "--tls-private-key-file=" + c.servingKey,
			"--token-auth-file=" + tokens,
			"--authorization-mode=AlwaysAllow", "--anonymous-auth=false",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + c.saKey, "--service-account-signing-key-file=" + c.saKey,
			"--service-cluster-ip-range=" + ServiceCIDR,
			"--enable-priority-and-fairness=false",
			"--profiling=false",
			"--allow-privileged=true",
			"--kubelet-client-certificate=" + clientCert, "--kubelet-client-key=" + clientKey,
			"--kubelet-preferred-address-types=InternalIP",
		}, slices.Concat(c.featureGateArgs(), runtimeConfigArgs(c.Binaries.Version, c.FeatureGates))...),
		dir:     dir,
		logPath: c.logPath("kube-apiserver"),
	}
	p, err := c.reg.start(c.apiserverSpec)
	if err != nil {
		return err
	}
	c.apiserver = p
	c.RESTConfig = &rest.Config{
		Host:            "https://" + net.JoinHostPort(c.hostIP, strconv.Itoa(c.ports.apiserver)),
		BearerToken:     c.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
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
    certificate-authority: %s
users:
- name: vgpu-e2e-admin
  user:
    token: %s
contexts:
- name: vgpu-e2e
  context: {cluster: vgpu-e2e, user: vgpu-e2e-admin}
current-context: vgpu-e2e
`, c.RESTConfig.Host, c.CAFile, c.token)
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

// Stop stops every process the cluster started (plugins, kube-scheduler and kube-controller-manager,
// the kubelets, the pods' containers, the containerds, the API server, etcd, the namespace holders),
// by process id, removes the DNAT rule and the temporary directory unless Keep was set. It is safe to
// call more than once and on a partially started cluster.
func (c *Cluster) Stop() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped = true
	plugins := c.plugins
	nodes := slices.Clone(c.Nodes)
	c.mu.Unlock()
	for _, p := range plugins {
		if !p.Exited() {
			_ = p.Stop(5 * time.Second)
		}
	}
	// The controllers first: nothing should react to the nodes going away.
	for _, p := range []*Process{c.kwok, c.controllerManager, c.scheduler} {
		if p != nil && !p.Exited() {
			_ = p.Stop(10 * time.Second)
		}
	}
	parallel(nodes, func(n *Node) {
		if k := n.Kubelet(); k != nil {
			_ = k.Stop(15 * time.Second)
		}
	})
	parallel(nodes, func(n *Node) { n.stopContainerd() })
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
		for _, n := range nodes {
			removeContainerCgroups(n.containerdStateDir())
		}
	}
	for _, n := range nodes {
		if n.holder != nil {
			n.holder.Kill()
		}
	}
	if c.serviceProxy {
		if _, err := removeServiceProxy(); err != nil {
			c.log.Logf("%v", err)
		}
	}
	if c.keep {
		c.log.Logf("keeping %s (logs in %s)", c.Dir, c.LogDir)
	} else if err := removeTree(c.Dir); err != nil {
		c.log.Logf("leaving %s: %v", c.Dir, err)
	}
	c.reg.close()
}

// parallel calls fn for every node concurrently and waits for all.
func parallel(nodes []*Node, fn func(*Node)) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(n)
		}()
	}
	wg.Wait()
}

// httpsProbe probes the health endpoints of kube-scheduler and kube-controller-manager, whose serving
// certificates are self-signed.
var httpsProbe = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

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

// Poll calls cond every interval until it reports done, returns an error, or timeout (or ctx) runs
// out; on timeout the error includes cond's last description of what it saw. For tests' own waits.
func Poll(ctx context.Context, timeout, interval time.Duration, cond func() (done bool, seen string, err error)) error {
	return poll(ctx, timeout, interval, cond)
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
