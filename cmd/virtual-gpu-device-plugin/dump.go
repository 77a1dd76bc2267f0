package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// dumpTimeout bounds every wait of dump and health: the admin call, the
// read-only lock, but for a snapshot's reading (snapshotTimeout).
const dumpTimeout = 2 * time.Second

// snapshotTimeout bounds dump's admin call: the plugin reads and sends
// the whole history, which takes seconds at the -history-max-bytes
// default of 64 MiB, and reads one snapshot at a time.
const snapshotTimeout = 30 * time.Second

// outputFormats are the values of -o.
var outputFormats = []string{"table", "wide", "json", "yaml"}

// inspectFlags are the flags shared by dump and health.
type inspectFlags struct {
	statePath   string
	adminSocket string
	output      string
	noHeaders   bool
}

// inspectEnvTwins are the flags of dump and health with an environment
// twin: those the serve job shares, so that `kubectl exec … dump` in the
// DaemonSet finds the same files.
var inspectEnvTwins = map[string]bool{"state": true, "admin-socket": true}

func (f *inspectFlags) register(fset *flag.FlagSet) {
	fset.StringVar(&f.statePath, "state", options.DefaultStatePath, "state `file`, read when no plugin answers on the admin socket")
	fset.StringVar(&f.adminSocket, "admin-socket", "", "the running plugin's admin socket `path` (default: admin.sock next to -state)")
	fset.StringVar(&f.output, "o", "table", "output `format`: "+strings.Join(outputFormats, ", "))
	fset.StringVar(&f.output, "output", "table", "output `format` (same as -o)")
	fset.BoolVar(&f.noHeaders, "no-headers", false, "table and wide output: print no header lines")
}

func (f *inspectFlags) validate() error {
	if !slices.Contains(outputFormats, f.output) {
		return usagef("invalid -o=%q: must be one of %s", f.output, strings.Join(outputFormats, ", "))
	}
	if !filepath.IsAbs(f.statePath) {
		return usagef("invalid -state=%q: must be an absolute path", f.statePath)
	}
	p, err := options.AdminSocketPath(f.adminSocket, f.statePath)
	if err != nil {
		return usagef("invalid -admin-socket=%q: %w", f.adminSocket, err)
	}
	f.adminSocket = p
	return nil
}

// parseSubcommand parses args of a subcommand whose flags may come before,
// between or after its positional arguments, filling the flags of
// inspectEnvTwins from their environment twins, and returns the positional
// arguments.
func parseSubcommand(fset *flag.FlagSet, args []string, getenv func(string) string) ([]string, error) {
	fset.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fset.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %w", fset.Name(), err)
		}
		if fset.NArg() == 0 {
			break
		}
		pos = append(pos, fset.Arg(0))
		args = fset.Args()[1:]
	}
	set := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fset.VisitAll(func(f *flag.Flag) {
		if v := getenv(options.EnvName(f.Name)); v != "" && inspectEnvTwins[f.Name] && !set[f.Name] && envErr == nil {
			if err := fset.Set(f.Name, v); err != nil {
				envErr = usagef("invalid %s=%q: %w", options.EnvName(f.Name), v, err)
			}
		}
	})
	return pos, envErr
}

// printUsage prints a subcommand's usage to w.
func printUsage(fset *flag.FlagSet, w io.Writer, synopsis, about string) {
	fmt.Fprintln(w, "Usage: virtual-gpu-device-plugin "+synopsis)
	fmt.Fprintln(w, "\n"+about)
	fmt.Fprintln(w, "\nFlags (-state and -admin-socket have the environment twins VGPU_STATE and VGPU_ADMIN_SOCKET):")
	fset.SetOutput(w)
	fset.PrintDefaults()
}

// readSnapshot asks the running plugin for the snapshot q selects or, when
// no plugin answers, reads it from the state file opened read-only.
func readSnapshot(ctx context.Context, f inspectFlags, q admin.Query) (admin.Snapshot, error) {
	timeout := dumpTimeout
	if !q.DevicesOnly {
		timeout = snapshotTimeout
	}
	snap, err := admin.NewClient(f.adminSocket, timeout).Snapshot(ctx, q)
	switch {
	case err == nil:
		return snap, nil
	case errors.Is(err, admin.ErrPermission):
		return snap, fmt.Errorf("%w; run as root or as the socket's owner", err)
	case !errors.Is(err, admin.ErrNoPlugin):
		return snap, err
	}
	st, err := store.Open(f.statePath, store.Options{ReadOnly: true, Timeout: dumpTimeout})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return snap, fmt.Errorf("no plugin answers on %s and there is no state file at %s", f.adminSocket, f.statePath)
	case errors.Is(err, store.ErrLocked):
		return snap, fmt.Errorf("no plugin answers on %s, and %s is held by another process (a plugin with another -admin-socket?): %w", f.adminSocket, f.statePath, err)
	case err != nil:
		return snap, err
	}
	defer st.Close()
	snap, err = admin.Read(stateSource{st}, q, nil)
	snap.Source = admin.SourceInfo{Type: admin.SourceFile, Path: f.statePath}
	return snap, err
}

