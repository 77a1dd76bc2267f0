package e2e_test

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

const (
	probeImage  = "vgpu-e2e.local/incluster-probe:e2e"
	probePrefix = "incluster-probe: " // cmd/inclusterprobe's line prefix
)

// probeReport is the JSON line cmd/inclusterprobe prints.
type probeReport struct {
	Host   string            `json:"host"`
	User   string            `json:"user"`
	Groups []string          `json:"groups"`
	Node   string            `json:"node"`
	Labels map[string]string `json:"labels"`
}

// TestInClusterAPI: the cluster runs what a DaemonSet whose pods talk to the API server needs. A
// DaemonSet (no nodeSelector) of hostNetwork pods running cmd/inclusterprobe gets one pod on every node
// (DaemonSet controller, scheduler, no node left with the not-ready taint); each pod has the
// ServiceAccount admission plugin's token volume, and client-go's rest.InClusterConfig in it reaches
// the API server at the kubernetes Service's ClusterIP:443 from KUBERNETES_SERVICE_HOST/PORT, verifies
// it with the mounted ca.crt, is authenticated as system:serviceaccount:default:default and reads its own
// Node's labels. Deleting the DaemonSet removes its pods (garbage collector).
func TestInClusterAPI(t *testing.T) {
	c := needCluster(t)
	for _, n := range c.Nodes {
		node, err := n.Get(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(node.Spec.Taints) != 0 {
			t.Errorf("node %s has taints %v, want none (the node lifecycle controller lifts not-ready)", n.Name, node.Spec.Taints)
		}
	}
	start := time.Now()
	bin, err := cluster.BuildStatic(t.Context(), moduleDir, "./cmd/inclusterprobe", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ImportBinaryImage(probeImage, bin, "/usr/bin/incluster-probe", []string{"/usr/bin/incluster-probe"}); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: inclusterprobe built and imported into %d nodes: %s", len(c.Nodes), time.Since(start).Round(time.Millisecond))

	labels := map[string]string{"app": "incluster-probe"}
	grace := int64(1)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "incluster-probe", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:                   true,
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:            "probe",
						Image:           probeImage,
						ImagePullPolicy: corev1.PullNever,
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"},
						}}},
					}},
				},
			},
		},
	}
	start = time.Now()
	created, err := c.Client.AppsV1().DaemonSets(ds.Namespace).Create(t.Context(), ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DeleteDaemonSet(ctx, 45*time.Second, created.Namespace, created.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	pods, err := c.WaitDaemonSetReady(t.Context(), time.Minute, ds.Namespace, ds.Name, len(c.Nodes))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: DaemonSet created -> %d pods ready: %s", len(pods), time.Since(start).Round(time.Millisecond))

	wantHost := "https://" + net.JoinHostPort(c.ServiceHost, strconv.Itoa(c.ServicePort))
	var nodes []string
	for _, pod := range pods {
		nodes = append(nodes, pod.Spec.NodeName)
		if !hasServiceAccountToken(&pod) {
			t.Errorf("pod %s has no projected service-account token volume: %+v", pod.Name, pod.Spec.Volumes)
		}
		log, err := c.WaitPodLog(t.Context(), 30*time.Second, pod.Namespace, pod.Name, "probe", probePrefix+"{")
		if err != nil {
			t.Errorf("pod %s on %s: %v", pod.Name, pod.Spec.NodeName, err)
			continue
		}
		var r probeReport
		for _, line := range strings.Split(log, "\n") {
			if rest, ok := strings.CutPrefix(line, probePrefix+"{"); ok {
				if err := json.Unmarshal([]byte("{"+rest), &r); err != nil {
					t.Errorf("pod %s: decode %q: %v", pod.Name, line, err)
				}
			}
		}
		t.Logf("pod %s on %s: %+v", pod.Name, pod.Spec.NodeName, r)
		if r.Host != wantHost {
			t.Errorf("pod %s: in-cluster config used %s, want the kubernetes Service's %s", pod.Name, r.Host, wantHost)
		}
		if want := "system:serviceaccount:" + pod.Namespace + ":default"; r.User != want {
			t.Errorf("pod %s: API server saw user %q, want %q", pod.Name, r.User, want)
		}
		if r.Node != pod.Spec.NodeName || r.Labels[corev1.LabelHostname] != pod.Spec.NodeName {
			t.Errorf("pod %s on %s read node %s with labels %v", pod.Name, pod.Spec.NodeName, r.Node, r.Labels)
		}
	}
	slices.Sort(nodes)
	if want := slices.Sorted(slices.Values(c.NodeNames())); !slices.Equal(nodes, want) {
		t.Errorf("DaemonSet pods on nodes %v, want one on each of %v", nodes, want)
	}

	start = time.Now()
	if err := c.DeleteDaemonSet(t.Context(), 45*time.Second, created.Namespace, created.Name); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: DaemonSet deleted -> its pods gone (garbage collector): %s", time.Since(start).Round(time.Millisecond))
}

// hasServiceAccountToken reports whether the pod has the projected volume with a service-account token
// that the ServiceAccount admission plugin adds.
func hasServiceAccountToken(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}
