package nvidiasmi

import (
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
)

// TestPDI: the PDI is the last 16 hex digits of a valid UUID; a GPU whose
// UUID is missing or not in NVIDIA's format shows N/A rather than
// panicking on a short one.
func TestPDI(t *testing.T) {
	for _, tc := range []struct {
		uuid string
		want string
	}{
		{"GPU-9bb57e8e-f94d-4b95-7c33-737bb8d09327", "0x7c33737bb8d09327"},
		{"", "N/A"},
		{"GPU-1234", "N/A"},
		{"GPU-", "N/A"},
	} {
		g := &gpu{st: &status.GPU{}, uuid: tc.uuid}
		if got := g.pdi(); got != tc.want {
			t.Errorf("pdi of %q: %q, want %q", tc.uuid, got, tc.want)
		}
	}
}

// TestAccountedAppFields_Format: the accounted apps' properties the
// virtual driver never has a value for format as [N/A], not a nil call,
// should a process ever reach them.
func TestAccountedAppFields_Format(t *testing.T) {
	g := &gpu{st: &status.GPU{Product: "NVIDIA H200", PCIBusID: "00000000:18:00.0"}}
	for i := range accountedAppFields {
		f := &accountedAppFields[i]
		if got := f.format(&queryContext{}, g, process{pid: 1}, false); got == "" {
			t.Errorf("%s: empty value", f.name)
		}
	}
}
