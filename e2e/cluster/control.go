package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The Service network. 198.18.0.0/15 is reserved for benchmarking (RFC 2544) and never routed, so the
// DNAT rule for the kubernetes Service's ClusterIP cannot hide a real address of the host's networks.
const (
	// ServiceCIDR is the API server's --service-cluster-ip-range.
	ServiceCIDR = "198.18.0.0/24"
	// KubernetesServiceIP is the ClusterIP of the default kubernetes Service (the range's first
	// address): KUBERNETES_SERVICE_HOST in every container.
	KubernetesServiceIP = "198.18.0.1"
	// kubernetesServicePort is the kubernetes Service's port, fixed at 443 by the API server.
	kubernetesServicePort = 443
	// serviceChain is the nat chain holding the harness's DNAT rule; OUTPUT jumps to it.
	serviceChain = "VGPU-E2E-SERVICES"
)

// ControllerManagerControllers are the kube-controller-manager controllers the cluster runs: enough for
// DaemonSets, service-account tokens in pods, the not-ready taint's removal, owner-reference garbage
// collection, namespace deletion and DRA's ResourceClaims (the resourceclaim controller creates a pod's
// claims from its ResourceClaimTemplates, deletes them after the pod and clears reservations of pods
// that are gone). The others (Deployments, Jobs, volumes, quotas, …) are left off to save the 2-core
// machine's CPU; taint-based eviction is off too, so a stopped kubelet's pods stay.
var ControllerManagerControllers = []string{
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"daemonset-controller",
	"node-lifecycle-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"resourceclaim-controller",
}

// startServiceProxy makes the default kubernetes Service reachable the way in-cluster clients look for
// it: the kubelet sets KUBERNETES_SERVICE_HOST/PORT of every container to the Service's ClusterIP and
// port, and with no kube-proxy nothing answers there. The harness plays kube-proxy for this one Service:
// one DNAT rule in the nat table's OUTPUT path (pods use hostNetwork, so their connections are the
// host's locally generated traffic) sends ClusterIP:443 to the endpoint the API server published for
// itself (<host IP>:<port>, from the Service's EndpointSlice). Nothing else of the host's networking
// changes; Stop, or the next Start after an interrupted run, removes the rule.
func (c *Cluster) startServiceProxy(ctx context.Context) error {
	var endpoint string
	err := poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		svc, err := c.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if svc.Spec.ClusterIP != c.ServiceHost || len(svc.Spec.Ports) != 1 || int(svc.Spec.Ports[0].Port) != c.ServicePort {
			return false, "", fmt.Errorf("kubernetes Service at %s %v, want %s port %d", svc.Spec.ClusterIP, svc.Spec.Ports, c.ServiceHost, c.ServicePort)
		}
		list, err := c.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, s := range list.Items {
			if len(s.Ports) != 1 || s.Ports[0].Port == nil {
				continue
			}
			for _, e := range s.Endpoints {
				if len(e.Addresses) > 0 {
					endpoint = net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(*s.Ports[0].Port)))
					return true, "", nil
				}
			}
		}
		return false, fmt.Sprintf("%d EndpointSlices without an endpoint", len(list.Items)), nil
	})
	if err != nil {
		return fmt.Errorf("endpoint of the kubernetes Service: %w", err)
	}
	if want := net.JoinHostPort(c.hostIP, strconv.Itoa(c.ports.apiserver)); endpoint != want {
		return fmt.Errorf("the API server published endpoint %s for the kubernetes Service, want %s", endpoint, want)
	}
	c.serviceProxy = true // from here on Stop removes whatever part of the rule exists
	for _, args := range [][]string{
		{"-N", serviceChain},
		{"-A", serviceChain, "-d", c.ServiceHost + "/32", "-p", "tcp", "--dport", strconv.Itoa(c.ServicePort),
			"-m", "comment", "--comment", "vgpu-e2e: default/kubernetes " + c.Dir, "-j", "DNAT", "--to-destination", endpoint},
		{"-A", "OUTPUT", "-j", serviceChain},
	} {
		if out, err := iptables(args...); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
	}
	// Check the route the way a pod's client takes it: ClusterIP:443, verifying the serving certificate
	// against the CA the pods get.
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Host = "https://" + net.JoinHostPort(c.ServiceHost, strconv.Itoa(c.ServicePort))
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return poll(ctx, 10*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		b, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", cfg.Host, err), nil
		}
		return string(b) == "ok", string(b), nil
	})
}

