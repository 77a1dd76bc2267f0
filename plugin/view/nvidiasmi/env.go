package nvidiasmi

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Environment variables read besides those of the status and topology
// packages.
const (
	// EnvIDs is plugin.EnvIDs: the container's device ids, joined by commas.
	EnvIDs = "VIRTUAL_GPU_IDS"
)

// machine is what the container may know of its GPUs: positions 0 … k-1.
type machine struct {
	gpus     []*gpu
	topology string               // VIRTUAL_GPU_TOPOLOGY, "" if unset
	links    *topology.LinkLabels // nil if unknown (linksErr says why)
	linksErr error
}

// readMachine builds the container's view from the environment and the
// status directory: the GPUs' status files, with the live values of the
// live file where it has them (status.ReadLive). Device ids are split on commas and trimmed; empty
// entries are skipped; the replicas of one GPU (fake-3::0, fake-3::1) are
// one GPU, at the position of its first entry, and so are the MIG devices
// of one GPU (fake-3-mig-3g40gb-0): the container sees their GPU with
// those MIG devices only, as a real one holding MIG devices does, and a
// GPU listed whole with all the MIG devices its status file has. VIRTUAL_GPU_UUIDS gives the
// UUIDs, one per entry of VIRTUAL_GPU_IDS or one per GPU; entries that are
// not UUIDs, or a list of another length, leave those UUIDs unknown.
// VIRTUAL_GPU_NUMA_NODES gives one node per GPU (-1 unknown); a list of
// another length is ignored and the status files' nodes are used.
// VIRTUAL_GPU_LINKS is decoded for the GPU count; if it cannot be, links is
// nil and linksErr says why.
func readMachine(env func(string) string) *machine {
	m := &machine{topology: env(topology.EnvTopology)}
	var entries []string // GPU id of each non-empty entry
	first := map[string]int{}
	migIDs := map[string][]string{} // GPU id -> the MIG device ids of it listed
	whole := map[string]bool{}      // GPU ids listed themselves
	for e := range strings.SplitSeq(env(EnvIDs), ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		gpuID := e
		switch {
		case topology.IsReplicaID(e):
			gpuID, _, _ = strings.Cut(e, topology.ReplicaSeparator)
		case topology.IsMIGID(e):
			i, ok := topology.GPUOf(e)
			if !ok {
				continue // no MIG device id of ours: nothing to show
			}
			gpuID = topology.GPUID(i)
			migIDs[gpuID] = append(migIDs[gpuID], e)
		default:
			whole[gpuID] = true
		}
		entries = append(entries, gpuID)
		if _, ok := first[gpuID]; !ok {
			first[gpuID] = len(m.gpus)
			m.gpus = append(m.gpus, &gpu{pos: len(m.gpus), id: gpuID, numa: -1})
		}
	}
	uuids := splitList(env(status.EnvUUIDs))
	switch len(uuids) {
	case len(m.gpus):
		for i, u := range uuids {
			m.gpus[i].uuid = u
		}
	case len(entries):
		for i, u := range uuids {
			if g := m.gpus[first[entries[i]]]; g.uuid == "" {
				g.uuid = u
			}
		}
	}
	for _, g := range m.gpus {
		if !status.ValidUUID(g.uuid) {
			g.uuid = ""
		}
	}
	nodes := splitList(env(topology.EnvNUMANodes))
	numaFromEnv := len(nodes) == len(m.gpus)
	if numaFromEnv {
		for i, s := range nodes {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 {
				m.gpus[i].numa = n
			}
		}
	}
	m.links, m.linksErr = topology.ParseLinks(env(topology.EnvLinks), len(m.gpus))
	if m.linksErr != nil {
		m.links = nil
		switch omitted := env(topology.EnvLinksOmitted); {
		case omitted != "":
			m.linksErr = fmt.Errorf("the links of these %d GPUs were too long to pass to the container (%s=%s)", len(m.gpus), topology.EnvLinksOmitted, omitted)
		case env(topology.EnvLinks) == "":
			m.linksErr = fmt.Errorf("%s is not set", topology.EnvLinks)
		}
	}
	dir := env(status.EnvStatusDir)
	if dir == "" {
		dir = status.DefaultDir
	}
	fsys := os.DirFS(dir)
	live, _ := status.ReadLive(fsys) // none, or unusable: the status files' values
	for _, g := range m.gpus {
		if g.uuid == "" {
			continue
		}
		st, err := status.Read(fsys, g.uuid)
		if err != nil || st.ID != g.id {
			continue // identity unknown: shown as N/A
		}
		live.Apply(st)
		g.setStatus(st)
		g.setMIG(st, whole[g.id], migIDs[g.id])
		if !numaFromEnv {
			g.numa = st.NUMANode
		}
	}
	return m
}

// splitList splits a comma-separated list, trimming spaces; "" is no entry.
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}
