package e2e_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// TestDRA_Restart: a pod of a 2-GPU claim runs on a DRA node. The kubelet is restarted: it registers
// the driver again (the registration socket is still there) and deletes the node's slices at start,
// which the driver publishes again at once (new slice objects; the library alone would wait its 30 s
// sync delay); the pod keeps its container and GPUs, and a new 1-GPU claim
// prepares. Then the plugin is killed with SIGKILL (its claims' CDI specs stay) and started again on
// the same state file: registered, pool complete, both pods untouched, a third claim prepares on GPUs
// of its own; deleting the first pod makes the kubelet unprepare its claim through the new process:
// the spec file is removed and dump shows the claim unprepared.
func TestDRA_Restart(t *testing.T) {
	parallelDRA(t)
	c := needCluster(t)
	node, p := draNode(t, c, "vgpu-e2e-dra-restart", cluster.PluginOptions{}, 4)
	two := claimTemplate("dra-restart-two", 2, "")
	one := claimTemplate("dra-restart-one", 1, "")
	applyDRA(t, c, two, one)
	podA, rcA, devsA, _ := claimPodRun(t, c, node, "dra-restart-a", cluster.PodClaim{ResourceClaimTemplateName: two.Name}, draScript)

	before, err := node.ResourcePool(t.Context(), cluster.DRADriverName)
	if err != nil {
		t.Fatal(err)
	}
	r, err := node.RestartKubelet(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitLog(t.Context(), 30*time.Second, cluster.DRARegisteredLog, 2); err != nil {
		t.Fatalf("the new kubelet did not register the driver: %v", err)
	}
	t.Logf("timing: new kubelet started -> driver registered again: %s", time.Since(r.Started).Round(time.Millisecond))
	// The new kubelet deletes the node's slices when it starts: the pool is back once its slices are new
	// objects, complete.
	err = cluster.Poll(t.Context(), 45*time.Second, 20*time.Millisecond, func() (bool, string, error) {
		pool, err := node.ResourcePool(t.Context(), cluster.DRADriverName)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, s := range pool.Slices {
			if slices.ContainsFunc(before.Slices, func(o resourcev1.ResourceSlice) bool { return o.UID == s.UID }) {
				return false, "the slices from before the restart", nil
			}
		}
		return len(pool.Devices) == 4, fmt.Sprintf("%d devices", len(pool.Devices)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: new kubelet started -> its wipe of the node's slices repaired, pool complete again: %s", time.Since(r.Started).Round(time.Millisecond))
	checkClaimPodRunning(t, c, podA, devsA)
	podB, _, devsB, took := claimPodRun(t, c, node, "dra-restart-b", cluster.PodClaim{ResourceClaimTemplateName: one.Name}, draScript)
	t.Logf("after the kubelet restart: a new claim got %v, pod running after %s", devsB, took.Round(time.Millisecond))
	if !disjoint(devsA, devsB) {
		t.Errorf("new claim got %v, overlapping the running pod's %v", devsB, devsA)
	}

	p.KillHard()
	if files := claimSpecFiles(t, node, string(rcA.UID)); len(files) != 1 {
		t.Errorf("after SIGKILL: spec files of claim %s: %v, want its one spec", rcA.UID, files)
	}
	killed := time.Now()
	p2 := startDRAPlugin(t, c, node, cluster.PluginOptions{StatePath: p.StatePath}, 4)
	t.Logf("timing: SIGKILL -> restarted driver registered, pool complete: %s", time.Since(killed).Round(time.Millisecond))
	checkClaimPodRunning(t, c, podA, devsA)
	checkClaimPodRunning(t, c, podB, devsB)
	podC, _, devsC, took := claimPodRun(t, c, node, "dra-restart-c", cluster.PodClaim{ResourceClaimTemplateName: one.Name}, draScript)
	t.Logf("after the plugin restart: a new claim got %v, pod running after %s", devsC, took.Round(time.Millisecond))
	if !disjoint(devsC, append(slices.Clone(devsA), devsB...)) {
		t.Errorf("new claim got %v, overlapping the running pods' %v and %v", devsC, devsA, devsB)
	}
	d, err := p2.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if recs := d.ClaimsOf(string(rcA.UID)); len(recs) != 1 || recs[0].State != "prepared" {
		t.Errorf("restarted plugin's dump: claim %s records %+v, want one prepared", rcA.UID, recs)
	}

	del := time.Now()
	if err := c.DeletePod(t.Context(), 40*time.Second, podA.Namespace, podA.Name); err != nil {
		t.Fatal(err)
	}
	waitClaimUnprepared(t, p2, string(rcA.UID))
	t.Logf("timing: pod of a claim prepared before the SIGKILL deleted -> unprepared by the new process: %s", time.Since(del).Round(time.Millisecond))
	checkClaimPodRunning(t, c, podB, devsB)
	checkClaimPodRunning(t, c, podC, devsC)
	// The other pods go while the driver runs (the kubelet cannot unprepare without it).
	for _, pod := range []*corev1.Pod{podB, podC} {
		rc, err := c.WaitPodClaim(t.Context(), 10*time.Second, pod.Namespace, pod.Name, cluster.ClaimName, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DeletePod(t.Context(), 40*time.Second, pod.Namespace, pod.Name); err != nil {
			t.Fatal(err)
		}
		waitClaimUnprepared(t, p2, string(rc.UID))
	}
}

// TestDRA_SharedClaim: one ResourceClaim of 2 GPUs (not from a template) is used by two pods: both run
// with the same VIRTUAL_GPU_IDS, the claim's devices, the claim is reserved for both, prepared once (one
// record in dump, one spec file); the first pod deleted, the claim stays prepared for the second; the
// second deleted, the claim is unprepared (spec file gone) while the ResourceClaim object remains.
func TestDRA_SharedClaim(t *testing.T) {
	parallelDRA(t)
	c := needCluster(t)
	node, p := draNode(t, c, "vgpu-e2e-dra-shared", cluster.PluginOptions{}, 4)
	rc := cluster.NewResourceClaim(metav1.NamespaceDefault, "dra-shared", draClassName, 2)
	applyDRA(t, c, rc)
	src := cluster.PodClaim{ResourceClaimName: rc.Name}
	pod1, _, devs, _ := claimPodRun(t, c, node, "dra-shared-1", src, draScript)
	pod2, rc2, devs2, _ := claimPodRun(t, c, node, "dra-shared-2", src, draScript)
	if len(devs) != 2 || !slices.Equal(devs, devs2) {
		t.Fatalf("claim %s: devices %v then %v, want the same 2", rc.Name, devs, devs2)
	}
	ids1, ids2 := podIDs(t, c, pod1), podIDs(t, c, pod2)
	if !slices.Equal(ids1, devs) || !slices.Equal(ids2, devs) {
		t.Errorf("%s: pod 1 %v, pod 2 %v, want both the claim's %v", cluster.EnvIDs, ids1, ids2, devs)
	}
	var reserved []string
	for _, r := range rc2.Status.ReservedFor {
		reserved = append(reserved, r.Name)
	}
	slices.Sort(reserved)
	if !slices.Equal(reserved, []string{pod1.Name, pod2.Name}) {
		t.Errorf("claim %s reserved for %v, want both pods", rc.Name, reserved)
	}
	d, err := p.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if recs := d.ClaimsOf(string(rc2.UID)); len(recs) != 1 || recs[0].State != "prepared" || !slices.Equal(recs[0].DeviceIDs, devs) {
		t.Errorf("dump: claim %s records %+v, want one prepared with %v", rc2.UID, recs, devs)
	}
	if files := claimSpecFiles(t, node, string(rc2.UID)); len(files) != 1 {
		t.Errorf("spec files of claim %s: %v, want one", rc2.UID, files)
	}

	if err := c.DeletePod(t.Context(), 40*time.Second, pod1.Namespace, pod1.Name); err != nil {
		t.Fatal(err)
	}
	// The claim stays prepared for the second pod (give the kubelet time to act wrongly: it unprepares
	// within a few seconds of a pod's deletion when no pod of the node uses the claim).
	err = cluster.Poll(t.Context(), 30*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		cur, err := c.Client.ResourceV1().ResourceClaims(rc.Namespace).Get(t.Context(), rc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return len(cur.Status.ReservedFor) == 1, fmt.Sprintf("reserved for %+v", cur.Status.ReservedFor), nil
	})
	if err != nil {
		t.Fatalf("claim %s after the first pod was deleted: %v", rc.Name, err)
	}
	// For 2 s, every dump shows the claim still prepared with its spec (the kubelet unprepares within a
	// second or so when no pod of the node uses a claim).
	stays := time.Now().Add(2 * time.Second)
	err = cluster.Poll(t.Context(), 10*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		d, err := p.Dump(t.Context())
		if err != nil {
			return false, err.Error(), nil
		}
		recs, files := d.ClaimsOf(string(rc2.UID)), claimSpecFiles(t, node, string(rc2.UID))
		if len(recs) != 1 || recs[0].State != "prepared" || len(files) != 1 {
			return false, "", fmt.Errorf("after the first pod left: claim records %+v, spec files %v, want still prepared", recs, files)
		}
		return time.Now().After(stays), "prepared", nil
	})
	if err != nil {
		t.Error(err)
	}
	checkClaimPodRunning(t, c, pod2, devs)

	del := time.Now()
	if err := c.DeletePod(t.Context(), 40*time.Second, pod2.Namespace, pod2.Name); err != nil {
		t.Fatal(err)
	}
	waitClaimUnprepared(t, p, string(rc2.UID))
	t.Logf("timing: last pod of the shared claim deleted -> unprepared, spec gone: %s", time.Since(del).Round(time.Millisecond))
	if _, err := c.Client.ResourceV1().ResourceClaims(rc.Namespace).Get(t.Context(), rc.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the ResourceClaim itself: %v, want it kept", err)
	}
}

// TestDRA_ClaimDeletedWhileStarting: a pod's ResourceClaim is deleted as soon as the scheduler has
// allocated it, while the pod starts (the kubelet prepares it or is about to). Whatever the pod does
// then (logged), once it is deleted the claim goes away, no CDI spec file of it (nor a temporary one)
// is left in the node's spec directory, and the plugin's dump has no prepared record of it.
func TestDRA_ClaimDeletedWhileStarting(t *testing.T) {
	parallelDRA(t)
	c := needCluster(t)
	node, p := draNode(t, c, "vgpu-e2e-dra-deleted", cluster.PluginOptions{}, 4)
	rc := cluster.NewResourceClaim(metav1.NamespaceDefault, "dra-deleted", draClassName, 2)
	applyDRA(t, c, rc)
	pod := claimPodSubmit(t, c, node, "dra-deleted", cluster.PodClaim{ResourceClaimName: rc.Name}, draScript)
	alloc, err := c.WaitPodClaim(t.Context(), 30*time.Second, pod.Namespace, pod.Name, cluster.ClaimName, cluster.ClaimAllocated)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Client.ResourceV1().ResourceClaims(rc.Namespace).Delete(t.Context(), rc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var phase corev1.PodPhase
	_ = cluster.Poll(t.Context(), 15*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		cur, err := c.Client.CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		phase = cur.Status.Phase
		return phase != corev1.PodPending, string(phase), nil
	})
	d, _ := p.Dump(t.Context())
	var recs []cluster.DumpClaim
	if d != nil {
		recs = d.ClaimsOf(string(alloc.UID))
	}
	t.Logf("claim %s (devices %v) deleted while its pod started: the pod is %s %s later; claim records %+v, spec files %v",
		alloc.Name, cluster.AllocatedDevices(alloc), phase, time.Since(deleted).Round(time.Millisecond), recs, claimSpecFiles(t, node, string(alloc.UID)))

	if err := c.DeletePod(t.Context(), 40*time.Second, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	err = cluster.Poll(t.Context(), 30*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		_, err := c.Client.ResourceV1().ResourceClaims(rc.Namespace).Get(t.Context(), rc.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "claim still there (" + errString(err) + ")", nil
	})
	if err != nil {
		t.Fatalf("claim %s: %v", rc.Name, err)
	}
	_, err = p.WaitDump(t.Context(), 30*time.Second, 100*time.Millisecond, func(d *cluster.DumpDoc) (bool, string, error) {
		recs := d.ClaimsOf(string(alloc.UID))
		files := claimSpecFiles(t, node, string(alloc.UID))
		prepared := len(recs) > 0 && recs[0].State == "prepared"
		return !prepared && len(files) == 0, fmt.Sprintf("records %+v, spec files %v", recs, files), nil
	})
	if err != nil {
		t.Fatalf("claim %s: %v", alloc.UID, err)
	}
	t.Logf("timing: claim deleted -> gone, no spec, no prepared record: %s", time.Since(deleted).Round(time.Millisecond))
}
