package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxGPUs is the largest number of GPUs a machine may have. It bounds every
// input (generic layouts, YAML files, nvidia-smi matrices) so that a bad or
// hostile description cannot make the plugin allocate unbounded memory. The
// largest real single-node NVLink domain today has 72 GPUs; 1024 leaves room
// for synthetic benchmark machines.
const MaxGPUs = 1024

// MaxNVLinks is the largest NVLink count of one GPU pair (NV18 on H100 and
// B200 systems).
const MaxNVLinks = 18

// IDPrefix is the prefix of every device id: GPU i is "fake-<i>".
const IDPrefix = "fake-"

// PCIe is the PCIe relation of two GPUs, in the terms `nvidia-smi topo -m`
// prints. A larger value is a closer relation; the zero value is SYS.
type PCIe uint8

// PCIe relations, from farthest to closest.
const (
	// SYS: the path crosses the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric).
	SYS PCIe = iota
	// NODE: same NUMA node, different PCIe host bridges.
	NODE
	// PHB: same PCIe host bridge (root complex), different switches or root ports.
	PHB
	// PXB: several PCIe switches, without crossing the host bridge.
	PXB
	// PIX: at most one PCIe switch (both GPUs directly under the same switch).
	PIX
	// BOARD: the same board, like the two GPUs of a Tesla K80 (NVML's
	// "internal" level). nvidia-smi has no label for it; ours is "BOARD".
	BOARD
)

var pcieNames = [...]string{SYS: "SYS", NODE: "NODE", PHB: "PHB", PXB: "PXB", PIX: "PIX", BOARD: "BOARD"}

// String returns the nvidia-smi label of p ("PIX", "SYS", ...), or
// "PCIe(<n>)" for a value outside the defined constants.
func (p PCIe) String() string {
	if int(p) < len(pcieNames) {
		return pcieNames[p]
	}
	return "PCIe(" + strconv.Itoa(int(p)) + ")"
}

// ParsePCIe parses an nvidia-smi PCIe label. It accepts the current labels
// (SYS, NODE, PHB, PXB, PIX), BOARD, and the aliases of older drivers: SOC
// (SYS) and PSB (PIX). The match is case-sensitive, as nvidia-smi prints.
func ParsePCIe(s string) (PCIe, bool) {
	switch s {
	case "SYS", "SOC":
		return SYS, true
	case "NODE":
		return NODE, true
	case "PHB":
		return PHB, true
	case "PXB":
		return PXB, true
	case "PIX", "PSB":
		return PIX, true
	case "BOARD":
		return BOARD, true
	}
	return 0, false
}

// Link describes how two distinct GPUs are connected. The zero value means
// no NVLink and a SYS PCIe path.
type Link struct {
	// NVLinks is the number of NVLinks between the pair, 0..MaxNVLinks. For
	// GPUs in an NVSwitch domain it is the per-pair link count of the domain.
	NVLinks int
	// PCIe is the PCIe relation of the pair. For a machine read from
	// nvidia-smi output, where an NVLinked pair shows only NV#, it is
	// inferred: NODE if both GPUs have the same known NUMA node, else SYS.
	PCIe PCIe
}

// String returns the label nvidia-smi would print for the pair: "NV<n>" if
// the pair has NVLinks, else the PCIe relation.
func (l Link) String() string {
	if l.NVLinks > 0 {
		return "NV" + strconv.Itoa(l.NVLinks)
	}
	return l.PCIe.String()
}

// link is the compact form stored in the n×n matrix.
type link struct {
	nv   uint8
	pcie PCIe
}

// Machine is a fake GPU server: GPUs fake-0 … fake-<n-1> of one model
// (GPUModel), their NUMA nodes, PCI bus ids and the links between every
// pair. A Machine is immutable once built, so it
// is safe for concurrent use; build one with Generic, Preset, Resolve, Parse
// or New. A nil *Machine behaves as a machine without GPUs: its accessors
// return zero values and never panic.
type Machine struct {
	name  string
	fixed bool
	numa  []int    // NUMA node of each GPU, -1 if unknown
	cpus  []string // CPU affinity of each GPU as nvidia-smi prints it, "" if unknown
	nodes []int    // NUMA node ids the machine declares, sorted
	links []link   // n*n, row-major; the diagonal is unused
	class []int    // interchangeable GPUs share a class id
	gpu   GPUModel
	bus   []uint32 // PCI domain<<8 | bus of each GPU
}

