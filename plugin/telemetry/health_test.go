package telemetry_test

import (
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func TestXIDText(t *testing.T) {
	for xid, want := range map[int]string{
		0: "No Error", 13: "Graphics Engine Exception", 48: "Double Bit ECC Error", 79: "GPU has fallen off the bus",
		94: "Contained ECC error", 172: "Uncorrectable SRAM Error", 173: "Unknown Error", -1: "Unknown Error", 1 << 20: "Unknown Error",
	} {
		if got := telemetry.XIDText(xid); got != want {
			t.Errorf("XIDText(%d) = %q, want %q", xid, got, want)
		}
	}
}

// series returns the sample lines of GPU gpu in an exposition.
func series(text string, gpu string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, `{gpu="`+gpu+`",`) {
			out = append(out, line)
		}
	}
	return out
}

// A GPU marked unhealthy with an XID reason of a lost GPU shows the XID,
// and nothing else, as a GPU that fell off the bus does; healed, it reports as before
// with XID 0. Without an XID in its reason it shows 0 while lost.
func TestExporter_UnhealthyGPUShowsXIDOnly(t *testing.T) {
	m := mustMachine(t, "dgx-a100")
	gpus := machineGPUs(m, nil)[:2]
	devs := newDevices(gpus)
	hs := &holdings{}
	hs.Set(hold("ml", "job", "main", "fake-1"))
	e := mustNew(t, telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel(), Devices: devs, Holders: hs, Seed: 1, Clock: storetest.NewClock(t, epoch)})
	healthy := series(exposition(t, e), "1")
	if len(healthy) != 25 {
		t.Fatalf("healthy held GPU of an A100 has %d series, want every default counter's 25:\n%s", len(healthy), strings.Join(healthy, "\n"))
	}

	for _, tc := range []struct {
		reason, code, msg string
	}{
		{"XID 79", "79", "GPU has fallen off the bus"},
		{"xid 13: graphics", "13", "Graphics Engine Exception"},
		{"admin: drain", "0", "No Error"},
		{"XID 200", "200", "Unknown Error"},
	} {
		devs.SetHealth(1, false, tc.reason)
		lines := series(exposition(t, e), "1")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "DCGM_FI_DEV_XID_ERRORS{") {
			t.Errorf("unhealthy %q: series %q, want only DCGM_FI_DEV_XID_ERRORS", tc.reason, lines)
			continue
		}
		want := `,container="main",err_code="` + tc.code + `",err_msg="` + tc.msg + `",namespace="ml",pod="job"} ` + tc.code
		if !strings.HasSuffix(lines[0], want) {
			t.Errorf("unhealthy %q: %s\nwant suffix %s", tc.reason, lines[0], want)
		}
		rs := mustReadings(t, e)
		if r := rs[1]; !r.Lost || r.UtilizationPercent != 0 || r.MemoryUsedMiB != 0 || r.PowerDrawW != 0 || r.SMClockMHz != 0 || len(r.Holders) != 1 {
			t.Errorf("unhealthy %q: reading %+v, want lost with zero values and its holder", tc.reason, r)
		}
		if other := series(exposition(t, e), "0"); len(other) != 25 {
			t.Errorf("unhealthy GPU 1 took GPU 0's series with it: %d left", len(other))
		}
	}

	devs.SetHealth(1, true, "")
	if healed := series(exposition(t, e), "1"); strings.Join(healed, "\n") != strings.Join(healthy, "\n") {
		t.Errorf("healed GPU reports\n%s\nwant as before\n%s", strings.Join(healed, "\n"), strings.Join(healthy, "\n"))
	}
}

// A shared GPU is unhealthy when any of its replicas is; its XID is the
// first one a replica's reason names.
func TestExporter_ReplicaHealth(t *testing.T) {
	m := mustMachine(t, "dgx-a100")
	gpus := machineGPUs(m, map[int]int{0: 3})[:1]
	devs := newDevices(gpus)
	e := mustNew(t, telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel(), Devices: devs})
	devs.mu.Lock()
	devs.list[1].Healthy, devs.list[1].Reason = false, "admin: drain"
	devs.list[2].Healthy, devs.list[2].Reason = false, "XID 94"
	devs.mu.Unlock()
	r := mustReadings(t, e)[0]
	if !r.Lost || r.XID != 94 {
		t.Errorf("replicas unhealthy (no XID, XID 94): lost %v, XID %d; want lost, 94", r.Lost, r.XID)
	}
}

