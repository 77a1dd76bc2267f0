// Command vgpu-churn compares allocation policies on a simulated stream of
// GPU requests arriving and leaving, on each preset machine.
//
// Usage:
//
//	vgpu-churn [-topology=all|NAME[,NAME…]|FILE] [-devices=N] [-requests=2000] [-seed=1] [-policies=lowest-index,best-connected]
//	vgpu-churn -replicas=N [-replica-share=0.5] [-policies=lowest-index,packed,distributed] [other flags as above]
//
// For every machine and policy it prints: requests placed and rejected,
// the mean score of the multi-GPU placements relative to the best set of
// the same size on an empty machine, and the share of multi-GPU requests
// that got a fully NVLink-connected set when one was free. All policies see
// the same seeded stream in one run.
//
// With -replicas=N every GPU is shared as N time-slicing replicas; a
// fraction -replica-share of the requests ask for replicas (1, 2 or 4) and
// are placed by the shared policies, the others ask for whole GPUs and take
// GPUs with nothing in use. It prints, per machine and shared policy: the
// whole-GPU and replica requests rejected, the mean number of GPUs with no
// replica in use, how many replica requests spanned several GPUs and the
// mean score of their GPUs relative to the best set of as many GPUs on the
// empty machine, and the relative score of the multi-GPU whole requests.
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
	policies := fs.String("policies", allocator.PolicyLowestIndex+","+allocator.PolicyBestConnected,
		"policies to compare, separated by commas (default with -replicas: "+sharedDefault+")")
	replicas := fs.Int("replicas", 0, "replicas per GPU; above 0, mix whole-GPU and replica requests and compare shared policies")
	share := fs.Float64("replica-share", 0.5, "with -replicas, the fraction of requests that ask for replicas, in (0, 1]")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *replicas < 0 || *replicas > topology.MaxReplicas {
		return fmt.Errorf("-replicas=%d: want 0..%d", *replicas, topology.MaxReplicas)
	}
	if !(*share > 0 && *share <= 1) {
		return fmt.Errorf("-replica-share=%v: want a fraction in (0, 1]", *share)
	}
	if *replicas > 0 {
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "policies" })
		if !set {
			*policies = sharedDefault
		}
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
	if *replicas > 0 {
		cfg := allocator.ChurnConfig{Seed: *seed, Requests: *requests, Replicas: *replicas, ReplicaShare: *share}
		return sharedTable(stdout, machines, strings.Split(*policies, ","), cfg)
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

// sharedDefault is the -policies default with -replicas.
const sharedDefault = allocator.SharedPolicyLowestIndex + "," + allocator.SharedPolicyPacked + "," + allocator.SharedPolicyDistributed

// sharedTable prints the comparison of shared policies (cfg.Replicas > 0).
func sharedTable(stdout io.Writer, machines []*topology.Machine, policies []string, cfg allocator.ChurnConfig) error {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "machine\tGPUs\treplicas\tpolicy\tplaced\twhole rejected\treplica rejected\twhole GPUs\tspread\treplica score\twhole-GPU score\t\n")
	pct := func(v float64, n int) string {
		if n == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.1f%%", 100*v)
	}
	for _, m := range machines {
		res, err := allocator.Churn(m, policies, cfg)
		if err != nil {
			return err
		}
		for _, r := range res {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d/%d\t%d/%d\t%.2f\t%d\t%s\t%s\t\n",
				m.Name(), m.Len(), cfg.Replicas, r.Policy, r.Placed,
				r.WholeRejected, r.WholeRequests, r.ReplicaRejected, r.ReplicaRequests,
				r.WholeGPUs, r.MultiReplica, pct(r.ReplicaRelScore, r.MultiReplica), pct(r.RelScore, r.MultiGPU))
		}
	}
	return tw.Flush()
}
