package telemetry_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// migScenario is two H100s of hgx-h100: GPU 0 with MIG on in the
// all-balanced layout (3g.40gb at 4 held by ml/a/main, 2g.20gb at 0
// free, 1g.10gb at 2 free and at 3 held by ml/b/main), GPU 1 whole, free.
func migScenario(t testing.TB, perPod bool) *telemetry.Exporter {
	t.Helper()
	m := mustMachine(t, "hgx-h100")
	gpus := machineGPUs(m, nil)[:2]
	migs := []telemetry.MIGInstance{
		{ID: topology.MIGID(0, "3g.40gb", 4), Profile: "3g.40gb", GPUInstanceID: 2, MemoryMiB: 40448, ComputeShare: 3.0 / 7},
		{ID: topology.MIGID(0, "2g.20gb", 0), Profile: "2g.20gb", GPUInstanceID: 3, MemoryMiB: 20096, ComputeShare: 2.0 / 7},
		{ID: topology.MIGID(0, "1g.10gb", 2), Profile: "1g.10gb", GPUInstanceID: 9, MemoryMiB: 9984, ComputeShare: 1.0 / 7},
		{ID: topology.MIGID(0, "1g.10gb", 3), Profile: "1g.10gb", GPUInstanceID: 10, MemoryMiB: 9984, ComputeShare: 1.0 / 7},
	}
	gpus[0].MIG = migs
	for _, d := range migs {
		gpus[0].DeviceIDs = append(gpus[0].DeviceIDs, d.ID)
	}
	hs := &holdings{}
	hs.Set(hold("ml", "a", "main", migs[0].ID), hold("ml", "b", "main", migs[3].ID))
	return mustNew(t, telemetry.Config{
		GPUs: gpus, GPUModel: m.GPUModel(), Hostname: "node-1", DriverVersion: "550.54.15",
		Devices: newDevices(gpus), Holders: hs, Model: telemetry.ModelSteady, Seed: 42, Clock: storetest.NewClock(t, epoch), PerPod: perPod,
	})
}

// The exposition of a MIG-enabled GPU for a fixed seed and clock is
// exactly the golden file's.
func TestExposition_GoldenMIG(t *testing.T) {
	for _, g := range []struct {
		file   string
		perPod bool
	}{{"mig.golden", false}, {"mig-perpod.golden", true}} {
		t.Run(g.file, func(t *testing.T) {
			got := exposition(t, migScenario(t, g.perPod))
			checkGolden(t, g.file, got)
		})
	}
}

// sampleRE reads one sample line: name, labels, value.
var sampleRE = regexp.MustCompile(`^(\w+)\{(.*)\} (\S+)$`)

// samples returns the samples of family name in exposition text: their
// labels (as printed) and values.
func samples(text, name string) (labels []string, values []float64) {
	for _, line := range strings.Split(text, "\n") {
		m := sampleRE.FindStringSubmatch(line)
		if m == nil || m[1] != name {
			continue
		}
		v, _ := strconv.ParseFloat(m[3], 64)
		labels, values = append(labels, m[2]), append(values, v)
	}
	return labels, values
}

// label returns the value of label name in printed labels, "" if absent.
func label(labels, name string) string {
	m := regexp.MustCompile(`(?:^|,)` + name + `="([^"]*)"`).FindStringSubmatch(labels)
	if m == nil {
		return ""
	}
	return m[1]
}

