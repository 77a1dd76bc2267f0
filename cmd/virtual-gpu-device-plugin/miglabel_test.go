package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

// TestServe_MIGConfigLabel: the node's MIG layout label changes the
// layout live, as GPU Operator's nvidia.com/mig.config does: the mixed
// strategy's resources register on their sockets and the GPUs' goes, the
// MIG labels and the state label follow; a layout that does not resolve
// is refused naming the label, its state is failed and the layout in
// force stays; without the label the profile's own layout is back.
func TestServe_MIGConfigLabel(t *testing.T) {
	n := newLiveNode(t)
	n.writeProfile(t, "h100", "version: v1\nflags:\n  topology: hgx-h100\n  migStrategy: mixed\n")
	api := newFakeAPI(map[string]string{"kubernetes.io/hostname": testNode, kube.ConfigLabel: "h100"})
	reg := n.start(t, api, "-label-node")
	if reg.Request.ResourceName != "unicore.mcyou.cc/gpu" {
		t.Fatalf("registered %s first", reg.Request.ResourceName)
	}
	if got := ids(plugintest.NextList(t, reg, 30*time.Second)); len(got) != 8 {
		t.Fatalf("list %v: want the 8 H100s whole", got)
	}
	socket := func(resource string) string {
		if resource == "unicore.mcyou.cc/gpu" {
			return filepath.Join(n.dir, "virtual-gpu.sock")
		}
		return filepath.Join(n.dir, plugin.SocketFor("virtual-gpu.sock", resource))
	}
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }
	waitLabel := func(key, want string) {
		t.Helper()
		plugintest.WaitFor(t, 30*time.Second, key+"="+want, func() bool {
			v, ok := api.nodeLabels()[key]
			return ok == (want != "") && v == want
		})
	}
	waitLabel(kube.LabelMIGCapable, "true")

	api.setLabel(kube.MIGConfigLabel, "all-balanced")
	got := map[string]int{}
	for len(got) < 3 {
		r := n.kubelet.WaitRegistration(30 * time.Second)
		got[r.Request.ResourceName] = len(plugintest.NextList(t, r, 30*time.Second).Devices)
	}
	for r, c := range map[string]int{"unicore.mcyou.cc/mig-1g.10gb": 16, "unicore.mcyou.cc/mig-2g.20gb": 8, "unicore.mcyou.cc/mig-3g.40gb": 8} {
		if got[r] != c {
			t.Errorf("%s lists %d devices, want %d (registered: %v)", r, got[r], c, got)
		}
	}
	plugintest.WaitFor(t, 30*time.Second, "the GPUs' socket gone (no whole GPU)", func() bool { return !exists(socket("unicore.mcyou.cc/gpu")) })
	waitLabel(kube.LabelMIGConfigState, kube.MIGStateSuccess)
	waitLabel(kube.LabelMIGStrategy, "mixed")
	waitLabel("unicore.mcyou.cc/mig-1g.10gb.count", "16")
	waitLabel("unicore.mcyou.cc/mig-3g.40gb.memory", "40448") // the model's (topology/mig)
	waitLabel(kube.LabelCount, "0")
	events := configEvents(n.snapshot(t))

	// A layout the product cannot hold: refused, the one in force stays.
	api.setLabelAndWait(t, kube.MIGConfigLabel, "all-1g.5gb")
	waitLabel(kube.LabelMIGConfigState, kube.MIGStateFailed)
	if c := n.logs.Count(`invalid node label ` + kube.MIGConfigLabel + `=\"all-1g.5gb\"`); c != 1 {
		t.Errorf("%d lines refusing the layout, want 1:\n%s", c, n.logs)
	}
	for _, r := range []string{"unicore.mcyou.cc/mig-1g.10gb", "unicore.mcyou.cc/mig-2g.20gb", "unicore.mcyou.cc/mig-3g.40gb"} {
		if !exists(socket(r)) {
			t.Errorf("%s's socket gone after a refused layout", r)
		}
	}
	if after := configEvents(n.snapshot(t)); len(after) != len(events) {
		t.Errorf("a refused layout changed the history: %v -> %v", events, after)
	}
	if v := api.nodeLabels()["unicore.mcyou.cc/mig-1g.10gb.count"]; v != "16" {
		t.Errorf("mig-1g.10gb.count=%q after a refused layout", v)
	}

	// The label removed: the profile's own (no layout), whole GPUs again.
	api.setLabel(kube.MIGConfigLabel, "")
	r := n.kubelet.WaitRegistration(30 * time.Second)
	if r.Request.ResourceName != "unicore.mcyou.cc/gpu" {
		t.Errorf("registered %s, want the GPUs' resource", r.Request.ResourceName)
	}
	waitLabel(kube.LabelMIGConfigState, "")
	waitLabel(kube.LabelMIGStrategy, "")
	waitLabel("unicore.mcyou.cc/mig-1g.10gb.count", "")
	waitLabel(kube.LabelCount, "8")
	for _, r := range []string{"unicore.mcyou.cc/mig-1g.10gb", "unicore.mcyou.cc/mig-2g.20gb", "unicore.mcyou.cc/mig-3g.40gb"} {
		plugintest.WaitFor(t, 30*time.Second, r+"'s socket gone", func() bool { return !exists(socket(r)) })
	}
	for _, k := range []string{kube.MIGConfigLabel, kube.ConfigLabel} {
		for _, p := range api.patchList() {
			if _, ok := p.set[k]; ok || strings.Contains(strings.Join(p.remove, ","), k+",") {
				t.Errorf("patched the operator's label %s: %+v", k, p)
			}
		}
	}
}
