package topology

import (
	"errors"
	"strings"
	"testing"
)

func TestMIGID_RoundTrip(t *testing.T) {
	for _, tc := range []struct {
		gpu     int
		profile string
		start   int
		want    string
	}{
		{0, "3g.40gb", 4, "fake-0-mig-3g40gb-4"},
		{7, "1g.10gb+me", 0, "fake-7-mig-1g10gbme-0"},
		{12, "7g.141gb", 0, "fake-12-mig-7g141gb-0"},
	} {
		id := MIGID(tc.gpu, tc.profile, tc.start)
		if id != tc.want {
			t.Errorf("MIGID(%d, %q, %d) = %q, want %q", tc.gpu, tc.profile, tc.start, id, tc.want)
		}
		gpu, profile, start, err := ParseMIGID(id)
		if err != nil || gpu != tc.gpu || profile != CompactProfile(tc.profile) || start != tc.start {
			t.Errorf("ParseMIGID(%q) = %d, %q, %d, %v", id, gpu, profile, start, err)
		}
		if g, ok := GPUOf(id); !ok || g != tc.gpu {
			t.Errorf("GPUOf(%q) = %d, %v; want %d", id, g, ok, tc.gpu)
		}
		if !IsMIGID(id) || IsReplicaID(id) {
			t.Errorf("%q: IsMIGID %v, IsReplicaID %v", id, IsMIGID(id), IsReplicaID(id))
		}
		// A DRA device name is a DNS label.
		if len(id) > 63 || strings.ContainsFunc(id, func(c rune) bool { return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') }) {
			t.Errorf("%q is not a DNS label", id)
		}
	}
}

func TestParseMIGID_Errors(t *testing.T) {
	for _, id := range []string{
		"fake-0", "gpu-0-mig-1g10gb-0", "fake-00-mig-1g10gb-0", "fake-0-mig-1g10gb", "fake-0-mig--0",
		"fake-0-mig-1g.10gb-0", "fake-0-mig-1G10GB-0", "fake-0-mig-1g10gb-01", "fake-0-mig-1g10gb--1", "fake-x-mig-1g10gb-0",
	} {
		if _, _, _, err := ParseMIGID(id); !errors.Is(err, ErrInvalidMIGID) || !strings.Contains(err.Error(), id) {
			t.Errorf("ParseMIGID(%q) = %v, want ErrInvalidMIGID naming it", id, err)
		}
	}
}

func TestMachineIndex_RefusesMIGIDs(t *testing.T) {
	m, err := Generic(4)
	if err != nil {
		t.Fatal(err)
	}
	if i, ok := m.Index(MIGID(1, "1g.10gb", 0)); ok {
		t.Errorf("Index of a MIG id = %d, true; a MIG device is not a GPU of the machine", i)
	}
}

func TestDeriveMIGUUID(t *testing.T) {
	id := MIGID(0, "1g.10gb", 0)
	u := DeriveMIGUUID("node-a", id)
	if !strings.HasPrefix(u, "MIG-") || len(u) != len(DeriveUUID("node-a", id)) {
		t.Errorf("DeriveMIGUUID = %q", u)
	}
	if u == DeriveMIGUUID("node-b", id) || u == DeriveMIGUUID("node-a", MIGID(0, "1g.10gb", 1)) {
		t.Error("MIG UUIDs of other nodes or ids are equal")
	}
}

func FuzzParseMIGID(f *testing.F) {
	for _, s := range []string{"fake-0-mig-1g10gb-0", "fake-3-mig-3g40gb-4", "fake-0-mig-", "fake--mig-1g-1", "fake-0::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		gpu, profile, start, err := ParseMIGID(id)
		if err != nil {
			if !errors.Is(err, ErrInvalidMIGID) {
				t.Fatalf("ParseMIGID(%q): %v does not wrap ErrInvalidMIGID", id, err)
			}
			return
		}
		if back := MIGID(gpu, profile, start); back != id {
			t.Fatalf("ParseMIGID(%q) = %d, %q, %d: MIGID gives %q", id, gpu, profile, start, back)
		}
	})
}