// A MIG-enabled GPU is reported per MIG device, as dcgm-exporter does:
// GPU_I_PROFILE and GPU_I_ID after modelName, the instance's memory
// (used + free = the profile's), its holders' labels, no GPU utilization;
// a GPU without MIG as before.
func TestExposition_MIGSeries(t *testing.T) {
	text := exposition(t, migScenario(t, false))
	labels, free := samples(text, "DCGM_FI_DEV_FB_FREE")
	_, used := samples(text, "DCGM_FI_DEV_FB_USED")
	var got []string
	for k, l := range labels {
		got = append(got, label(l, "gpu")+"/"+label(l, "GPU_I_PROFILE")+"/"+label(l, "GPU_I_ID")+"/"+label(l, "pod")+"/"+strconv.Itoa(int(used[k]+free[k])))
	}
	want := []string{"0/3g.40gb/2/a/40448", "0/2g.20gb/3//20096", "0/1g.10gb/9//9984", "0/1g.10gb/10/b/9984", "1////81559"}
	if !slices.Equal(got, want) {
		t.Errorf("FB series gpu/profile/GI/pod/used+free = %v, want %v", got, want)
	}
	if used[0] <= 0 || used[3] <= 0 || used[1] != 0 || used[2] != 0 {
		t.Errorf("FB_USED %v: want the held instances (3g.40gb, the second 1g.10gb) using memory, the free ones none", used)
	}
	if !strings.Contains(labels[0], `modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",Hostname="node-1"`) {
		t.Errorf("labels %s: want GPU_I_PROFILE and GPU_I_ID between modelName and Hostname", labels[0])
	}
	utilLabels, _ := samples(text, "DCGM_FI_DEV_GPU_UTIL")
	if len(utilLabels) != 1 || label(utilLabels[0], "gpu") != "1" {
		t.Errorf("GPU_UTIL series %v: want GPU 1's only (NVML has no utilization under MIG)", utilLabels)
	}
	tempLabels, temps := samples(text, "DCGM_FI_DEV_GPU_TEMP")
	if len(tempLabels) != 5 || temps[0] != temps[1] || temps[0] != temps[3] {
		t.Errorf("GPU_TEMP %v %v: want one per MIG device with its GPU's value, and GPU 1's", tempLabels, temps)
	}
	grLabels, gr := samples(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
	if len(grLabels) != 5 || gr[0] <= 0 || gr[1] != 0 {
		t.Errorf("GR_ENGINE_ACTIVE %v: want the held 3g.40gb busy, the free 2g.20gb idle", gr)
	}
}

// The readings carry the MIG devices' shares.
func TestReadings_MIG(t *testing.T) {
	rs := mustReadings(t, migScenario(t, false))
	if len(rs[1].MIG) != 0 {
		t.Errorf("GPU 1: %d MIG readings, want none", len(rs[1].MIG))
	}
	m := rs[0].MIG
	if len(m) != 4 || len(m[0].Holders) != 1 || m[0].Holders[0].Pod != "a" || len(m[1].Holders) != 0 {
		t.Fatalf("GPU 0 MIG readings %+v: want 4, the 3g.40gb held by ml/a", m)
	}
	sum := 0
	for _, d := range m {
		if d.MemoryUsedMiB+d.MemoryFreeMiB != d.MemoryTotalMiB || d.MemoryUsedMiB > d.MemoryTotalMiB {
			t.Errorf("%s: used %d + free %d, total %d", d.ID, d.MemoryUsedMiB, d.MemoryFreeMiB, d.MemoryTotalMiB)
		}
		sum += d.MemoryUsedMiB
	}
	// nvidia-smi reads the GPU's and the holders' memory from the readings: they are the MIG devices'.
	if r := rs[0]; r.MemoryUsedMiB != sum || r.MemoryFreeMiB != r.MemoryTotalMiB-sum ||
		r.Holders[0].MemoryUsedMiB != m[0].MemoryUsedMiB || r.Holders[1].MemoryUsedMiB != m[3].MemoryUsedMiB {
		t.Errorf("GPU 0 used %d free %d, holders %+v: want the MIG devices' %d, the holders' their MIG device's", r.MemoryUsedMiB, r.MemoryFreeMiB, r.Holders, sum)
	}
}

// MIG devices that are not the GPU's device ids, or repeat a GPU
// instance id, are refused.
func TestNew_MIGInvalid(t *testing.T) {
	m := mustMachine(t, "hgx-h100")
	for name, mig := range map[string][]telemetry.MIGInstance{
		"unknown id":     {{ID: "fake-0-mig-3g40gb-4", Profile: "3g.40gb", GPUInstanceID: 2, MemoryMiB: 40448, ComputeShare: 0.5}},
		"GI twice":       {{ID: "fake-0", Profile: "3g.40gb", GPUInstanceID: 2, MemoryMiB: 40448, ComputeShare: 0.5}, {ID: "fake-0", Profile: "3g.40gb", GPUInstanceID: 2, MemoryMiB: 40448, ComputeShare: 0.5}},
		"memory too big": {{ID: "fake-0", Profile: "3g.40gb", GPUInstanceID: 2, MemoryMiB: 1 << 20, ComputeShare: 0.5}},
		"no profile":     {{ID: "fake-0", GPUInstanceID: 2, MemoryMiB: 40448, ComputeShare: 0.5}},
		"no share":       {{ID: "fake-0", Profile: "3g.40gb", GPUInstanceID: 2, MemoryMiB: 40448}},
	} {
		gpus := machineGPUs(m, nil)[:1]
		gpus[0].MIG = mig
		_, err := telemetry.New(telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel()})
		if !errors.Is(err, telemetry.ErrInvalidConfig) || !strings.Contains(err.Error(), "MIG device") {
			t.Errorf("%s: New = %v, want ErrInvalidConfig naming the MIG device", name, err)
		}
	}
}

