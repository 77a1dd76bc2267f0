package topology_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func TestParseXID(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   int
		ok     bool
	}{
		{"XID 79", 79, true},
		{"xid 48: double bit ECC", 48, true},
		{"Xid 13", 13, true},
		{"XID:94", 94, true},
		{"xid=63", 63, true},
		{"XID #31", 31, true},
		{"fault injection: XID 79 on fake-3", 79, true},
		{"admin: XID 79, then XID 48", 79, true},
		{"XID 0", 0, true},
		{"XID 999999", 999999, true},
		{"", 0, false},
		{"admin: drain", 0, false},
		{"fault injection: down:fake-1:after=30s", 0, false},
		{"XID", 0, false},
		{"XID 1234567", 0, false}, // more than 6 digits
		{"XIDS 79", 0, false},
		{"noxid 79", 0, false},
		{"XID 79abc", 0, false},
		{"XID -1", 0, false},
	} {
		got, ok := topology.ParseXID(tc.reason)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseXID(%q) = %d, %v; want %d, %v", tc.reason, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseXID(f *testing.F) {
	for _, s := range []string{"XID 79", "xid 48: x", "admin", "XID 1234567", "XID:", "xid\t\n5"} {
		f.Add(s)
	}
	digits := regexp.MustCompile(`[0-9]+`)
	f.Fuzz(func(t *testing.T, reason string) {
		n, ok := topology.ParseXID(reason)
		switch {
		case !ok && n != 0:
			t.Fatalf("ParseXID(%q) = %d without an XID", reason, n)
		case ok && (n < 0 || n > 999999):
			t.Fatalf("ParseXID(%q) = %d: out of range", reason, n)
		case ok && !strings.Contains(strings.ToLower(reason), "xid"):
			t.Fatalf("ParseXID(%q) = %d: no xid in the reason", reason, n)
		case ok && !digits.MatchString(reason):
			t.Fatalf("ParseXID(%q) = %d: no number in the reason", reason, n)
		}
	})
}

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		reason  string
		want    topology.Fault
		answers bool
	}{
		{"XID 79", topology.Fault{Kind: topology.FaultLost, XID: 79}, false},
		{"", topology.Fault{Kind: topology.FaultLost}, false},
		{"admin: drain", topology.Fault{Kind: topology.FaultLost}, false},
		{"fault injection: down:fake-1:after=30s", topology.Fault{Kind: topology.FaultLost}, false},
		{"XID 48: double bit ECC", topology.Fault{Kind: topology.FaultECC, XID: 48}, true},
		{"xid=63", topology.Fault{Kind: topology.FaultECC, XID: 63}, true},
		{"XID 64", topology.Fault{Kind: topology.FaultECC, XID: 64}, true},
		{"XID 92", topology.Fault{Kind: topology.FaultECC, XID: 92}, true},
		{"XID 94", topology.Fault{Kind: topology.FaultECC, XID: 94}, true},
		{"XID 95", topology.Fault{Kind: topology.FaultECC, XID: 95}, true},
		{"uncorrectable ECC error", topology.Fault{Kind: topology.FaultECC}, true},
		{"eccentric", topology.Fault{Kind: topology.FaultLost}, false},
		{"Thermal slowdown", topology.Fault{Kind: topology.FaultThermal}, true},
		{"XID 79 after a thermal event", topology.Fault{Kind: topology.FaultLost, XID: 79}, false},
		{"thermal, then ECC", topology.Fault{Kind: topology.FaultECC}, true},
		{"thermals", topology.Fault{Kind: topology.FaultLost}, false},
	} {
		got := topology.ParseFault(tc.reason)
		if got != tc.want || got.Answers() != tc.answers {
			t.Errorf("ParseFault(%q) = %+v (answers %v); want %+v (answers %v)", tc.reason, got, got.Answers(), tc.want, tc.answers)
		}
	}
}

func TestMemoryErrors(t *testing.T) {
	a100 := topology.GPUModel{Product: "NVIDIA A100-SXM4-80GB", Compute: topology.ComputeCapability{Major: 8}, Family: "ampere"}
	v100 := topology.GPUModel{Product: "Tesla V100-SXM2-32GB", Compute: topology.ComputeCapability{Major: 7}, Family: "volta"}
	rtx := topology.GPUModel{Product: "NVIDIA RTX A6000", Compute: topology.ComputeCapability{Major: 8, Minor: 6}, Family: "ampere"}
	for _, tc := range []struct {
		name   string
		g      topology.GPUModel
		reason string
		want   topology.MemoryErrors
	}{
		{"a100 healthy reason", a100, "XID 79", topology.MemoryErrors{}},
		{"a100 dbe", a100, "XID 48", topology.MemoryErrors{VolatileUncorrected: 1, AggregateUncorrected: 1, RemappedUncorrectable: 1, RemapPending: true}},
		{"a100 remap failure", a100, "XID 64", topology.MemoryErrors{VolatileUncorrected: 1, AggregateUncorrected: 1, RemapPending: true, RemapFailure: true}},
		{"a100 sbe storm", a100, "XID 92", topology.MemoryErrors{VolatileCorrected: 120, AggregateCorrected: 120, RemappedCorrectable: 1}},
		{"v100 dbe retires a page", v100, "XID 48", topology.MemoryErrors{VolatileUncorrected: 1, AggregateUncorrected: 1, RetiredDBE: 1, RetiredPending: true}},
		{"v100 sbe storm", v100, "XID 92", topology.MemoryErrors{VolatileCorrected: 120, AggregateCorrected: 120, RetiredSBE: 1}},
		{"workstation has no ECC", rtx, "XID 48", topology.MemoryErrors{}},
	} {
		if got := tc.g.MemoryErrors(topology.ParseFault(tc.reason)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
