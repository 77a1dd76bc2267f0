package topology

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// APIVersion and Kind identify a YAML topology file; both fields are
// required and must match exactly. A future incompatible format will get a
// new APIVersion.
const (
	APIVersion = "virtual-gpu.unicore.mcyou.cc/v1"
	Kind       = "Topology"
)

// Limits of a YAML file, besides MaxGPUs.
const (
	maxElements    = 4 * MaxGPUs // NUMA nodes + host bridges + switches after expansion
	maxSwitchDepth = 8
	maxFileBytes   = 4 << 20
)

type fileSpec struct {
	APIVersion  string       `yaml:"apiVersion"`
	Kind        string       `yaml:"kind"`
	Name        string       `yaml:"name"`
	Description string       `yaml:"description"`
	GPU         *gpuSpec     `yaml:"gpu"`
	NUMANodes   []numaSpec   `yaml:"numaNodes"`
	NVLinks     []nvlinkSpec `yaml:"nvlinks"`
}

type gpuSpec struct {
	Product           string `yaml:"product"`
	MemoryMiB         *int   `yaml:"memoryMiB"`
	ComputeCapability string `yaml:"computeCapability"`
	Family            string `yaml:"family"`
	PowerLimitW       *int   `yaml:"powerLimitW"`
	IdlePowerW        *int   `yaml:"idlePowerW"`
}

type numaSpec struct {
	ID          *int         `yaml:"id"`
	Count       *int         `yaml:"count"`
	CPUs        string       `yaml:"cpus"`
	HostBridges []bridgeSpec `yaml:"hostBridges"`
}

type bridgeSpec struct {
	Count    *int         `yaml:"count"`
	GPUs     int          `yaml:"gpus"`
	Switches []switchSpec `yaml:"switches"`
}

type switchSpec struct {
	Count    *int         `yaml:"count"`
	GPUs     int          `yaml:"gpus"`
	Board    bool         `yaml:"board"`
	Switches []switchSpec `yaml:"switches"`
}

type nvlinkSpec struct {
	Domain string  `yaml:"domain"`
	Pairs  [][]int `yaml:"pairs"`
	Links  int     `yaml:"links"`
	Repeat *int    `yaml:"repeat"`
	Stride int     `yaml:"stride"`
}

// ParseYAML reads a YAML topology file (see the package documentation and
// topology/README.md for the format). name is used in errors and, if the file
// has no name field, as the machine's name (its base name without
// extension). Every error is a *ParseError naming name and the line.
func ParseYAML(name string, r io.Reader) (*Machine, error) {
	data, err := readAll(name, r)
	if err != nil {
		return nil, err
	}
	return parseYAML(name, data)
}

func readAll(name string, r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, &ParseError{File: name, Msg: "read", Err: err}
	}
	if len(data) > maxFileBytes {
		return nil, parseErr(name, 0, fmt.Sprintf("file larger than %d bytes", maxFileBytes))
	}
	return data, nil
}

func parseYAML(name string, data []byte) (m *Machine, err error) {
	defer func() {
		// The YAML library is not ours; never let a bug in it crash the plugin.
		if r := recover(); r != nil {
			m, err = nil, parseErr(name, 0, fmt.Sprintf("YAML decoder failed: %v", r))
		}
	}()
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(name, err)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return nil, parseErr(name, 0, "empty file: expected a YAML mapping with apiVersion, kind and numaNodes")
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, parseErr(name, doc.Line, "expected a YAML mapping with apiVersion, kind and numaNodes")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var spec fileSpec
	if err := dec.Decode(&spec); err != nil {
		return nil, yamlError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, parseErr(name, extra.Line, "expected a single YAML document, found another")
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(name, err)
	}
	x := &expander{file: name, root: doc}
	return x.build(&spec)
}

