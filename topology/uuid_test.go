package topology_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func ExampleDeriveUUID() {
	first := topology.DeriveUUID("node-a", "fake-0")
	again := topology.DeriveUUID("node-a", "fake-0") // on every start, on every machine
	fmt.Println(first)
	fmt.Println(first == again)
	// Output:
	// GPU-0ad70432-690a-8c80-736d-ffae01403654
	// true
}

func TestDeriveUUID_FormatAndUniqueness(t *testing.T) {
	seen := make(map[string]string)
	for _, node := range []string{"node-a", "node-b", "", "node-a\x01"} {
		for i := range 2000 {
			id := "fake-" + strconv.Itoa(i)
			u := topology.DeriveUUID(node, id)
			if !status.ValidUUID(u) {
				t.Fatalf("DeriveUUID(%q, %q) = %q: not in NVIDIA's format", node, id, u)
			}
			key := fmt.Sprintf("%q/%s", node, id)
			if prev, ok := seen[u]; ok {
				t.Fatalf("DeriveUUID gives %s for %s and %s", u, prev, key)
			}
			seen[u] = key
		}
	}
}

func TestValidUUID(t *testing.T) {
	cases := []struct {
		in   string
		want bool
	}{
		{"GPU-9bb57e8e-f94d-4b95-7c33-ee279c8fb75c", true},
		{"GPU-9BB57E8E-F94D-4B95-7C33-EE279C8FB75C", false},
		{"9bb57e8e-f94d-4b95-7c33-ee279c8fb75c", false},
		{"MIG-9bb57e8e-f94d-4b95-7c33-ee279c8fb75c", false},
		{"GPU-9bb57e8e-f94d-4b95-7c33-ee279c8fb75", false},
		{"GPU-9bb57e8e-f94d-4b95-7c33-ee279c8fb75c ", false},
		{"GPU-9bb57e8ef94d-4b95-7c33-ee279c8fb75c-", false},
		{"", false},
	}
	for _, tc := range cases {
		if got := status.ValidUUID(tc.in); got != tc.want {
			t.Errorf("ValidUUID(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