// migService is a Service of set over a real state file that has set's
// devices and their status files, in a temporary directory, with its
// store.
func migService(t *testing.T, set *gpuset.Set) (*telemetry.Service, *store.Store) {
	t.Helper()
	dir := plugintest.ShortTempDir(t)
	st := storetest.MustOpenPath(t, filepath.Join(dir, "state.db"), store.Options{})
	devs := plugintest.Served(t, st, set)
	vcfg := plugintest.ViewConfig(dir)
	files, err := view.NewFiles(vcfg, st, os.Args[0], "node-a", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	files.Publish(view.New(vcfg, set))
	return telemetry.NewService(telemetry.ServiceConfig{Store: st, Devices: &staticDevices{devs: devs}, Live: files, Hostname: "node-a",
		Clock: storetest.NewClock(t, epoch), Logger: zerolog.Nop()}), st
}

// The service reports a MIG set's layout: a series per MIG device of the
// layout in force with its profile, GPU instance id and memory.
func TestService_MIG(t *testing.T) {
	set := plugintest.MIGSet(t, "hgx-h100", gpuset.MIG{Strategy: gpuset.MIGStrategySingle, Layout: "all-3g.40gb"})
	tel, _ := migService(t, set)
	if err := tel.Follow(set, telemetry.Settings{Model: telemetry.ModelSteady}); err != nil {
		t.Fatal(err)
	}
	r := &serviceRig{tel: tel}
	code, text := r.scrape(t)
	if code != 200 {
		t.Fatalf("scrape: %d %s", code, text)
	}
	labels, free := samples(text, "DCGM_FI_DEV_FB_FREE")
	if len(labels) != 16 {
		t.Fatalf("%d FB_FREE series, want 16 (8 GPUs × 2 × 3g.40gb):\n%s", len(labels), strings.Join(labels, "\n"))
	}
	for k, l := range labels {
		gi := label(l, "GPU_I_ID")
		if label(l, "GPU_I_PROFILE") != "3g.40gb" || gi != []string{"1", "2"}[k%2] || free[k] != 40448 {
			t.Errorf("series %s = %v: want 3g.40gb, GPU instance %d, 40448 MiB free", l, free[k], k%2+1)
		}
	}
}

// A holder of a MIG device loads its MIG device, which is its compute
// share of the GPU: driven at 100 % on a 1g.10gb (1/7 of an H100) its MIG
// device is fully busy, the GPU a seventh busy, and its power far from
// the limit; memory beyond its MIG device's is not used.
func TestReadings_MIGLoadIsItsShare(t *testing.T) {
	e := migScenario(t, false)
	b := telemetry.Holder{Namespace: "ml", Pod: "b", Container: "main"}
	if err := e.SetOverride(0, b, telemetry.Override{UtilizationPercent: ptr(100.0), MemoryUsedMiB: ptr(30000)}); err != nil {
		t.Fatal(err)
	}
	a := telemetry.Holder{Namespace: "ml", Pod: "a", Container: "main"}
	if err := e.SetOverride(0, a, telemetry.Override{UtilizationPercent: ptr(0.0), MemoryUsedMiB: ptr(0)}); err != nil {
		t.Fatal(err)
	}
	r := mustReadings(t, e)[0]
	m := r.MIG[3] // the 1g.10gb at 3, ml/b's
	if m.UtilizationPercent != 100 || m.GREngineActive != 1 || m.MemoryUsedMiB != m.MemoryTotalMiB || m.Holders[0].UtilizationPercent != 100 {
		t.Errorf("ml/b's 1g.10gb: %+v, want fully busy and full (30000 MiB capped at its 9984)", m)
	}
	if r.UtilizationPercent != 14 || r.MemoryUsedMiB != m.MemoryTotalMiB {
		t.Errorf("GPU: utilization %d %%, memory used %d MiB; want 14 %% (100/7) and the 1g.10gb's %d", r.UtilizationPercent, r.MemoryUsedMiB, m.MemoryTotalMiB)
	}
	gm := mustMachine(t, "hgx-h100").GPUModel()
	if limit := float64(gm.PowerLimitW); r.PowerDrawW > float64(gm.IdlePowerW)+0.4*(limit-float64(gm.IdlePowerW)) {
		t.Errorf("GPU power %.1f W with a seventh of it busy: want well under the %v W limit", r.PowerDrawW, limit)
	}
}

// Through DRA (a partitionable set) a MIG device is a series while a
// prepared claim holds it: none of GPU 1's 25 placements before, its
// claimed 3g.40gb (GPU instance 2) after the claim and a new Follow.
func TestService_MIGPartitionable(t *testing.T) {
	set := plugintest.MIGSet(t, "hgx-h100", gpuset.MIG{Layout: "all-enabled", Partitionable: true})
	tel, st := migService(t, set)
	instances := func() []string {
		t.Helper()
		if err := tel.Follow(set, telemetry.Settings{Model: telemetry.ModelSteady}); err != nil {
			t.Fatal(err)
		}
		code, text := (&serviceRig{tel: tel}).scrape(t)
		if code != 200 {
			t.Fatalf("scrape: %d %s", code, text)
		}
		labels, _ := samples(text, "DCGM_FI_DEV_FB_FREE")
		var out []string
		for _, l := range labels {
			if p := label(l, "GPU_I_PROFILE"); p != "" {
				out = append(out, label(l, "gpu")+" "+p+" "+label(l, "GPU_I_ID"))
			}
		}
		return out
	}
	if got := instances(); len(got) != 0 {
		t.Errorf("MIG series with no claim: %v", got)
	}
	if _, _, err := st.RecordClaimPrepared(store.Claim{UID: "uid-1", Namespace: "default", Name: "mig", DeviceIDs: []string{"fake-1-mig-3g40gb-4"}}); err != nil {
		t.Fatal(err)
	}
	if got, want := instances(), []string{"1 3g.40gb 2"}; !slices.Equal(got, want) {
		t.Errorf("MIG series with a prepared claim: %v, want %v", got, want)
	}
}