var (
	yamlLineRE    = regexp.MustCompile(`^line (\d+): (.*)$`)
	yamlFieldRE   = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	yamlConvertRE = regexp.MustCompile("^cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
)

// yamlError turns an error of the YAML library into a *ParseError with the
// line number taken out of the message and Go type names replaced by words.
func yamlError(file string, err error) *ParseError {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	line := 0
	if mm := yamlLineRE.FindStringSubmatch(msg); mm != nil {
		line, _ = strconv.Atoi(mm[1])
		msg = mm[2]
	}
	if mm := yamlFieldRE.FindStringSubmatch(msg); mm != nil {
		msg = fmt.Sprintf("unknown field %q", mm[1])
	} else if mm := yamlConvertRE.FindStringSubmatch(msg); mm != nil {
		msg = fmt.Sprintf("expected %s, found %s %q", goTypeWord(mm[3]), mm[1], mm[2])
	}
	return parseErr(file, line, msg)
}

func goTypeWord(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch {
	case t == "int":
		return "an integer"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	default:
		return "a mapping"
	}
}

// expander turns a decoded fileSpec into a Machine, remembering where it is
// in the document so that errors name the line.
type expander struct {
	file     string
	root     *yaml.Node
	paths    []gpuPath
	numa     []int
	cpus     []string
	nodes    []int
	elements int
	bridges  int
	switches int
	boards   int
}

// errAt returns a *ParseError for the YAML element at path (mapping keys and
// sequence indices from the document root); the line is that of the deepest
// element of path that exists.
func (x *expander) errAt(path []any, format string, args ...any) *ParseError {
	return parseErr(x.file, lineAt(x.root, path), fmt.Sprintf(format, args...))
}

func lineAt(n *yaml.Node, path []any) int {
	line := n.Line
	for _, p := range path {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == p {
						next = n.Content[i+1]
						if next.Kind == yaml.ScalarNode {
							return next.Line
						}
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
			}
		}
		if next == nil {
			return line
		}
		n, line = next, next.Line
	}
	return line
}

func with(path []any, more ...any) []any {
	return append(append(make([]any, 0, len(path)+len(more)), path...), more...)
}

func (x *expander) count(path []any, c *int) (int, error) {
	if c == nil {
		return 1, nil
	}
	if *c < 1 || *c > MaxGPUs {
		return 0, x.errAt(with(path, "count"), "count %d out of range: expected 1..%d", *c, MaxGPUs)
	}
	return *c, nil
}

func (x *expander) addElement(path []any) error {
	x.elements++
	if x.elements > maxElements {
		return x.errAt(path, "too many NUMA nodes, host bridges and switches after expansion: expected at most %d", maxElements)
	}
	return nil
}

func (x *expander) addGPUs(path []any, n int, p gpuPath, cpus string) error {
	if n < 0 || n > MaxGPUs || len(x.paths)+n > MaxGPUs {
		return x.errAt(with(path, "gpus"), "gpus %d: expected 0..%d and at most %d GPUs in the machine", n, MaxGPUs, MaxGPUs)
	}
	for range n {
		x.paths = append(x.paths, p)
		x.numa = append(x.numa, p.numa)
		x.cpus = append(x.cpus, cpus)
	}
	return nil
}

func (x *expander) build(s *fileSpec) (*Machine, error) {
	if s.APIVersion != APIVersion {
		return nil, x.errAt([]any{"apiVersion"}, "apiVersion %q: expected %q", s.APIVersion, APIVersion)
	}
	if s.Kind != Kind {
		return nil, x.errAt([]any{"kind"}, "kind %q: expected %q", s.Kind, Kind)
	}
	if len(s.NUMANodes) == 0 {
		return nil, x.errAt([]any{"numaNodes"}, "expected numaNodes: a list of at least one NUMA node")
	}
	seen := make(map[int]int) // NUMA id -> line
	next := 0
	for i, ns := range s.NUMANodes {
		path := []any{"numaNodes", i}
		count, err := x.count(path, ns.Count)
		if err != nil {
			return nil, err
		}
		id := next
		if ns.ID != nil {
			id = *ns.ID
		}
		if id < 0 || id > maxElements {
			return nil, x.errAt(with(path, "id"), "NUMA node id %d: expected 0..%d", id, maxElements)
		}
		if ns.CPUs != "" && count > 1 {
			return nil, x.errAt(with(path, "cpus"), "cpus given for %d NUMA nodes: expected count 1 with cpus", count)
		}
		if ns.CPUs != "" {
			if err := checkCPUList(ns.CPUs); err != nil {
				return nil, x.errAt(with(path, "cpus"), "cpus %q: expected a CPU list like 0-19,40-59: %v", ns.CPUs, err)
			}
		}
		for k := range count {
			nid := id + k
			if l, dup := seen[nid]; dup {
				return nil, x.errAt(path, "NUMA node %d already declared at line %d", nid, l)
			}
			seen[nid] = lineAt(x.root, path)
			if err := x.addElement(path); err != nil {
				return nil, err
			}
			x.nodes = append(x.nodes, nid)
			for j, bs := range s.NUMANodes[i].HostBridges {
				if err := x.bridge(with(path, "hostBridges", j), &bs, nid, ns.CPUs); err != nil {
					return nil, err
				}
			}
		}
		next = id + count
	}
	n := len(x.paths)
	if n == 0 {
		return nil, x.errAt([]any{"numaNodes"}, "no GPUs: expected gpus under a host bridge or switch")
	}
	nv, err := x.nvlinks(s.NVLinks, n)
	if err != nil {
		return nil, err
	}
	gpu, err := x.gpuModel(s.GPU)
	if err != nil {
		return nil, err
	}
	name := s.Name
	if name == "" {
		name = baseName(x.file)
	}
	m, err := newMachine(name, true, x.numa, x.cpus, x.nodes, fromTree(x.paths, nv), gpu)
	if err != nil {
		return nil, &ParseError{File: x.file, Msg: "build machine", Err: err}
	}
	return m, nil
}

