package topology

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestTopology_ReplicaID_RoundTrip(t *testing.T) {
	tests := []struct {
		name         string
		gpu, replica int
		want         string
	}{
		{"first", 0, 0, "fake-0::0"},
		{"second replica", 0, 1, "fake-0::1"},
		{"two digits", 12, 34, "fake-12::34"},
		{"largest", MaxGPUs - 1, MaxReplicas - 1, "fake-1023::1023"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := ReplicaID(tt.gpu, tt.replica)
			if id != tt.want {
				t.Fatalf("ReplicaID(%d, %d) = %q, want %q", tt.gpu, tt.replica, id, tt.want)
			}
			if !IsReplicaID(id) {
				t.Errorf("IsReplicaID(%q) = false", id)
			}
			g, r, err := ParseReplicaID(id)
			if err != nil || g != tt.gpu || r != tt.replica {
				t.Errorf("ParseReplicaID(%q) = %d, %d, %v", id, g, r, err)
			}
		})
	}
}

func TestTopology_ParseReplicaID_Errors(t *testing.T) {
	tests := []struct {
		name, id, wantMsg string
	}{
		{"empty", "", `replica id "": want fake-<gpu>::<replica>`},
		{"GPU id", "fake-3", `replica id "fake-3": no "::" separator`},
		{"other prefix", "gpu-3::1", `replica id "gpu-3::1": want fake-<gpu>::<replica>`},
		{"no GPU number", "fake-::1", `GPU number "": empty`},
		{"no replica number", "fake-3::", `replica number "": empty`},
		{"leading zero GPU", "fake-03::1", `GPU number "03": leading zero`},
		{"leading zero replica", "fake-3::01", `replica number "01": leading zero`},
		{"sign", "fake-+3::1", `GPU number "+3": not a decimal number`},
		{"negative replica", "fake-3::-1", `replica number "-1": not a decimal number`},
		{"space", "fake-3:: 1", `replica number " 1": not a decimal number`},
		{"trailing space", "fake-3::1 ", `replica number "1 ": not a decimal number`},
		{"second separator", "fake-3::1::2", `replica number "1::2": not a decimal number`},
		{"single colon", "fake-3:1", `no "::" separator`},
		{"huge", "fake-99999999999999999999::0", `GPU number "99999999999999999999": too large`},
		{"non-ASCII digit", "fake-３::0", `not a decimal number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, r, err := ParseReplicaID(tt.id)
			if !errors.Is(err, ErrInvalidReplicaID) {
				t.Fatalf("ParseReplicaID(%q) = %d, %d, %v; want ErrInvalidReplicaID", tt.id, g, r, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q lacks %q", err, tt.wantMsg)
			}
		})
	}
}

func TestTopology_IsReplicaID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"fake-0::0", true},
		{"fake-0", false},
		{"fake-10", false},
		{"fake-01::0", true}, // meant as a replica id; ParseReplicaID rejects it
		{"", false},
	}
	for _, tt := range tests {
		if got := IsReplicaID(tt.id); got != tt.want {
			t.Errorf("IsReplicaID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestTopology_Machine_ReplicaIndex(t *testing.T) {
	m := MustPreset(t, "workstation-4gpu")
	tests := []struct {
		name     string
		id       string
		replicas int
		gpu, rep int
		wantMsg  string // "" for success
	}{
		{"first", "fake-0::0", 4, 0, 0, ""},
		{"last", "fake-3::3", 4, 3, 3, ""},
		{"one replica", "fake-2::0", 1, 2, 0, ""},
		{"GPU out of range", "fake-4::0", 4, 0, 0, "machine workstation-4gpu has GPUs 0..3"},
		{"replica out of range", "fake-1::4", 4, 0, 0, "GPUs have replicas 0..3"},
		{"zero replicas per GPU", "fake-1::0", 0, 0, 0, "0 replicas per GPU, want 1..1024"},
		{"too many replicas per GPU", "fake-1::0", MaxReplicas + 1, 0, 0, "1025 replicas per GPU"},
		{"malformed", "fake-1", 4, 0, 0, `no "::" separator`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, r, err := m.ReplicaIndex(tt.id, tt.replicas)
			if tt.wantMsg == "" {
				if err != nil || g != tt.gpu || r != tt.rep {
					t.Fatalf("ReplicaIndex(%q, %d) = %d, %d, %v; want %d, %d", tt.id, tt.replicas, g, r, err, tt.gpu, tt.rep)
				}
				return
			}
			if !errors.Is(err, ErrInvalidReplicaID) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("ReplicaIndex(%q, %d) error %v; want ErrInvalidReplicaID saying %q", tt.id, tt.replicas, err, tt.wantMsg)
			}
		})
	}
	var nilMachine *Machine
	if _, _, err := nilMachine.ReplicaIndex("fake-0::0", 2); !errors.Is(err, ErrInvalidReplicaID) {
		t.Errorf("nil machine: %v", err)
	}
}

func TestTopology_Machine_ReplicaIDs(t *testing.T) {
	m := MustPreset(t, "workstation-4gpu")
	ids := m.ReplicaIDs(2)
	want := []string{"fake-0::0", "fake-0::1", "fake-1::0", "fake-1::1", "fake-2::0", "fake-2::1", "fake-3::0", "fake-3::1"}
	if !slices.Equal(ids, want) {
		t.Fatalf("ReplicaIDs(2) = %v, want %v", ids, want)
	}
	for _, id := range ids {
		if _, _, err := m.ReplicaIndex(id, 2); err != nil {
			t.Errorf("ReplicaIndex(%q): %v", id, err)
		}
		if _, ok := m.Index(id); ok {
			t.Errorf("Index(%q) accepts a replica id", id)
		}
	}
	for _, bad := range []int{0, -1, MaxReplicas + 1} {
		if got := m.ReplicaIDs(bad); got != nil {
			t.Errorf("ReplicaIDs(%d) = %v, want nil", bad, got)
		}
	}
}

// FuzzParseReplicaID checks that ParseReplicaID never panics, accepts
// exactly the canonical ids (those ReplicaID writes back unchanged), and
// wraps ErrInvalidReplicaID in every error.
func FuzzParseReplicaID(f *testing.F) {
	for _, s := range []string{"fake-0::0", "fake-12::7", "fake-3", "fake-03::1", "fake-1::1::1", "fake-::", "fake--1::0", "fake-1:: 2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		g, r, err := ParseReplicaID(id)
		if err != nil {
			if !errors.Is(err, ErrInvalidReplicaID) {
				t.Fatalf("ParseReplicaID(%q) error %v does not wrap ErrInvalidReplicaID", id, err)
			}
			if g != 0 || r != 0 {
				t.Fatalf("ParseReplicaID(%q) = %d, %d with an error", id, g, r)
			}
			return
		}
		if g < 0 || r < 0 {
			t.Fatalf("ParseReplicaID(%q) = %d, %d", id, g, r)
		}
		if back := ReplicaID(g, r); back != id {
			t.Fatalf("ParseReplicaID(%q) = %d, %d but ReplicaID gives %q: not canonical", id, g, r, back)
		}
		if !IsReplicaID(id) {
			t.Fatalf("IsReplicaID(%q) = false for a valid replica id", id)
		}
	})
}

func TestGPUOf(t *testing.T) {
	tests := []struct {
		id   string
		want int
		ok   bool
	}{
		{"fake-0", 0, true}, {"fake-17", 17, true}, {"fake-3::2", 3, true},
		{"fake-", 0, false}, {"fake-01", 0, false}, {"fake-1a", 0, false}, {"gpu-1", 0, false}, {"fake--1", 0, false},
		{"fake-1::", 0, false}, {"fake-+1", 0, false}, {"fake-99999999999999999999", 0, false},
	}
	for _, tt := range tests {
		if got, ok := GPUOf(tt.id); got != tt.want || ok != tt.ok {
			t.Errorf("GPUOf(%q) = %d, %v; want %d, %v", tt.id, got, ok, tt.want, tt.ok)
		}
	}
}
