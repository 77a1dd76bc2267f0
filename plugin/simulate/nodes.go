package simulate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// stats counts what the Simulator did, for its metrics.
type stats struct {
	started       atomic.Uint64 // node simulations started
	statusPatches atomic.Uint64 // Node status patches sent
	sliceWrites   atomic.Uint64 // ResourceSlice creates, updates and deletes sent
}

// Stats is what the Simulator did so far.
type Stats struct {
	// Nodes is the number of nodes simulated now.
	Nodes int
	// Started counts the node simulations started (restarts included).
	Started uint64
	// StatusPatches counts the Node status patches sent.
	StatusPatches uint64
	// SliceWrites counts the ResourceSlice creates, updates and deletes
	// sent.
	SliceWrites uint64
	// Synced reports whether the first lists of Nodes, Pods and claims
	// are in: until then no node is simulated.
	Synced bool
}

// Stats returns what the Simulator did so far.
func (s *Simulator) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Nodes: len(s.sims), Started: s.stats.started.Load(), StatusPatches: s.stats.statusPatches.Load(),
		SliceWrites: s.stats.sliceWrites.Load(), Synced: s.synced}
}

// Nodes returns a summary of every simulated node, sorted by name.
func (s *Simulator) Nodes() ([]admin.NodeSummary, error) {
	s.mu.Lock()
	sims := make([]*node, 0, len(s.sims))
	for _, n := range s.sims {
		sims = append(sims, n)
	}
	s.mu.Unlock()
	slices.SortFunc(sims, func(a, b *node) int { return strings.Compare(a.name, b.name) })
	out := make([]admin.NodeSummary, 0, len(sims))
	for _, n := range sims {
		sum, err := n.summary()
		if err != nil {
			return nil, fmt.Errorf("node %q: %w", n.name, err)
		}
		out = append(out, sum)
	}
	return out, nil
}

// summary is the node's line of `dump --nodes`.
func (n *node) summary() (admin.NodeSummary, error) {
	set, devs := n.tgt.current()
	sum := admin.NodeSummary{Node: n.name, KubeletAPI: string(n.api)}
	if set == nil {
		return sum, nil
	}
	sum.Profile, sum.Topology, sum.Resource = set.Config.Profile, set.Config.GPUs.Machine.Name(), set.Resource()
	sum.GPUs = set.GPUs.Machine().Len()
	held := map[string]bool{}
	if n.api == "dra" {
		claims, err := n.st.PreparedClaims()
		if err != nil {
			return sum, err
		}
		held = store.ClaimedDevices(claims)
		sum.Active = len(claims)
	} else {
		active, err := n.st.Allocations(store.AllocationFilter{Active: true})
		if err != nil {
			return sum, err
		}
		for _, a := range active {
			for _, id := range a.DeviceIDs {
				held[id] = true
			}
		}
		sum.Active = len(active)
	}
	sum.Devices = len(devs)
	for _, d := range devs {
		switch {
		case held[d.ID]:
			sum.Allocated++
		case !d.Healthy:
			sum.Unhealthy++
		default:
			sum.Free++
		}
	}
	return sum, nil
}

// Handler is the Simulator's admin API: GET /v1/nodes (the summary), and
// each simulated node's own admin API under /v1/nodes/{node}/ (its
// snapshot, its devices' health), as a plugin serves it.
func (s *Simulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, _ *http.Request) {
		sums, err := s.Nodes()
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, sums)
	})
	mux.HandleFunc("/v1/nodes/{node}/", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("node")
		s.mu.Lock()
		n := s.sims[name]
		names := make([]string, 0, len(s.sims))
		if n == nil {
			for k := range s.sims {
				names = append(names, k)
			}
		}
		s.mu.Unlock()
		if n == nil {
			writeJSON(w, http.StatusNotFound, map[string]any{"error": unknownNode(name, names), "notSimulated": true})
			return
		}
		http.StripPrefix("/v1/nodes/"+name, n.adm).ServeHTTP(w, r)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("%s %s: not found: the simulator serves /v1/nodes and /v1/nodes/{node}/…", r.Method, r.URL.Path)})
	})
	return mux
}

// unknownNode says that name is not simulated, listing a few that are.
func unknownNode(name string, names []string) string {
	slices.Sort(names)
	const show = 5
	list := strings.Join(names[:min(show, len(names))], ", ")
	if len(names) > show {
		list += fmt.Sprintf(", … (%d in all)", len(names))
	}
	if list == "" {
		list = "none"
	}
	return fmt.Sprintf("node %q is not simulated (simulated: %s)", name, list)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
