package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// presetLabels is the golden table: the labels of every preset, unshared,
// without a profile.
var presetLabels = map[string]map[string]string{
	"dgx1-pascal":      golden("8", "Tesla-P100-SXM2-16GB", "16384", "pascal", "6", "0", "DGX1-PASCAL", "dgx1-pascal", "true"),
	"dgx1-volta":       golden("8", "Tesla-V100-SXM2-32GB", "32768", "volta", "7", "0", "DGX1-VOLTA", "dgx1-volta", "true"),
	"dgx-a100":         golden("8", "NVIDIA-A100-SXM4-40GB", "40960", "ampere", "8", "0", "DGX-A100", "dgx-a100", "true"),
	"hgx-h100":         golden("8", "NVIDIA-H100-80GB-HBM3", "81559", "hopper", "9", "0", "HGX-H100", "hgx-h100", "true"),
	"dgx2":             golden("16", "Tesla-V100-SXM3-32GB", "32768", "volta", "7", "0", "DGX2", "dgx2", "true"),
	"pcie-8gpu":        golden("8", "NVIDIA-L40S", "46068", "ada-lovelace", "8", "9", "PCIE-8GPU", "pcie-8gpu", "false"),
	"workstation-4gpu": golden("4", "NVIDIA-RTX-A6000", "49140", "ampere", "8", "6", "WORKSTATION-4GPU", "workstation-4gpu", "true"),
}

func golden(count, product, memory, family, major, minor, machine, topo, nvlink string) map[string]string {
	return map[string]string{
		LabelCount: count, LabelProduct: product, LabelMemory: memory, LabelFamily: family,
		LabelComputeMajor: major, LabelComputeMinor: minor, LabelMachine: machine,
		LabelReplicas: "1", LabelSharingStrategy: SharingNone, LabelTopology: topo, LabelNVLink: nvlink,
	}
}

func mustPreset(t testing.TB, name string) *topology.Machine {
	t.Helper()
	m, err := topology.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGPULabels_EveryPreset(t *testing.T) {
	for _, name := range topology.PresetNames() {
		t.Run(name, func(t *testing.T) {
			want, ok := presetLabels[name]
			if !ok {
				t.Fatalf("preset %s has no row in the golden table", name)
			}
			got, err := GPULabels(LabelSpec{Machine: mustPreset(t, name), Topology: name})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, want) {
				t.Errorf("labels differ:\n%s", labelDiff(got, want))
			}
		})
	}
}

func TestGPULabels_GenericAndCustomMachines(t *testing.T) {
	generic, err := topology.Generic(4)
	if err != nil {
		t.Fatal(err)
	}
	custom, err := topology.New("lab node #3 (2 cards)", []int{0, 0}, func(i, j int) topology.Link {
		return topology.Link{NVLinks: 4, PCIe: topology.PHB}
	})
	if err != nil {
		t.Fatal(err)
	}
	// A file may carry a preset's name: the -topology value decides.
	lookalike := mustPreset(t, "dgx-a100")
	tests := []struct {
		name     string
		machine  *topology.Machine
		topology string
		want     map[string]string
	}{
		{"generic layout", generic, "", golden("4", "NVIDIA-L40S", "46068", "ada-lovelace", "8", "9", "GENERIC-4", TopologyGeneric, "false")},
		{"file", custom, "/etc/vgpu/lab.yaml", golden("2", "NVIDIA-L40S", "46068", "ada-lovelace", "8", "9", "LAB-NODE-3-2-CARDS", TopologyCustom, "true")},
		{"file named like a preset", lookalike, "./dgx-a100", golden("8", "NVIDIA-A100-SXM4-40GB", "40960", "ampere", "8", "0", "DGX-A100", TopologyCustom, "true")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := GPULabels(LabelSpec{Machine: tt.machine, Topology: tt.topology})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("labels differ:\n%s", labelDiff(got, tt.want))
			}
		})
	}
}

