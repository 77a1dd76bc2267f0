package telemetry_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// overrideScenario: an A100 machine (40960 MiB), GPU 0 held by ml/job/main,
// GPU 1 shared by ml/job/main and ml/other/main.
func overrideScenario(t *testing.T) (*telemetry.Exporter, *storetest.Clock, *holdings) {
	t.Helper()
	m := mustMachine(t, "dgx-a100")
	hs := &holdings{}
	hs.Set(hold("ml", "job", "main", "fake-0", "fake-1"), hold("ml", "other", "main", "fake-1"))
	c := storetest.NewClock(t, epoch)
	e := mustNew(t, telemetry.Config{GPUs: machineGPUs(m, nil)[:3], GPUModel: m.GPUModel(), Holders: hs, Clock: c, Seed: 3})
	return e, c, hs
}

var job = telemetry.Holder{Namespace: "ml", Pod: "job", Container: "main"}

// Bad overrides are refused with an error naming what was wrong, and
// change nothing.
func TestSetOverride_Refused(t *testing.T) {
	e, _, hs := overrideScenario(t)
	before := exposition(t, e)
	for _, tc := range []struct {
		name   string
		gpu    int
		holder telemetry.Holder
		o      telemetry.Override
		is     error
		says   string
	}{
		{"nothing set", 0, job, telemetry.Override{}, telemetry.ErrInvalidOverride, "neither utilization nor memory"},
		{"utilization below 0", 0, job, telemetry.Override{UtilizationPercent: ptr(-1.0)}, telemetry.ErrInvalidOverride, "utilization -1 %: want 0..100"},
		{"utilization above 100", 0, job, telemetry.Override{UtilizationPercent: ptr(100.5)}, telemetry.ErrInvalidOverride, "utilization 100.5 %"},
		{"utilization NaN", 0, job, telemetry.Override{UtilizationPercent: ptr(math.NaN())}, telemetry.ErrInvalidOverride, "utilization NaN"},
		{"utilization +Inf", 0, job, telemetry.Override{UtilizationPercent: ptr(math.Inf(1))}, telemetry.ErrInvalidOverride, "utilization +Inf"},
		{"memory below 0", 0, job, telemetry.Override{MemoryUsedMiB: ptr(-1)}, telemetry.ErrInvalidOverride, "memory used -1 MiB: want 0..40960"},
		{"memory above the GPU's", 0, job, telemetry.Override{MemoryUsedMiB: ptr(40961)}, telemetry.ErrInvalidOverride, "memory used 40961 MiB"},
		{"negative ttl", 0, job, telemetry.Override{UtilizationPercent: ptr(5.0), TTL: -time.Second}, telemetry.ErrInvalidOverride, "ttl -1s"},
		{"ttl too long", 0, job, telemetry.Override{UtilizationPercent: ptr(5.0), TTL: 2 * time.Hour}, telemetry.ErrInvalidOverride, "up to 1h0m0s"},
		{"unknown GPU", 9, job, telemetry.Override{UtilizationPercent: ptr(5.0)}, store.ErrUnknownDevice, "GPU 9"},
		{"negative GPU", -1, job, telemetry.Override{UtilizationPercent: ptr(5.0)}, store.ErrUnknownDevice, "GPU -1"},
		{"not the holder", 2, job, telemetry.Override{UtilizationPercent: ptr(5.0)}, telemetry.ErrNotHolder, "GPU 2, ml/job/main"},
		{"another container of the pod", 0, telemetry.Holder{Namespace: "ml", Pod: "job", Container: "sidecar"},
			telemetry.Override{UtilizationPercent: ptr(5.0)}, telemetry.ErrNotHolder, "ml/job/sidecar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := e.SetOverride(tc.gpu, tc.holder, tc.o)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("SetOverride = %v; want %v saying %q", err, tc.is, tc.says)
			}
		})
	}
	hs.Fail(errors.New("store closed"))
	if err := e.SetOverride(0, job, telemetry.Override{UtilizationPercent: ptr(5.0)}); err == nil || !strings.Contains(err.Error(), "store closed") {
		t.Errorf("SetOverride with unreadable holders = %v; want the source's error", err)
	}
	hs.Fail(nil)
	if after := exposition(t, e); after != before {
		t.Error("refused overrides changed the exposition")
	}
}

// An override drives the holder's share until its TTL has passed; a
// shared GPU still sums and caps; Clear ends it at once.
func TestSetOverride_DrivesUntilExpiry(t *testing.T) {
	e, c, _ := overrideScenario(t)
	model := mustReadings(t, e)
	if err := e.SetOverride(0, job, telemetry.Override{UtilizationPercent: ptr(12.4), MemoryUsedMiB: ptr(1234), TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r := mustReadings(t, e)[0]
	if r.UtilizationPercent != 12 || r.MemoryUsedMiB != 1234 || r.MemoryFreeMiB != 40960-1234 || !r.Holders[0].Overridden {
		t.Errorf("overridden: utilization %d%%, memory %d/%d MiB, overridden %v; want 12%%, 1234/%d, true",
			r.UtilizationPercent, r.MemoryUsedMiB, r.MemoryFreeMiB, r.Holders[0].Overridden, 40960-1234)
	}
	if r.PowerDrawW >= model[0].PowerDrawW {
		t.Errorf("power %.3f W at 12%% is not below the model's %.3f W at %d%%", r.PowerDrawW, model[0].PowerDrawW, model[0].UtilizationPercent)
	}

	// Only utilization: memory stays the model's.
	if err := e.SetOverride(1, job, telemetry.Override{UtilizationPercent: ptr(100.0)}); err != nil {
		t.Fatal(err)
	}
	r1 := mustReadings(t, e)[1]
	if r1.UtilizationPercent != 100 || r1.Holders[0].UtilizationPercent >= 100 || r1.Holders[0].UtilizationPercent < 50 {
		t.Errorf("shared GPU with one holder at 100 %%: %+v; want 100 %% in all, its share scaled to 50..99", r1)
	}

	c.Advance(29 * time.Second)
	if r := mustReadings(t, e)[0]; r.UtilizationPercent != 12 {
		t.Errorf("before expiry: %d%%, want 12%%", r.UtilizationPercent)
	}
	c.Advance(time.Second)
	if r := mustReadings(t, e)[0]; r.Holders[0].Overridden || r.MemoryUsedMiB == 1234 {
		t.Errorf("after expiry still overridden: %+v", r)
	}

	if !e.ClearOverride(1, job) {
		t.Error("ClearOverride of a live override reported none")
	}
	if e.ClearOverride(1, job) || e.ClearOverride(0, job) || e.ClearOverride(7, job) {
		t.Error("ClearOverride reported an override that is gone")
	}
	if r := mustReadings(t, e)[1]; r.Holders[0].Overridden {
		t.Error("cleared override still drives the GPU")
	}
}

// An override ends with the hold: once the container releases the GPU,
// the GPU idles even if the override has not expired.
func TestSetOverride_EndsWithTheHold(t *testing.T) {
	e, _, hs := overrideScenario(t)
	if err := e.SetOverride(0, job, telemetry.Override{UtilizationPercent: ptr(80.0), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	hs.Set(hold("ml", "other", "main", "fake-1"))
	if r := mustReadings(t, e)[0]; r.UtilizationPercent != 0 || len(r.Holders) != 0 {
		t.Errorf("released GPU: %+v, want idle", r)
	}
}
