package cluster

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The versions a KWOK cluster (Options.KWOK) runs, built from the Go module proxy by EnsureKWOKBinaries.
const (
	// EtcdVersion is the etcd of a KWOK cluster (go.etcd.io/etcd/server/v3). Debian's etcd 3.4 lacks
	// the RequestWatchProgress feature kube-apiserver 1.36 needs for the watch-list requests kwok's
	// informers make: their watches end every few seconds and pods stay Pending.
	EtcdVersion = "v3.6.16"
	// KWOKVersion is the kwok controller (sigs.k8s.io/kwok/cmd/kwok) that plays the kubelet of the fake
	// nodes.
	KWOKVersion = "v0.8.0"
)

// The marks of a KWOK node (the kwok documentation's conventions). kwok manages exactly the Nodes with
// the annotation; the label and the taint keep other pods off them and let KWOKPod's pods find them.
const (
	// KWOKNodeAnnotation, with the value KWOKNodeValue, is the annotation kwok selects its nodes by
	// (--manage-nodes-with-annotation-selector).
	KWOKNodeAnnotation = "kwok.x-k8s.io/node"
	// KWOKNodeValue is the value of KWOKNodeAnnotation and of the KWOKTaintKey taint.
	KWOKNodeValue = "fake"
	// KWOKTaintKey is the key of the NoSchedule taint on every KWOK node.
	KWOKTaintKey = "kwok.x-k8s.io/node"
	// KWOKNodeLabel, with the value KWOKNodeLabelValue, is the label of every KWOK node.
	KWOKNodeLabel      = "type"
	KWOKNodeLabelValue = "kwok"
)

// kwokNodeLeaseSeconds is kwok's --node-lease-duration-seconds: it renews a Lease per node (the stage
// node-heartbeat-with-lease updates the conditions only every ~10 min, so the Leases keep the nodes
// Ready for the node lifecycle controller). A restarted kwok takes over existing nodes only once their
// Leases expire, so the cluster starts kwok once.
const kwokNodeLeaseSeconds = 40

// KWOKPodCIDR is the pool kwok gives the pods on its nodes their IPs from (--cidr): room for far more
// than the pods of 1,000 nodes.
const KWOKPodCIDR = "10.244.0.0/16"

// kwokNodeIP is the InternalIP kwok writes into every KWOK Node (--node-ip): an address nothing
// dials (kwok serves no kubelet API here).
const kwokNodeIP = "10.1.0.1"

// kwokStages are kwok's default Stages (see kwokstages/README.md): node initialisation, the
// heartbeat that goes with Leases, and the pods' ready, complete and delete steps.
//
//go:embed kwokstages/*.yaml
var kwokStages embed.FS

// KWOKBinaries are the executables of a KWOK cluster.
type KWOKBinaries struct {
	// Etcd is etcd EtcdVersion; KWOK is kwok KWOKVersion.
	Etcd, KWOK string
	// BuildTaken is how long building them took: zero when both came from the cache.
	BuildTaken time.Duration
}

// EnsureKWOKBinaries returns etcd EtcdVersion and kwok KWOKVersion, building each one that is not there
// yet with the go command (through the Go module proxy) into <cacheDir>/bin/etcd-<version>-<go
// version>-<arch>/etcd and <cacheDir>/bin/kwok-<version>-<go version>-<arch>/kwok; what is there is never
// rebuilt. etcd builds in a throw-away module that requires go.etcd.io/etcd/server/v3 (its go.mod has
// replace directives, so `go install pkg@version` refuses it); kwok with `go install pkg@version`, from
// its own go.mod, so neither touches this module's dependencies. Both are static (CGO_ENABLED=0). A cold
// build takes about 1 min (etcd) and 1.5 min (kwok) on 2 cores.
func EnsureKWOKBinaries(ctx context.Context, cacheDir string, log Logger) (KWOKBinaries, error) {
	var bins KWOKBinaries
	for _, b := range []struct {
		name, version string
		out           *string
		build         func(ctx context.Context, tmp string, env []string) error
	}{
		{"etcd", EtcdVersion, &bins.Etcd, buildEtcd},
		{"kwok", KWOKVersion, &bins.KWOK, buildKWOK},
	} {
		binDir, err := cacheBinDir(ctx, cacheDir, b.name+"-"+b.version)
		if err != nil {
			return KWOKBinaries{}, err
		}
		*b.out = filepath.Join(binDir, b.name)
		if fi, err := os.Stat(*b.out); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			continue
		}
		if err := os.MkdirAll(binDir, 0o755); err != nil {
			return KWOKBinaries{}, fmt.Errorf("create %s: %w", binDir, err)
		}
		tmp, err := os.MkdirTemp(binDir, ".build-")
		if err != nil {
			return KWOKBinaries{}, err
		}
		log.Logf("building %s %s into %s (cold: 1-2 min)", b.name, b.version, binDir)
		start := time.Now()
		// GOWORK=off and a build dir of its own: no go.work or go.mod around it adds modules.
		env := append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off", "GOBIN="+tmp)
		err = b.build(ctx, tmp, env)
		if err == nil {
			err = os.Rename(filepath.Join(tmp, b.name), *b.out)
		}
		os.RemoveAll(tmp)
		if err != nil {
			return KWOKBinaries{}, fmt.Errorf("build %s %s: %w", b.name, b.version, err)
		}
		d := time.Since(start)
		bins.BuildTaken += d
		log.Logf("built %s %s in %s", b.name, b.version, d.Round(time.Second))
	}
	return bins, nil
}

