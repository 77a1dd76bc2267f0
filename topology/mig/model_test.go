package mig

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// lgippA100 is the valid placements of an 8-slice part as `nvidia-smi mig
// -lgipp` prints them, per GPU instance profile id: the A100's of NVIDIA's
// NVML mock (go-nvml pkg/nvml/mock/gpus/a100.go, a100_GpuInstancePlacements)
// and the MIG User Guide's placement diagrams, which give H100 and H200 the
// same slots (their recorded instances sit at 4:4, 0:2, 2:1 and 3:1:
// NVIDIA/DCGM issue 138, nvidia_gpu_exporter's captures).
const lgippA100 = `
GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 15 Placements: {0,2,4,6}:2
GPU  0 Profile ID 14 Placements: {0,2,4}:2
GPU  0 Profile ID  9 Placements: {0,4}:4
GPU  0 Profile ID  5 Placement : {0}:4
GPU  0 Profile ID  0 Placement : {0}:8
`

// lgipNames are the profile names per id that `nvidia-smi mig -lgip`
// prints for each product (sources in products.yaml), written here apart
// from the data file.
var lgipNames = map[string]map[int]string{
	"NVIDIA A100-SXM4-40GB": {19: "1g.5gb", 20: "1g.5gb+me", 15: "1g.10gb", 14: "2g.10gb", 9: "3g.20gb", 5: "4g.20gb", 0: "7g.40gb"},
	"NVIDIA A100-SXM4-80GB": {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 5: "4g.40gb", 0: "7g.80gb"},
	"NVIDIA A100 80GB PCIe": {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 5: "4g.40gb", 0: "7g.80gb"},
	"NVIDIA H100 80GB HBM3": {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 5: "4g.40gb", 0: "7g.80gb"},
	"NVIDIA H200":           {19: "1g.18gb", 20: "1g.18gb+me", 15: "1g.35gb", 14: "2g.35gb", 9: "3g.71gb", 5: "4g.71gb", 0: "7g.141gb"},
}

// documentedPlacements parses -lgipp text into placements per profile id.
func documentedPlacements(t *testing.T, text string) map[int][]Placement {
	t.Helper()
	re := regexp.MustCompile(`^GPU\s+\d+ Profile ID\s+(\d+) Placements?\s*: \{([\d,]+)\}:(\d+)$`)
	out := map[int][]Placement{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unparsable -lgipp line %q", line)
		}
		id, _ := strconv.Atoi(m[1])
		size, _ := strconv.Atoi(m[3])
		for _, s := range strings.Split(m[2], ",") {
			start, _ := strconv.Atoi(s)
			out[id] = append(out[id], Placement{Start: start, Size: size})
		}
	}
	return out
}

// TestProducts_PlacementsAreNVIDIAs: for every product, every profile's
// placement set is exactly the documented one, the profile ids and names are
// those nvidia-smi lists, and no profile is missing or extra.
func TestProducts_PlacementsAreNVIDIAs(t *testing.T) {
	want := documentedPlacements(t, lgippA100)
	if got := Products(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(func(yield func(string) bool) {
		for k := range lgipNames {
			if !yield(k) {
				return
			}
		}
	})) {
		t.Fatalf("Products() = %v, want the products of lgipNames", got)
	}
	for _, name := range Products() {
		t.Run(name, func(t *testing.T) {
			p, err := LookupProduct(name)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Profiles) != len(want) {
				t.Errorf("%d profiles, want %d", len(p.Profiles), len(want))
			}
			for _, pr := range p.Profiles {
				if pr.Name != lgipNames[name][pr.ID] {
					t.Errorf("profile id %d is %q, nvidia-smi lists %q", pr.ID, pr.Name, lgipNames[name][pr.ID])
				}
				if !slices.Equal(pr.Placements, want[pr.ID]) {
					t.Errorf("%s (id %d) placements %s, NVIDIA documents %s", pr.Name, pr.ID, PlacementsString(pr.Placements), PlacementsString(want[pr.ID]))
				}
			}
		})
	}
}

