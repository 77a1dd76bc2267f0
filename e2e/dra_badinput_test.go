package e2e_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// kubeletPrepareFailed is the reason of the kubelet's event when a pod's claims cannot be prepared.
const kubeletPrepareFailed = "FailedPrepareDynamicResources"

// waitPodEvent waits for an event of the pod with the reason whose message contains substr, and returns
// the message.
func waitPodEvent(t *testing.T, c *cluster.Cluster, pod *corev1.Pod, reason, substr string) string {
	t.Helper()
	sel := fields.Set{"involvedObject.name": pod.Name, "involvedObject.uid": string(pod.UID)}.AsSelector().String()
	var msg string
	err := cluster.Poll(t.Context(), time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		evs, err := c.Client.CoreV1().Events(pod.Namespace).List(t.Context(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, e := range evs.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, substr) {
				msg = e.Message
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("events %q", seen), nil
	})
	if err != nil {
		t.Fatalf("pod %s: no event %s naming %q: %v", pod.Name, reason, substr, err)
	}
	return msg
}

// checkNothingPrepared checks that the claim uid left no CDI spec file (nor a temporary one) in the
// node's spec directory, the directory has no temporary file at all, and the plugin's dump has no
// prepared record of it.
func checkNothingPrepared(t *testing.T, p *cluster.Plugin, uid string) {
	t.Helper()
	if files := claimSpecFiles(t, p.Node, uid); len(files) != 0 {
		t.Errorf("claim %s: spec files %v, want none", uid, files)
	}
	entries, err := os.ReadDir(p.Node.CDISpecDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left in %s", e.Name(), p.Node.CDISpecDir)
		}
	}
	d, err := p.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.ClaimsOf(uid) {
		if r.State == "prepared" {
			t.Errorf("dump: claim %s has a prepared record %+v", uid, r)
		}
	}
}