// buildEtcd builds etcd EtcdVersion as tmp/etcd in a module generated in tmp.
func buildEtcd(ctx context.Context, tmp string, env []string) error {
	const pkg = "go.etcd.io/etcd/server/v3"
	for _, argv := range [][]string{
		{"go", "mod", "init", "vgpu-e2e-etcd-build"},
		{"go", "get", pkg + "@" + EtcdVersion},
		{"go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(tmp, "etcd"), pkg},
	} {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = tmp
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, lastLines(string(out), 30))
		}
	}
	return nil
}

// buildKWOK installs kwok KWOKVersion into tmp (GOBIN in env).
func buildKWOK(ctx context.Context, tmp string, env []string) error {
	argv := []string{"go", "install", "-trimpath", "-ldflags=-s -w", "sigs.k8s.io/kwok/cmd/kwok@" + KWOKVersion}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = tmp // outside any module: pkg@version builds with kwok's go.mod
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, lastLines(string(out), 30))
	}
	return nil
}

// writeKWOKStages writes the embedded stages into dir and returns their paths, sorted.
func writeKWOKStages(dir string) ([]string, error) {
	entries, err := kwokStages.ReadDir("kwokstages")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	var paths []string
	for _, e := range entries {
		b, err := kwokStages.ReadFile("kwokstages/" + e.Name())
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, e.Name())
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return nil, fmt.Errorf("write kwok stage %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths, nil
}

// kwokArgs is the command line of the kwok controller: the admin kubeconfig, only the Nodes with
// KWOKNodeAnnotation (never a kubelet's), pod IPs from KWOKPodCIDR, Leases, and the stages (one -c each).
func kwokArgs(binary, kubeconfig string, stages []string) []string {
	argv := []string{binary,
		"--kubeconfig=" + kubeconfig,
		"--manage-nodes-with-annotation-selector=" + KWOKNodeAnnotation + "=" + KWOKNodeValue,
		"--cidr=" + KWOKPodCIDR,
		"--node-ip=" + kwokNodeIP,
		fmt.Sprintf("--node-lease-duration-seconds=%d", kwokNodeLeaseSeconds),
	}
	for _, s := range stages {
		argv = append(argv, "-c", s)
	}
	return argv
}

// kwokWatching is what kwok logs once it reached the API server and starts watching its nodes.
const kwokWatching = "Watch nodes"

// startKWOK starts the kwok controller with kwokArgs and waits until it watches nodes.
func (c *Cluster) startKWOK(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "kwok")
	stages, err := writeKWOKStages(dir)
	if err != nil {
		return err
	}
	p, err := c.reg.start(processSpec{name: "kwok", argv: kwokArgs(c.KWOKBinaries.KWOK, c.Kubeconfig, stages), dir: dir, logPath: c.logPath("kwok")})
	if err != nil {
		return err
	}
	c.kwok = p
	return poll(ctx, 60*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("kwok exited: %w (log %s)", p.ExitErr(), p.LogPath)
		}
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			return false, err.Error(), nil
		}
		return strings.Contains(string(b), kwokWatching), "no " + kwokWatching + " in " + p.LogPath, nil
	})
}

