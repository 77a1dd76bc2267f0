package mig

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// layoutOf writes a GPU's devices as "name@start:size" in placement order.
func layoutOf(g GPU) string {
	var parts []string
	for _, d := range g.Devices {
		parts = append(parts, d.Profile.Name+"@"+d.Placement.String())
	}
	return strings.Join(parts, " ")
}

// builtin returns GPU Operator's default configuration.
func builtin(t testing.TB) *Config {
	t.Helper()
	c, err := BuiltinConfig()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestResolve_Builtin: named layouts on named products, placed as real
// GPUs show them where a recording exists (all-balanced on H100 and H200:
// NVIDIA/DCGM issue 138, nvidia_gpu_exporter's captures).
func TestResolve_Builtin(t *testing.T) {
	c := builtin(t)
	for _, tc := range []struct {
		layout, product, want string
	}{
		{"all-balanced", "NVIDIA H100 80GB HBM3", "2g.20gb@0:2 1g.10gb@2:1 1g.10gb@3:1 3g.40gb@4:4"},
		{"all-balanced", "NVIDIA H200", "2g.35gb@0:2 1g.18gb@2:1 1g.18gb@3:1 3g.71gb@4:4"},
		{"all-balanced", "NVIDIA A100-SXM4-40GB", "2g.10gb@0:2 1g.5gb@2:1 1g.5gb@3:1 3g.20gb@4:4"},
		{"all-balanced", "NVIDIA A100 80GB PCIe", "2g.20gb@0:2 1g.10gb@2:1 1g.10gb@3:1 3g.40gb@4:4"},
		{"all-1g.10gb", "NVIDIA H100 80GB HBM3", "1g.10gb@0:1 1g.10gb@1:1 1g.10gb@2:1 1g.10gb@3:1 1g.10gb@4:1 1g.10gb@5:1 1g.10gb@6:1"},
		{"all-1g.10gb", "NVIDIA A100-SXM4-40GB", "1g.10gb@0:2 1g.10gb@2:2 1g.10gb@4:2 1g.10gb@6:2"},
		{"all-1g.35gb", "NVIDIA H200", "1g.35gb@0:2 1g.35gb@2:2 1g.35gb@4:2 1g.35gb@6:2"},
		{"all-2g.20gb", "NVIDIA A100-SXM4-80GB", "2g.20gb@0:2 2g.20gb@2:2 2g.20gb@4:2"},
		{"all-3g.40gb", "NVIDIA H100 80GB HBM3", "3g.40gb@0:4 3g.40gb@4:4"},
		{"all-4g.71gb", "NVIDIA H200", "4g.71gb@0:4"},
		{"all-7g.80gb", "NVIDIA H100 80GB HBM3", "7g.80gb@0:8"},
		{"all-1g.10gb.me", "NVIDIA H100 80GB HBM3", "1g.10gb+me@6:1"},
		{"all-enabled", "NVIDIA H200", ""},
	} {
		t.Run(tc.layout+"/"+tc.product, func(t *testing.T) {
			gpus, err := Resolve(c, tc.layout, tc.product, 4)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gpus {
				if !g.MIGEnabled || g.Entry < 0 || g.Product != tc.product {
					t.Errorf("GPU %d: %+v", g.Index, g)
				}
				if got := layoutOf(g); got != tc.want {
					t.Errorf("GPU %d: %s, want %s", g.Index, got, tc.want)
				}
			}
		})
	}
}

// TestResolve_Deterministic: Resolve is the same on every call, and a
// lone 3g instance goes at 4:4, where the recorded H100s and H200 have
// theirs, keeping slices 0-3 for a 4g.
func TestResolve_Deterministic(t *testing.T) {
	c := builtin(t)
	a, err := Resolve(c, "all-balanced", "NVIDIA H100 80GB HBM3", 8)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		b, err := Resolve(c, "all-balanced", "NVIDIA H100 80GB HBM3", 8)
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("Resolve differs between calls: %v", err)
		}
	}
	p, _ := LookupProduct("NVIDIA H100 80GB HBM3")
	devs, err := Place(p, map[string]int{"3g.40gb": 1})
	if err != nil || len(devs) != 1 || devs[0].Placement != (Placement{4, 4}) {
		t.Fatalf("one 3g.40gb placed at %v (%v), want 4:4", devs, err)
	}
}