// removeServiceProxy removes the harness's nat chain and the OUTPUT rule jumping to it, if present,
// and reports whether it was.
func removeServiceProxy() (bool, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return false, fmt.Errorf("iptables (Debian package iptables): %w", err)
	}
	// Listing a missing chain fails with a misleading message under iptables-nft: list the table.
	out, err := iptables("-S")
	if err != nil {
		return false, fmt.Errorf("list the nat table: %w", err)
	}
	if !slices.Contains(strings.Split(out, "\n"), "-N "+serviceChain) {
		return false, nil
	}
	// -D removes one rule per call; a rule added twice (it never is) would need a second call.
	for range 10 {
		if _, err := iptables("-D", "OUTPUT", "-j", serviceChain); err != nil {
			break
		}
	}
	var errs []error
	for _, args := range [][]string{{"-F", serviceChain}, {"-X", serviceChain}} {
		if out, err := iptables(args...); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s", err, out))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return true, fmt.Errorf("remove the DNAT rule of the kubernetes Service: %w", err)
	}
	return true, nil
}

// iptables runs `iptables -w -t nat args...` and returns its output.
func iptables(args ...string) (string, error) {
	return run("/", nil, append([]string{"iptables", "-w", "-t", "nat"}, args...)...)
}

// startScheduler starts kube-scheduler with the admin kubeconfig, no leader election and its secure
// port on loopback, and waits until its /healthz answers.
func (c *Cluster) startScheduler(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "kube-scheduler")
	p, err := c.startControlPlaneComponent(ctx, "kube-scheduler", dir, c.ports.scheduler, c.Binaries.Scheduler, c.kwokRateArgs(kwokSchedulerQPS)...)
	c.scheduler = p
	return err
}

// The API rate limits (QPS; the burst is twice that) of kube-scheduler and kube-controller-manager in a
// KWOK cluster, for 1,000 nodes and thousands of pods: their defaults (50 and 20 QPS) make the
// scheduler's bindings and the controllers' status updates queue for minutes.
const (
	kwokSchedulerQPS         = 200
	kwokControllerManagerQPS = 100
)

// kwokControllers are the controllers a KWOK cluster's controller manager runs besides
// ControllerManagerControllers: the pod garbage collector deletes the pods of deleted (fake) nodes.
var kwokControllers = []string{"pod-garbage-collector-controller"}

// kwokRateArgs are the --kube-api-qps and --kube-api-burst flags (qps, 2*qps) of a KWOK cluster's
// scheduler and controller manager; none for other clusters. (kube-scheduler still honours the
// deprecated flags when it has no --config, as here.)
func (c *Cluster) kwokRateArgs(qps int) []string {
	if c.KWOKBinaries.KWOK == "" {
		return nil
	}
	return []string{fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", 2*qps)}
}

// startControllerManager starts kube-controller-manager with ControllerManagerControllers, the
// service-account signing key (legacy token Secrets) and the serving CA as the root CA it publishes to
// every namespace as the kube-root-ca.crt ConfigMap (the ca.crt of pods' service-account volumes).
func (c *Cluster) startControllerManager(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "kube-controller-manager")
	controllers := ControllerManagerControllers
	if c.KWOKBinaries.KWOK != "" {
		controllers = append(slices.Clone(controllers), kwokControllers...)
	}
	p, err := c.startControlPlaneComponent(ctx, "kube-controller-manager", dir, c.ports.controllerManager, c.Binaries.ControllerManager,
		append([]string{
			"--controllers=" + strings.Join(controllers, ","),
			"--service-account-private-key-file=" + c.saKey,
			"--root-ca-file=" + c.CAFile,
			"--use-service-account-credentials=false",
		}, c.kwokRateArgs(kwokControllerManagerQPS)...)...,
	)
	c.controllerManager = p
	return err
}

// startControlPlaneComponent starts kube-scheduler or kube-controller-manager: the admin kubeconfig, no
// leader election, its own endpoint on 127.0.0.1:port with a self-signed certificate in dir and without
// delegated authentication (with it the component keeps looking for a client CA this API server does
// not publish), so only the always-allowed paths (/healthz, /readyz, /livez) answer. It waits until /healthz
// answers ok. It returns the process also when the wait fails, for Stop.
func (c *Cluster) startControlPlaneComponent(ctx context.Context, name, dir string, port int, binary string, extra ...string) (*Process, error) {
	if err := mkdirFor(filepath.Join(dir, "x")); err != nil {
		return nil, err
	}
	argv := append([]string{binary,
		"--kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + dir,
		"--profiling=false",
		"-v=2",
	}, append(c.featureGateArgs(), extra...)...)
	p, err := c.reg.start(processSpec{name: name, argv: argv, dir: dir, logPath: c.logPath(name)})
	if err != nil {
		return nil, err
	}
	c.log.Logf("%s serving on 127.0.0.1:%d", name, port)
	healthz := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	err = poll(ctx, 60*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("%s exited: %w (log %s)", name, p.ExitErr(), p.LogPath)
		}
		resp, err := httpsProbe.Get(healthz)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	return p, err
}
