package nvidiasmi_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

// TestLiveValues: the live file's values replace the status files' where
// it has the GPU and they fit it; an unusable live file is ignored.
func TestLiveValues(t *testing.T) {
	f := newFixture(t, mustPreset(t, "dgx-a100"), []int{0, 1, 2}, nil)
	w, err := status.NewWriter(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	l := status.NewLive(testTime)
	a := f.gpus[0].Telemetry
	a.UtilizationGPUPercent, a.MemoryUsedMiB, a.TemperatureC, a.PowerDrawW = 90, 4096, 61, 301.254
	l.GPUs[f.gpus[0].UUID] = a
	b := f.gpus[1].Telemetry
	b.UtilizationGPUPercent, b.MemoryUsedMiB = 50, f.gpus[1].MemoryTotalMiB // more than it has: not applied
	l.GPUs[f.gpus[1].UUID] = b
	if err := w.WriteLive(l); err != nil {
		t.Fatal(err)
	}
	const q = "--query-gpu=index,utilization.gpu,memory.used,temperature.gpu,power.draw"
	out, code := f.run(t, q, "--format=csv,noheader,nounits")
	if want := "0, 90, 4096, 61, 301.25\n1, 0, 0, 33, 60.00\n2, 0, 0, 33, 60.00\n"; code != 0 || out != want {
		t.Errorf("with live values: exit %d\n%s\nwant\n%s", code, out, want)
	}
	if err := os.WriteFile(filepath.Join(f.dir, status.LiveFileName), []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = f.run(t, q, "--format=csv,noheader,nounits")
	if want := "0, 0, 0, 33, 60.00\n1, 0, 0, 33, 60.00\n2, 0, 0, 33, 60.00\n"; code != 0 || out != want {
		t.Errorf("with an unusable live file: exit %d\n%s", code, out)
	}
}
