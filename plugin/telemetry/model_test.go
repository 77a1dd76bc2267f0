package telemetry_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func TestParseModel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want telemetry.Model
		err  bool
	}{
		{"", telemetry.ModelSteady, false},
		{"idle", telemetry.ModelIdle, false},
		{"steady", telemetry.ModelSteady, false},
		{"wave", telemetry.ModelWave, false},
		{"random-walk", telemetry.ModelRandomWalk, false},
		{"Steady", "", true},
		{"randomwalk", "", true},
		{" wave", "", true},
	} {
		got, err := telemetry.ParseModel(tc.in)
		if tc.err {
			if !errors.Is(err, telemetry.ErrUnknownModel) {
				t.Errorf("ParseModel(%q) = %q, %v; want ErrUnknownModel", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseModel(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if got := telemetry.Model("").String(); got != "steady" {
		t.Errorf("zero Model is %q, want steady", got)
	}
}

// rangeScenario has four GPUs of machine m: GPU 0 free, GPU 1 held by one
// container, GPU 2 shared by two replica holders, GPU 3 held whole by three
// containers (more than any kubelet allows, to push the caps).
func rangeScenario(t testing.TB, m *topology.Machine, model telemetry.Model, seed uint64) *telemetry.Exporter {
	t.Helper()
	gpus := machineGPUs(m, map[int]int{2: 4})[:4]
	hs := &holdings{}
	hs.Set(
		hold("a", "one", "c", "fake-1"),
		hold("b", "rep-0", "c", "fake-2::0"),
		hold("b", "rep-1", "c", "fake-2::3"),
		hold("c", "x", "c", "fake-3"),
		hold("c", "y", "c", "fake-3"),
		hold("c", "z", "c", "fake-3"),
	)
	return mustNew(t, telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel(), Holders: hs, Model: model, Seed: seed})
}

// Over every preset's GPU model, every load model, many seeds and times,
// every value stays in the physical range of the product and the derived
// series agree with each other.
func TestReadings_PhysicalRanges(t *testing.T) {
	seeds, times := 24, 24
	if testing.Short() {
		seeds, times = 4, 6
	}
	for _, name := range topology.PresetNames() {
		m := mustMachine(t, name)
		gm := m.GPUModel()
		for _, model := range telemetry.Models {
			for seed := range uint64(seeds) {
				e := rangeScenario(t, m, model, seed*0x9e37+1)
				for k := range times {
					at := epoch.Add(time.Duration(k)*7919*time.Second + time.Duration(seed)*time.Hour)
					rs, err := e.ReadingsAt(at)
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range rs {
						checkReading(t, name, model, gm, r)
					}
					free := rs[0]
					if free.UtilizationPercent != 0 || free.MemoryUsedMiB != 0 || free.MemoryUtilizationPercent != 0 || free.GREngineActive != 0 {
						t.Errorf("%s/%s: free GPU is busy: %+v", name, model, free)
					}
					if math.Abs(free.PowerDrawW-float64(gm.IdlePowerW)) > 0.02*float64(gm.IdlePowerW)+0.001 {
						t.Errorf("%s/%s: free GPU draws %.3f W, idle is %d W", name, model, free.PowerDrawW, gm.IdlePowerW)
					}
					for _, r := range rs[1:] {
						switch {
						case model == telemetry.ModelIdle && !idle(r):
							t.Errorf("%s/idle: held GPU %d is not idle: %+v", name, r.Index, r)
						case r.UtilizationPercent > 0 && r.SMClockMHz <= free.SMClockMHz:
							t.Errorf("%s/%s: busy GPU %d clocks %d MHz, idle clock is %d", name, model, r.Index, r.SMClockMHz, free.SMClockMHz)
						case r.UtilizationPercent == 0 && r.SMClockMHz != free.SMClockMHz:
							t.Errorf("%s/%s: idle GPU %d clocks %d MHz, idle clock is %d", name, model, r.Index, r.SMClockMHz, free.SMClockMHz)
						}
					}
				}
			}
		}
	}
}

// idle reports whether r shows no load, its holders' shares included.
func idle(r telemetry.Reading) bool {
	for _, h := range r.Holders {
		if h.UtilizationPercent != 0 || h.MemoryUsedMiB != 0 {
			return false
		}
	}
	return r.UtilizationPercent == 0 && r.MemoryUsedMiB == 0 && r.MemoryUtilizationPercent == 0 && r.GREngineActive == 0
}

// checkReading checks the physical ranges of a healthy GPU's reading and
// the agreement of its derived values.
func checkReading(t *testing.T, preset string, model telemetry.Model, gm topology.GPUModel, r telemetry.Reading) {
	t.Helper()
	var errs []string
	check := func(ok bool, what string) {
		if !ok {
			errs = append(errs, what)
		}
	}
	check(!r.Lost && r.XID == 0, "healthy GPU lost")
	check(r.UtilizationPercent >= 0 && r.UtilizationPercent <= 100, "utilization outside 0..100")
	check(r.MemoryUtilizationPercent >= 0 && r.MemoryUtilizationPercent <= r.UtilizationPercent*6/10+1, "memory copy utilization outside 0..0.6 × utilization")
	check(r.MemoryTotalMiB == gm.MemoryMiB, "memory total is not the product's")
	check(r.MemoryUsedMiB >= 0 && r.MemoryUsedMiB <= gm.MemoryMiB, "memory used outside 0..total")
	check(r.MemoryUsedMiB+r.MemoryFreeMiB == gm.MemoryMiB, "used + free != total")
	check(r.PowerDrawW > 0 && r.PowerDrawW <= float64(gm.PowerLimitW), "power outside 0..limit")
	check(r.PowerLimitW == gm.PowerLimitW, "power limit is not the product's")
	check(r.PowerDrawW == math.Round(r.PowerDrawW*1000)/1000, "power has more than 3 decimals")
	check(r.GREngineActive >= 0 && r.GREngineActive <= 1, "GR engine active outside 0..1")
	check(math.Abs(r.GREngineActive*100-float64(r.UtilizationPercent)) <= 0.5+1e-9, "GR engine active != utilization/100")
	check(r.TemperatureC >= 25 && r.TemperatureC <= 90, "temperature outside 25..90 °C")
	check(r.SMClockMHz >= 100 && r.SMClockMHz <= 3000, "SM clock outside 100..3000 MHz")
	var util, mem int
	for _, h := range r.Holders {
		check(h.UtilizationPercent >= 0 && h.UtilizationPercent <= 100, "holder utilization outside 0..100")
		check(h.MemoryUsedMiB >= 0 && h.MemoryUsedMiB <= gm.MemoryMiB, "holder memory outside 0..total")
		util += h.UtilizationPercent
		mem += h.MemoryUsedMiB
	}
	n := len(r.Holders)
	check(n == 0 || abs(util-r.UtilizationPercent) <= n, "holders' utilizations do not sum to the GPU's")
	check(n == 0 || abs(mem-r.MemoryUsedMiB) <= n, "holders' memory does not sum to the GPU's")
	if len(errs) > 0 {
		t.Errorf("%s/%s GPU %d: %s: %+v", preset, model, r.Index, strings.Join(errs, "; "), r)
	}
}

func abs(x int) int { return max(x, -x) }

// utilAt returns the utilization of GPU 0 held by holdings hs under model
// and seed at t.
func utilAt(t *testing.T, model telemetry.Model, seed uint64, at time.Time, hs ...telemetry.Holding) telemetry.Reading {
	t.Helper()
	m := mustMachine(t, "dgx-a100")
	src := &holdings{}
	src.Set(hs...)
	e := mustNew(t, telemetry.Config{GPUs: machineGPUs(m, nil)[:1], GPUModel: m.GPUModel(), Holders: src, Model: model, Seed: seed})
	rs, err := e.ReadingsAt(at)
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

// A GPU held by several containers carries the sum of their loads, capped
// at 100 %: each holder's share is what it alone would put on the GPU,
// scaled down when the sum is over.
func TestReadings_SharedGPUSumsCapped(t *testing.T) {
	a, b, c := hold("ns", "a", "c", "fake-0"), hold("ns", "b", "c", "fake-0"), hold("ns", "c", "c", "fake-0")
	capped := 0
	for _, model := range []telemetry.Model{telemetry.ModelSteady, telemetry.ModelWave, telemetry.ModelRandomWalk} {
		for seed := range uint64(20) {
			at := epoch.Add(time.Duration(seed) * 977 * time.Second)
			ua := utilAt(t, model, seed, at, a).UtilizationPercent
			ub := utilAt(t, model, seed, at, b).UtilizationPercent
			uc := utilAt(t, model, seed, at, c).UtilizationPercent
			ab := utilAt(t, model, seed, at, a, b)
			abc := utilAt(t, model, seed, at, a, b, c)
			if want := min(100, ua+ub); abs(ab.UtilizationPercent-want) > 1 {
				t.Errorf("%s seed %d: a %d%% + b %d%% gives %d%%, want %d%%", model, seed, ua, ub, ab.UtilizationPercent, want)
			}
			if want := min(100, ua+ub+uc); abs(abc.UtilizationPercent-want) > 1 {
				t.Errorf("%s seed %d: a %d%% + b %d%% + c %d%% gives %d%%, want %d%%", model, seed, ua, ub, uc, abc.UtilizationPercent, want)
			}
			if ua+ub+uc > 100 {
				capped++
				// Scaled in proportion: a's share of the capped sum.
				want := float64(ua) * 100 / float64(ua+ub+uc)
				if got := float64(abc.Holders[0].UtilizationPercent); math.Abs(got-want) > 1.5 {
					t.Errorf("%s seed %d: a's share %v%%, want %.1f%%", model, seed, got, want)
				}
			}
		}
	}
	if capped == 0 {
		t.Error("no case went over 100 %: the cap was not tested")
	}
}

// The same seed, clock second, holders and health give the same values;
// another second or another seed gives others.
func TestReadings_Deterministic(t *testing.T) {
	for _, model := range telemetry.Models[1:] {
		one := exposition(t, scenario(t, model, false))
		if two := exposition(t, scenario(t, model, false)); two != one {
			t.Errorf("%s: two exporters with one seed and clock differ", model)
		}
		e := scenario(t, model, false)
		r1, _ := e.ReadingsAt(epoch.Add(100 * time.Millisecond))
		r2, _ := e.ReadingsAt(epoch.Add(900 * time.Millisecond))
		r3, _ := e.ReadingsAt(epoch.Add(time.Second))
		if !slices.EqualFunc(r1, r2, sameValues) {
			t.Errorf("%s: two reads within one second differ", model)
		}
		if slices.EqualFunc(r1, r3, sameValues) {
			t.Errorf("%s: the next second has the same values everywhere", model)
		}
		other := utilAt(t, model, 43, epoch, hold("ml", "train-0", "trainer", "fake-0"))
		this := utilAt(t, model, 42, epoch, hold("ml", "train-0", "trainer", "fake-0"))
		if other.UtilizationPercent == this.UtilizationPercent && other.MemoryUsedMiB == this.MemoryUsedMiB {
			t.Errorf("%s: seeds 42 and 43 give the same load", model)
		}
	}
}

func sameValues(a, b telemetry.Reading) bool {
	return a.UtilizationPercent == b.UtilizationPercent && a.MemoryUsedMiB == b.MemoryUsedMiB &&
		a.PowerDrawW == b.PowerDrawW && a.TemperatureC == b.TemperatureC && a.SMClockMHz == b.SMClockMHz &&
		a.MemoryUtilizationPercent == b.MemoryUtilizationPercent && a.GREngineActive == b.GREngineActive
}

// Each model has its shape over an hour: steady stays within its noise,
// wave swings, random-walk wanders in small steps, idle does nothing.
func TestModels_Shapes(t *testing.T) {
	h := hold("ml", "job", "main", "fake-0")
	for _, tc := range []struct {
		model              telemetry.Model
		minSpan, maxSpan   int // max - min over the hour
		maxStep            int // largest change from one second to the next
		minMean, maxMean   float64
		seeds, secondsStep int
	}{
		{telemetry.ModelIdle, 0, 0, 0, 0, 0, 5, 1},
		{telemetry.ModelSteady, 1, 9, 9, 36, 99, 5, 1},
		{telemetry.ModelWave, 25, 100, 12, 10, 90, 5, 1},
		{telemetry.ModelRandomWalk, 15, 100, 8, 0, 100, 5, 1},
	} {
		for seed := range uint64(tc.seeds) {
			m := mustMachine(t, "dgx-a100")
			src := &holdings{}
			src.Set(h)
			e := mustNew(t, telemetry.Config{GPUs: machineGPUs(m, nil)[:1], GPUModel: m.GPUModel(), Holders: src, Model: tc.model, Seed: seed})
			lo, hi, prev, step, sum := 101, -1, -1, 0, 0
			const n = 3600
			for s := range n {
				rs, err := e.ReadingsAt(epoch.Add(time.Duration(s) * time.Second))
				if err != nil {
					t.Fatal(err)
				}
				u := rs[0].UtilizationPercent
				lo, hi, sum = min(lo, u), max(hi, u), sum+u
				if prev >= 0 {
					step = max(step, abs(u-prev))
				}
				prev = u
			}
			mean := float64(sum) / n
			if hi-lo < tc.minSpan || hi-lo > tc.maxSpan || step > tc.maxStep || mean < tc.minMean || mean > tc.maxMean {
				t.Errorf("%s seed %d: over an hour min %d max %d (span want %d..%d), largest step %d (want <= %d), mean %.1f (want %.0f..%.0f)",
					tc.model, seed, lo, hi, tc.minSpan, tc.maxSpan, step, tc.maxStep, mean, tc.minMean, tc.maxMean)
			}
		}
	}
}