// stateSource is the state file as the admin API reads it.
type stateSource struct{ *store.Store }

var _ admin.Source = stateSource{}

// DamagedRecords lists the records the store quarantined (read-write) or
// skipped as damaged (read-only).
func (s stateSource) DamagedRecords() ([]admin.DamagedRecord, error) {
	damaged, err := s.Damaged()
	if err != nil {
		return nil, err
	}
	out := make([]admin.DamagedRecord, len(damaged))
	for i, d := range damaged {
		out[i] = admin.DamagedRecord{Bucket: d.Bucket, Key: d.Key, Reason: d.Reason}
	}
	return out, nil
}

const dumpSynopsis = "dump [-o table|wide|json|yaml] [--no-headers] [--device ID] [--since TIME|DURATION] [--limit N] [--active]"

// given reports whether the flag name was set on the command line.
func given(fset *flag.FlagSet, name string) bool {
	set := false
	fset.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// dump prints the devices and the history.
func dump(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	var (
		f      inspectFlags
		device string
		since  string
		limit  int
		active bool
	)
	fset := flag.NewFlagSet("dump", flag.ContinueOnError)
	f.register(fset)
	fset.StringVar(&device, "device", "", "only history of this device `id`")
	fset.StringVar(&since, "since", "", "only history since this RFC 3339 `time` or this long ago (e.g. 1h)")
	fset.IntVar(&limit, "limit", 0, "at most this many history records of each kind, newest first; 0 means all")
	fset.BoolVar(&active, "active", false, "only allocations that still hold their devices")
	pos, err := parseSubcommand(fset, args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(fset, stdout, dumpSynopsis, "Shows the devices (health, NUMA node, holder), the allocation history, the health events and the\n"+
			"configuration changes, newest first, from the running plugin or, when none runs, from the state file (read-only).")
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("dump: unexpected argument %q", pos[0])
	}
	if err := f.validate(); err != nil {
		return err
	}
	if limit < 0 {
		return usagef("invalid --limit=%d: must be 0 (all) or positive", limit)
	}
	if device == "" && given(fset, "device") {
		return usagef("invalid --device: empty: want a device id (leave --device out for every device)")
	}
	sinceT, err := parseSince(since, time.Now())
	if err != nil {
		return err
	}
	snap, err := readSnapshot(ctx, f, admin.Query{DeviceID: device, Since: sinceT, Limit: limit, Active: active})
	if err != nil {
		return err
	}
	return writeSnapshot(stdout, snap, f)
}

// parseSince reads an RFC 3339 time or a duration back from now.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("invalid --since=%q: want an RFC 3339 time (2026-11-30T08:00:00Z) or a duration (90m)", topology.Clip(v))
}

