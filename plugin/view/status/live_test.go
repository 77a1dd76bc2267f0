package status_test

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

// TestLive_WriteReadApply: the live file reads back; Apply gives a GPU its
// live values when they fit it; an invalid one is refused and leaves the
// previous file; Sync leaves it alone; RemoveLive removes it.
func TestLive_WriteReadApply(t *testing.T) {
	dir := t.TempDir()
	w := mustWriter(t, dir)
	g := mustGPU(t, "dgx-a100", 1)
	other := mustGPU(t, "dgx-a100", 2)
	if err := w.Sync([]*status.GPU{g, other}); err != nil {
		t.Fatal(err)
	}
	if _, err := status.ReadLive(os.DirFS(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadLive without a file: %v, want fs.ErrNotExist", err)
	}
	l := status.NewLive(testTime)
	live := g.Telemetry
	live.UtilizationGPUPercent, live.MemoryUsedMiB, live.PowerDrawW = 90, 4096, 301.25
	l.GPUs[g.UUID] = live
	if err := w.WriteLive(l); err != nil {
		t.Fatal(err)
	}
	got, err := status.ReadLive(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Updated.Equal(testTime) || len(got.GPUs) != 1 {
		t.Errorf("read back %+v", got)
	}
	a, b := *g, *other
	if !got.Apply(&a) || a.Telemetry.UtilizationGPUPercent != 90 || a.Telemetry.MemoryUsedMiB != 4096 || a.Telemetry.PowerDrawW != 301.25 {
		t.Errorf("Apply to %s: %+v", g.ID, a.Telemetry)
	}
	if got.Apply(&b) || !reflect.DeepEqual(b.Telemetry, other.Telemetry) {
		t.Errorf("Apply to a GPU the live file lacks changed it: %+v", b.Telemetry)
	}
	if (*status.Live)(nil).Apply(&b) {
		t.Error("a nil live file applied")
	}
	// Memory used beyond a GPU's total − reserved is not applied to it.
	big := live
	big.MemoryUsedMiB = g.MemoryTotalMiB
	l.GPUs[other.UUID] = big
	if !l.Apply(&a) || l.Apply(&b) {
		t.Error("Apply: memory used above total − reserved applied")
	}
	delete(l.GPUs, other.UUID)

	for name, bad := range map[string]func(*status.Live){
		"utilization":  func(l *status.Live) { x := l.GPUs[g.UUID]; x.UtilizationGPUPercent = 101; l.GPUs[g.UUID] = x },
		"UUID":         func(l *status.Live) { l.GPUs["GPU-nope"] = live },
		"kind":         func(l *status.Live) { l.Kind = "GPUStatus" },
		"memory":       func(l *status.Live) { x := l.GPUs[g.UUID]; x.MemoryUsedMiB = -1; l.GPUs[g.UUID] = x },
		"power is NaN": func(l *status.Live) { x := l.GPUs[g.UUID]; x.PowerDrawW = nan(); l.GPUs[g.UUID] = x },
	} {
		c := status.NewLive(testTime)
		c.GPUs[g.UUID] = live
		bad(c)
		if err := w.WriteLive(c); !errors.Is(err, status.ErrInvalidStatus) && !errors.Is(err, status.ErrInvalidUUID) && !errors.Is(err, status.ErrUnsupportedVersion) {
			t.Errorf("WriteLive with a bad %s: %v", name, err)
		}
	}
	if got, err := status.ReadLive(os.DirFS(dir)); err != nil || got.GPUs[g.UUID].UtilizationGPUPercent != 90 {
		t.Errorf("after refused writes: %+v, %v; want the previous file", got, err)
	}
	if err := w.Sync([]*status.GPU{g}); err != nil {
		t.Fatal(err)
	}
	if names := listDir(t, dir); len(names) != 2 || !strings.Contains(strings.Join(names, " "), status.LiveFileName) {
		t.Errorf("after Sync the directory holds %v, want the live file and one status file", names)
	}
	if err := w.RemoveLive(); err != nil {
		t.Fatal(err)
	}
	if err := w.RemoveLive(); err != nil {
		t.Errorf("RemoveLive without a file: %v", err)
	}
	if _, err := status.ReadLive(os.DirFS(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadLive after RemoveLive: %v", err)
	}
}

// TestReadLive_Refuses: what is not a live file is refused, never a panic.
func TestReadLive_Refuses(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":        "utilization=90",
		"two objects":     `{"apiVersion":"virtual-gpu.unicore.mcyou.cc/v1","kind":"GPUTelemetry","gpus":{}} {}`,
		"status file":     `{"apiVersion":"virtual-gpu.unicore.mcyou.cc/v1","kind":"GPUStatus"}`,
		"bad value":       `{"apiVersion":"virtual-gpu.unicore.mcyou.cc/v1","kind":"GPUTelemetry","gpus":{"GPU-0ad70432-690a-8c80-736d-ffae01403654":{"utilizationGpuPercent":900}}}`,
		"too large":       `{"apiVersion":"virtual-gpu.unicore.mcyou.cc/v1","kind":"GPUTelemetry","gpus":{},"x":"` + strings.Repeat("x", status.MaxLiveBytes) + `"}`,
		"empty (a crash)": "",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, status.LiveFileName), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := status.ReadLive(os.DirFS(dir)); !errors.Is(err, status.ErrInvalidStatus) && !errors.Is(err, status.ErrUnsupportedVersion) {
			t.Errorf("%s: %v, want ErrInvalidStatus or ErrUnsupportedVersion", name, err)
		}
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, status.LiveFileName), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := status.ReadLive(os.DirFS(dir)); !errors.Is(err, status.ErrInvalidStatus) {
		t.Errorf("a directory: %v", err)
	}
}

// TestLive_AtomicReplace: readers of the live file while the writer
// replaces it see whole documents.
func TestLive_AtomicReplace(t *testing.T) {
	dir := t.TempDir()
	w := mustWriter(t, dir)
	g := mustGPU(t, "hgx-h100", 0)
	write := func(u int) {
		l := status.NewLive(testTime)
		x := g.Telemetry
		x.UtilizationGPUPercent = u
		l.GPUs[g.UUID] = x
		if err := w.WriteLive(l); err != nil {
			t.Fatal(err)
		}
	}
	write(0)
	var done atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for !done.Load() {
				if _, err := status.ReadLive(os.DirFS(dir)); err != nil {
					errs <- err
					return
				}
				reads.Add(1)
			}
		})
	}
	for i := range 200 {
		write(i % 101)
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a reader saw a partial or missing live file: %v", err)
	}
	if reads.Load() == 0 {
		t.Error("no read completed")
	}
}

