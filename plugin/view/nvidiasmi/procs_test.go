package nvidiasmi_test

import (
	"bytes"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/nvidiasmi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

// writeLive writes a live file with each GPU's status telemetry, changed
// by mutate.
func (f *fixture) writeLive(t testing.TB, mutate func(pos int, tel *status.Telemetry)) {
	t.Helper()
	w, err := status.NewWriter(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	l := status.NewLive(testTime)
	for pos, g := range f.gpus {
		tel := g.Telemetry
		mutate(pos, &tel)
		l.GPUs[g.UUID] = tel
	}
	if err := w.WriteLive(l); err != nil {
		t.Fatal(err)
	}
}

// procsFixture is a container of pod trainer-0 with GPUs 0-3 of hgx-h100:
// GPU 0 held by it (and by another pod), GPU 1 by one holder of another
// name (the fallback), GPU 2 by it but idle, GPU 3 by nobody.
func procsFixture(t *testing.T) *fixture {
	f := newFixture(t, mustPreset(t, "hgx-h100"), []int{0, 1, 2, 3}, nil)
	f.writeLive(t, func(pos int, tel *status.Telemetry) {
		switch pos {
		case 0:
			tel.UtilizationGPUPercent, tel.MemoryUsedMiB = 90, 30000
			tel.Holders = []status.Holder{
				{Namespace: "ml", Pod: "other-1", Container: "main", UtilizationGPUPercent: 40, MemoryUsedMiB: 12000},
				{Namespace: "ml", Pod: testPod, Container: "main", UtilizationGPUPercent: 50, MemoryUsedMiB: 18000},
			}
		case 1:
			tel.UtilizationGPUPercent, tel.MemoryUsedMiB = 20, 2566
			tel.Holders = []status.Holder{{Namespace: "ml", Pod: "renamed-host", Container: "main", UtilizationGPUPercent: 20, MemoryUsedMiB: 2566}}
		case 2:
			tel.Holders = []status.Holder{{Namespace: "ml", Pod: testPod, Container: "main"}}
		}
	})
	return f
}

// TestComputeApps: --query-compute-apps lists the container's own
// processes: its holders by pod name, or a GPU's only holder; an idle
// holder or none is no process.
func TestComputeApps(t *testing.T) {
	f := procsFixture(t)
	out, code := f.run(t, "--query-compute-apps=gpu_bus_id,pid,process_name,used_gpu_memory,name,used_memory", "--format=csv")
	want := "gpu_bus_id, pid, process_name, used_gpu_memory [MiB], process_name, used_gpu_memory [MiB]\n" +
		f.gpus[0].PCIBusID + ", 1, /usr/bin/python3, 18000 MiB, /usr/bin/python3, 18000 MiB\n" +
		f.gpus[1].PCIBusID + ", 1, /usr/bin/python3, 2566 MiB, /usr/bin/python3, 2566 MiB\n"
	if code != 0 || out != want {
		t.Errorf("exit %d:\n%s\nwant\n%s", code, out, want)
	}
	out, code = f.run(t, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits", "-i", "1")
	if want := "1, 2566\n"; code != 0 || out != want {
		t.Errorf("-i 1 noheader nounits: exit %d %q, want %q", code, out, want)
	}
	out, code = f.run(t, "--query-compute-apps=pid", "--format=csv", "-i", "2,3")
	if want := "pid\n"; code != 0 || out != want {
		t.Errorf("idle and free GPUs: exit %d %q, want %q", code, out, want)
	}
	out, code = f.run(t, "--query-accounted-apps=gpu_name,pid,gpu_util,mem_util,max_memory_usage,time", "--format=csv")
	if want := "gpu_name, pid, gpu_utilization [%], mem_utilization [%], max_memory_usage [MiB], time [ms]\n"; code != 0 || out != want {
		t.Errorf("accounted apps (accounting off): exit %d %q, want %q", code, out, want)
	}
}

// TestComputeApps_Errors: a field of no list, a missing --format or a
// second query are refused as the real tool refuses them.
func TestComputeApps_Errors(t *testing.T) {
	f := procsFixture(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--query-compute-apps=pid,memory.used", "--format=csv"}, "Field \"memory.used\" is not a valid field to query.\n\n"},
		{[]string{"--query-accounted-apps=used_memory", "--format=csv"}, "Field \"used_memory\" is not a valid field to query.\n\n"},
		{[]string{"--query-compute-apps=pid"}, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"},
		{[]string{"--query-compute-apps=pid", "--query-gpu=name", "--format=csv"}, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"},
		{[]string{"--query-compute-apps=pid", "--format=json"}, "ERROR: Option json is not recognized. Please run 'nvidia-smi -h' for help.\n"},
		// A list over the size bound is cut between characters, not inside one.
		{[]string{"--query-compute-apps=a" + strings.Repeat("é", 40000), "--format=csv"},
			"Field \"a" + strings.Repeat("é", 31) + "…\" is not a valid field to query.\n\n"},
		// An empty list, or an empty name in one, as --query-gpu's.
		{[]string{"--query-compute-apps=", "--format=csv"}, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"},
		{[]string{"--query-compute-apps=pid,,process_name", "--format=csv"}, "Field \"\" is not a valid field to query.\n\n"},
		{[]string{"--query-accounted-apps=pid,", "--format=csv"}, "Field \"\" is not a valid field to query.\n\n"},
		// A list over the size bound is cut in the message as --query-gpu's is.
		{[]string{"--query-compute-apps=" + strings.Repeat("pid,", 20000), "--format=csv"},
			"Field \"" + strings.Repeat("pid,", 16) + "…\" is not a valid field to query.\n\n"},
	} {
		out, code := f.run(t, tc.args...)
		if code != nvidiasmi.ExitInvalidArgument || out != tc.want {
			args := strings.Join(tc.args, " ")
			if len(args) > 120 {
				args = args[:120] + "…"
			}
			t.Errorf("%s: exit %d %q, want 2 %q", args, code, out, tc.want)
		}
	}
}

// TestProcessName: the name is argv[0] of /proc/1/cmdline, else
// /proc/1/comm, else [Not Found].
func TestProcessName(t *testing.T) {
	f := procsFixture(t)
	for _, tc := range []struct {
		name string
		proc fstest.MapFS
		want string
	}{
		{"cmdline", fstest.MapFS{"1/cmdline": {Data: []byte("./gpu_burn\x0060\x00")}, "1/comm": {Data: []byte("gpu_burn\n")}}, "./gpu_burn"},
		{"comm", fstest.MapFS{"1/cmdline": {Data: []byte{}}, "1/comm": {Data: []byte("memhog\n")}}, "memhog"},
		{"none", fstest.MapFS{}, "[Not Found]"},
		{"comma", fstest.MapFS{"1/cmdline": {Data: []byte("a,b\x00")}}, "a?b"},
		// Only the first 64 KiB of cmdline are read.
		{"long", fstest.MapFS{"1/cmdline": {Data: bytes.Repeat([]byte("a"), 100<<10)}}, strings.Repeat("a", 64<<10)},
		// An unreadable cmdline (here a directory) falls back to comm.
		{"unreadable", fstest.MapFS{"1/cmdline/x": {}, "1/comm": {Data: []byte("memhog\n")}}, "memhog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c := &nvidiasmi.Command{
				Env: func(k string) string { return f.env[k] }, Stdout: &out, Stderr: &out,
				Now: func() time.Time { return testTime }, Hostname: func() (string, error) { return testPod, nil }, Proc: tc.proc,
			}
			if code := c.Run([]string{"--query-compute-apps=process_name", "--format=csv,noheader", "-i", "0"}); code != 0 || out.String() != tc.want+"\n" {
				t.Errorf("exit %d %q, want %q", code, out.String(), tc.want)
			}
		})
	}
}

// TestProcesses_SummaryAndQuery: the summary and -q show the same
// processes as --query-compute-apps; no process: "No running processes
// found" and "Processes : None".
func TestProcesses_SummaryAndQuery(t *testing.T) {
	f := procsFixture(t)
	out, code := f.run(t)
	for _, want := range []string{
		"|    0   N/A  N/A               1      C   /usr/bin/python3                      18000MiB |\n",
		"|    1   N/A  N/A               1      C   /usr/bin/python3                       2566MiB |\n",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "No running processes found") {
		t.Error("summary says no processes")
	}
	out, _ = f.run(t, "-i", "3")
	if !strings.Contains(out, "No running processes found") {
		t.Errorf("summary of a free GPU:\n%s", out)
	}
	out, _ = f.run(t, "-q", "-i", "3")
	if !strings.Contains(out, "    Processes                                          : None\n") {
		t.Errorf("-q of a free GPU:\n%s", out)
	}
}