func TestGPULabels_SharingAndProfile(t *testing.T) {
	m := mustPreset(t, "dgx-a100")
	tests := []struct {
		name     string
		spec     LabelSpec
		product  string
		replicas string
		strategy string
		profile  string // "" = absent
	}{
		{"replicas unset", LabelSpec{}, "NVIDIA-A100-SXM4-40GB", "1", "none", ""},
		{"one replica is not sharing", LabelSpec{Replicas: 1}, "NVIDIA-A100-SXM4-40GB", "1", "none", ""},
		{"time-slicing", LabelSpec{Replicas: 4}, "NVIDIA-A100-SXM4-40GB-SHARED", "4", "time-slicing", ""},
		{"time-slicing renamed keeps the product", LabelSpec{Replicas: 4, Renamed: true}, "NVIDIA-A100-SXM4-40GB", "4", "time-slicing", ""},
		{"most replicas", LabelSpec{Replicas: topology.MaxReplicas}, "NVIDIA-A100-SXM4-40GB-SHARED", "1024", "time-slicing", ""},
		{"profile", LabelSpec{Replicas: 2, Profile: "a100-shared"}, "NVIDIA-A100-SXM4-40GB-SHARED", "2", "time-slicing", "a100-shared"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Machine, spec.Topology = m, "dgx-a100"
			got, err := GPULabels(spec)
			if err != nil {
				t.Fatal(err)
			}
			if got[LabelProduct] != tt.product || got[LabelReplicas] != tt.replicas || got[LabelSharingStrategy] != tt.strategy {
				t.Errorf("product %q replicas %q strategy %q, want %q %q %q", got[LabelProduct], got[LabelReplicas],
					got[LabelSharingStrategy], tt.product, tt.replicas, tt.strategy)
			}
			if p, ok := got[LabelProfile]; p != tt.profile || ok != (tt.profile != "") {
				t.Errorf("profile label %q (present %v), want %q", p, ok, tt.profile)
			}
			if got[LabelCount] != "8" {
				t.Errorf("count %q, want 8: replicas do not change the GPU count", got[LabelCount])
			}
		})
	}
}

func TestGPULabels_RefusesBadInput(t *testing.T) {
	m := mustPreset(t, "dgx-a100")
	tests := []struct {
		name   string
		spec   LabelSpec
		errHas string
	}{
		{"no machine", LabelSpec{}, "no machine"},
		{"negative replicas", LabelSpec{Machine: m, Replicas: -1}, "-1 replicas"},
		{"too many replicas", LabelSpec{Machine: m, Replicas: topology.MaxReplicas + 1}, "1025 replicas"},
		{"profile not a label value", LabelSpec{Machine: m, Profile: "my profile"}, `gpu.profile="my profile"`},
		{"profile too long", LabelSpec{Machine: m, Profile: strings.Repeat("p", 64)}, "must be no more than 63"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := GPULabels(tt.spec)
			if !errors.Is(err, ErrInvalidLabel) || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("got %v, %v; want an ErrInvalidLabel error mentioning %q", got, err, tt.errHas)
			}
		})
	}
}

