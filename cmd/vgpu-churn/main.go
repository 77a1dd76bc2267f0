// Command vgpu-churn compares allocation policies on a simulated stream of
// GPU requests arriving and leaving, on each preset machine.
//
// Usage:
//
//	vgpu-churn [-topology=all|NAME[,NAME…]|FILE] [-devices=N] [-requests=2000] [-seed=1] [-policies=lowest-index,best-connected]
//
// For every machine and policy it prints: requests placed and rejected,
// the mean score of the multi-GPU placements relative to the best set of
// the same size on an empty machine, and the share of multi-GPU requests
// that got a fully NVLink-connected set when one was free. All policies see
// the same seeded stream in one run.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/unicore/virtual-gpu-device-plugin/allocator"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "vgpu-churn:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vgpu-churn", flag.ContinueOnError)
	topo := fs.String("topology", "all", `"all" (every preset and generic-8), preset names separated by commas, or a topology file`)
	devices := fs.Int("devices", 8, "GPU count of the generic layout used by -topology=all")
	requests := fs.Int("requests", 2000, "number of requests per machine")
	seed := fs.Uint64("seed", 1, "seed of the request stream")
	policies := fs.String("policies", allocator.PolicyLowestIndex+","+allocator.PolicyBestConnected, "policies to compare, separated by commas")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var machines []*topology.Machine
	specs := strings.Split(*topo, ",")
	if *topo == "all" {
		specs = topology.PresetNames()
	}
	for _, s := range specs {
		m, err := topology.Resolve(s, 0, false)
		if err != nil {
			return err
		}
		machines = append(machines, m)
	}
	if *topo == "all" {
		m, err := topology.Generic(*devices)
		if err != nil {
			return err
		}
		machines = append(machines, m)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "machine\tGPUs\tpolicy\tplaced\trejected\tmulti-GPU\trel. score\tNVLink-full\t\n")
	for _, m := range machines {
		res, err := allocator.Churn(m, strings.Split(*policies, ","), allocator.ChurnConfig{Seed: *seed, Requests: *requests})
		if err != nil {
			return err
		}
		for _, r := range res {
			share := "n/a"
			if s := r.NVLinkShare(); s >= 0 {
				share = fmt.Sprintf("%.1f%% (%d/%d)", 100*s, r.NVLinkGot, r.NVLinkPossible)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%.1f%%\t%s\t\n",
				m.Name(), m.Len(), r.Policy, r.Placed, r.Rejected, r.MultiGPU, 100*r.RelScore, share)
		}
	}
	return tw.Flush()
}