// TestResolve_Errors: invalid layouts are refused naming the GPU and the
// profile, with the documented sentinel.
func TestResolve_Errors(t *testing.T) {
	c := Merge(builtin(t), mustParse(t, `
version: v1
mig-configs:
  overlap:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "1g.20gb": 3}
  too-many:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 8}
  too-much-compute:
    - devices: all
      mig-enabled: true
      mig-devices: {"4g.40gb": 1, "2g.20gb": 2}
  second-gpu:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.5gb": 1}
  out-of-range:
    - devices: [0, 9]
      mig-enabled: false
  other-product-range:
    - device-filter: "0x233510DE"
      devices: [9]
      mig-enabled: false
  ci-profile:
    - devices: all
      mig-enabled: true
      mig-devices: {"1c.3g.40gb": 1}
`))
	const h100 = "NVIDIA H100 80GB HBM3"
	for _, tc := range []struct {
		layout, product string
		gpus            int
		want            error
		msg             []string
	}{
		{"all-1g.5gb", h100, 8, ErrUnknownProfile, []string{`mig layout "all-1g.5gb"`, "GPU 0 (NVIDIA H100 80GB HBM3)", "profile 1g.5gb", "1g.10gb, 1g.10gb+me"}},
		{"all-1g.18gb", "NVIDIA A100-SXM4-40GB", 2, ErrUnknownProfile, []string{"GPU 0", "profile 1g.18gb"}},
		{"second-gpu", h100, 2, ErrUnknownProfile, []string{"entry 1", "GPU 1 (", "profile 1g.5gb"}},
		{"overlap", h100, 1, ErrDoesNotFit, []string{"GPU 0", "1g.20gb ×3, 3g.40gb ×1", "overlap in every arrangement", "3g.40gb {0,4}:4, 1g.20gb {0,2,4,6}:2"}},
		{"too-many", h100, 2, ErrDoesNotFit, []string{"GPU 0", "profile 1g.10gb: 8 instances", "at most 7"}},
		{"too-much-compute", h100, 1, ErrDoesNotFit, []string{"8 compute slices", "the GPU has 7"}},
		{"out-of-range", h100, 4, ErrDeviceIndex, []string{`mig layout "out-of-range" entry 0`, "GPU 9", "GPUs 0-3"}},
		{"all-disabled", h100, 0, ErrDeviceIndex, []string{"a node of 0 GPUs"}},
		{"ci-profile", h100, 1, ErrUnknownProfile, []string{"1c.3g.40gb", "compute-instance profiles are not modelled"}},
		{"all-1g.35gb", h100, 8, ErrNoMatchingEntry, []string{"8 × NVIDIA H100 80GB HBM3 (0x233010DE)"}},
		{"other-product-range", h100, 8, ErrNoMatchingEntry, nil},
		{"all-1g.10gb", "Tesla V100-SXM2-32GB", 8, ErrNoMatchingEntry, []string{"no MIG"}},
		{"all-enabled", "Tesla V100-SXM2-32GB", 8, ErrNoMIG, []string{"GPU 0", `"Tesla V100-SXM2-32GB"`}},
		{"all-2g.99gb", h100, 8, ErrUnknownLayout, []string{`"all-2g.99gb"`}},
	} {
		t.Run(tc.layout+"/"+tc.product, func(t *testing.T) {
			_, err := Resolve(c, tc.layout, tc.product, tc.gpus)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Resolve = %v, want %v", err, tc.want)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not contain %q", err, m)
				}
			}
		})
	}
	if _, err := Resolve(nil, "all-disabled", h100, 1); !errors.Is(err, ErrUnknownLayout) {
		t.Errorf("Resolve(nil config) = %v", err)
	}
}