// gpuModel checks the gpu mapping; without one the GPUs are
// DefaultGPUModel. Every field but family is required.
func (x *expander) gpuModel(s *gpuSpec) (GPUModel, error) {
	path := []any{"gpu"}
	if s == nil {
		for i := 0; i+1 < len(x.root.Content); i += 2 {
			if x.root.Content[i].Value == "gpu" {
				return GPUModel{}, x.errAt(path, "gpu is empty: expected a mapping with product, memoryMiB, computeCapability, powerLimitW and idlePowerW, or no gpu key")
			}
		}
		return DefaultGPUModel(), nil
	}
	var missing []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"product", s.Product != ""}, {"memoryMiB", s.MemoryMiB != nil}, {"computeCapability", s.ComputeCapability != ""},
		{"powerLimitW", s.PowerLimitW != nil}, {"idlePowerW", s.IdlePowerW != nil},
	} {
		if !f.set {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return GPUModel{}, x.errAt(path, "gpu lacks %s: expected product, memoryMiB, computeCapability, powerLimitW and idlePowerW (family is optional)",
			strings.Join(missing, ", "))
	}
	cc, ok := parseComputeCapability(s.ComputeCapability)
	if !ok {
		return GPUModel{}, x.errAt(with(path, "computeCapability"), "computeCapability %q: expected MAJOR.MINOR like \"8.0\"", s.ComputeCapability)
	}
	g := GPUModel{Product: s.Product, MemoryMiB: *s.MemoryMiB, Compute: cc, Family: s.Family,
		PowerLimitW: *s.PowerLimitW, IdlePowerW: *s.IdlePowerW}
	if g.Family == "" {
		if g.Family = FamilyOf(cc); g.Family == "" {
			return GPUModel{}, x.errAt(path, "gpu lacks family: computeCapability %s has no known family, expected family like ampere", cc)
		}
	}
	if field, msg := g.check(); field != "" {
		return GPUModel{}, x.errAt(with(path, field), "%s", msg)
	}
	return g, nil
}