func nan() float64 { return math.NaN() }

// FuzzReadLive: any content is read as a valid live file or refused with
// ErrInvalidStatus or ErrUnsupportedVersion; what is read writes back.
func FuzzReadLive(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"virtual-gpu.unicore.mcyou.cc/v1","kind":"GPUTelemetry","updated":"2026-01-02T03:04:05Z","gpus":{"GPU-0ad70432-690a-8c80-736d-ffae01403654":{"utilizationGpuPercent":90,"memoryUsedMiB":4096,"powerDrawW":301.25,"lastXid":79}}}`))
	f.Add([]byte(`{"apiVersion":"virtual-gpu.unicore.mcyou.cc/v1","kind":"GPUTelemetry","gpus":null}`))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := status.ReadLive(fstest.MapFS{status.LiveFileName: {Data: data}})
		if err != nil {
			if !errors.Is(err, status.ErrInvalidStatus) && !errors.Is(err, status.ErrUnsupportedVersion) && !errors.Is(err, status.ErrInvalidUUID) {
				t.Fatalf("ReadLive(%q): %v wraps no sentinel", data, err)
			}
			return
		}
		if err := mustWriter(t, t.TempDir()).WriteLive(l); err != nil {
			t.Fatalf("a live file read does not write: %v", err)
		}
	})
}
