package metrics_test

import (
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/metrics"
)

func TestResult_String(t *testing.T) {
	for r, want := range map[metrics.Result]string{metrics.ResultOK: "ok", metrics.ResultRejected: "rejected", metrics.ResultFailed: "failed", 7: "Result(7)"} {
		if got := r.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(r), got, want)
		}
	}
}
