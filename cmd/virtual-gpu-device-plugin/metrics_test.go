package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// The running plugin's scrape is promlint-clean and carries the build, the
// allocation states read from its store, and the Allocate latency.
func TestBinary_Metrics_BuildStateLatency(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t, "-metrics-address=127.0.0.1:0")
	var line struct{ Address string }
	if err := json.Unmarshal([]byte(p.logs.waitLine(t, "serving /metrics")), &line); err != nil || line.Address == "" {
		t.Fatalf("metrics address from the log: %v", err)
	}
	allocate(t, reg, "fake-0", "fake-1")
	allocate(t, reg, "fake-2")
	resp, err := http.Get("http://" + line.Address + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	body := string(b)

	for _, want := range []string{
		`virtual_gpu_devices_by_allocation_state{state="allocated"} 3`,
		`virtual_gpu_devices_by_allocation_state{state="free"} 1`,
		`virtual_gpu_devices_by_allocation_state{state="held"} 0`,
		`virtual_gpu_devices_by_allocation_state{state="abandoned"} 0`,
		`virtual_gpu_allocate_duration_seconds_count 2`,
		`virtual_gpu_health_changes_total{cause="fault-injection"} 0`,
		`virtual_gpu_health_changes_total{cause="reconcile"} 4`, // the first start added the 4 devices
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The test binary is stamped as make build stamps it.
	if !regexp.MustCompile(`(?m)^virtual_gpu_build_info\{goversion="go[^"]+",revision="` + testRevision + `",version="dev"\} 1$`).MatchString(body) {
		t.Errorf("/metrics lacks a build_info line:\n%s", grepLines(body, "build_info"))
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("promlint: %s: %s", pr.Metric, pr.Text)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