// TestProducts_Invariants: what holds for every profile of every product:
// the name's g is the compute slices and its gb rounds the memory the way
// mig-parted names profiles, the placements fit the GPU, the instances
// fit the placements, and a whole-GPU profile has every slice.
func TestProducts_Invariants(t *testing.T) {
	for _, name := range Products() {
		p, err := LookupProduct(name)
		if err != nil {
			t.Fatal(err)
		}
		full := 0
		for _, pr := range p.Profiles {
			n, err := ParseProfileName(pr.Name)
			if err != nil {
				t.Errorf("%s: %s: %v", name, pr.Name, err)
				continue
			}
			if n.G != pr.ComputeSlices {
				t.Errorf("%s: %s has %d compute slices", name, pr.Name, pr.ComputeSlices)
			}
			// mig-parted's getMigMemorySizeGB: the memory fraction rounded up to
			// eighths, times the GPU's memory in GB.
			if gb := migMemoryGB(pr.MemoryMiB, p); gb != n.GB {
				t.Errorf("%s: %s: %d MiB names %dgb", name, pr.Name, pr.MemoryMiB, gb)
			}
			for _, pl := range pr.Placements {
				if pl.Size != pr.MemorySlices || pl.End() > p.MemorySlices {
					t.Errorf("%s: %s: placement %s", name, pr.Name, pl)
				}
			}
			if pr.ComputeSlices == p.ComputeSlices {
				full++
				if pr.MemorySlices != p.MemorySlices || len(pr.Placements) != 1 || pr.Instances != 1 {
					t.Errorf("%s: %s is the whole GPU but has %d memory slices, %d placements", name, pr.Name, pr.MemorySlices, len(pr.Placements))
				}
			}
		}
		if full != 1 {
			t.Errorf("%s: %d whole-GPU profiles, want 1", name, full)
		}
	}
}

// gpuMemoryGB is the memory of the products in GB as their names say.
var gpuMemoryGB = map[string]int{
	"NVIDIA A100-SXM4-40GB": 40, "NVIDIA A100-SXM4-80GB": 80, "NVIDIA A100 80GB PCIe": 80,
	"NVIDIA H100 80GB HBM3": 80, "NVIDIA H200": 141,
}

// migMemoryGB names memory as mig-parted does: ceil(fraction×8)/8 of the
// GPU's GB, rounded; the whole-GPU profile's memory stands for the GPU's.
func migMemoryGB(mib int, p *Product) int {
	whole := p.Profiles[len(p.Profiles)-1].MemoryMiB
	eighths := (mib*8 + whole - 1) / whole
	return (eighths*gpuMemoryGB[p.Name] + 4) / 8
}

// TestProducts_RecordedMIGDevices: the MIG devices real GPUs show (nvidia-smi
// and nvidia-smi -q of MIG-enabled GPUs on driver 590.48.01,
// utkuozdemir/nvidia_gpu_exporter internal/captures/linux-x86_64__nvidia-
// {h100,h200}-mig__590.48.01.txt) have the model's names, memory, SMs and
// engines. The rows are the captures' "MIG devices" table: memory total,
// SM, CE, ENC, DEC, OFA, JPG.
func TestProducts_RecordedMIGDevices(t *testing.T) {
	recorded := map[string]string{
		"NVIDIA H100 80GB HBM3": `
MIG 3g.40gb 40448MiB | 60 | 3 0 3 0 3
MIG 2g.20gb 20096MiB | 32 | 2 0 2 0 2
MIG 1g.10gb  9984MiB | 16 | 1 0 1 0 1`,
		"NVIDIA H200": `
MIG 2g.35gb 33280MiB | 32 | 2 0 2 0 2
MIG 1g.18gb 16384MiB | 16 | 1 0 1 0 1`,
	}
	// The H200 capture's 3g.71gb devices are 1c.3g.71gb and 2c.3g.71gb
	// compute instances of one GPU instance of 71424 MiB.
	h200, _ := LookupProduct("NVIDIA H200")
	if pr, _ := h200.Profile("3g.71gb"); pr.MemoryMiB != 71424 {
		t.Errorf("H200 3g.71gb: %d MiB, recorded 71424", pr.MemoryMiB)
	}
	for product, rows := range recorded {
		p, err := LookupProduct(product)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range strings.Split(strings.TrimSpace(rows), "\n") {
			var name string
			var mib, sm, ce, enc, dec, ofa, jpg int
			if _, err := fmt.Sscanf(row, "MIG %s %dMiB | %d | %d %d %d %d %d", &name, &mib, &sm, &ce, &enc, &dec, &ofa, &jpg); err != nil {
				t.Fatalf("row %q: %v", row, err)
			}
			pr, ok := p.Profile(name)
			if !ok {
				t.Errorf("%s: no profile %s", product, name)
				continue
			}
			got := [7]int{pr.MemoryMiB, pr.Multiprocessors, pr.CopyEngines, pr.Encoders, pr.Decoders, pr.OFAs, pr.JPEGs}
			if want := [7]int{mib, sm, ce, enc, dec, ofa, jpg}; got != want {
				t.Errorf("%s %s: MiB, SM, CE, ENC, DEC, OFA, JPG = %v, recorded %v", product, name, got, want)
			}
		}
	}
}

