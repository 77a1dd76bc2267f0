package gpuset_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// config is the configuration of a preset (or n generic GPUs for a
// "generic-<n>" name) with sharing sh, the NUMA nodes always reported.
func config(t testing.TB, machine string, sh gpuset.Sharing) gpuset.Config {
	t.Helper()
	c := plugintest.GPUConfig(t, machine, sh)
	c.NUMAReport, c.SysfsRoot = topology.NUMAReportAlways, t.TempDir()
	return c
}

// devicesOf builds the set of cfg and its devices as a real store has them
// after reconciling it with the set's specs.
func devicesOf(t testing.TB, cfg gpuset.Config) (*gpuset.Set, []gpuset.Device) {
	t.Helper()
	set, err := gpuset.New(cfg, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.MustOpen(t, store.Options{})
	devs := plugintest.Served(t, st, set)
	return set, devs
}

// partlyShared shares GPUs 0 and 2 of four as two replicas each, one
// device per container.
var partlyShared = gpuset.Sharing{Replicas: 2, GPUs: []int{0, 2}, FailRequestsGreaterThanOne: true}

func ids(devs []gpuset.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.ID
	}
	return out
}

func indices(devs []gpuset.Device) []int {
	out := make([]int, len(devs))
	for i, d := range devs {
		out[i] = d.Index
	}
	return out
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestSet_Devices: the specs keep every GPU and add the replicas; the set
// advertises replicas of the shared GPUs and the others whole, each with
// its GPU's NUMA node, under the resource the sharing names.
func TestSet_Devices(t *testing.T) {
	volta, err := topology.Preset("dgx1-volta")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cfg      gpuset.Config
		resource string
		devices  []string
		indices  []int
		specs    int
		max      int
	}{
		{"all shared", config(t, "dgx1-volta", gpuset.Sharing{Replicas: 4}), "unicore.mcyou.cc/gpu", volta.ReplicaIDs(4), seq(32), 8 + 32, 0},
		{"partly shared", config(t, "generic-4", partlyShared), "unicore.mcyou.cc/gpu",
			[]string{"fake-0::0", "fake-0::1", "fake-1", "fake-2::0", "fake-2::1", "fake-3"}, []int{0, 1, 2, 4, 5, 6}, 4 + 4, 1},
		{"renamed", config(t, "generic-2", gpuset.Sharing{Replicas: 2, ResourceName: "unicore.mcyou.cc/gpu.shared", Renamed: true}),
			"unicore.mcyou.cc/gpu.shared", []string{"fake-0::0", "fake-0::1", "fake-1::0", "fake-1::1"}, seq(4), 2 + 4, 0},
		{"not shared", config(t, "generic-3", gpuset.Sharing{Replicas: 1}), "unicore.mcyou.cc/gpu", []string{"fake-0", "fake-1", "fake-2"}, seq(3), 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, devs := devicesOf(t, tc.cfg)
			m := tc.cfg.Machine
			if set.Resource() != tc.resource || len(set.Specs()) != tc.specs || set.Len() != len(tc.devices) {
				t.Errorf("resource %s with %d specs, %d devices; want %s with %d, %d", set.Resource(), len(set.Specs()), set.Len(), tc.resource, tc.specs, len(tc.devices))
			}
			if got := ids(devs); !slices.Equal(got, tc.devices) {
				t.Errorf("devices %v, want %v", got, tc.devices)
			}
			if got := indices(devs); !slices.Equal(got, tc.indices) {
				t.Errorf("indices %v, want %v", got, tc.indices)
			}
			for _, d := range devs {
				if g := set.GPU(d); d.NUMA != m.NUMA(g) || !strings.HasPrefix(d.ID, m.ID(g)) || !d.Healthy {
					t.Errorf("%+v: want GPU %d's NUMA node %d, healthy", d, g, m.NUMA(g))
				}
			}
			if max, rule := set.Limit(); max != tc.max || (max > 0) != (rule == gpuset.FailRequestsRule) {
				t.Errorf("limit %d (%q), want %d", max, rule, tc.max)
			}
			for _, sp := range set.Specs() {
				if sp.GPU != "" && sp.UUID != "" || sp.GPU == "" && sp.UUID == "" {
					t.Errorf("spec %+v: a GPU has a UUID, a replica none", sp)
				}
			}
		})
	}
}

