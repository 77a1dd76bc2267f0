package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// NodeSummary is one simulated node as `dump --nodes` shows it: its
// profile and what its devices are doing. The JSON names are the
// simulator's admin API (GET /v1/nodes).
type NodeSummary struct {
	Node       string `json:"node"`
	Profile    string `json:"profile,omitempty"`
	KubeletAPI string `json:"kubeletAPI"`
	Topology   string `json:"topology,omitempty"`
	Resource   string `json:"resource,omitempty"`
	// GPUs counts the physical GPUs; Devices the devices advertised
	// (replicas and MIG devices included).
	GPUs    int `json:"gpus"`
	Devices int `json:"devices"`
	// Allocated, Free and Unhealthy split Devices: held by an active
	// allocation or a prepared claim; healthy and not held; unhealthy
	// and not held.
	Allocated int `json:"allocated"`
	Free      int `json:"free"`
	Unhealthy int `json:"unhealthy"`
	// Active counts the active allocations (device plugin) or prepared
	// claims (DRA).
	Active int `json:"active"`
}

// StoreSource is an open state file as a Source: the plugin's own store,
// or a state file opened read-only.
type StoreSource struct{ *store.Store }

var _ Source = StoreSource{}

// DamagedRecords lists the records the store quarantined (read-write) or
// skipped as damaged (read-only).
func (s StoreSource) DamagedRecords() ([]DamagedRecord, error) {
	damaged, err := s.Damaged()
	if err != nil {
		return nil, err
	}
	out := make([]DamagedRecord, len(damaged))
	for i, d := range damaged {
		out[i] = DamagedRecord{Bucket: d.Bucket, Key: d.Key, Reason: d.Reason}
	}
	return out, nil
}

// ForNode returns a client of simulated node name's admin API, served by
// the simulator on the same socket under /v1/nodes/{name}/.
func (c *Client) ForNode(name string) *Client {
	n := *c
	n.prefix = c.prefix + "/v1/nodes/" + url.PathEscape(name)
	return &n
}

// Nodes returns the simulator's summary of every simulated node.
func (c *Client) Nodes(ctx context.Context) ([]NodeSummary, error) {
	var out []NodeSummary
	err := c.do(ctx, http.MethodGet, "/v1/nodes", nil, nil, &out)
	return out, err
}

// PrintNodes writes the node summaries in the format o names: json and
// yaml the list, table and wide one line per node with the totals last.
func PrintNodes(w io.Writer, nodes []NodeSummary, o PrintOptions) error {
	switch o.Format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if nodes == nil {
			nodes = []NodeSummary{}
		}
		return enc.Encode(nodes)
	case "yaml":
		b, err := yaml.Marshal(nodes)
		if err != nil {
			return fmt.Errorf("yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	wide := o.Format == "wide"
	if !o.NoHeaders {
		if wide {
			fmt.Fprintln(tw, "NODE\tPROFILE\tAPI\tTOPOLOGY\tRESOURCE\tGPUS\tDEVICES\tALLOCATED\tFREE\tUNHEALTHY\tACTIVE")
		} else {
			fmt.Fprintln(tw, "NODE\tPROFILE\tAPI\tDEVICES\tALLOCATED\tFREE\tUNHEALTHY")
		}
	}
	var total NodeSummary
	for _, n := range nodes {
		profile := n.Profile
		if profile == "" {
			profile = "-"
		}
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", cell(n.Node), cell(profile), n.KubeletAPI, cell(n.Topology), cell(n.Resource),
				n.GPUs, n.Devices, n.Allocated, n.Free, n.Unhealthy, n.Active)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", cell(n.Node), cell(profile), n.KubeletAPI, n.Devices, n.Allocated, n.Free, n.Unhealthy)
		}
		total.GPUs += n.GPUs
		total.Devices += n.Devices
		total.Allocated += n.Allocated
		total.Free += n.Free
		total.Unhealthy += n.Unhealthy
		total.Active += n.Active
	}
	if len(nodes) == 0 && !o.NoHeaders {
		fmt.Fprintln(tw, "(no simulated nodes)")
	}
	if len(nodes) > 0 && !o.NoHeaders {
		label := fmt.Sprintf("total (%d nodes)", len(nodes))
		if wide {
			fmt.Fprintf(tw, "%s\t\t\t\t\t%d\t%d\t%d\t%d\t%d\t%d\n", label, total.GPUs, total.Devices, total.Allocated, total.Free, total.Unhealthy, total.Active)
		} else {
			fmt.Fprintf(tw, "%s\t\t\t%d\t%d\t%d\t%d\n", label, total.Devices, total.Allocated, total.Free, total.Unhealthy)
		}
	}
	return tw.Flush()
}