func (x *expander) bridge(path []any, bs *bridgeSpec, numa int, cpus string) error {
	count, err := x.count(path, bs.Count)
	if err != nil {
		return err
	}
	for range count {
		if err := x.addElement(path); err != nil {
			return err
		}
		x.bridges++
		p := gpuPath{numa: numa, bridge: x.bridges, board: -1}
		if err := x.addGPUs(path, bs.GPUs, p, cpus); err != nil {
			return err
		}
		for j := range bs.Switches {
			if err := x.pcieSwitch(with(path, "switches", j), &bs.Switches[j], p, cpus, 1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (x *expander) pcieSwitch(path []any, ss *switchSpec, parent gpuPath, cpus string, depth int) error {
	if depth > maxSwitchDepth {
		return x.errAt(path, "switches nested deeper than %d levels", maxSwitchDepth)
	}
	count, err := x.count(path, ss.Count)
	if err != nil {
		return err
	}
	for range count {
		if err := x.addElement(path); err != nil {
			return err
		}
		x.switches++
		p := parent
		p.switches = append(append(make([]int, 0, depth), parent.switches...), x.switches)
		p.board = -1
		if ss.Board {
			x.boards++
			p.board = x.boards
		}
		if err := x.addGPUs(path, ss.GPUs, p, cpus); err != nil {
			return err
		}
		p.board = -1
		for j := range ss.Switches {
			if err := x.pcieSwitch(with(path, "switches", j), &ss.Switches[j], p, cpus, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// nvlinks expands the nvlinks entries into an n*n count matrix.
func (x *expander) nvlinks(specs []nvlinkSpec, n int) ([]uint8, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	nv := make([]uint8, n*n)
	owner := make([]int32, n*n) // entry index + 1 that set the pair
	for i, s := range specs {
		path := []any{"nvlinks", i}
		set := func(a, b int) error {
			if a == b {
				return x.errAt(path, "GPU %d linked to itself: expected two different GPUs", a)
			}
			if o := owner[a*n+b]; o != 0 {
				return x.errAt(path, "GPUs %d and %d are already linked by the nvlinks entry at line %d",
					a, b, lineAt(x.root, []any{"nvlinks", int(o) - 1}))
			}
			owner[a*n+b], owner[b*n+a] = int32(i+1), int32(i+1)
			nv[a*n+b], nv[b*n+a] = uint8(s.Links), uint8(s.Links)
			return nil
		}
		if s.Links < 1 || s.Links > MaxNVLinks {
			return nil, x.errAt(with(path, "links"), "links %d: expected 1..%d NVLinks per pair", s.Links, MaxNVLinks)
		}
		repeat := 1
		if s.Repeat != nil {
			repeat = *s.Repeat
			if repeat < 1 || repeat > MaxGPUs {
				return nil, x.errAt(with(path, "repeat"), "repeat %d: expected 1..%d", repeat, MaxGPUs)
			}
		}
		if s.Stride < 0 || s.Stride > MaxGPUs || repeat > 1 && s.Stride == 0 {
			return nil, x.errAt(with(path, "stride"), "stride %d: expected 1..%d with repeat", s.Stride, MaxGPUs)
		}
		switch {
		case (s.Domain == "") == (s.Pairs == nil):
			return nil, x.errAt(path, "expected exactly one of domain (an NVSwitch domain) or pairs (point-to-point links)")
		case s.Domain != "":
			members, err := parseList(s.Domain, MaxGPUs-1)
			if err != nil {
				return nil, x.errAt(with(path, "domain"), "domain %q: expected a GPU list like 0-7 or 0-3,8-11: %v", s.Domain, err)
			}
			if len(members) < 2 {
				return nil, x.errAt(with(path, "domain"), "domain %q: expected at least 2 GPUs", s.Domain)
			}
			for r := range repeat {
				off := r * s.Stride
				if last := members[len(members)-1] + off; last >= n {
					return nil, x.errAt(with(path, "domain"), "domain GPU %d (repetition %d) out of range: the machine has GPUs 0..%d", last, r+1, n-1)
				}
				for a := range members {
					for b := a + 1; b < len(members); b++ {
						if err := set(members[a]+off, members[b]+off); err != nil {
							return nil, err
						}
					}
				}
			}
		default:
			if len(s.Pairs) == 0 {
				return nil, x.errAt(with(path, "pairs"), "expected a list of GPU pairs like [[0, 1], [2, 3]]")
			}
			for r := range repeat {
				off := r * s.Stride
				for k, p := range s.Pairs {
					pp := with(path, "pairs", k)
					if len(p) != 2 {
						return nil, x.errAt(pp, "pair %v: expected two GPU indices like [0, 1]", p)
					}
					a, b := p[0]+off, p[1]+off
					if p[0] < 0 || p[1] < 0 || a >= n || b >= n {
						return nil, x.errAt(pp, "pair [%d, %d] (repetition %d) out of range: the machine has GPUs 0..%d", a, b, r+1, n-1)
					}
					if err := set(a, b); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return nv, nil
}

// parseList parses a list like "0-7,16,18-19" into sorted distinct ints in
// 0..max.
func parseList(s string, max int) ([]int, error) {
	var out []int
	seen := make(map[int]bool)
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad item %q", item)
		}
		b := a
		if isRange {
			b, err = strconv.Atoi(strings.TrimSpace(hi))
			if err != nil || b < a {
				return nil, fmt.Errorf("bad range %q", item)
			}
		}
		if b > max {
			return nil, fmt.Errorf("%d is above %d", b, max)
		}
		for v := a; v <= b; v++ {
			if seen[v] {
				return nil, fmt.Errorf("%d listed twice", v)
			}
			seen[v] = true
			out = append(out, v)
		}
	}
	for i := 1; i < len(out); i++ {
		if out[i] < out[i-1] {
			return nil, fmt.Errorf("not in increasing order")
		}
	}
	return out, nil
}

// checkCPUList checks the syntax of a CPU list like "0-19,40-59" without
// expanding it.
func checkCPUList(s string) error {
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(item), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return fmt.Errorf("bad item %q", item)
		}
		if isRange {
			if b, err := strconv.Atoi(hi); err != nil || b < a {
				return fmt.Errorf("bad range %q", item)
			}
		}
	}
	return nil
}

func baseName(file string) string {
	b := file
	if i := strings.LastIndexAny(b, `/\`); i >= 0 {
		b = b[i+1:]
	}
	if i := strings.LastIndexByte(b, '.'); i > 0 {
		b = b[:i]
	}
	if b == "" {
		return "custom"
	}
	return b
}
