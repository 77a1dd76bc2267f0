package view

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func TestStatusHealth_ReasonFitsTheFormat(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	long := strings.Repeat("é", 600) // 1200 bytes
	h := statusHealth(false, "XID 79\nfallen off the bus\t"+long, time.Time{}, now)
	if strings.ContainsAny(h.Reason, "\n\t") || len(h.Reason) > 1024 || !strings.HasPrefix(h.Reason, "XID 79 fallen off the bus ") || !h.Since.Equal(now) {
		t.Errorf("health = %+v (%d bytes)", h, len(h.Reason))
	}
	if !strings.HasSuffix(h.Reason, "é") {
		t.Errorf("reason cut inside a rune: %q", h.Reason[len(h.Reason)-4:])
	}
	if h := statusHealth(true, "was broken", now, now); h.Reason != "" || !h.Healthy {
		t.Errorf("healthy = %+v, want no reason", h)
	}
}

// TestInstallTool: installed atomically with mode 0755, rewritten only
// when the content differs; a container holding the old file keeps it.
func TestInstallTool(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	tools := filepath.Join(dir, "tools")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(src, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	inode := func(p string) uint64 {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v, want 0755", p, fi.Mode().Perm())
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	dst := filepath.Join(tools, "nvidia-smi")
	write("version one")
	if changed, err := installTool(src, tools, "nvidia-smi"); err != nil || !changed {
		t.Fatalf("first install: changed %v, %v", changed, err)
	}
	first := inode(dst)
	held, err := os.Open(dst) // a running container's bind mount holds the inode
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if changed, err := installTool(src, tools, "nvidia-smi"); err != nil || changed {
		t.Fatalf("same content: changed %v, %v; want untouched", changed, err)
	}
	if inode(dst) != first {
		t.Error("same content: the file was replaced")
	}
	// A crashed install's leftover goes; a shorter and a longer binary are
	// both seen as different.
	if err := os.WriteFile(filepath.Join(tools, ".nvidia-smi.tmp-123"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"version", "version one and more"} {
		write(content)
		if changed, err := installTool(src, tools, "nvidia-smi"); err != nil || !changed {
			t.Fatalf("%q: changed %v, %v", content, changed, err)
		}
		if b, _ := os.ReadFile(dst); string(b) != content {
			t.Errorf("installed %q, want %q", b, content)
		}
	}
	if inode(dst) == first {
		t.Error("new content written in place: a running container would see a changing binary")
	}
	if b, _ := os.ReadFile(held.Name()); string(b) == "version one" {
		t.Error("path still has the old content")
	}
	old := make([]byte, 32)
	n, _ := held.ReadAt(old, 0)
	if string(old[:n]) != "version one" {
		t.Errorf("the held file reads %q, want the old content", old[:n])
	}
	if left, _ := filepath.Glob(filepath.Join(tools, ".nvidia-smi.tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if _, err := installTool(filepath.Join(dir, "missing"), tools, "nvidia-smi"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing source: %v, want an error naming it", err)
	}
}

// TestInstallTool_NotAFile: what stands at the tool's path and is not a
// file is named, with what to do, not as a failed rename; it is left as
// it is.
func TestInstallTool_NotAFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, "is a directory, not a file: remove it"},
		{"directory with files", func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(p, "x"), nil, 0o644)
		}, "is a directory, not a file: remove it"},
		{"named pipe", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "is a named pipe, not a file: remove it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			if err := os.WriteFile(src, []byte("tool"), 0o755); err != nil {
				t.Fatal(err)
			}
			tools := filepath.Join(dir, "tools")
			if err := os.Mkdir(tools, 0o755); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(tools, "nvidia-smi")
			if err := tc.make(dst); err != nil {
				t.Fatal(err)
			}
			_, err := installTool(src, tools, "nvidia-smi")
			if want := fmt.Sprintf("install nvidia-smi: %q %s", dst, tc.want); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("err = %v, want it to start with %s", err, want)
			}
			if left, _ := filepath.Glob(filepath.Join(tools, ".nvidia-smi.tmp-*")); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// The status files (the telemetry off) show a fault as the telemetry does:
// an ECC fault's memory errors and XID, a thermal fault's heat and
// slowdown reasons; healthy again, neither.
func TestFaultTelemetry(t *testing.T) {
	m, err := topology.Preset("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	g, err := status.NewGPU(m, 0, "node-a", now)
	if err != nil {
		t.Fatal(err)
	}
	gm := m.GPUModel()
	ecc := faultTelemetry(gm, g.Telemetry, statusHealth(false, "XID 48", now, now))
	if ecc.MemoryErrors.RemappedUncorrectable != 1 || !ecc.MemoryErrors.RemapPending || ecc.LastXID == nil || *ecc.LastXID != 48 {
		t.Errorf("ECC fault: %+v", ecc)
	}
	hot := faultTelemetry(gm, g.Telemetry, statusHealth(false, "thermal", now, now))
	if hot.TemperatureC <= gm.Thresholds().SlowdownC || hot.ClockEventReasons&topology.ClockEventHWThermalSlowdown == 0 ||
		hot.MemoryTemperatureC == nil || *hot.MemoryTemperatureC != hot.TemperatureC+3 {
		t.Errorf("thermal fault: %+v", hot)
	}
	lost := faultTelemetry(gm, g.Telemetry, statusHealth(false, "XID 79", now, now))
	if lost.MemoryErrors != (topology.MemoryErrors{}) || lost.LastXID == nil || *lost.LastXID != 79 {
		t.Errorf("lost GPU: %+v", lost)
	}
	healed := faultTelemetry(gm, ecc, statusHealth(true, "", now, now))
	if healed.MemoryErrors != (topology.MemoryErrors{}) || healed.ClockEventReasons != topology.ClockEventGPUIdle {
		t.Errorf("healed: %+v", healed)
	}
	if err := (&status.GPU{}).Validate(); err == nil {
		t.Fatal("validate accepted an empty status")
	}
	g.Telemetry = ecc
	if err := g.Validate(); err != nil {
		t.Errorf("status with an ECC fault: %v", err)
	}
}