// TestResolve_Entries: which entry applies to which GPU: the last that
// matches; a GPU none matches keeps MIG disabled; device filters with and
// without a subsystem; MIG disabled on a product without MIG is fine.
func TestResolve_Entries(t *testing.T) {
	c := mustParse(t, `
version: v1
mig-configs:
  mixed:
    - devices: all
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
    - devices: [1, 3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1}
    - devices: [3]
      mig-enabled: false
  partial:
    - devices: [2]
      mig-enabled: true
      mig-devices: {"1g.10gb": 1}
  sub-ok:
    - device-filter: "0x233010DE:0x16C110DE"
      devices: all
      mig-enabled: true
      mig-devices: {}
  sub-other:
    - device-filter: ["0x233010DE:0x000010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {}
  decimal-filter:
    - device-filter: "590352606"
      devices: all
      mig-enabled: false
`)
	const h100 = "NVIDIA H100 80GB HBM3"
	gpus, err := Resolve(c, "mixed", h100, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		entry   int
		enabled bool
		layout  string
	}{
		{0, true, "7g.80gb@0:8"},
		// Without a 3g the 2g goes at 4:2, leaving 0-3 for a 4g, and the
		// second 1g takes the lowest of the equal starts left.
		{1, true, "1g.10gb@0:1 2g.20gb@4:2 1g.10gb@6:1"},
		{0, true, "7g.80gb@0:8"},
		{2, false, ""},
	}
	for i, g := range gpus {
		if g.Index != i || g.Entry != want[i].entry || g.MIGEnabled != want[i].enabled || layoutOf(g) != want[i].layout {
			t.Errorf("GPU %d: entry %d, enabled %v, %q; want %+v", i, g.Entry, g.MIGEnabled, layoutOf(g), want[i])
		}
	}
	gpus, err = Resolve(c, "partial", h100, 3)
	if err != nil {
		t.Fatal(err)
	}
	if gpus[0].Entry != -1 || gpus[0].MIGEnabled || gpus[1].Entry != -1 || !gpus[2].MIGEnabled {
		t.Errorf("partial: %+v", gpus)
	}
	if _, err := Resolve(c, "sub-ok", h100, 1); err != nil {
		t.Errorf("sub-ok: %v", err)
	}
	if _, err := Resolve(c, "sub-other", h100, 1); !errors.Is(err, ErrNoMatchingEntry) {
		t.Errorf("sub-other: %v, want ErrNoMatchingEntry", err)
	}
	if _, err := Resolve(c, "decimal-filter", h100, 1); err != nil { // 590352606 = 0x233010DE
		t.Errorf("decimal-filter: %v", err)
	}
	gpus, err = Resolve(builtin(t), "all-disabled", "Tesla V100-SXM2-32GB", 2)
	if err != nil || gpus[0].MIGEnabled || gpus[1].Entry != 0 {
		t.Errorf("all-disabled on a V100: %+v, %v", gpus, err)
	}
}

// expectedLayouts are the built-in layouts each product takes, from GPU
// Operator's config comments ("# H100-80GB, H800-80GB, A100-80GB, …").
var expectedLayouts = map[string][]string{
	"NVIDIA A100-SXM4-40GB": {"all-1g.10gb", "all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb", "all-3g.20gb", "all-4g.20gb", "all-7g.40gb"},
	"NVIDIA A100-SXM4-80GB": {"all-1g.10gb", "all-1g.10gb.me", "all-1g.20gb", "all-2g.20gb", "all-3g.40gb", "all-4g.40gb", "all-7g.80gb"},
	"NVIDIA A100 80GB PCIe": {"all-1g.10gb", "all-1g.10gb.me", "all-1g.20gb", "all-2g.20gb", "all-3g.40gb", "all-4g.40gb", "all-7g.80gb"},
	"NVIDIA H100 80GB HBM3": {"all-1g.10gb", "all-1g.10gb.me", "all-1g.20gb", "all-2g.20gb", "all-3g.40gb", "all-4g.40gb", "all-7g.80gb"},
	"NVIDIA H200":           {"all-1g.18gb", "all-1g.18gb.me", "all-1g.35gb", "all-2g.35gb", "all-3g.71gb", "all-4g.71gb", "all-7g.141gb"},
}

