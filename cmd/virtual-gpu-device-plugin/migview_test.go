package main

import (
	"context"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestBinary_MIGContainerView: a container allocated a MIG device gets
// NVIDIA_VISIBLE_DEVICES of its MIG UUID (as NVIDIA's plugin sets it) and
// sees, through the mounted nvidia-smi, its GPU with that MIG device only
// (-L, mig -lgi), MIG mode Enabled.
func TestBinary_MIGContainerView(t *testing.T) {
	n := newNode(t)
	_, reg := n.start(t, "-topology=hgx-h100", "-mig-strategy=single", "-mig-config=all-3g.40gb", "-numa-report=never", "-node-name=node-a", "-visible-devices-env")
	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"fake-1-mig-3g40gb-4"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ans := resp.ContainerResponses[0]
	uuidOf := map[string]string{}
	for _, d := range n.dump(t).Devices {
		uuidOf[d.ID] = d.UUID
	}
	migUUID := uuidOf["fake-1-mig-3g40gb-4"]
	if !strings.HasPrefix(migUUID, "MIG-") || ans.Envs["NVIDIA_VISIBLE_DEVICES"] != migUUID || ans.Envs["VIRTUAL_GPU_UUIDS"] != uuidOf["fake-1"] {
		t.Errorf("envs %v: want NVIDIA_VISIBLE_DEVICES %s (the MIG device's), VIRTUAL_GPU_UUIDS %s (its GPU's)", ans.Envs, migUUID, uuidOf["fake-1"])
	}
	mounts := map[string]*pluginapi.Mount{}
	for _, m := range ans.Mounts {
		mounts[m.ContainerPath] = m
	}
	smi, statusDir := mounts["/usr/bin/nvidia-smi"], mounts["/run/virtual-gpu"]
	if smi == nil || statusDir == nil {
		t.Fatalf("mounts %v", ans.Mounts)
	}
	out, code := runSMI(t, smi.HostPath, ans.Envs, statusDir.HostPath, "-L")
	want := "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + uuidOf["fake-1"] + ")\n  MIG 3g.40gb     Device  0: (UUID: " + migUUID + ")\n"
	if out != want || code != 0 {
		t.Errorf("nvidia-smi -L: exit %d\n%s\nwant\n%s", code, out, want)
	}
	out, code = runSMI(t, smi.HostPath, ans.Envs, statusDir.HostPath, "mig", "-lgi")
	if code != 0 || strings.Count(out, "MIG 3g.40gb") != 1 || !strings.Contains(out, "|   0  MIG 3g.40gb          9        2          4:4     |") {
		t.Errorf("nvidia-smi mig -lgi: exit %d\n%s\nwant GPU instance 2 at 4:4 only", code, out)
	}
	out, _ = runSMI(t, smi.HostPath, ans.Envs, statusDir.HostPath, "--query-gpu=uuid,mig.mode.current", "--format=csv,noheader")
	if out != uuidOf["fake-1"]+", Enabled\n" {
		t.Errorf("--query-gpu=uuid,mig.mode.current: %q", out)
	}
}
