package nvidiasmi_test

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

// benchFixture is a container with the 8 GPUs of hgx-h100.
func benchFixture(b *testing.B) *fixture {
	return newQuickFixture(b, mustPreset(b, "hgx-h100"), []int{0, 1, 2, 3, 4, 5, 6, 7})
}

func benchMain(b *testing.B, args ...string) {
	f := benchFixture(b)
	env := func(k string) string { return f.env[k] }
	b.ReportAllocs()
	for b.Loop() {
		if code := nvidiasmi.Main(args, env, io.Discard, io.Discard); code != 0 {
			b.Fatalf("exit code %d", code)
		}
	}
}

// BenchmarkMain_ListGPUs is `nvidia-smi -L` in a container with 8 GPUs:
// the environment, 8 status files read and validated, 8 lines.
func BenchmarkMain_ListGPUs(b *testing.B) { benchMain(b, "-L") }

// BenchmarkMain_QueryGPU is a monitoring scrape: 25 fields of 8 GPUs.
func BenchmarkMain_QueryGPU(b *testing.B) {
	benchMain(b, "--query-gpu="+commonFields, "--format=csv,noheader,nounits")
}

// BenchmarkMain_QueryGPUEveryField is a scrape of every property of
// --help-query-gpu (with the values of the live file, the board facts and
// the memory errors) of 8 GPUs.
func BenchmarkMain_QueryGPUEveryField(b *testing.B) {
	var names []string
	for _, line := range strings.Split(helpQueryGPU(b), "\n") {
		if name, ok := strings.CutPrefix(line, `"`); ok {
			names = append(names, name[:strings.Index(name, `"`)])
		}
	}
	benchMain(b, "--query-gpu="+strings.Join(names, ","), "--format=csv")
}

// BenchmarkMain_Summary is `nvidia-smi` in a container with 8 GPUs.
func BenchmarkMain_Summary(b *testing.B) { benchMain(b) }

// BenchmarkBaseline_ReadStatusFiles is the floor of the benchmarks above:
// reading the 8 status files with the status package alone.
func BenchmarkBaseline_ReadStatusFiles(b *testing.B) {
	f := benchFixture(b)
	fsys := os.DirFS(f.dir)
	uuids := strings.Split(f.env[status.EnvUUIDs], ",")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := status.ReadGPUs(fsys, uuids); err != nil {
			b.Fatal(err)
		}
	}
}