// TestResolve_EveryBuiltinLayoutOnEveryProduct: each built-in layout
// resolves on 8 GPUs of each product that has its profiles, every GPU the
// same, with exactly the layout's devices; on the others it fails with
// ErrUnknownProfile (an entry for every product names a profile the
// product lacks) or ErrNoMatchingEntry (its entries are for other
// products). Products without MIG take all-disabled alone.
func TestResolve_EveryBuiltinLayoutOnEveryProduct(t *testing.T) {
	c := builtin(t)
	for _, product := range append(Products(), "Tesla V100-SXM2-32GB", "NVIDIA L40S") {
		want := append([]string{"all-disabled"}, expectedLayouts[product]...)
		if HasMIG(product) {
			want = append(want, "all-enabled", "all-balanced")
		}
		var ok []string
		for _, name := range c.Names() {
			gpus, err := Resolve(c, name, product, 8)
			if err != nil {
				if !errors.Is(err, ErrUnknownProfile) && !errors.Is(err, ErrNoMatchingEntry) && !errors.Is(err, ErrNoMIG) {
					t.Errorf("%s on %s: %v", name, product, err)
				}
				if slices.Contains(want, name) {
					t.Errorf("%s on %s: %v, want it to resolve", name, product, err)
				}
				continue
			}
			ok = append(ok, name)
			entry := c.Layouts[name][gpus[0].Entry]
			for _, g := range gpus {
				if layoutOf(g) != layoutOf(gpus[0]) || g.Entry != gpus[0].Entry {
					t.Errorf("%s on %s: GPU %d differs from GPU 0", name, product, g.Index)
				}
				counts := map[string]int{}
				for _, d := range g.Devices {
					counts[d.Profile.Name]++
				}
				for p, n := range entry.MIGDevices {
					if n > 0 && counts[p] != n {
						t.Errorf("%s on %s: GPU %d has %d × %s, the layout says %d", name, product, g.Index, counts[p], p, n)
					}
				}
			}
		}
		slices.Sort(want)
		if !slices.Equal(ok, want) {
			t.Errorf("%s takes %v, want %v", product, ok, want)
		}
	}
}

// TestPlace_FitsIffSomeArrangementFits: for every multiset of up to four
// instances of each product's profiles, Place succeeds exactly when an
// exhaustive search finds non-overlapping valid placements within the
// instance limits, and what it returns is such an arrangement.
func TestPlace_FitsIffSomeArrangementFits(t *testing.T) {
	for _, name := range Products() {
		p, _ := LookupProduct(name)
		var counts []int
		var walk func(i, total int)
		checked := 0
		walk = func(i, total int) {
			if i == len(p.Profiles) {
				m := map[string]int{}
				var todo []Profile
				for j, n := range counts {
					if n > 0 {
						m[p.Profiles[j].Name] = n
					}
					for range n {
						todo = append(todo, p.Profiles[j])
					}
				}
				checked++
				devs, err := Place(p, m)
				fits := exhaustiveFit(todo, 0, 0, p.ComputeSlices)
				if (err == nil) != fits {
					t.Fatalf("%s: Place(%v) = %v, exhaustive search says fits=%v", name, m, err, fits)
				}
				if err != nil {
					if !errors.Is(err, ErrDoesNotFit) {
						t.Fatalf("%s: Place(%v) = %v, want ErrDoesNotFit", name, m, err)
					}
					return
				}
				checkArrangement(t, p, m, devs)
				return
			}
			for n := 0; n <= 4 && total+n <= 8; n++ {
				counts = append(counts, n)
				walk(i+1, total+n)
				counts = counts[:len(counts)-1]
			}
		}
		walk(0, 0)
		if checked < 1000 {
			t.Fatalf("%s: only %d multisets checked", name, checked)
		}
	}
}

// exhaustiveFit tries every valid placement of every instance.
func exhaustiveFit(todo []Profile, i int, used uint64, computeLeft int) bool {
	if i == 0 {
		per := map[string]int{}
		for _, pr := range todo {
			per[pr.Name]++
			if per[pr.Name] > pr.Instances {
				return false
			}
		}
	}
	if i == len(todo) {
		return true
	}
	if todo[i].ComputeSlices > computeLeft {
		return false
	}
	for _, pl := range todo[i].Placements {
		m := (uint64(1)<<pl.Size - 1) << pl.Start
		if m&used == 0 && exhaustiveFit(todo, i+1, used|m, computeLeft-todo[i].ComputeSlices) {
			return true
		}
	}
	return false
}

// checkArrangement checks that devs are m's devices at valid,
// non-overlapping placements, in ascending order.
func checkArrangement(t *testing.T, p *Product, m map[string]int, devs []Device) {
	t.Helper()
	got := map[string]int{}
	for i, d := range devs {
		got[d.Profile.Name]++
		if !slices.Contains(d.Profile.Placements, d.Placement) {
			t.Fatalf("%s: %s at %s, not a valid placement", p.Name, d.Profile.Name, d.Placement)
		}
		for _, e := range devs[:i] {
			if e.Placement.Overlaps(d.Placement) {
				t.Fatalf("%s: %s@%s overlaps %s@%s", p.Name, d.Profile.Name, d.Placement, e.Profile.Name, e.Placement)
			}
			if e.Placement.Start > d.Placement.Start {
				t.Fatalf("%s: devices not in placement order: %v", p.Name, devs)
			}
		}
	}
	if !reflect.DeepEqual(got, m) && !(len(got) == 0 && len(m) == 0) {
		t.Fatalf("%s: placed %v, asked %v", p.Name, got, m)
	}
}

