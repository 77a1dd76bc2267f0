package e2e_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/cluster"
)

// healthBound is issue 6's bound: a health change reaches the Node's allocatable within a second.
const healthBound = time.Second

// demoPod returns the seed's vgpu-demo pod (testdata/vgpu-demo.yaml): 2 devices, container "demo".
func demoPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pod, err := cluster.LoadPod(filepath.Join(moduleDir, "testdata", "vgpu-demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// findAllocation returns the newest allocation record whose device ids are ids (sorted), or nil.
func findAllocation(d *cluster.DumpDoc, ids []string) *cluster.DumpAllocation {
	for i := range d.Allocations {
		if slices.Equal(d.Allocations[i].SortedIDs(), ids) {
			return &d.Allocations[i]
		}
	}
	return nil
}

// TestHealth (issue 6): `health set fake-1 unhealthy` takes one device out of the Node's allocatable
// within a second, `health set fake-1 healthy` brings it back, and `dump` (table and JSON) run against the
// running plugin shows the demo pod's allocation. The demo pod keeps running throughout.
func TestHealth(t *testing.T) {
	c := needCluster(t)
	plugin := startPlugin(t, c, cluster.PluginOptions{})
	running := runPod(t, c, demoPod(t))
	ids := podDevices(t, c, running, 2)

	// dump while the plugin runs: it answers over the admin socket.
	table, err := plugin.CLI(t.Context(), "dump")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dump:\n%s", table)
	for _, id := range ids {
		if !strings.Contains(table, id) {
			t.Errorf("dump table does not mention the demo pod's device %s", id)
		}
	}
	if want := strings.Join(ids, ","); !strings.Contains(table, want) {
		t.Errorf("dump table has no allocation of %s", want)
	}
	doc, err := plugin.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != "virtual-gpu.unicore.mcyou.cc/v1" || doc.Kind != "Snapshot" {
		t.Errorf("dump -o json: apiVersion %q kind %q, want virtual-gpu.unicore.mcyou.cc/v1 Snapshot", doc.APIVersion, doc.Kind)
	}
	if doc.Source.Type != "plugin" || doc.Source.Path != plugin.AdminSocket {
		t.Errorf("dump -o json: source %+v, want the running plugin at %s", doc.Source, plugin.AdminSocket)
	}
	alloc := findAllocation(doc, ids)
	if alloc == nil {
		t.Fatalf("dump -o json has no allocation of the demo pod's devices %v: %+v", ids, doc.Allocations)
	}
	if got := alloc.Envs[cluster.EnvIDs]; got != strings.Join(ids, ",") {
		t.Errorf("allocation %d: %s=%q, want %q", alloc.Seq, cluster.EnvIDs, got, strings.Join(ids, ","))
	}
	for _, id := range ids {
		if d := doc.Device(id); d == nil || d.Holder == nil || d.Holder.Seq != alloc.Seq {
			t.Errorf("dump -o json: device %s: %+v, want holder seq %d", id, d, alloc.Seq)
		}
	}

	for _, step := range []struct {
		health string
		args   []string
		want   int64
	}{
		{"unhealthy", []string{"--reason", "e2e"}, 3},
		{"healthy", nil, 4},
	} {
		since := time.Now()
		out, err := plugin.CLI(t.Context(), append([]string{"health", "set", "fake-1", step.health}, step.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		returned := time.Now()
		at, err := c.WaitNodeResource(t.Context(), 10*time.Second, cluster.ResourceName, 4, step.want)
		if err != nil {
			t.Fatal(err)
		}
		took := at.Sub(since)
		pushed, perr := c.WaitKubeletLog(t.Context(), 5*time.Second, kubeletGotDevices, since)
		pushedAfter := "-"
		if perr == nil {
			pushedAfter = pushed.Time.Sub(since).Round(time.Millisecond).String()
		}
		t.Logf("timing: health set fake-1 %s (command took %s, said %q) -> kubelet got the device list: %s, -> node allocatable %d: %s",
			step.health, returned.Sub(since).Round(time.Millisecond), strings.TrimSpace(out), pushedAfter, step.want, took.Round(time.Millisecond))
		if took > healthBound {
			t.Errorf("node allocatable reached %d %s after `health set fake-1 %s`, want <= %s", step.want, took.Round(time.Millisecond), step.health, healthBound)
		}
		doc, err := plugin.Dump(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		d := doc.Device("fake-1")
		if d == nil || d.Healthy != (step.health == "healthy") {
			t.Errorf("dump after health set fake-1 %s: device %+v", step.health, d)
		}
		if step.health == "unhealthy" && d != nil && d.Reason != "e2e" {
			t.Errorf("dump: fake-1 reason %q, want e2e", d.Reason)
		}
		if n := len(doc.HealthEvents); n == 0 || doc.HealthEvents[0].DeviceID != "fake-1" || doc.HealthEvents[0].Healthy != (step.health == "healthy") || doc.HealthEvents[0].Cause != "admin" {
			t.Errorf("dump: newest health event %+v, want fake-1 %s by admin", doc.HealthEvents, step.health)
		}
	}
	checkStillRunning(t, c, running, ids)
}