// KWOKNode describes a fake node for AddKWOKNodes.
type KWOKNode struct {
	// Name is the Node's name (a DNS subdomain), also its kubernetes.io/hostname label.
	Name string
	// Labels are set on the Node besides the ones every KWOK node has (KWOKNodeLabel,
	// kubernetes.io/hostname, kubernetes.io/os, kubernetes.io/arch), which they may not change.
	Labels map[string]string
}

// The resources every KWOK node has (kwok keeps a non-empty status map as it is, so they must be there
// for pods to fit).
var kwokNodeResources = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("32"),
	corev1.ResourceMemory: resource.MustParse("256Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// NewKWOKNode returns the Node object of a fake node for kwok: annotation KWOKNodeAnnotation=fake,
// labels KWOKNodeLabel=kwok, kubernetes.io/hostname, kubernetes.io/os=linux, kubernetes.io/arch and
// n.Labels, the taint KWOKTaintKey=fake:NoSchedule, and capacity and allocatable cpu 32, memory 256Gi,
// pods 110. kwok's node-initialize stage adds the conditions, addresses and node info. An invalid name
// or label is an error.
func NewKWOKNode(n KWOKNode) (*corev1.Node, error) {
	if errs := validation.IsDNS1123Subdomain(n.Name); len(errs) > 0 {
		return nil, fmt.Errorf("kwok node name %q: %s", n.Name, strings.Join(errs, "; "))
	}
	labels := map[string]string{
		KWOKNodeLabel:          KWOKNodeLabelValue,
		corev1.LabelHostname:   n.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
	}
	for k, v := range n.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("kwok node %s: label key %q: %s", n.Name, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("kwok node %s: label %s value %q: %s", n.Name, k, v, strings.Join(errs, "; "))
		}
		if own, ok := labels[k]; ok && own != v {
			return nil, fmt.Errorf("kwok node %s: label %s=%q: every KWOK node has %s=%q", n.Name, k, v, k, own)
		}
		labels[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   n.Name,
			Labels: labels,
			Annotations: map[string]string{
				KWOKNodeAnnotation:             KWOKNodeValue,
				"node.alpha.kubernetes.io/ttl": "0",
			},
		},
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: KWOKTaintKey, Value: KWOKNodeValue, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity:    kwokNodeResources.DeepCopy(),
			Allocatable: kwokNodeResources.DeepCopy(),
		},
	}, nil
}

// kwokWorkers is how many requests AddKWOKNodes and DeleteKWOKNodes have in flight.
const kwokWorkers = 32

// kwokClient returns a client with a higher rate limit than Client, for creating and deleting many
// nodes; an error if the cluster runs no kwok.
func (c *Cluster) kwokClient() (kubernetes.Interface, error) {
	if c.kwok == nil {
		return nil, errors.New("the cluster runs no kwok (start it with Options.KWOK)")
	}
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	return kubernetes.NewForConfig(cfg)
}