// ExampleResolve shows all-balanced on a node of two H100s.
func ExampleResolve() {
	cfg, err := BuiltinConfig()
	if err != nil {
		fmt.Println(err)
		return
	}
	gpus, err := Resolve(cfg, "all-balanced", "NVIDIA H100 80GB HBM3", 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, g := range gpus {
		for _, d := range g.Devices {
			fmt.Printf("GPU %d: MIG %-8s %s  %6d MiB  %3d SMs\n", g.Index, d.Profile.Name, d.Placement, d.Profile.MemoryMiB, d.Profile.Multiprocessors)
		}
	}
	// Output:
	// GPU 0: MIG 2g.20gb  0:2   20096 MiB   32 SMs
	// GPU 0: MIG 1g.10gb  2:1    9984 MiB   16 SMs
	// GPU 0: MIG 1g.10gb  3:1    9984 MiB   16 SMs
	// GPU 0: MIG 3g.40gb  4:4   40448 MiB   60 SMs
	// GPU 1: MIG 2g.20gb  0:2   20096 MiB   32 SMs
	// GPU 1: MIG 1g.10gb  2:1    9984 MiB   16 SMs
	// GPU 1: MIG 1g.10gb  3:1    9984 MiB   16 SMs
	// GPU 1: MIG 3g.40gb  4:4   40448 MiB   60 SMs
}

// TestPlace_Backtracks: when the preferred placement of a device leaves a
// later one no room, Place tries the others. On the modelled products the
// preference never dead-ends (TestPlace_FitsIffSomeArrangementFits passes
// without backtracking), so the product here is made up: the 2g's
// preferred start 2 is the only one the 1g.2-slice profile has.
func TestPlace_Backtracks(t *testing.T) {
	pls := func(size int, starts ...int) []Placement {
		var out []Placement
		for _, s := range starts {
			out = append(out, Placement{s, size})
		}
		return out
	}
	p := &Product{Name: "made-up", MemorySlices: 4, ComputeSlices: 4, Profiles: []Profile{
		{Name: "2g.2gb", ComputeSlices: 2, MemorySlices: 2, Instances: 2, Placements: pls(2, 0, 2)},
		{Name: "1g.2gb", ComputeSlices: 1, MemorySlices: 2, Instances: 1, Placements: pls(2, 2)},
		{Name: "1g.1gb", ComputeSlices: 1, MemorySlices: 1, Instances: 2, Placements: pls(1, 0, 1)},
	}}
	devs, err := Place(p, map[string]int{"2g.2gb": 1, "1g.2gb": 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := layoutOf(GPU{Devices: devs}); got != "2g.2gb@0:2 1g.2gb@2:2" {
		t.Fatalf("placed %s", got)
	}
	if devs, err := Place(p, map[string]int{"2g.2gb": 1}); err != nil || devs[0].Placement.Start != 2 {
		t.Fatalf("a lone 2g.2gb at %v (%v), want its preferred start 2", devs, err)
	}
}

// TestPlace_NilProduct: Place on no product (what LookupProduct gives a
// product without MIG) is an error wrapping ErrNoMIG, not a panic.
func TestPlace_NilProduct(t *testing.T) {
	for _, devs := range []map[string]int{nil, {"1g.10gb": 1}} {
		if _, err := Place(nil, devs); !errors.Is(err, ErrNoMIG) {
			t.Errorf("Place(nil, %v) = %v, want ErrNoMIG", devs, err)
		}
	}
}

// TestResolve_NegativeDeviceIndex: a hand-built Config (ParseConfig refuses
// it) whose entry names GPU -1 is ErrDeviceIndex, not silently ignored.
func TestResolve_NegativeDeviceIndex(t *testing.T) {
	cfg := &Config{Version: ConfigVersion, Layouts: map[string]Layout{
		"L": {{AllDevices: true}, {Devices: []int{-1}, MIGEnabled: true, MIGDevices: map[string]int{"7g.80gb": 1}}},
	}}
	if _, err := Resolve(cfg, "L", "NVIDIA H100 80GB HBM3", 2); !errors.Is(err, ErrDeviceIndex) {
		t.Fatalf("Resolve = %v, want ErrDeviceIndex", err)
	}
}