// Name returns the machine's name: the preset name, the name given in a
// YAML file (else the file's base name without extension), or "generic-<n>".
func (m *Machine) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// Len returns the number of GPUs.
func (m *Machine) Len() int {
	if m == nil {
		return 0
	}
	return len(m.numa)
}

// FixedSize reports whether the GPU count is fixed by the topology (a preset
// or a file) rather than chosen with -devices (a generic layout).
func (m *Machine) FixedSize() bool { return m != nil && m.fixed }

// ID returns the device id of GPU i, "fake-<i>" (GPUID). It does not check
// i.
func (m *Machine) ID(i int) string { return GPUID(i) }

// GPUID returns the device id of GPU i, "fake-<i>", of any machine: also a
// GPU's CDI device name and the id in its status file. It does not check
// i; GPUOf reads it back.
func GPUID(i int) string { return IDPrefix + strconv.Itoa(i) }

// Index returns the index of the device id ("fake-<i>" → i) and whether id
// names a GPU of this machine. Only the canonical form is accepted: no sign,
// no leading zeros, no spaces.
func (m *Machine) Index(id string) (int, bool) {
	if IsReplicaID(id) || IsMIGID(id) {
		return 0, false
	}
	i, ok := GPUOf(id)
	if !ok || i >= m.Len() {
		return 0, false
	}
	return i, true
}

// GPUOf returns the GPU index a device id names, whatever the machine: i
// for a GPU id "fake-<i>", a replica id "fake-<i>::<j>" and a MIG device
// id "fake-<i>-mig-<profile>-<start>", all in the canonical form
// (ParseReplicaID, ParseMIGID). ok is false for anything else.
func GPUOf(id string) (gpu int, ok bool) {
	if IsMIGID(id) {
		i, _, _, err := ParseMIGID(id)
		return i, err == nil
	}
	if IsReplicaID(id) {
		i, _, err := ParseReplicaID(id)
		return i, err == nil
	}
	s, found := strings.CutPrefix(id, IDPrefix)
	if !found {
		return 0, false
	}
	i, err := canonicalUint(s)
	return i, err == nil
}