// forEach calls fn for every item with kwokWorkers goroutines and returns the errors joined.
func forEach[T any](items []T, fn func(T) error) error {
	work := make(chan T)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range min(kwokWorkers, len(items)) {
		wg.Go(func() {
			for it := range work {
				if err := fn(it); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// AddKWOKNodes creates the Node objects (NewKWOKNode) of nodes, concurrently; kwok then makes them Ready
// (see WaitKWOKNodesReady). Every node is checked before any is created; a name given twice or one
// that exists already is an error. It needs a cluster started with Options.KWOK.
func (c *Cluster) AddKWOKNodes(ctx context.Context, nodes []KWOKNode) error {
	client, err := c.kwokClient()
	if err != nil {
		return fmt.Errorf("add kwok nodes: %w", err)
	}
	objs := make([]*corev1.Node, len(nodes))
	seen := map[string]bool{}
	for i, n := range nodes {
		if seen[n.Name] {
			return fmt.Errorf("add kwok nodes: node %s given twice", n.Name)
		}
		seen[n.Name] = true
		if objs[i], err = NewKWOKNode(n); err != nil {
			return fmt.Errorf("add kwok nodes: %w", err)
		}
	}
	err = forEach(objs, func(n *corev1.Node) error {
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create kwok node %s: %w", n.Name, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("add kwok nodes: %w", err)
	}
	return nil
}

// kwokNodesSeen returns which of names nodes (a List of the KWOK nodes) lack or have not Ready (or
// with the node.kubernetes.io/not-ready taint, which keeps the scheduler away), and a description of
// the first of them; none means all are ready for pods.
func kwokNodesSeen(nodes []corev1.Node, names []string) (notReady int, seen string) {
	byName := make(map[string]*corev1.Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	for _, name := range names {
		var why string
		switch n := byName[name]; {
		case n == nil:
			why = "no such Node"
		default:
			if ok, msg := nodeReady(n); !ok {
				why = "not Ready (" + msg + ")"
			} else if i := slices.IndexFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady }); i >= 0 {
				why = "taint " + n.Spec.Taints[i].ToString()
			}
		}
		if why != "" {
			if notReady == 0 {
				seen = fmt.Sprintf("node %s: %s", name, why)
			}
			notReady++
		}
	}
	if notReady > 0 {
		seen = fmt.Sprintf("%d of %d nodes not ready, e.g. %s", notReady, len(names), seen)
	}
	return notReady, seen
}

// WaitKWOKNodesReady waits until every Node of names is Ready and without the
// node.kubernetes.io/not-ready taint (the node lifecycle controller lifts it once kwok reported Ready),
// so that the scheduler places pods on them. It lists the KWOK nodes (label KWOKNodeLabel) once per
// round, however many names there are.
func (c *Cluster) WaitKWOKNodesReady(ctx context.Context, timeout time.Duration, names []string) error {
	err := poll(ctx, timeout, 250*time.Millisecond, func() (bool, string, error) {
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: KWOKNodeLabel + "=" + KWOKNodeLabelValue})
		if err != nil {
			return false, err.Error(), nil
		}
		n, seen := kwokNodesSeen(list.Items, names)
		return n == 0, seen, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %d kwok nodes ready: %w", len(names), err)
	}
	return nil
}

// DeleteKWOKNodes deletes the Nodes of names, concurrently, and waits until they are gone. A missing
// Node is not an error. The pods bound to them are deleted by the controller manager's pod garbage
// collector (a KWOK cluster runs it) some 40 s later, after its quarantine.
func (c *Cluster) DeleteKWOKNodes(ctx context.Context, timeout time.Duration, names []string) error {
	client, err := c.kwokClient()
	if err != nil {
		return fmt.Errorf("delete kwok nodes: %w", err)
	}
	err = forEach(names, func(name string) error {
		if err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete kwok node %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete kwok nodes: %w", err)
	}
	err = poll(ctx, timeout, 250*time.Millisecond, func() (bool, string, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: KWOKNodeLabel + "=" + KWOKNodeLabelValue})
		if err != nil {
			return false, err.Error(), nil
		}
		left := 0
		for _, n := range list.Items {
			if slices.Contains(names, n.Name) {
				left++
			}
		}
		return left == 0, fmt.Sprintf("%d of %d nodes still there", left, len(names)), nil
	})
	if err != nil {
		return fmt.Errorf("delete kwok nodes: %w", err)
	}
	return nil
}

// TolerateKWOK makes pod schedulable on KWOK nodes only and returns it: it adds a toleration of the
// KWOKTaintKey taint and the node selector KWOKNodeLabel=kwok.
func TolerateKWOK(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
		Key: KWOKTaintKey, Operator: corev1.TolerationOpEqual, Value: KWOKNodeValue, Effect: corev1.TaintEffectNoSchedule,
	})
	if pod.Spec.NodeSelector == nil {
		pod.Spec.NodeSelector = map[string]string{}
	}
	pod.Spec.NodeSelector[KWOKNodeLabel] = KWOKNodeLabelValue
	return pod
}

// NewKWOKPod returns a pod in the default namespace for KWOK nodes (TolerateKWOK; no node chosen):
// one container of ShellImage that kwok never runs (its pod-ready stage marks it Running once bound)
// and no termination grace period.
func NewKWOKPod(name string) *corev1.Pod {
	grace := int64(0)
	return TolerateKWOK(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "main", Image: ShellImage, ImagePullPolicy: corev1.PullNever}},
		},
	})
}
