package options_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
)

func TestLoad_MIG(t *testing.T) {
	c, err := load([]string{"-topology=hgx-h100", "-mig-config=all-balanced"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mc := c.GPUs.MIG
	if mc.Strategy != gpuset.MIGStrategyNone || mc.Layout != "all-balanced" || len(mc.GPUs) != 8 || len(mc.GPUs[3].Devices) != 4 || mc.Partitionable {
		t.Errorf("MIG %+v", mc)
	}
	if c, err := load(nil, map[string]string{"VGPU_TOPOLOGY": "dgx-a100", "VGPU_MIG_STRATEGY": "single", "VGPU_MIG_CONFIG": "all-1g.5gb"}); err != nil || len(c.GPUs.MIG.GPUs[0].Devices) != 7 {
		t.Errorf("from the environment: %+v, %v", c, err)
	}
	if c, err := load(nil, nil); err != nil || c.GPUs.MIG.Strategy != gpuset.MIGStrategyNone || c.GPUs.MIG.GPUs != nil {
		t.Errorf("default: %+v, %v; want strategy none, no layout", c.GPUs.MIG, err)
	}

	// Through DRA a layout turns MIG on (its devices do not matter: every
	// placement is published); the strategy stays the default.
	for _, layout := range []string{"all-enabled", "all-balanced", "all-1g.10gb"} {
		c, err := load([]string{"-topology=hgx-h100", "-mig-config=" + layout, "-kubelet-api=dra", "-node-name=n"}, nil)
		if err != nil {
			t.Fatalf("DRA with %s: %v", layout, err)
		}
		mc := c.GPUs.MIG
		if !mc.Partitionable || mc.Strategy != gpuset.MIGStrategyNone || mc.Layout != layout || len(mc.GPUs) != 8 || !mc.Enabled(0) || !mc.Enabled(7) {
			t.Errorf("DRA with %s: MIG %+v; want partitionable, strategy none, every GPU MIG-enabled", layout, mc)
		}
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "mig.yaml")
	if err := os.WriteFile(file, []byte("version: v1\nmig-configs:\n  two-3g:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        3g.40gb: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := load([]string{"-topology=hgx-h100", "-mig-config-file=" + file, "-mig-config=two-3g", "-mig-strategy=single"}, nil); err != nil || len(c.GPUs.MIG.GPUs[7].Devices) != 2 {
		t.Errorf("a layout of -mig-config-file: %v", err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-mig-strategy=both"}, `invalid -mig-strategy="both": must be one of none, single, mixed`},
		{[]string{"-topology=hgx-h100", "-mig-config=all-1g.5gb"}, `invalid -mig-config="all-1g.5gb": `},
		{[]string{"-topology=hgx-h100", "-mig-config=no-such"}, `invalid -mig-config="no-such": `},
		{[]string{"-topology=dgx1-volta", "-mig-config=all-enabled"}, `invalid -mig-config="all-enabled": `},
		{[]string{"-topology=hgx-h100", "-mig-strategy=single", "-mig-config=all-balanced"}, `invalid -mig-config="all-balanced": `},
		{[]string{"-topology=hgx-h100", "-mig-config-file=" + filepath.Join(dir, "none.yaml")}, `invalid -mig-config-file="` + filepath.Join(dir, "none.yaml") + `": open `},
		{[]string{"-topology=hgx-h100", "-mig-strategy=single", "-mig-config=all-1g.10gb", "-kubelet-api=dra", "-node-name=n"},
			`invalid -mig-strategy="single": is how the device plugin advertises MIG devices, not while -kubelet-api is dra: through DRA every placement`},
		{[]string{"-topology=hgx-h100", "-mig-strategy=mixed", "-mig-config=all-balanced", "-kubelet-api=dra", "-node-name=n"},
			`invalid -mig-strategy="mixed": is how the device plugin advertises MIG devices, not while -kubelet-api is dra`},
		{[]string{"-mig-strategy=single", "-kubelet-api=dra", "-node-name=n"}, `invalid -mig-strategy="single": is how the device plugin advertises MIG devices`},
		{[]string{"-topology=dgx1-volta", "-mig-config=all-enabled", "-kubelet-api=dra", "-node-name=n"}, `invalid -mig-config="all-enabled": `},
	} {
		_, err := load(tc.args, nil)
		checkInvalid(t, err, tc.want)
	}
	// The refusal names the GPU and the profile.
	_, err = load([]string{"-topology=hgx-h100", "-mig-config=all-1g.5gb"}, nil)
	if err == nil || !strings.Contains(err.Error(), "1g.5gb") || !strings.Contains(err.Error(), "GPU") {
		t.Errorf("H100 with 1g.5gb: %v; want the GPU and the profile named", err)
	}
	_, err = load([]string{"-topology=hgx-h100", "-mig-strategy=single", "-mig-config=all-balanced"}, nil)
	if err == nil || !strings.Contains(err.Error(), "GPU fake-0") || !strings.Contains(err.Error(), "use mixed") {
		t.Errorf("single all-balanced: %v", err)
	}
}