// writeSnapshot prints snap in the output format of f: json and yaml print
// the document; table and wide print the devices and, unless the snapshot
// is devices-only, the history and any damaged records.
func writeSnapshot(w io.Writer, snap admin.Snapshot, f inspectFlags) error {
	switch f.output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(snap)
	case "yaml":
		b, err := yaml.Marshal(snap)
		if err != nil {
			return fmt.Errorf("yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	t := table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0), wide: f.output == "wide", headers: !f.noHeaders}
	devicesOnly := snap.Allocations == nil && snap.HealthEvents == nil && snap.ConfigEvents == nil
	if !devicesOnly && t.headers {
		fmt.Fprintf(t.tw, "source: %s %s\n\n", snap.Source.Type, cell(snap.Source.Path))
	}
	t.devices(snap.Devices)
	if !devicesOnly {
		t.allocations(snap.Allocations)
		t.events(snap.HealthEvents)
		t.configEvents(snap.ConfigEvents)
		t.damaged(snap.DamagedRecords)
	}
	return t.tw.Flush()
}

// table prints the sections of a snapshot as aligned columns.
type table struct {
	tw      *tabwriter.Writer
	wide    bool
	headers bool
}

// row prints one line of cells.
func (t table) row(cells ...string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// header prints a header line, after a blank line unless it is the first
// section, or nothing with --no-headers.
func (t table) header(first bool, cells ...string) {
	if !t.headers {
		return
	}
	if !first {
		fmt.Fprintln(t.tw)
	}
	t.row(cells...)
}

// empty says a section has no rows, unless headers are off.
func (t table) empty(what string) {
	if t.headers {
		fmt.Fprintf(t.tw, "(no %s)\n", what)
	}
}

// devices prints the devices. When GPUs are shared, a REPLICAS column
// says per shared GPU how many of its replicas are in use out of its
// total, and its HOLDER column lists their holders; the replicas
// themselves are rows of the wide output only.
func (t table) devices(devs []admin.Device) {
	shared := slices.ContainsFunc(devs, func(d admin.Device) bool { return d.Replicas != nil || d.GPU != "" })
	var cols []string
	if t.wide {
		cols = []string{"DEVICE", "INDEX", "UUID", "NUMA", "TOPOLOGY NUMA", "HEALTH", "REASON", "SINCE", "HOLDER", "ALLOCATION"}
	} else {
		cols = []string{"DEVICE", "NUMA", "HEALTH", "REASON", "SINCE", "HOLDER"}
	}
	if shared {
		cols = slices.Insert(cols, slices.Index(cols, "HOLDER"), "REPLICAS")
	}
	t.header(true, cols...)
	for _, d := range devs {
		if d.GPU != "" && !t.wide {
			continue
		}
		health := healthWord(d.Healthy)
		if d.Removed {
			health = "Removed"
		}
		var row []string
		if t.wide {
			row = []string{cell(d.ID), strconv.Itoa(d.Index), cell(d.UUID), reportedNUMA(d), numa(d.NUMANode), health, cell(d.Reason), fmtTime(d.Since), holder(d.Holder), allocation(d.Holder)}
		} else {
			row = []string{cell(d.ID), reportedNUMA(d), health, cell(d.Reason), fmtTime(d.Since), holder(d.Holder)}
		}
		if shared {
			at := slices.Index(cols, "REPLICAS")
			row = slices.Insert(row, at, replicaUse(d.Replicas))
			if u := d.Replicas; u != nil {
				row[at+1] = holders(u.Holders, holder)
				if t.wide {
					row[at+2] = holders(u.Holders, allocation)
				}
			}
		}
		t.row(row...)
	}
}

// replicaUse is "in use/total" for a shared GPU, "-" otherwise.
func replicaUse(u *admin.ReplicaUse) string {
	if u == nil {
		return "-"
	}
	return strconv.Itoa(u.InUse) + "/" + strconv.Itoa(u.Total)
}

// holders joins the holders of a shared GPU's replicas, each as show
// renders it, or "-" when none.
func holders(hs []admin.Holder, show func(*admin.Holder) string) string {
	if len(hs) == 0 {
		return "-"
	}
	out := make([]string, len(hs))
	for i := range hs {
		out[i] = show(&hs[i])
	}
	return strings.Join(out, ",")
}

func (t table) allocations(allocs []admin.Allocation) {
	t.header(false, "SEQ", "TIME", "DEVICES", "STATE", "POD", "HELD SINCE", "RELEASED")
	for _, a := range allocs {
		t.row(strconv.FormatUint(a.Seq, 10), fmtTime(a.Time), cell(strings.Join(a.DeviceIDs, ",")), cell(a.State),
			pod(a.Namespace, a.Pod, a.Container), fmtTime(a.HeldSince), fmtTime(a.ReleasedAt))
	}
	if len(allocs) == 0 {
		t.empty("allocations")
	}
}

func (t table) events(events []admin.HealthEvent) {
	t.header(false, "EVENT", "TIME", "DEVICE", "HEALTH", "CAUSE", "REASON")
	for _, e := range events {
		t.row(strconv.FormatUint(e.Seq, 10), fmtTime(e.Time), cell(e.DeviceID), healthWord(e.Healthy), cell(e.Cause), cell(e.Reason))
	}
	if len(events) == 0 {
		t.empty("health events")
	}
}

// configEvents prints the configuration changes; wide adds the profile
// before, the detail, the resource name and the replicas.
func (t table) configEvents(events []admin.ConfigEvent) {
	if t.wide {
		t.header(false, "CONFIG EVENT", "TIME", "PROFILE", "PREVIOUS", "WHY", "DETAIL", "RESOURCE", "MACHINE", "DEVICES", "REPLICAS", "CHANGES")
	} else {
		t.header(false, "CONFIG EVENT", "TIME", "PROFILE", "WHY", "MACHINE", "DEVICES", "CHANGES")
	}
	for _, e := range events {
		seq, devices := strconv.FormatUint(e.Seq, 10), strconv.Itoa(e.Devices)
		if t.wide {
			t.row(seq, fmtTime(e.Time), cell(e.Profile), cell(e.PreviousProfile), cell(e.Why), cell(e.Detail), cell(e.ResourceName),
				cell(e.Machine), devices, replicas(e.Replicas), deviceChanges(e))
		} else {
			t.row(seq, fmtTime(e.Time), cell(e.Profile), cell(e.Why), cell(e.Machine), devices, deviceChanges(e))
		}
	}
	if len(events) == 0 {
		t.empty("config events")
	}
}

// deviceChanges says which devices a configuration change added, removed
// and restored: "added fake-4,fake-5; removed fake-0", or "-".
func deviceChanges(e admin.ConfigEvent) string {
	var parts []string
	for _, c := range []struct {
		what string
		ids  []string
	}{{"added", e.Added}, {"removed", e.Removed}, {"restored", e.Restored}} {
		if len(c.ids) > 0 {
			parts = append(parts, c.what+" "+compactIDs(c.ids))
		}
	}
	return cell(strings.Join(parts, "; "))
}

// compactIDs joins ids with commas in device order (GPU, then replica
// number; the store lists them by id, where fake-0::10 comes before
// fake-0::2), a run of replicas of one GPU numbered one after the other
// written as one range: fake-0::0-3 for fake-0::0, fake-0::1, fake-0::2
// and fake-0::3.
func compactIDs(ids []string) string {
	ids = slices.Clone(ids)
	slices.SortStableFunc(ids, compareDeviceIDs)
	var b strings.Builder
	for i := 0; i < len(ids); {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(ids[i])
		gpu, first, err := topology.ParseReplicaID(ids[i])
		j := i + 1
		for err == nil && j < len(ids) {
			g, r, err := topology.ParseReplicaID(ids[j])
			if err != nil || g != gpu || r != first+(j-i) {
				break
			}
			j++
		}
		if j-i > 1 {
			b.WriteString("-" + strconv.Itoa(first+j-i-1))
		}
		i = j
	}
	return b.String()
}

// compareDeviceIDs orders GPU ids fake-<i> and replica ids fake-<i>::<j>
// by GPU, a GPU before its replicas, replicas by number; other ids after
// them, as they are.
func compareDeviceIDs(a, b string) int {
	ka, oka := deviceKey(a)
	kb, okb := deviceKey(b)
	switch {
	case oka && okb:
		return cmp.Or(cmp.Compare(ka[0], kb[0]), cmp.Compare(ka[1], kb[1]))
	case oka:
		return -1
	case okb:
		return 1
	}
	return 0
}

// deviceKey returns (GPU index, replica number + 1, or 0 for a GPU) of a
// device id of the machine's forms.
func deviceKey(id string) ([2]int, bool) {
	if g, r, err := topology.ParseReplicaID(id); err == nil {
		return [2]int{g, r + 1}, true
	}
	if n, ok := strings.CutPrefix(id, topology.IDPrefix); ok {
		if g, err := strconv.Atoi(n); err == nil && g >= 0 {
			return [2]int{g, 0}, true
		}
	}
	return [2]int{}, false
}

func replicas(n int) string {
	if n <= 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// damaged prints the damaged records, only when there are some.
func (t table) damaged(recs []admin.DamagedRecord) {
	if len(recs) == 0 {
		return
	}
	t.header(false, "DAMAGED RECORD", "BUCKET", "REASON")
	for _, r := range recs {
		t.row(cell(r.Key), cell(r.Bucket), cell(r.Reason))
	}
}

// reportedNUMA is the NUMA node the kubelet was told: "-" none (or a
// removed device), "unknown" when no plugin said (read from the file).
func reportedNUMA(d admin.Device) string {
	switch {
	case d.Removed:
		return "-"
	case d.ReportedNUMANode == nil:
		return "unknown"
	}
	return numa(*d.ReportedNUMANode)
}

func numa(n int) string {
	if n < 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func holder(h *admin.Holder) string {
	switch {
	case h == nil:
		return "-"
	case h.Pod == "":
		return fmt.Sprintf("#%d (%s)", h.Seq, cell(h.State))
	}
	return pod(h.Namespace, h.Pod, h.Container)
}

func allocation(h *admin.Holder) string {
	if h == nil {
		return "-"
	}
	return fmt.Sprintf("#%d %s", h.Seq, cell(h.State))
}

func pod(namespace, name, container string) string {
	if name == "" {
		return "-"
	}
	return cell(namespace + "/" + name + "/" + container)
}

func healthWord(healthy bool) string {
	if healthy {
		return "Healthy"
	}
	return "Unhealthy"
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// cell makes s safe for one table cell: "" is "-"; tabs, control and other
// non-printable characters and invalid UTF-8 are escaped as in a Go string
// literal (\n, \t, \x1b, \u202e), so a stored string can neither break the
// columns nor reach the terminal as a control sequence.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r != '\t' && unicode.IsPrint(r):
			b.WriteString(s[:n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
	return b.String()
}
