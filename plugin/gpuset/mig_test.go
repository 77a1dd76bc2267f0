package gpuset_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
	"github.com/unicore/virtual-gpu-device-plugin/topology/mig"
)

// migConfig is the configuration of preset machine with the built-in
// layout resolved on it and strategy st.
func migConfig(t testing.TB, machine, layout string, st gpuset.MIGStrategy, sh gpuset.Sharing) gpuset.Config {
	t.Helper()
	return plugintest.WithMIG(t, config(t, machine, sh), nil, gpuset.MIG{Strategy: st, Layout: layout})
}

func TestMIG_Mixed(t *testing.T) {
	cfg := migConfig(t, "hgx-h100", "all-balanced", gpuset.MIGStrategyMixed, gpuset.Sharing{})
	// GPU 1 keeps MIG off: it stays a whole GPU under the GPUs' resource.
	cfg.MIG.GPUs[1] = mig.GPU{Index: 1, Product: cfg.MIG.GPUs[1].Product, Entry: -1}
	set, devs := devicesOf(t, cfg)
	want := []string{"unicore.mcyou.cc/gpu", "unicore.mcyou.cc/mig-1g.10gb", "unicore.mcyou.cc/mig-2g.20gb", "unicore.mcyou.cc/mig-3g.40gb"}
	if got := set.Resources(); !slices.Equal(got, want) {
		t.Fatalf("Resources = %v, want %v", got, want)
	}
	for r, n := range map[string]int{want[0]: 1, want[1]: 14, want[2]: 7, want[3]: 7} {
		if got := gpuset.OfResource(devs, r); len(got) != n {
			t.Errorf("%s: %d devices %v, want %d", r, len(got), ids(got), n)
		}
	}
	if got := ids(gpuset.OfResource(devs, want[0])); !slices.Equal(got, []string{"fake-1"}) {
		t.Errorf("whole GPUs = %v, want [fake-1]", got)
	}
	if set.Len() != len(devs) || len(devs) != 29 {
		t.Errorf("Len %d, devices %d; want 29 (7 GPUs × 4 MIG devices + 1 GPU)", set.Len(), len(devs))
	}
	// The all-balanced placements of a real H100: 1g at 2 and 3, 2g at 0, 3g at 4.
	var got0 []string
	for _, d := range set.MIGOf(0) {
		got0 = append(got0, d.Profile.Name+"@"+d.Placement.String())
	}
	if w := []string{"2g.20gb@0:2", "1g.10gb@2:1", "1g.10gb@3:1", "3g.40gb@4:4"}; !slices.Equal(sortedCopy(got0), sortedCopy(w)) {
		t.Errorf("GPU 0 MIG devices %v, want %v", got0, w)
	}
	members, err := set.Members("fake-0")
	if err != nil || len(members) != 4 || !slices.ContainsFunc(members, func(id string) bool { return id == topology.MIGID(0, "3g.40gb", 4) }) {
		t.Errorf("Members(fake-0) = %v, %v; want its 4 MIG devices", members, err)
	}
	if m, err := set.Members("fake-1"); err != nil || !slices.Equal(m, []string{"fake-1"}) {
		t.Errorf("Members(fake-1) = %v, %v", m, err)
	}
	if _, err := set.Members(topology.MIGID(0, "3g.40gb", 4)); err == nil || !strings.Contains(err.Error(), "set fake-0") {
		t.Errorf("Members of a MIG id = %v, want a refusal naming its GPU", err)
	}
	// Every MIG device is stored with a UUID of its own; the GPUs' stay theirs.
	var migSpecs int
	for _, sp := range set.Specs() {
		if sp.MIG != "" {
			migSpecs++
			if !strings.HasPrefix(sp.UUID, "MIG-") || sp.GPU == "" {
				t.Errorf("MIG spec %+v", sp)
			}
		}
	}
	if migSpecs != 28 {
		t.Errorf("%d MIG specs, want 28", migSpecs)
	}
	env := set.Env(gpuset.OfResource(devs, want[3])[:1])
	if env[gpuset.EnvIDs] != topology.MIGID(0, "3g.40gb", 4) {
		t.Errorf("env %s = %q", gpuset.EnvIDs, env[gpuset.EnvIDs])
	}
}