func TestSanitize_AsGFDAndAlwaysAValidLabelValue(t *testing.T) {
	long := "NVIDIA Hypothetical Accelerator With A Very Long Marketing Name 192GB HBM3e"
	tests := []struct {
		in, want, shared string
	}{
		{"NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB-SHARED"},
		{"Tesla T4", "Tesla-T4", "Tesla-T4-SHARED"},
		{"  Tesla   T4  ", "Tesla-T4", "Tesla-T4-SHARED"},
		{"NVIDIA GeForce RTX 4090 (Laptop)", "NVIDIA-GeForce-RTX-4090-Laptop", "NVIDIA-GeForce-RTX-4090-Laptop-SHARED"},
		{"GPU/x:y,z", "GPUxyz", "GPUxyz-SHARED"},
		{"A100_SXM4.40GB", "A100_SXM4.40GB", "A100_SXM4.40GB-SHARED"},
		{"Ünïcödé GPU", "ncd-GPU", "ncd-GPU-SHARED"},
		{"-A100-", "A100", "A100-SHARED"},
		{"(()) ..", "", ""},
		{long, "NVIDIA-Hypothetical-Accelerator-With-A-Very-Long-Marketing-Name", "NVIDIA-Hypothetical-Accelerator-With-A-Very-Long-Marketi-SHARED"},
		// Cut at 63 (56 before "-SHARED") lands just after a '-', which goes too.
		{"abcdefghij abcdefghij abcdefghij abcdefghij abcdefghijk abcdef xyz", "abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghijk-abcdef", "abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghijk-SHARED"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := productValue(tt.in, false); got != tt.want {
				t.Errorf("productValue(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if got := productValue(tt.in, true); got != tt.shared {
				t.Errorf("productValue(%q, shared) = %q, want %q", tt.in, got, tt.shared)
			}
			for _, v := range []string{tt.want, tt.shared} {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("%q is not a label value: %v", v, errs)
				}
			}
		})
	}
}

func FuzzSanitize(f *testing.F) {
	for _, s := range []string{"NVIDIA A100-SXM4-80GB", "  -_.x ", strings.Repeat("a b", 40), "Ünïcödé", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, shared := range []bool{false, true} {
			v := productValue(s, shared)
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Fatalf("productValue(%q, %v) = %q: %v", s, shared, v, errs)
			}
			if shared && v != "" && !strings.HasSuffix(v, sharedSuffix) {
				t.Fatalf("productValue(%q, shared) = %q lacks %s", s, v, sharedSuffix)
			}
		}
		if v := MachineType(s); len(validation.IsValidLabelValue(v)) > 0 || strings.ToUpper(v) != v {
			t.Fatalf("MachineType(%q) = %q", s, v)
		}
	})
}

func TestTopologyKind(t *testing.T) {
	tests := map[string]string{
		"":                    TopologyGeneric,
		"dgx-a100":            "dgx-a100",
		"hgx-h100":            "hgx-h100",
		"dgx-a100.yaml":       TopologyCustom,
		"/etc/vgpu/topo.yaml": TopologyCustom,
		"DGX-A100":            TopologyCustom,
	}
	for spec, want := range tests {
		if got := TopologyKind(spec); got != want {
			t.Errorf("TopologyKind(%q) = %q, want %q", spec, got, want)
		}
	}
}

