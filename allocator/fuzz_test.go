package allocator

import (
	"slices"
	"testing"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// FuzzPreferred feeds arbitrary requests to Preferred on a 16-GPU and a
// 40-GPU machine: it must never panic, and must return either an error or
// a valid set.
func FuzzPreferred(f *testing.F) {
	dgx2, err := topology.Preset("dgx2")
	if err != nil {
		f.Fatal(err)
	}
	mesh := meshMachine(f, 40)
	f.Add([]byte{0, 1, 2, 3, 4, 5}, []byte{1}, 3, false)
	f.Add([]byte{15, 3, 3}, []byte{}, 1, false)
	f.Add([]byte{0, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 30}, []byte{30, 8}, 8, true)
	f.Fuzz(func(t *testing.T, avail, must []byte, size int, big bool) {
		m := dgx2
		if big {
			m = mesh
		}
		a := make([]int, len(avail))
		for i, b := range avail {
			a[i] = int(int8(b))
		}
		mi := make([]int, len(must))
		for i, b := range must {
			mi[i] = int(int8(b))
		}
		got, err := Preferred(m, a, mi, size)
		if err != nil {
			if got != nil {
				t.Fatalf("error %v with a result %v", err, got)
			}
			return
		}
		if len(got) != size || !slices.IsSorted(got) {
			t.Fatalf("got %v for size %d", got, size)
		}
		for i, g := range got {
			if !slices.Contains(a, g) || i > 0 && got[i-1] == g {
				t.Fatalf("got %v: %d invalid for available %v", got, g, a)
			}
		}
		for _, x := range mi {
			if !slices.Contains(got, x) {
				t.Fatalf("got %v without must-include %d", got, x)
			}
		}
	})
}