func sortedCopy(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func TestMIG_Single(t *testing.T) {
	set, devs := devicesOf(t, migConfig(t, "hgx-h100", "all-1g.10gb", gpuset.MIGStrategySingle, gpuset.Sharing{}))
	if r := set.Resources(); !slices.Equal(r, []string{"unicore.mcyou.cc/gpu"}) || len(devs) != 56 {
		t.Errorf("single all-1g.10gb: resources %v, %d devices; want the GPUs' resource, 56", r, len(devs))
	}
	// MIG devices of two GPUs sort by GPU, and map back to it.
	if set.GPU(devs[7]) != 1 || set.GPU(devs[6]) != 0 {
		t.Errorf("GPU of devices 6 and 7: %d, %d", set.GPU(devs[6]), set.GPU(devs[7]))
	}
	// all-disabled: every GPU whole, as NVIDIA's single strategy on a node without MIG.
	set, devs = devicesOf(t, migConfig(t, "hgx-h100", "all-disabled", gpuset.MIGStrategySingle, gpuset.Sharing{}))
	if len(devs) != 8 || devs[0].ID != "fake-0" || set.PerGPU() != 1 {
		t.Errorf("single all-disabled: %v", ids(devs))
	}
}

func TestMIG_Refusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gpuset.Config
		want []string
	}{
		{"single with two profiles", migConfig(t, "hgx-h100", "all-balanced", gpuset.MIGStrategySingle, gpuset.Sharing{}),
			[]string{"single", "GPU fake-0", "1g.10gb", "2g.20gb", "mixed"}},
		{"mixed with time-slicing", migConfig(t, "hgx-h100", "all-1g.10gb", gpuset.MIGStrategyMixed, gpuset.Sharing{Replicas: 2}),
			[]string{"time-slicing", "all-1g.10gb"}},
		{"no device left", migConfig(t, "hgx-h100", "all-enabled", gpuset.MIGStrategyMixed, gpuset.Sharing{}),
			[]string{"all-enabled", "no device"}},
	} {
		if tc.name == "mixed with time-slicing" {
			tc.cfg.Sharing = gpuset.Sharing{Replicas: 2, ResourceName: "unicore.mcyou.cc/gpu", PolicyName: "distributed"}
		}
		_, err := gpuset.New(tc.cfg, "node-a")
		if !errors.Is(err, gpuset.ErrMIG) {
			t.Errorf("%s: %v, want gpuset.ErrMIG", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v does not say %q", tc.name, err, w)
			}
		}
	}
	// A layout of a product without MIG is mig's error, named.
	c := config(t, "dgx1-volta", gpuset.Sharing{})
	c.MIG = gpuset.MIG{Strategy: gpuset.MIGStrategyMixed, Layout: "x", GPUs: []mig.GPU{{MIGEnabled: true}}}
	if _, err := gpuset.New(c, ""); err == nil {
		t.Error("MIG on a V100 accepted")
	}
}

// TestMIG_Partitionable: DRA's view keeps every GPU whole and every
// placement of every profile as a device, whatever the layout's devices.
func TestMIG_Partitionable(t *testing.T) {
	cfg := migConfig(t, "hgx-h100", "all-enabled", gpuset.MIGStrategyNone, gpuset.Sharing{})
	cfg.MIG.Partitionable = true
	set, devs := devicesOf(t, cfg)
	product := set.MIGProduct()
	per := len(gpuset.MIGPlacements(product, 0))
	if len(devs) != 8*(per+1) || per < 20 || per >= gpuset.MIGStride {
		t.Fatalf("%d devices with %d placements per GPU", len(devs), per)
	}
	members, err := set.Members("fake-3")
	if err != nil || len(members) != per+1 || members[0] != "fake-3" {
		t.Errorf("Members(fake-3) = %d ids, %v", len(members), err)
	}
	d, ok := set.MIGDevice(topology.MIGID(3, "4g.40gb", 0))
	if !ok || d.GPU != 3 || d.Profile.Name != "4g.40gb" {
		t.Errorf("MIGDevice = %+v, %v", d, ok)
	}
}

// TestMIG_Prefer: MIG devices of a request are packed: on the GPU that
// holds them with the fewest to spare (a partly used one before a free
// one), spread over the fullest GPUs only when none holds them; the GPUs
// of mustInclude first.
func TestMIG_Prefer(t *testing.T) {
	set, devs := devicesOf(t, migConfig(t, "hgx-h100", "all-1g.10gb", gpuset.MIGStrategyMixed, gpuset.Sharing{}))
	// GPU 2 has 3 free devices, GPU 5 has 6, every other GPU 7; GPU 6 none.
	var avail []gpuset.Device
	for _, d := range devs {
		g := set.GPU(d)
		switch {
		case g == 2 && d.Index%gpuset.MIGStride > 3:
		case g == 5 && d.Index%gpuset.MIGStride == 1:
		case g == 6:
		default:
			avail = append(avail, d)
		}
	}
	gpusOf := func(ids []string) []int {
		var out []int
		for _, id := range ids {
			g, _ := topology.GPUOf(id)
			out = append(out, g)
		}
		return out
	}
	for _, tc := range []struct {
		size int
		want []int
	}{
		{3, []int{2, 2, 2}},
		{2, []int{2, 2}},
		{6, []int{5, 5, 5, 5, 5, 5}},
		{7, []int{0, 0, 0, 0, 0, 0, 0}},
		{9, []int{0, 0, 0, 0, 0, 0, 0, 1, 1}},
	} {
		got, err := set.Prefer(avail, nil, tc.size)
		if err != nil || !slices.Equal(gpusOf(got), tc.want) {
			t.Errorf("Prefer %d = %v (GPUs %v), %v; want GPUs %v", tc.size, got, gpusOf(got), err, tc.want)
		}
	}
	must := avail[len(avail)-1] // on GPU 7
	got, err := set.Prefer(avail, []gpuset.Device{must}, 2)
	if err != nil || len(got) != 2 || got[0] != must.ID || !slices.Equal(gpusOf(got), []int{7, 7}) {
		t.Errorf("Prefer with mustInclude on GPU 7 = %v, %v; want both on GPU 7", got, err)
	}
}

// BenchmarkNew_MIG builds the set of an 8-GPU H100 node whole, with the
// single strategy's 56 MIG devices and with every placement (DRA's 8 × 25
// devices): what a start and every live change pay.
func BenchmarkNew_MIG(b *testing.B) {
	whole := config(b, "hgx-h100", gpuset.Sharing{})
	single := migConfig(b, "hgx-h100", "all-1g.10gb", gpuset.MIGStrategySingle, gpuset.Sharing{})
	every := migConfig(b, "hgx-h100", "all-enabled", gpuset.MIGStrategyNone, gpuset.Sharing{})
	every.MIG.Partitionable = true
	for _, bc := range []struct {
		name string
		cfg  gpuset.Config
	}{{"whole", whole}, {"single-56", single}, {"partitionable-200", every}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := gpuset.New(bc.cfg, "node-a"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