// TestSet_Devices_NotStored: a configured device the store lacks is an
// error, not a shorter list.
func TestSet_Devices_NotStored(t *testing.T) {
	set, err := gpuset.New(config(t, "generic-3", gpuset.Sharing{Replicas: 1}), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	stored := []store.Device{{ID: "fake-0"}, {ID: "fake-1"}, {ID: "fake-2", Removed: true}}
	if _, err := set.Devices(stored); !errors.Is(err, store.ErrUnknownDevice) {
		t.Errorf("Devices = %v, want store.ErrUnknownDevice", err)
	}
}

// without returns devs less those with the given ids.
func without(devs []gpuset.Device, ids ...string) []gpuset.Device {
	return slices.DeleteFunc(slices.Clone(devs), func(d gpuset.Device) bool { return slices.Contains(ids, d.ID) })
}

// byID returns the devices of devs with these ids, in devs' order.
func byID(devs []gpuset.Device, ids ...string) []gpuset.Device {
	return slices.DeleteFunc(slices.Clone(devs), func(d gpuset.Device) bool { return !slices.Contains(ids, d.ID) })
}

// TestSet_Prefer_Policies: three one-replica containers on 2 GPUs × 4
// replicas, each placed on what the earlier left free, as the kubelet
// asks: distributed spreads them over both GPUs, packed puts them on one
// and keeps the other whole.
func TestSet_Prefer_Policies(t *testing.T) {
	for policy, want := range map[string][]string{
		"distributed":  {"fake-0::0", "fake-1::0", "fake-0::1"},
		"packed":       {"fake-0::0", "fake-0::1", "fake-0::2"},
		"lowest-index": {"fake-0::0", "fake-0::1", "fake-0::2"},
	} {
		t.Run(policy, func(t *testing.T) {
			set, avail := devicesOf(t, config(t, "generic-2", gpuset.Sharing{Replicas: 4, PolicyName: policy}))
			var got []string
			for range 3 {
				ids, err := set.Prefer(avail, nil, 1)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ids...)
				avail = without(avail, ids...)
			}
			if !slices.Equal(got, want) {
				t.Errorf("placed %v, want %v", got, want)
			}
		})
	}
}

// TestSet_Prefer_Mixed: with only some GPUs shared, a request takes
// replicas first and whole GPUs for what the replicas cannot hold or must
// include.
func TestSet_Prefer_Mixed(t *testing.T) {
	set, all := devicesOf(t, config(t, "generic-4", partlyShared))
	for _, tc := range []struct {
		name  string
		avail []gpuset.Device
		must  []string
		size  int
		want  []string
	}{
		{"one: a replica", all, nil, 1, []string{"fake-0::0"}},
		{"two: replicas of two GPUs", all, nil, 2, []string{"fake-0::0", "fake-2::0"}},
		{"five: every replica and a whole GPU", all, nil, 5, []string{"fake-0::0", "fake-0::1", "fake-2::0", "fake-2::1", "fake-1"}},
		{"must include a whole GPU", all, []string{"fake-3"}, 2, []string{"fake-0::0", "fake-3"}},
		{"no replica left: whole GPUs", byID(all, "fake-1", "fake-3"), nil, 1, []string{"fake-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := set.Prefer(tc.avail, byID(all, tc.must...), tc.size)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Errorf("chose %v, want %v", got, want)
			}
		})
	}
}

// TestSet_Prefer_WholeGPUs: without sharing the allocation policy chooses
// among the GPUs (an NVLink pair on a DGX-1) and must include what it must.
func TestSet_Prefer_WholeGPUs(t *testing.T) {
	set, all := devicesOf(t, config(t, "dgx1-volta", gpuset.Sharing{Replicas: 1}))
	got, err := set.Prefer(all, byID(all, "fake-5"), 2)
	if err != nil {
		t.Fatal(err)
	}
	want, err := allocator.Policies[allocator.PolicyBestConnected](set.Machine(), seq(8), []int{5}, 2)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if wantIDs := []string{set.Machine().ID(want[0]), set.Machine().ID(want[1])}; !slices.Equal(got, slices.Sorted(slices.Values(wantIDs))) {
		t.Errorf("chose %v, want the policy's %v", got, wantIDs)
	}
}

