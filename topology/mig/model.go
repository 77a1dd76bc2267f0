package mig

import (
	"bytes"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

//go:embed products.yaml
var productsYAML []byte

// Placement is where a GPU instance sits on its GPU: the first memory slice
// it occupies and how many (nvidia-smi mig -lgipp prints a profile's valid
// placements as "{0,4}:4"; -lgi prints an instance's as "4:4").
type Placement struct {
	// Start is the index of the first memory slice, from 0.
	Start int
	// Size is the number of memory slices.
	Size int
}

// String formats p as nvidia-smi mig -lgi does: "start:size".
func (p Placement) String() string { return fmt.Sprintf("%d:%d", p.Start, p.Size) }

// End is one past the last memory slice p occupies.
func (p Placement) End() int { return p.Start + p.Size }

// Overlaps reports whether p and q share a memory slice.
func (p Placement) Overlaps(q Placement) bool { return p.Start < q.End() && q.Start < p.End() }

// PlacementsString writes placements of one size as nvidia-smi mig -lgipp
// does: "{0,2,4}:2"; "{}" for none.
func PlacementsString(pls []Placement) string {
	if len(pls) == 0 {
		return "{}"
	}
	starts := make([]string, len(pls))
	for i, pl := range pls {
		starts[i] = strconv.Itoa(pl.Start)
	}
	return "{" + strings.Join(starts, ",") + "}:" + strconv.Itoa(pls[0].Size)
}

// Profile is a GPU instance profile of a product, as nvidia-smi mig -lgip
// and -lgipp list it. Profiles are values; the slices they hold belong to
// the model and must not be modified.
type Profile struct {
	// Name is the profile as NVIDIA names it: "<g>g.<gb>gb", with
	// attributes after a "+" ("1g.10gb+me": media extensions).
	Name string
	// ID is the GPU instance profile id (nvidia-smi mig -lgip, column ID;
	// nvmlGpuInstanceProfileInfo_t.id): 19 for 1g.10gb on an H100.
	ID int
	// MemoryMiB is the instance's memory (NVML MemorySizeMB).
	MemoryMiB int
	// MemorySlices is the number of memory slices the instance occupies:
	// the size of each of its placements.
	MemorySlices int
	// ComputeSlices is the number of compute slices (the "g" of the name).
	ComputeSlices int
	// Multiprocessors is the instance's SM count.
	Multiprocessors int
	// CopyEngines, Decoders, Encoders, JPEGs and OFAs are the instance's
	// copy engines, NVDEC, NVENC, NVJPG and optical flow accelerators.
	CopyEngines, Decoders, Encoders, JPEGs, OFAs int
	// Instances is the most instances of the profile one GPU holds
	// (nvidia-smi mig -lgip, Instances Total).
	Instances int
	// Placements are the profile's valid placements in ascending start
	// order (nvidia-smi mig -lgipp).
	Placements []Placement
}

// Product is the MIG model of one GPU product: its slices and its
// profiles. Products are immutable and safe for concurrent use.
type Product struct {
	// Name is the product name as nvidia-smi prints it and topology keys
	// it: "NVIDIA H100 80GB HBM3".
	Name string
	// PCIDeviceID is the PCI device id as mig-parted's device-filter
	// writes it: "0x233010DE" (device << 16 | vendor).
	PCIDeviceID string
	// PCISubsystemID is the PCI subsystem id ("0x16C110DE"), "" if unknown;
	// a device-filter "<device>:<subsystem>" matches it.
	PCISubsystemID string
	// MemorySlices and ComputeSlices are the GPU's slices (8 and 7 on an
	// A100 or H100).
	MemorySlices, ComputeSlices int
	// Profiles are the product's GPU instance profiles in the order
	// nvidia-smi mig -lgip lists them.
	Profiles []Profile
	// Sources name where the product's facts come from.
	Sources []string
}

// Profile returns the product's profile of that name.
func (p *Product) Profile(name string) (Profile, bool) {
	for _, pr := range p.Profiles {
		if pr.Name == name {
			return pr, true
		}
	}
	return Profile{}, false
}

// ProfileNames returns the names of the product's profiles in -lgip order.
func (p *Product) ProfileNames() []string {
	names := make([]string, len(p.Profiles))
	for i, pr := range p.Profiles {
		names[i] = pr.Name
	}
	return names
}

// The data file's shape.
type catalogFile struct {
	Version  int           `yaml:"version"`
	Products []productFile `yaml:"products"`
}

type productFile struct {
	Name           string        `yaml:"name"`
	PCIDeviceID    string        `yaml:"pciDeviceID"`
	PCISubsystemID string        `yaml:"pciSubsystemID"`
	MemorySlices   int           `yaml:"memorySlices"`
	ComputeSlices  int           `yaml:"computeSlices"`
	Sources        []string      `yaml:"sources"`
	Profiles       []profileFile `yaml:"profiles"`
}

type profileFile struct {
	Name            string `yaml:"name"`
	ID              int    `yaml:"id"`
	MemoryMiB       int    `yaml:"memoryMiB"`
	MemorySlices    int    `yaml:"memorySlices"`
	ComputeSlices   int    `yaml:"computeSlices"`
	Multiprocessors int    `yaml:"multiprocessors"`
	CopyEngines     int    `yaml:"copyEngines"`
	Decoders        int    `yaml:"decoders"`
	Encoders        int    `yaml:"encoders"`
	JPEGs           int    `yaml:"jpegs"`
	OFAs            int    `yaml:"ofas"`
	Instances       int    `yaml:"instances"`
	Placements      []int  `yaml:"placements"`
}

// catalog is the loaded model: products by name, in file order.
type catalog struct {
	byName map[string]*Product
	names  []string
}

var loadCatalog = sync.OnceValues(func() (*catalog, error) { return parseCatalog(productsYAML) })

// parseCatalog decodes and checks a products file.
func parseCatalog(data []byte) (*catalog, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f catalogFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("mig products data: %w", err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("mig products data: version %d, want 1", f.Version)
	}
	c := &catalog{byName: make(map[string]*Product, len(f.Products))}
	for _, pf := range f.Products {
		p, err := pf.product()
		if err != nil {
			return nil, fmt.Errorf("mig products data: %w", err)
		}
		if _, dup := c.byName[p.Name]; dup {
			return nil, fmt.Errorf("mig products data: product %q listed twice", p.Name)
		}
		c.byName[p.Name] = p
		c.names = append(c.names, p.Name)
	}
	return c, nil
}

// product converts and validates one product of the data file.
func (pf productFile) product() (*Product, error) {
	if pf.Name == "" {
		return nil, fmt.Errorf("product without a name")
	}
	if !strings.HasPrefix(pf.PCIDeviceID, "0x") {
		return nil, fmt.Errorf("product %q: pciDeviceID %q is not 0x<device><vendor>", pf.Name, pf.PCIDeviceID)
	}
	if _, err := parseDeviceID(pf.PCIDeviceID); err != nil {
		return nil, fmt.Errorf("product %q: pciDeviceID: %w", pf.Name, err)
	}
	if pf.PCISubsystemID != "" {
		if _, err := parseDeviceID(pf.PCISubsystemID); err != nil {
			return nil, fmt.Errorf("product %q: pciSubsystemID: %w", pf.Name, err)
		}
	}
	if pf.MemorySlices < 1 || pf.ComputeSlices < 1 || pf.ComputeSlices > pf.MemorySlices {
		return nil, fmt.Errorf("product %q: %d memory and %d compute slices", pf.Name, pf.MemorySlices, pf.ComputeSlices)
	}
	if len(pf.Sources) == 0 {
		return nil, fmt.Errorf("product %q: no sources", pf.Name)
	}
	p := &Product{
		Name: pf.Name, PCIDeviceID: canonicalID(pf.PCIDeviceID), PCISubsystemID: canonicalID(pf.PCISubsystemID),
		MemorySlices: pf.MemorySlices, ComputeSlices: pf.ComputeSlices, Sources: slices.Clone(pf.Sources),
	}
	ids := map[int]bool{}
	for _, rf := range pf.Profiles {
		pr, err := rf.profile(p)
		if err != nil {
			return nil, fmt.Errorf("product %q: %w", pf.Name, err)
		}
		if _, dup := p.Profile(pr.Name); dup {
			return nil, fmt.Errorf("product %q: profile %s listed twice", pf.Name, pr.Name)
		}
		if ids[pr.ID] {
			return nil, fmt.Errorf("product %q: profile id %d listed twice", pf.Name, pr.ID)
		}
		ids[pr.ID] = true
		p.Profiles = append(p.Profiles, pr)
	}
	if len(p.Profiles) == 0 {
		return nil, fmt.Errorf("product %q: no profiles", pf.Name)
	}
	return p, nil
}

// profile converts and validates one profile of product p.
func (rf profileFile) profile(p *Product) (Profile, error) {
	name, err := ParseProfileName(rf.Name)
	if err != nil {
		return Profile{}, fmt.Errorf("profile %q: %w", rf.Name, err)
	}
	if name.C != name.G || name.String() != rf.Name {
		return Profile{}, fmt.Errorf("profile %q: a GPU instance profile is named <g>g.<gb>gb[+attrs], without a compute-instance prefix", rf.Name)
	}
	if name.G != rf.ComputeSlices {
		return Profile{}, fmt.Errorf("profile %q: %d compute slices, the name says %d", rf.Name, rf.ComputeSlices, name.G)
	}
	switch {
	case rf.ID < 0:
		return Profile{}, fmt.Errorf("profile %q: negative id %d", rf.Name, rf.ID)
	case rf.MemoryMiB <= 0 || rf.Multiprocessors <= 0 || rf.CopyEngines <= 0:
		return Profile{}, fmt.Errorf("profile %q: memory, multiprocessors and copy engines must be positive", rf.Name)
	case rf.Decoders < 0 || rf.Encoders < 0 || rf.JPEGs < 0 || rf.OFAs < 0:
		return Profile{}, fmt.Errorf("profile %q: negative engine count", rf.Name)
	case rf.MemorySlices < 1 || rf.MemorySlices > p.MemorySlices:
		return Profile{}, fmt.Errorf("profile %q: %d memory slices of the GPU's %d", rf.Name, rf.MemorySlices, p.MemorySlices)
	case rf.ComputeSlices < 1 || rf.ComputeSlices > p.ComputeSlices:
		return Profile{}, fmt.Errorf("profile %q: %d compute slices of the GPU's %d", rf.Name, rf.ComputeSlices, p.ComputeSlices)
	case rf.Instances < 1 || rf.Instances > len(rf.Placements):
		return Profile{}, fmt.Errorf("profile %q: %d instances with %d placements", rf.Name, rf.Instances, len(rf.Placements))
	}
	pr := Profile{
		Name: rf.Name, ID: rf.ID, MemoryMiB: rf.MemoryMiB, MemorySlices: rf.MemorySlices, ComputeSlices: rf.ComputeSlices,
		Multiprocessors: rf.Multiprocessors, CopyEngines: rf.CopyEngines, Decoders: rf.Decoders, Encoders: rf.Encoders,
		JPEGs: rf.JPEGs, OFAs: rf.OFAs, Instances: rf.Instances,
	}
	for i, start := range rf.Placements {
		pl := Placement{Start: start, Size: rf.MemorySlices}
		if start < 0 || pl.End() > p.MemorySlices {
			return Profile{}, fmt.Errorf("profile %q: placement %s outside the GPU's %d memory slices", rf.Name, pl, p.MemorySlices)
		}
		if i > 0 && start <= rf.Placements[i-1] {
			return Profile{}, fmt.Errorf("profile %q: placements not in ascending order at %d", rf.Name, start)
		}
		pr.Placements = append(pr.Placements, pl)
	}
	return pr, nil
}

// Products returns the names of the products the model knows, in the data
// file's order.
func Products() []string {
	c, err := loadCatalog()
	if err != nil {
		return nil
	}
	return slices.Clone(c.names)
}

// LookupProduct returns the MIG model of a product by its nvidia-smi name
// ("NVIDIA H200"). A product the model does not partition is an error that
// wraps ErrNoMIG and names it.
func LookupProduct(name string) (*Product, error) {
	c, err := loadCatalog()
	if err != nil {
		return nil, err
	}
	p, ok := c.byName[name]
	if !ok {
		return nil, fmt.Errorf("product %q: %w (MIG products: %s)", name, ErrNoMIG, strings.Join(c.names, ", "))
	}
	return p, nil
}

// HasMIG reports whether the model partitions the product.
func HasMIG(product string) bool {
	_, err := LookupProduct(product)
	return err == nil
}