// GPUsOf returns the distinct GPUs of device ids, ascending: a replica
// counts as its GPU (GPUOf); an id that names no GPU is left out. It is
// what a container of those devices has: the GPUs whose UUIDs, device
// nodes and status files it gets.
func GPUsOf(ids ...string) []int {
	out := make([]int, 0, len(ids))
	for _, id := range ids {
		if i, ok := GPUOf(id); ok {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// NUMA returns the NUMA node of GPU i, or -1 if it is unknown (an N/A
// affinity in nvidia-smi output) or i is out of range.
func (m *Machine) NUMA(i int) int {
	if i < 0 || i >= m.Len() {
		return -1
	}
	return m.numa[i]
}

// CPUAffinity returns the CPU list of GPU i as nvidia-smi prints it (for
// example "0-19,40-59"), or "" if unknown or i is out of range.
func (m *Machine) CPUAffinity(i int) string {
	if i < 0 || i >= m.Len() {
		return ""
	}
	return m.cpus[i]
}

// NUMANodes returns the sorted NUMA node ids the machine declares, including
// nodes without GPUs. The caller may modify the returned slice.
func (m *Machine) NUMANodes() []int {
	if m == nil {
		return nil
	}
	return slices.Clone(m.nodes)
}

// GPUModel returns the model of the machine's GPUs: the preset's or the
// YAML file's gpu mapping, else DefaultGPUModel. It returns the zero
// GPUModel for a nil machine.
func (m *Machine) GPUModel() GPUModel {
	if m == nil {
		return GPUModel{}
	}
	return m.gpu
}

// PCIBusID returns the PCI bus id of GPU i as nvidia-smi prints it, such as
// "00000000:41:00.0", or "" if i is out of range. Bus ids are unique and
// ascend with the index, as on a real machine; their gaps follow the PCIe
// tree: GPUs under one switch get consecutive buses, and each host bridge,
// NUMA node and socket starts a new block of buses (see topology/README.md).
func (m *Machine) PCIBusID(i int) string {
	if i < 0 || i >= m.Len() {
		return ""
	}
	return formatBusID(m.bus[i])
}

// MinorNumber returns the minor number of GPU i, the N of its /dev/nvidiaN
// device node, which nvidia-smi -q prints as "Minor Number": it equals the
// index. It returns -1 if i is out of range.
func (m *Machine) MinorNumber(i int) int {
	if i < 0 || i >= m.Len() {
		return -1
	}
	return i
}

// Link returns the connection between GPUs i and j. It returns the zero Link
// if i == j or either index is out of range.
func (m *Machine) Link(i, j int) Link {
	n := m.Len()
	if i == j || i < 0 || j < 0 || i >= n || j >= n {
		return Link{}
	}
	l := m.links[i*n+j]
	return Link{NVLinks: int(l.nv), PCIe: l.pcie}
}

// Class returns the interchangeability class of GPU i: two GPUs have the
// same class iff they have the same NUMA node and the same Link to every
// other GPU, so swapping them changes nothing. Class ids are in 0..Len()-1
// and a class's id is its lowest GPU index. It returns -1 for an index out
// of range. Allocators use it to skip symmetric choices.
func (m *Machine) Class(i int) int {
	if i < 0 || i >= m.Len() {
		return -1
	}
	return m.class[i]
}

// String returns a one-line summary, for logs.
func (m *Machine) String() string {
	if m == nil {
		return "<nil machine>"
	}
	nv := 0
	n := m.Len()
	for i := range n {
		for j := i + 1; j < n; j++ {
			if m.links[i*n+j].nv > 0 {
				nv++
			}
		}
	}
	return fmt.Sprintf("%s: %d GPUs, NUMA nodes %v, %d NVLinked pairs", m.name, n, m.nodes, nv)
}

// newMachine checks the parts and builds a Machine. numa and cpus have one
// entry per GPU; nodes lists the declared NUMA nodes (GPU nodes are added);
// links is n*n and must be symmetric; gpu is the GPUs' model.
func newMachine(name string, fixed bool, numa []int, cpus []string, nodes []int, links []link, gpu GPUModel) (*Machine, error) {
	n := len(numa)
	if n < 1 || n > MaxGPUs {
		return nil, fmt.Errorf("machine %q has %d GPUs, want 1..%d: %w", name, n, MaxGPUs, ErrInvalidDeviceCount)
	}
	if len(links) != n*n || len(cpus) != n {
		return nil, fmt.Errorf("machine %q: inconsistent sizes: %w", name, ErrInvalidTopology)
	}
	set := make(map[int]bool, len(nodes)+n)
	for _, v := range nodes {
		set[v] = true
	}
	for i, v := range numa {
		if v < -1 {
			return nil, fmt.Errorf("machine %q: GPU %d has NUMA node %d: %w", name, i, v, ErrInvalidTopology)
		}
		if v >= 0 {
			set[v] = true
		}
	}
	all := make([]int, 0, len(set))
	for v := range set {
		all = append(all, v)
	}
	slices.Sort(all)
	for i := range n {
		for j := i + 1; j < n; j++ {
			a, b := links[i*n+j], links[j*n+i]
			if a != b {
				return nil, fmt.Errorf("machine %q: link %d-%d is %v but %d-%d is %v: %w",
					name, i, j, a, j, i, b, ErrInvalidTopology)
			}
			if a.nv > MaxNVLinks || a.pcie > BOARD {
				return nil, fmt.Errorf("machine %q: link %d-%d out of range: %w", name, i, j, ErrInvalidTopology)
			}
		}
	}
	if field, msg := gpu.check(); field != "" {
		return nil, fmt.Errorf("machine %q: GPU model: %s: %w", name, msg, ErrInvalidTopology)
	}
	m := &Machine{name: name, fixed: fixed, numa: numa, cpus: cpus, nodes: all, links: links, gpu: gpu}
	m.class = m.classes()
	m.bus = pciBusIDs(n, func(i, j int) PCIe { return links[i*n+j].pcie })
	return m, nil
}

// classes groups interchangeable GPUs (see Class). If a and b are twins
// with link L between them, "row a with L on its diagonal" equals "row b
// with L on its diagonal", so a hash of that row, for each link value L in
// the row, finds the candidates in O(n²) overall; twins confirms them. The
// relation is transitive, so comparing with one member of a class suffices.
func (m *Machine) classes() []int {
	n := m.Len()
	class := make([]int, n)
	type key struct {
		code int
		hash uint64
	}
	buckets := make(map[key][]int) // representatives
	const kinds = (MaxNVLinks + 1) * (int(BOARD) + 1)
	code := func(l link) int { return int(l.nv)*(int(BOARD)+1) + int(l.pcie) }
	var seen [kinds]bool
	codes := make([]int, 0, 8)
	for i := range n {
		row := m.links[i*n : (i+1)*n]
		var sum uint64
		codes = codes[:0]
		clear(seen[:])
		for x, l := range row {
			if x == i {
				continue
			}
			c := code(l)
			sum += mix(uint64(x), c)
			if !seen[c] {
				seen[c] = true
				codes = append(codes, c)
			}
		}
		class[i] = i
	find:
		for _, c := range codes {
			for _, r := range buckets[key{c, sum + mix(uint64(i), c)}] {
				if code(row[r]) == c && m.numa[r] == m.numa[i] && m.twins(r, i) {
					class[i] = r
					break find
				}
			}
		}
		if class[i] == i {
			for _, c := range codes {
				k := key{c, sum + mix(uint64(i), c)}
				buckets[k] = append(buckets[k], i)
			}
		}
	}
	return class
}

// mix hashes a (GPU index, link code) cell (splitmix64 finalizer).
func mix(x uint64, c int) uint64 {
	z := x*0x9e3779b97f4a7c15 + uint64(c)*0xbf58476d1ce4e5b9 + 1
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// twins reports whether GPUs a and b have the same link to every other GPU.
func (m *Machine) twins(a, b int) bool {
	n := m.Len()
	ra, rb := m.links[a*n:(a+1)*n], m.links[b*n:(b+1)*n]
	for x := range n {
		if x != a && x != b && ra[x] != rb[x] {
			return false
		}
	}
	return true
}

// gpuPath places one GPU in the PCIe tree, for relation.
type gpuPath struct {
	numa     int
	bridge   int   // global host bridge id
	switches []int // global switch ids from the top switch down to the GPU's parent
	board    int   // board id, -1 if none
}

// relation derives the PCIe relation of two GPUs from their tree positions.
func relation(a, b gpuPath) PCIe {
	switch {
	case a.numa != b.numa || a.numa < 0:
		return SYS
	case a.board >= 0 && a.board == b.board:
		return BOARD
	case a.bridge != b.bridge:
		return NODE
	}
	c := 0
	for c < len(a.switches) && c < len(b.switches) && a.switches[c] == b.switches[c] {
		c++
	}
	switch {
	case c == 0:
		return PHB
	case c == len(a.switches) && c == len(b.switches):
		return PIX
	default:
		return PXB
	}
}

// fromTree builds the link matrix from the GPUs' tree positions and an NVLink
// count matrix (n*n, may be nil).
func fromTree(paths []gpuPath, nv []uint8) []link {
	n := len(paths)
	links := make([]link, n*n)
	for i := range n {
		for j := i + 1; j < n; j++ {
			l := link{pcie: relation(paths[i], paths[j])}
			if nv != nil {
				l.nv = nv[i*n+j]
			}
			links[i*n+j], links[j*n+i] = l, l
		}
	}
	return links
}

// New builds a fixed-size machine from its parts, for tests and programs
// that generate topologies: numa gives the NUMA node of each GPU (-1 for
// unknown) and linkOf(i, j) the connection of each pair i < j (it is called
// once per pair). Its GPUs are DefaultGPUModel. It returns an error wrapping ErrInvalidDeviceCount or
// ErrInvalidTopology for a bad count, NUMA id, NVLink count or relation.
func New(name string, numa []int, linkOf func(i, j int) Link) (*Machine, error) {
	n := len(numa)
	if n < 1 || n > MaxGPUs {
		return nil, fmt.Errorf("machine %q has %d GPUs, want 1..%d: %w", name, n, MaxGPUs, ErrInvalidDeviceCount)
	}
	links := make([]link, n*n)
	for i := range n {
		for j := i + 1; j < n; j++ {
			l := linkOf(i, j)
			if l.NVLinks < 0 || l.NVLinks > MaxNVLinks || l.PCIe > BOARD {
				return nil, fmt.Errorf("machine %q: link %d-%d is %+v, want 0..%d NVLinks and a defined relation: %w",
					name, i, j, l, MaxNVLinks, ErrInvalidTopology)
			}
			c := link{nv: uint8(l.NVLinks), pcie: l.PCIe}
			links[i*n+j], links[j*n+i] = c, c
		}
	}
	return newMachine(name, true, slices.Clone(numa), make([]string, n), nil, links, DefaultGPUModel())
}