// A container gets its physical GPUs, each once, in VIRTUAL_GPU_IDS, with
// sharing the replica ids in VIRTUAL_GPU_REPLICAS, and the topology
// variables of the GPUs.
func TestSet_Env(t *testing.T) {
	cfg := config(t, "generic-4", partlyShared)
	set, all := devicesOf(t, cfg)
	got := set.Env(byID(all, "fake-0::1", "fake-1", "fake-2::0", "fake-2::1"))
	want := cfg.Machine.ContainerEnv([]int{0, 1, 2})
	want[gpuset.EnvIDs] = "fake-0,fake-1,fake-2"
	want[gpuset.EnvReplicas] = "fake-0::1,fake-1,fake-2::0,fake-2::1"
	if !maps.Equal(got, want) {
		t.Errorf("shared: env = %v\nwant  %v", got, want)
	}
	cfg = config(t, "dgx1-volta", gpuset.Sharing{Replicas: 1})
	set, all = devicesOf(t, cfg)
	got = set.Env(byID(all, "fake-2", "fake-6"))
	want = cfg.Machine.ContainerEnv([]int{2, 6})
	want[gpuset.EnvIDs] = "fake-2,fake-6"
	if !maps.Equal(got, want) {
		t.Errorf("whole GPUs: env = %v\nwant  %v", got, want)
	}
}

func TestSet_Members(t *testing.T) {
	set, _ := devicesOf(t, config(t, "generic-4", partlyShared))
	for _, tc := range []struct {
		id   string
		want []string
		err  string
	}{
		{"fake-0", []string{"fake-0::0", "fake-0::1"}, ""},
		{"fake-1", []string{"fake-1"}, ""},
		{"fake-0::1", nil, "fake-0::1 is a replica of fake-0: health is per GPU, set fake-0 (all its replicas follow)"},
		{"fake-9", nil, `"fake-9": unknown device`},
		{"fake-9::0", nil, `"fake-9::0": unknown device`},
	} {
		got, err := set.Members(tc.id)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Members(%s) = %v, %v; want error %q", tc.id, got, err, tc.err)
			}
			if strings.Contains(tc.err, "unknown") && !errors.Is(err, store.ErrUnknownDevice) {
				t.Errorf("Members(%s): %v, want store.ErrUnknownDevice", tc.id, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Members(%s) = %v, %v; want %v", tc.id, got, err, tc.want)
		}
	}
	if got, want := set.DeviceIDsOf(2), []string{"fake-2", "fake-2::0", "fake-2::1"}; !slices.Equal(got, want) {
		t.Errorf("DeviceIDsOf(2) = %v, want %v", got, want)
	}
	if got, want := set.DeviceIDsOf(1), []string{"fake-1"}; !slices.Equal(got, want) {
		t.Errorf("DeviceIDsOf(1) = %v, want %v", got, want)
	}
}

// The metrics' score of a preferred set is the score of its GPUs.
func TestSet_ScoreOfReplicas(t *testing.T) {
	set, _ := devicesOf(t, config(t, "dgx1-volta", gpuset.Sharing{Replicas: 4}))
	// Replicas 1 and 3 of GPU 0, replica 0 of GPU 3: GPUs 0 and 3.
	if got, want := set.Score([]int{1, 3, 12}), allocator.Score(set.Machine(), []int{0, 3}); got != want {
		t.Errorf("score = %d, want the GPUs' %d", got, want)
	}
	whole, _ := devicesOf(t, config(t, "dgx1-volta", gpuset.Sharing{Replicas: 1}))
	if got, want := whole.Score([]int{1, 3}), allocator.Score(whole.Machine(), []int{1, 3}); got != want {
		t.Errorf("whole GPUs: score = %d, want %d", got, want)
	}
}

// TestSet_Equal: a set equals one of the same configuration, and differs
// from one that differs in any field of the configuration (a field added
// to Config later is compared without anyone listing it) or in the node
// identity its UUIDs come from.
func TestSet_Equal(t *testing.T) {
	base := config(t, "dgx1-volta", gpuset.Sharing{Replicas: 1})
	a, _ := gpuset.New(base, "node-a")
	b, _ := gpuset.New(base, "node-a")
	if !a.Equal(b) {
		t.Error("the same configuration: not equal")
	}
	other, _ := gpuset.New(base, "node-b")
	if a.Equal(other) {
		t.Error("another node identity (other UUIDs): equal")
	}
	for name, change := range map[string]func(*gpuset.Config){
		"policy":   func(c *gpuset.Config) { c.AllocationPolicy = allocator.PolicyLowestIndex },
		"topology": func(c *gpuset.Config) { c.Topology = "elsewhere" },
		"fail>1":   func(c *gpuset.Config) { c.Sharing.FailRequestsGreaterThanOne = true },
	} {
		c := base
		change(&c)
		s, err := gpuset.New(c, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if a.Equal(s) {
			t.Errorf("%s changed: still equal", name)
		}
	}
	if a.Equal(nil) || (*gpuset.Set)(nil).Equal(a) {
		t.Error("a nil set equals one")
	}
}