func TestSelectedProfile(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   string
		ok     bool
	}{
		{"no labels", nil, "", false},
		{"label absent", map[string]string{"nvidia.com/device-plugin.config": "x"}, "", false},
		{"label empty means the default", map[string]string{ConfigLabel: ""}, "", false},
		{"label set", map[string]string{ConfigLabel: "a100-shared"}, "a100-shared", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := SelectedProfile(tt.labels); got != tt.want || ok != tt.ok {
				t.Errorf("got %q, %v; want %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestLabelChanges(t *testing.T) {
	desired := map[string]string{LabelCount: "8", LabelProduct: "NVIDIA-A100-SXM4-40GB"}
	tests := []struct {
		name    string
		current map[string]string
		desired map[string]string
		set     map[string]string
		remove  []string
		err     error
	}{
		{name: "unchanged: nothing to send", current: map[string]string{"zone": "a", LabelCount: "8", LabelProduct: "NVIDIA-A100-SXM4-40GB"}, desired: desired},
		{name: "unlabelled node", current: map[string]string{"zone": "a"}, desired: desired, set: desired},
		{name: "one value changed", current: map[string]string{LabelCount: "4", LabelProduct: "NVIDIA-A100-SXM4-40GB"}, desired: desired, set: map[string]string{LabelCount: "8"}},
		{
			name:    "stale labels of ours removed, nobody else's",
			current: map[string]string{LabelCount: "8", LabelProduct: "NVIDIA-A100-SXM4-40GB", LabelProfile: "old", LabelPrefix + "zzz": "1", ConfigLabel: "old", "nvidia.com/gpu.count": "8", "unicore.mcyou.cc/virtual-gpu": "true"},
			desired: desired,
			remove:  []string{LabelProfile, LabelPrefix + "zzz"},
		},
		{name: "nothing desired removes all of ours", current: map[string]string{LabelCount: "8", "zone": "a"}, desired: nil, remove: []string{LabelCount}},
		{name: "a foreign key desired", current: nil, desired: map[string]string{ConfigLabel: "x"}, err: ErrForeignLabel},
		{name: "an invalid value desired", current: nil, desired: map[string]string{LabelProduct: "A B"}, err: ErrInvalidLabel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, remove, err := LabelChanges(tt.current, tt.desired)
			if !errors.Is(err, tt.err) {
				t.Fatalf("got %v, want %v", err, tt.err)
			}
			if !maps.Equal(set, tt.set) || !slices.Equal(remove, tt.remove) {
				t.Errorf("set %v remove %v, want set %v remove %v", set, remove, tt.set, tt.remove)
			}
		})
	}
}

// recordingPatcher records PatchNodeLabels calls.
type recordingPatcher struct {
	calls []string
	err   error
}

func (p *recordingPatcher) PatchNodeLabels(_ context.Context, name string, set map[string]string, remove []string) error {
	p.calls = append(p.calls, fmt.Sprintf("%s set=%v remove=%v", name, set, remove))
	return p.err
}

var _ LabelPatcher = (*recordingPatcher)(nil)

func TestSyncLabels(t *testing.T) {
	desired := map[string]string{LabelCount: "8"}
	t.Run("patches once with the difference", func(t *testing.T) {
		var p recordingPatcher
		changed, err := SyncLabels(t.Context(), &p, "gpu-1", map[string]string{"zone": "a", LabelProfile: "x"}, desired)
		want := []string{"gpu-1 set=map[unicore.mcyou.cc/gpu.count:8] remove=[unicore.mcyou.cc/gpu.profile]"}
		if err != nil || !changed || !slices.Equal(p.calls, want) {
			t.Errorf("got %v, %v, calls %q; want true, nil, %q", changed, err, p.calls, want)
		}
	})
	t.Run("no patch when unchanged", func(t *testing.T) {
		var p recordingPatcher
		changed, err := SyncLabels(t.Context(), &p, "gpu-1", map[string]string{"zone": "a", LabelCount: "8"}, desired)
		if err != nil || changed || len(p.calls) != 0 {
			t.Errorf("got %v, %v, calls %q; want false, nil, none", changed, err, p.calls)
		}
	})
	t.Run("patch error", func(t *testing.T) {
		boom := errors.New("boom")
		p := recordingPatcher{err: boom}
		if changed, err := SyncLabels(t.Context(), &p, "gpu-1", nil, desired); !errors.Is(err, boom) || changed {
			t.Errorf("got %v, %v; want false, boom", changed, err)
		}
	})
	t.Run("foreign label refused before any patch", func(t *testing.T) {
		var p recordingPatcher
		if _, err := SyncLabels(t.Context(), &p, "gpu-1", nil, map[string]string{"team": "ml"}); !errors.Is(err, ErrForeignLabel) || len(p.calls) != 0 {
			t.Errorf("got %v, calls %q; want ErrForeignLabel and no call", err, p.calls)
		}
	})
}

// labelDiff lists the keys whose values differ.
func labelDiff(got, want map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(maps.Collect(func(yield func(string, string) bool) {
		for k, v := range got {
			yield(k, v)
		}
		for k, v := range want {
			yield(k, v)
		}
	}))) {
		g, gok := got[k]
		w, wok := want[k]
		if g != w || gok != wok {
			fmt.Fprintf(&b, "  %s: got %q (%v), want %q (%v)\n", k, g, gok, w, wok)
		}
	}
	return b.String()
}

// TestGPULabels_MIG: the MIG labels as GFD writes them: with single the
// GPU labels describe the MIG devices, with mixed each profile's resource
// has its own and the GPUs' count is the whole GPUs'.
func TestGPULabels_MIG(t *testing.T) {
	m := mustPreset(t, "hgx-h100")
	small := MIGProfileSpec{Name: "1g.10gb", Resource: "unicore.mcyou.cc/mig-1g.10gb", Count: 16, MemoryMiB: 9856, Multiprocessors: 16, Slices: 1, CopyEngines: 1, Decoders: 1, JPEGs: 1}
	big := MIGProfileSpec{Name: "3g.40gb", Resource: "unicore.mcyou.cc/mig-3g.40gb", Count: 4, MemoryMiB: 40192, Multiprocessors: 60, Slices: 3, CopyEngines: 3, Decoders: 3, JPEGs: 3}

	single, err := GPULabels(LabelSpec{Machine: m, Topology: "hgx-h100", MIG: MIGSpec{Capable: true, Strategy: "single", Profiles: []MIGProfileSpec{small}}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		LabelMIGCapable: "true", LabelMIGStrategy: "single", LabelCount: "16", LabelProduct: "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
		LabelMemory: "9856", LabelPrefix + "multiprocessors": "16", LabelPrefix + "slices.gi": "1", LabelPrefix + "slices.ci": "1",
		LabelPrefix + "engines.copy": "1", LabelPrefix + "engines.decoder": "1", LabelPrefix + "engines.encoder": "0",
		LabelPrefix + "engines.jpeg": "1", LabelPrefix + "engines.ofa": "0",
	} {
		if single[k] != v {
			t.Errorf("single: %s=%q, want %q", k, single[k], v)
		}
	}

	mixed, err := GPULabels(LabelSpec{Machine: m, Topology: "hgx-h100", MIG: MIGSpec{Capable: true, Strategy: "mixed", Whole: 4, Profiles: []MIGProfileSpec{small, big}}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		LabelMIGStrategy: "mixed", LabelCount: "4", LabelProduct: "NVIDIA-H100-80GB-HBM3", LabelMemory: "81559",
		"unicore.mcyou.cc/mig-1g.10gb.count": "16", "unicore.mcyou.cc/mig-1g.10gb.replicas": "1",
		"unicore.mcyou.cc/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "unicore.mcyou.cc/mig-3g.40gb.memory": "40192",
		"unicore.mcyou.cc/mig-3g.40gb.slices.gi": "3", "unicore.mcyou.cc/mig-3g.40gb.multiprocessors": "60",
	} {
		if mixed[k] != v {
			t.Errorf("mixed: %s=%q, want %q", k, mixed[k], v)
		}
	}
	for k := range mixed {
		if !Owned(k) {
			t.Errorf("label %s is not one we own: SyncLabels would refuse it", k)
		}
	}

	// Back to whole GPUs: every MIG device label goes, the operator's
	// layout label stays.
	whole, err := GPULabels(LabelSpec{Machine: m, Topology: "hgx-h100", MIG: MIGSpec{Capable: true}})
	if err != nil {
		t.Fatal(err)
	}
	current := maps.Clone(mixed)
	current[MIGConfigLabel] = "half"
	current[LabelMIGConfigState] = MIGStateSuccess
	_, remove, err := LabelChanges(current, whole)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(remove, MIGConfigLabel) || !slices.Contains(remove, LabelMIGStrategy) || !slices.Contains(remove, LabelMIGConfigState) ||
		!slices.Contains(remove, "unicore.mcyou.cc/mig-1g.10gb.count") {
		t.Errorf("removed %v", remove)
	}
	if _, _, err := LabelChanges(nil, map[string]string{MIGConfigLabel: "x"}); !errors.Is(err, ErrForeignLabel) {
		t.Errorf("writing the operator's layout label: %v", err)
	}
}