// An ECC fault leaves the GPU answering, as a real GPU with a memory error
// does: every series stays, with its XID and the remapped rows its XID
// records; a GPU that retires pages instead (V100) has no remapped-rows
// series at all. Healed, the counts go back to 0.
func TestExporter_ECCFaultAnswers(t *testing.T) {
	for _, tc := range []struct {
		machine, reason string
		want            map[string]string // series of GPU 1 -> value
		absent          []string
	}{
		{"dgx-a100", "XID 48: double bit ECC", map[string]string{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "1",
			"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "0", "DCGM_FI_DEV_ROW_REMAP_FAILURE": "0", "DCGM_FI_DEV_XID_ERRORS": "48"}, nil},
		{"dgx-a100", "XID 64", map[string]string{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "0", "DCGM_FI_DEV_ROW_REMAP_FAILURE": "1",
			"DCGM_FI_DEV_XID_ERRORS": "64"}, nil},
		{"dgx-a100", "XID 92: SBE storm", map[string]string{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "1", "DCGM_FI_DEV_XID_ERRORS": "92"}, nil},
		{"dgx1-volta", "XID 48", map[string]string{"DCGM_FI_DEV_XID_ERRORS": "48"},
			[]string{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"}},
	} {
		t.Run(tc.machine+"/"+tc.reason, func(t *testing.T) {
			m := mustMachine(t, tc.machine)
			gpus := machineGPUs(m, nil)[:2]
			devs := newDevices(gpus)
			hs := &holdings{}
			hs.Set(hold("ml", "job", "main", "fake-1"))
			e := mustNew(t, telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel(), Devices: devs, Holders: hs, Clock: storetest.NewClock(t, epoch)})
			healthy := len(series(exposition(t, e), "1"))
			devs.SetHealth(1, false, tc.reason)
			lines := series(exposition(t, e), "1")
			if len(lines) != healthy {
				t.Errorf("ECC fault: %d series, want all %d of a healthy GPU", len(lines), healthy)
			}
			got := map[string]string{}
			for _, l := range lines {
				name, _, _ := strings.Cut(l, "{")
				got[name] = l[strings.LastIndexByte(l, ' ')+1:]
			}
			for name, v := range tc.want {
				if got[name] != v {
					t.Errorf("%s = %q, want %s", name, got[name], v)
				}
			}
			for _, name := range tc.absent {
				if _, ok := got[name]; ok {
					t.Errorf("%s served on %s, whose GPUs retire pages", name, tc.machine)
				}
			}
			if r := mustReadings(t, e)[1]; r.Lost || r.Fault != "ecc" || r.UtilizationPercent == 0 {
				t.Errorf("reading %+v: want an answering, busy GPU with fault ecc", r)
			}
			devs.SetHealth(1, true, "")
			if r := mustReadings(t, e)[1]; r.MemoryErrors != (topology.MemoryErrors{}) || r.XID != 0 || r.Fault != "" {
				t.Errorf("healed: %+v", r)
			}
		})
	}
}

// A thermal fault keeps the GPU answering at its slowdown temperature, its
// busy clock halved and the thermal slowdown reasons active.
func TestExporter_ThermalFault(t *testing.T) {
	m := mustMachine(t, "hgx-h100")
	gpus := machineGPUs(m, nil)[:1]
	devs := newDevices(gpus)
	hs := &holdings{}
	hs.Set(hold("ml", "job", "main", "fake-0"))
	e := mustNew(t, telemetry.Config{GPUs: gpus, GPUModel: m.GPUModel(), Devices: devs, Holders: hs, Clock: storetest.NewClock(t, epoch)})
	cool := mustReadings(t, e)[0]
	devs.SetHealth(0, false, "thermal slowdown: fan failure")
	hot := mustReadings(t, e)[0]
	slowdown := m.GPUModel().Thresholds().SlowdownC
	const thermal = topology.ClockEventHWSlowdown | topology.ClockEventHWThermalSlowdown | topology.ClockEventSWThermalSlowdown
	switch {
	case hot.Lost || hot.Fault != "thermal":
		t.Errorf("thermal fault: lost %v fault %q, want an answering GPU with fault thermal", hot.Lost, hot.Fault)
	case hot.TemperatureC < slowdown:
		t.Errorf("thermal fault: %d °C, want at least the slowdown temperature %d °C", hot.TemperatureC, slowdown)
	case hot.SMClockMHz*2 > cool.SMClockMHz+1:
		t.Errorf("thermal fault: SM clock %d MHz, want half of %d", hot.SMClockMHz, cool.SMClockMHz)
	case hot.ClockEventReasons&thermal != thermal || cool.ClockEventReasons&thermal != 0:
		t.Errorf("clock event reasons %#x hot, %#x cool", hot.ClockEventReasons, cool.ClockEventReasons)
	}
}