// TestDRA_BadInput: (a) the binary with -kubelet-api=dra but no -node-name, an unreadable -kubeconfig,
// or no API access at all exits 2 with an error naming what is missing; (b) a claim whose opaque
// configuration (GpuConfig) has an unknown field: Prepare fails, the pod's kubelet event
// FailedPrepareDynamicResources names the field, no CDI spec is written (nor a temporary file left) and
// dump has no prepared record; (c) a claim allocated fake-3 of a node whose profile (a -config directory,
// changed live from 4 GPUs to 2) no longer has it: Prepare fails with an error naming fake-3 and what is
// served now, nothing written. The allocation in (c) is written by the test (claim status, as the
// scheduler would) and the pod bound after the change, so the kubelet prepares a claim of the old pool.
func TestDRA_BadInput(t *testing.T) {
	parallelDRA(t)
	c := needCluster(t)
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	t.Run("no API access", func(t *testing.T) {
		dir := t.TempDir()
		common := []string{"-kubelet-api=dra", "-state=" + filepath.Join(dir, "state.db"), "-admin-socket=" + filepath.Join(dir, "admin.sock"),
			"-kubelet-registry-dir=" + filepath.Join(dir, "registry"), "-kubelet-plugins-dir=" + filepath.Join(dir, "plugins"),
			"-cdi-spec-dir=" + filepath.Join(dir, "cdi"), "-pod-resources-socket=" + filepath.Join(dir, "pod-resources.sock")}
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"no -node-name", nil, "-kubelet-api=dra needs -node-name"},
			{"kubeconfig missing", []string{"-node-name=n1", "-kubeconfig=" + filepath.Join(dir, "nope")}, "-kubeconfig: kubeconfig " + filepath.Join(dir, "nope")},
			{"no API access", []string{"-node-name=n1"}, "-kubelet-api=dra needs API access"},
		} {
			cmd := exec.CommandContext(t.Context(), pluginBin, append(append([]string{}, common...), tc.args...)...)
			cmd.Dir = dir
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir} // no KUBECONFIG, NODE_NAME, service account
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("%s: %v, want exit status 2", tc.name, err)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("%s: stderr %q, want %q", tc.name, stderr.String(), tc.want)
			}
			t.Logf("%s: exit %v after %s: %s", tc.name, err, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr.String()))
		}
	})

	node := addContainerd2Node(t, c, "vgpu-e2e-dra-bad")
	applyDRAClass(t, c)

	t.Run("opaque config unknown field", func(t *testing.T) {
		p := startDRAPlugin(t, c, node, cluster.PluginOptions{}, 4)
		tmpl := claimTemplate("dra-bad-config", 1, "")
		tmpl.Spec.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{
			Requests: []string{cluster.ClaimName},
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver:     cluster.DRADriverName,
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpu.unicore.mcyou.cc/v1alpha1","kind":"GpuConfig","env":{"A":"b"},"sharing":{"strategy":"TimeSlicing"}}`)},
			}},
		}}
		applyDRA(t, c, tmpl)
		pod := claimPodSubmit(t, c, node, "dra-bad-config", cluster.PodClaim{ResourceClaimTemplateName: tmpl.Name}, draScript)
		rc, err := c.WaitPodClaim(t.Context(), 30*time.Second, pod.Namespace, pod.Name, cluster.ClaimName, cluster.ClaimAllocated)
		if err != nil {
			t.Fatal(err)
		}
		msg := waitPodEvent(t, c, pod, kubeletPrepareFailed, `unknown field "sharing"`)
		t.Logf("pod event %s: %s", kubeletPrepareFailed, msg)
		if cur, err := c.Client.CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{}); err != nil || cur.Status.Phase != corev1.PodPending {
			t.Errorf("pod %s: %v %v, want Pending", pod.Name, cur.Status.Phase, err)
		}
		checkNothingPrepared(t, p, string(rc.UID))
		if lines, err := p.FindLog("claim not prepared"); err != nil || len(lines) == 0 {
			t.Errorf("plugin log: no \"claim not prepared\" line (%v)", err)
		}
		if err := c.DeletePod(t.Context(), 40*time.Second, pod.Namespace, pod.Name); err != nil {
			t.Fatal(err)
		}
		checkNothingPrepared(t, p, string(rc.UID))
	})

	t.Run("device removed by a profile change", func(t *testing.T) {
		profiles := filepath.Join(t.TempDir(), "profiles")
		if err := os.MkdirAll(profiles, 0o755); err != nil {
			t.Fatal(err)
		}
		write := func(n int) {
			t.Helper()
			// Written aside and renamed, as a ConfigMap update swaps its files.
			tmp := filepath.Join(profiles, ".small.tmp")
			if err := os.WriteFile(tmp, fmt.Appendf(nil, "version: v1\nflags:\n  devices: %d\n", n), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(profiles, "small.yaml")); err != nil {
				t.Fatal(err)
			}
		}
		write(4)
		p := startDRAPlugin(t, c, node, cluster.PluginOptions{Devices: -1, Args: []string{"-config=" + profiles, "-config-default=small"}}, 4)

		rc := cluster.NewResourceClaim(metav1.NamespaceDefault, "dra-bad-removed", draClassName, 1)
		applyDRA(t, c, rc)
		pod := cluster.NewClaimPod("dra-bad-removed", cluster.PodClaim{ResourceClaimName: rc.Name}, draScript)
		pod.Spec.SchedulerName = "e2e-no-scheduler" // bound below, by the test
		created, err := c.SubmitPod(t.Context(), pod)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deletePodAtCleanup(t, c, created) })

		changed := time.Now()
		write(2)
		if _, err := node.WaitResourcePool(t.Context(), 30*time.Second, cluster.DRADriverName, 2); err != nil {
			t.Fatal(err)
		}
		t.Logf("timing: profile file changed 4 -> 2 GPUs -> pool of 2 published: %s", time.Since(changed).Round(time.Millisecond))

		// The allocation the scheduler made before the change: fake-3, reserved for the pod.
		rc.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: cluster.ClaimName, Driver: cluster.DRADriverName, Pool: node.Name, Device: "fake-3",
		}}}}
		rc.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: created.Name, UID: created.UID}}
		if _, err := c.Client.ResourceV1().ResourceClaims(rc.Namespace).UpdateStatus(t.Context(), rc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: created.Name, Namespace: created.Namespace},
			Target: corev1.ObjectReference{Kind: "Node", Name: node.Name}}
		if err := c.Client.CoreV1().Pods(created.Namespace).Bind(t.Context(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		msg := waitPodEvent(t, c, created, kubeletPrepareFailed, `"fake-3"`)
		t.Logf("pod event %s: %s", kubeletPrepareFailed, msg)
		if !strings.Contains(msg, "not served") {
			t.Errorf("event %q: want it to say the device is not served", msg)
		}
		checkNothingPrepared(t, p, string(rc.UID))
		if err := c.DeletePod(t.Context(), 40*time.Second, created.Namespace, created.Name); err != nil {
			t.Fatal(err)
		}
	})
}
