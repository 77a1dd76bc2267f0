package kube

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// The memory a Client and one Node watch add to a process, measured as the
// plugin would see it: two child processes of this test binary (which links
// client-go, as the plugin binary does), one idle and one with a Client
// watching a Node of the fake API server through 100 label changes. Each
// reports its live heap after GC and its RSS; the benchmark reports both,
// their differences (what the watch adds) and ratios (watch / idle).
//
//	go test -run '^$' -bench WatchNode_Memory -benchtime 3x ./plugin/kube

const (
	memChildEnv     = "VGPU_NODE_MEM_CHILD"      // "idle" or "watch"
	memKubeEnv      = "VGPU_NODE_MEM_KUBECONFIG" // the fake server, for "watch"
	memLabelChanges = 100
)

func BenchmarkWatchNode_Memory(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads VmRSS from /proc")
	}
	labels := map[string]string{}
	for i := range 20 { // a node's usual labels: kubernetes.io/*, topology, the cluster's own
		labels["example.com/label-"+strconv.Itoa(i)] = "value-" + strconv.Itoa(i)
	}
	var idle, watch memFigures
	for b.Loop() {
		f := newFakeAPIServer(b, testNode("gpu-1", labels))
		idle.add(runMemChild(b, "idle", "", nil))
		watch.add(runMemChild(b, "watch", f.kubeconfig(b), func() {
			for i := range memLabelChanges {
				f.setLabels("gpu-1", map[string]string{ConfigLabel: "profile-" + strconv.Itoa(i)})
			}
		}))
	}
	n := float64(b.N)
	b.ReportMetric(idle.heap/n, "idle-heap-B")
	b.ReportMetric(watch.heap/n, "watch-heap-B")
	b.ReportMetric((watch.heap-idle.heap)/n, "added-heap-B")
	b.ReportMetric(watch.heap/idle.heap, "heap-ratio")
	b.ReportMetric(idle.rss/n, "idle-rss-B")
	b.ReportMetric(watch.rss/n, "watch-rss-B")
	b.ReportMetric((watch.rss-idle.rss)/n, "added-rss-B")
	b.ReportMetric(watch.rss/idle.rss, "rss-ratio")
}

// memFigures sums the figures of child runs.
type memFigures struct{ heap, rss float64 }

func (m *memFigures) add(o memFigures) { m.heap += o.heap; m.rss += o.rss }

// runMemChild runs this test binary as a memory child in mode and returns
// its figures; drive runs once the child is watching.
func runMemChild(b *testing.B, mode, kubeconfig string, drive func()) memFigures {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), memChildEnv+"="+mode, memKubeEnv+"="+kubeconfig)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var fig memFigures
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "WATCHING" && drive != nil:
			drive()
		case strings.HasPrefix(line, "MEM "):
			if _, err := fmt.Sscanf(line, "MEM heap=%g rss=%g", &fig.heap, &fig.rss); err != nil {
				b.Fatalf("child output %q: %v", line, err)
			}
		}
	}
	if err := cmd.Wait(); err != nil || fig.heap == 0 {
		b.Fatalf("memory child %s: %v (figures %+v)", mode, err, fig)
	}
	return fig
}

// TestMemoryChild is the child process of BenchmarkWatchNode_Memory; it
// skips unless run as one.
func TestMemoryChild(t *testing.T) {
	mode := os.Getenv(memChildEnv)
	switch mode {
	case "":
		t.Skip("the child process of BenchmarkWatchNode_Memory")
	case "watch":
		c, err := NewClient(Options{Kubeconfig: os.Getenv(memKubeEnv)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		calls := make(chan struct{}, memLabelChanges+1)
		done := make(chan error, 1)
		go func() {
			done <- c.WatchNode(ctx, "gpu-1", func(map[string]string) error {
				calls <- struct{}{}
				return nil
			})
		}()
		<-calls
		// Changes made before the watch opens are replayed from the list's
		// version, so each of them is delivered.
		fmt.Println("WATCHING")
		for range memLabelChanges {
			select {
			case <-calls:
			case err := <-done:
				t.Fatalf("WatchNode returned %v", err)
			}
		}
		printMem(t)
		cancel()
		<-done
	default:
		printMem(t)
	}
}

// printMem prints the live heap after GC and the RSS.
func printMem(t *testing.T) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var rss float64
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			rss = kb * 1024
		}
	}
	fmt.Printf("MEM heap=%d rss=%.0f\n", ms.HeapInuse, rss)
}