// TestLookupProduct_NoMIG: products without MIG are refused by name.
func TestLookupProduct_NoMIG(t *testing.T) {
	for _, name := range []string{"Tesla V100-SXM2-32GB", "NVIDIA L40S", "NVIDIA RTX A6000", ""} {
		_, err := LookupProduct(name)
		if !errors.Is(err, ErrNoMIG) {
			t.Fatalf("LookupProduct(%q) = %v, want ErrNoMIG", name, err)
		}
		if !strings.Contains(err.Error(), strconv.Quote(name)) {
			t.Errorf("error %q does not name %q", err, name)
		}
		if HasMIG(name) {
			t.Errorf("HasMIG(%q)", name)
		}
	}
	if !HasMIG("NVIDIA H200") {
		t.Error("HasMIG(NVIDIA H200) = false")
	}
}

// TestParseCatalog_Rejects: the data file's checks catch broken data.
func TestParseCatalog_Rejects(t *testing.T) {
	good := `version: 1
products:
  - name: X
    pciDeviceID: "0x12340000"
    memorySlices: 8
    computeSlices: 7
    sources: [s]
    profiles:
      - {name: 1g.5gb, id: 19, memoryMiB: 4864, memorySlices: 1, computeSlices: 1, multiprocessors: 14, copyEngines: 1, decoders: 0, encoders: 0, jpegs: 0, ofas: 0, instances: 7, placements: [0, 1, 2, 3, 4, 5, 6]}
`
	if _, err := parseCatalog([]byte(good)); err != nil {
		t.Fatalf("good catalog: %v", err)
	}
	for name, tc := range map[string]struct{ old, new, want string }{
		"unknown field":     {"sources: [s]", "sources: [s]\n    extra: 1", "field extra not found"},
		"version":           {"version: 1", "version: 2", "version 2"},
		"bad pci id":        {`"0x12340000"`, `"1234"`, "pciDeviceID"},
		"no sources":        {"sources: [s]", "sources: []", "no sources"},
		"g mismatch":        {"computeSlices: 1, multi", "computeSlices: 2, multi", "compute slices"},
		"placement outside": {"5, 6]", "5, 8]", "outside"},
		"not ascending":     {"[0, 1, 2", "[1, 0, 2", "ascending"},
		"too many inst":     {"instances: 7", "instances: 8", "instances"},
		"bad name":          {"name: 1g.5gb", "name: 1x.5gb", "profile"},
		"ci profile":        {"name: 1g.5gb", "name: 1c.1g.5gb", "compute-instance"},
	} {
		t.Run(name, func(t *testing.T) {
			data := strings.Replace(good, tc.old, tc.new, 1)
			if data == good {
				t.Fatalf("replacement %q not applied", tc.old)
			}
			_, err := parseCatalog([]byte(data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseCatalog = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
