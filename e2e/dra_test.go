package e2e_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// startDRAPlugin starts the plugin as node's DRA driver (startNodePlugin with
// cluster.KubeletAPIDRA) and waits until its pool shows n devices.
func startDRAPlugin(t *testing.T, c *cluster.Cluster, node *cluster.Node, opts cluster.PluginOptions, n int64) *cluster.Plugin {
	t.Helper()
	opts.KubeletAPI = cluster.KubeletAPIDRA
	return startNodePlugin(t, c, node, opts, n)
}

// applyDRA applies objs (cluster.Apply) and deletes them at cleanup, waiting until they are gone.
func applyDRA(t *testing.T, c *cluster.Cluster, objs ...runtime.Object) {
	t.Helper()
	if err := c.Apply(t.Context(), objs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rev := slices.Clone(objs)
		slices.Reverse(rev)
		if err := c.Delete(ctx, 45*time.Second, rev...); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// kubeletWatchesRegistry is the kubelet's log line (-v=2, klog) when its plugin watcher starts on its
// plugin registration directory.
const kubeletWatchesRegistry = `"Plugin Watcher Start" path=`

// TestDRA_Cluster checks, without a driver, what the DRA scenarios build on: the feature gates the
// cluster was given are on (off) in the API server and every kubelet; the API server serves
// resource.k8s.io/v1; a DeviceClass applied (created, then updated) reads back as applied, its
// extendedResourceName kept exactly when the API server has DRAExtendedResource on; a pod of a
// ResourceClaimTemplate gets its claim from the controller manager's resourceclaim controller (owned by
// the pod, the template's spec, not allocated), stays Pending as unschedulable for the scheduler's DRA
// plugin (no device anywhere), and its claim is deleted after it; every kubelet watches its (empty)
// plugin registration directory at the path outside its mount namespace, has no plugin registered,
// and no node has a ResourceSlice.
func TestDRA_Cluster(t *testing.T) {
	c := needCluster(t)
	ctx := t.Context()
	t.Logf("kubernetes %s, feature gates %v", c.Binaries.Version, c.FeatureGates)
	// The gates the cluster was started with (VGPU_E2E_FEATURE_GATES) reached the API server and every
	// kubelet.
	for gate, want := range c.FeatureGates {
		if on, err := c.FeatureEnabled(ctx, gate); err != nil || on != want {
			t.Errorf("kube-apiserver: feature gate %s on %v (%v), want %v", gate, on, err, want)
		}
		for _, n := range c.Nodes {
			if on, err := n.KubeletFeatureEnabled(ctx, gate); err != nil || on != want {
				t.Errorf("kubelet %s: feature gate %s on %v (%v), want %v", n.Name, gate, on, err, want)
			}
		}
	}

	res, err := c.Client.Discovery().ServerResourcesForGroupVersion(resourcev1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatalf("discovery of %s: %v", resourcev1.SchemeGroupVersion, err)
	}
	var served []string
	for _, r := range res.APIResources {
		served = append(served, r.Name)
	}
	for _, want := range []string{"deviceclasses", "resourceclaims", "resourceclaims/status", "resourceclaimtemplates", "resourceslices"} {
		if !slices.Contains(served, want) {
			t.Errorf("%s does not serve %s (serves %v)", resourcev1.SchemeGroupVersion, want, served)
		}
	}

	// The DeviceClass: created, then applied again with a second selector (the update path).
	ext := "e2e.unicore.mcyou.cc/dra-cluster-gpu"
	class := cluster.NewDeviceClass("e2e-dra-cluster.unicore.mcyou.cc", cluster.DRADriverName)
	class.Spec.ExtendedResourceName = &ext
	applyDRA(t, c, class)
	if class.UID == "" || class.ResourceVersion == "" {
		t.Fatalf("applied DeviceClass has no UID/resourceVersion: %+v", class.ObjectMeta)
	}
	update := cluster.NewDeviceClass(class.Name, cluster.DRADriverName)
	update.Spec.ExtendedResourceName = &ext
	update.Spec.Selectors = append(update.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes["` + cluster.DRADriverName + `"].type == "gpu"`}})
	if err := c.Apply(ctx, update); err != nil {
		t.Fatal(err)
	}
	got, err := c.Client.ResourceV1().DeviceClasses().Get(ctx, class.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, s := range got.Spec.Selectors {
		if s.CEL != nil {
			exprs = append(exprs, s.CEL.Expression)
		}
	}
	if want := []string{`device.driver == "` + cluster.DRADriverName + `"`, update.Spec.Selectors[1].CEL.Expression}; !slices.Equal(exprs, want) || got.UID != class.UID {
		t.Errorf("DeviceClass %s read back with selectors %q (uid %s), want %q (uid %s)", class.Name, exprs, got.UID, want, class.UID)
	}
	extOn, err := c.FeatureEnabled(ctx, "DRAExtendedResource")
	if err != nil {
		t.Fatal(err)
	}
	switch kept := got.Spec.ExtendedResourceName != nil && *got.Spec.ExtendedResourceName == ext; {
	case extOn && !kept:
		t.Errorf("DRAExtendedResource is on but the DeviceClass read back with extendedResourceName %v", got.Spec.ExtendedResourceName)
	case !extOn && got.Spec.ExtendedResourceName != nil:
		t.Errorf("DRAExtendedResource is off but the DeviceClass kept extendedResourceName %q", *got.Spec.ExtendedResourceName)
	}
	t.Logf("DRAExtendedResource on: %v (extendedResourceName read back: %v)", extOn, got.Spec.ExtendedResourceName != nil)

	// A pod of a ResourceClaimTemplate: its claim comes from the resourceclaim controller.
	tmpl := cluster.NewResourceClaimTemplate(metav1.NamespaceDefault, "dra-cluster-two-gpus", class.Name, 2)
	applyDRA(t, c, tmpl)
	submitted := time.Now()
	pod, err := c.SubmitPod(ctx, cluster.NewClaimPod("dra-cluster-pending", cluster.PodClaim{ResourceClaimTemplateName: tmpl.Name}, "sleep infinity"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePodAtCleanup(t, c, pod) })
	claim, err := c.WaitPodClaim(ctx, 30*time.Second, pod.Namespace, pod.Name, cluster.ClaimName, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: pod submitted -> its claim %s created: %s", claim.Name, time.Since(submitted).Round(time.Millisecond))
	if owner := metav1.GetControllerOf(claim); owner == nil || owner.Kind != "Pod" || owner.UID != pod.UID {
		t.Errorf("claim %s: controller %+v, want the pod %s (uid %s)", claim.Name, owner, pod.Name, pod.UID)
	}
	if got := claim.Annotations["resource.kubernetes.io/pod-claim-name"]; got != cluster.ClaimName {
		t.Errorf("claim %s: annotation resource.kubernetes.io/pod-claim-name %q, want %q", claim.Name, got, cluster.ClaimName)
	}
	if r := claim.Spec.Devices.Requests; len(r) != 1 || r[0].Exactly == nil || r[0].Exactly.DeviceClassName != class.Name || r[0].Exactly.Count != 2 {
		t.Errorf("claim %s: requests %+v, want the template's 2 devices of %s", claim.Name, r, class.Name)
	}
	cond, err := c.WaitPodUnschedulable(ctx, 30*time.Second, pod.Namespace, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s unschedulable: %s", pod.Name, cond.Message)
	if !strings.Contains(cond.Message, "cannot allocate all claims") {
		t.Errorf("pod %s: PodScheduled message %q, want the scheduler's DRA plugin's %q", pod.Name, cond.Message, "cannot allocate all claims")
	}
	if claim, err = c.Client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation != nil || len(claim.Status.ReservedFor) != 0 {
		t.Errorf("claim %s allocated without a driver: %+v", claim.Name, claim.Status)
	}
	if err := c.DeletePod(ctx, 40*time.Second, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	err = cluster.Poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		_, err := c.Client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "claim still there (" + errString(err) + ")", nil
	})
	if err != nil {
		t.Errorf("claim %s of the deleted pod: %v", claim.Name, err)
	}

	// The kubelets: the plugin watcher on each one's registry dir, nothing registered, no slices.
	for _, n := range c.Nodes {
		entries, err := os.ReadDir(n.PluginsRegistryDir)
		if err != nil {
			t.Errorf("node %s: %v", n.Name, err)
		} else if len(entries) != 0 {
			t.Errorf("node %s: %s not empty: %v", n.Name, n.PluginsRegistryDir, entries)
		}
		if fi, err := os.Stat(n.PluginsDir); err != nil || !fi.IsDir() {
			t.Errorf("node %s: plugins dir %s: %v", n.Name, n.PluginsDir, err)
		}
		lines, err := n.FindKubeletLog(kubeletWatchesRegistry + strconv.Quote(n.PluginsRegistryDir))
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) == 0 {
			t.Errorf("node %s: the kubelet's log has no line %s%q", n.Name, kubeletWatchesRegistry, n.PluginsRegistryDir)
		}
		socks, err := n.RegisteredPluginSockets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(socks) != 0 {
			t.Errorf("node %s: kubelet has plugins registered: %v", n.Name, socks)
		}
	}
	all, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 0 {
		t.Errorf("%d ResourceSlices without a driver: %v", len(all.Items), all.Items)
	}
	for _, n := range c.Nodes {
		if _, err := n.ResourcePool(ctx, cluster.DRADriverName); err == nil {
			t.Errorf("node %s has a pool of %s", n.Name, cluster.DRADriverName)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
