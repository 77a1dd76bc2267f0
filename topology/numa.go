package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// SysfsNodeDir is the directory, relative to the sysfs root, that lists the
// host's NUMA nodes as node0, node1, ….
const SysfsNodeDir = "devices/system/node"

// HostNUMANodes returns the sorted NUMA node ids of the host, read from the
// entries node<N> of SysfsNodeDir in fsys, which is rooted at the sysfs
// mount: the plugin passes os.DirFS("/sys") (or its -sysfs-root flag), tests
// an fstest.MapFS. A missing directory (no sysfs, or a kernel without NUMA)
// means the nodes are unknown: it returns nil and no error. Other read errors
// are returned.
func HostNUMANodes(fsys fs.FS) ([]int, error) {
	entries, err := fs.ReadDir(fsys, SysfsNodeDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read host NUMA nodes from %s: %w", SysfsNodeDir, err)
	}
	var ids []int
	for _, e := range entries {
		d, ok := strings.CutPrefix(e.Name(), "node")
		if !ok || d == "" || len(d) > 1 && d[0] == '0' {
			continue
		}
		id, err := strconv.Atoi(d)
		if err != nil || id < 0 {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// NUMAReport is the plugin's -numa-report mode: which NUMA node each device
// reports to the kubelet (in ListAndWatch), whose Topology Manager aligns
// devices with CPUs by it. The zero value is NUMAReportAuto, the default.
type NUMAReport uint8

// NUMA report modes.
const (
	// NUMAReportAuto reports a device's NUMA node only if the host has a
	// node of that id (read from sysfs): the kubelet refuses a pod whose
	// device sits on a node it does not know, so a machine modelled with
	// more nodes than the host reports none for the devices it cannot place.
	NUMAReportAuto NUMAReport = iota
	// NUMAReportAlways reports the topology's NUMA node whatever the host has.
	NUMAReportAlways
	// NUMAReportNever reports no NUMA node for any device.
	NUMAReportNever
)

var numaReportNames = [...]string{NUMAReportAuto: "auto", NUMAReportAlways: "always", NUMAReportNever: "never"}

// String returns "auto", "always" or "never" (the flag's values), or
// "NUMAReport(<n>)" for a value outside the defined constants.
func (r NUMAReport) String() string {
	if int(r) < len(numaReportNames) {
		return numaReportNames[r]
	}
	return "NUMAReport(" + strconv.Itoa(int(r)) + ")"
}

// ParseNUMAReport parses a -numa-report value: auto, always or never
// (case-sensitive). Anything else is an error wrapping ErrInvalidNUMAReport.
func ParseNUMAReport(s string) (NUMAReport, error) {
	for r, name := range numaReportNames {
		if s == name {
			return NUMAReport(r), nil
		}
	}
	return 0, fmt.Errorf("NUMA report mode %q: want auto, always or never: %w", s, ErrInvalidNUMAReport)
}

// ReportedNUMA is what ReportNUMA decided: the NUMA node each device
// reports, and what the caller should log. It is a plain value.
type ReportedNUMA struct {
	// Nodes holds, for GPU index i, the NUMA node reported for it, or -1
	// for none.
	Nodes []int
	// Host lists the host's NUMA nodes read from sysfs (auto only); nil if
	// not read, unknown (no node directory) or unreadable.
	Host []int
	// Dropped lists, sorted and without repeats, the topology's NUMA nodes
	// whose devices report none because the host lacks them (auto only).
	Dropped []int
	// HostErr says why the host's nodes could not be read (auto only); no
	// device then reports a NUMA node.
	HostErr error
}

// Node returns the NUMA node reported for GPU i, or -1 for none or an index
// out of range.
func (r ReportedNUMA) Node(i int) int {
	if i < 0 || i >= len(r.Nodes) {
		return -1
	}
	return r.Nodes[i]
}

// ReportNUMA decides the NUMA node each GPU of m reports under mode. In
// NUMAReportAuto it reads the host's nodes from sysfs (rooted at the sysfs
// mount, see HostNUMANodes) and keeps a GPU's node only if the host has it;
// a missing node directory means the host's nodes are unknown, so none is
// kept. sysfs is read only in auto mode and may then not be nil. GPUs
// whose NUMA node is unknown (-1) report none in every mode and are not
// counted as dropped. A mode outside the constants reports none, like
// NUMAReportNever. ReportNUMA never fails: a sysfs error is returned in
// HostErr for the caller to log, with every node dropped.
func (m *Machine) ReportNUMA(mode NUMAReport, sysfs fs.FS) ReportedNUMA {
	r := ReportedNUMA{Nodes: make([]int, m.Len())}
	if mode == NUMAReportAuto {
		r.Host, r.HostErr = HostNUMANodes(sysfs)
		if r.HostErr != nil {
			r.Host = nil
		}
	}
	for i := range r.Nodes {
		node := m.NUMA(i)
		switch {
		case mode == NUMAReportAlways || node < 0:
		case mode != NUMAReportAuto: // never, or a mode outside the constants
			node = -1
		case !slices.Contains(r.Host, node):
			r.Dropped = append(r.Dropped, node)
			node = -1
		}
		r.Nodes[i] = node
	}
	slices.Sort(r.Dropped)
	r.Dropped = slices.Compact(r.Dropped)
	return r
}
