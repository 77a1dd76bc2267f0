package admin

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// OutputFormats are the formats Print writes: the values of dump's and
// health list's -o.
var OutputFormats = []string{"table", "wide", "json", "yaml"}

// PrintOptions says how Print writes a snapshot.
type PrintOptions struct {
	// Format is one of OutputFormats; "" is table.
	Format string
	// NoHeaders leaves the header lines out of table and wide output.
	NoHeaders bool
}

// Print writes snap in the format o names: json and yaml print the
// document (the Snapshot's JSON, as documented); table and wide print the
// devices and, unless the snapshot is devices-only, the history and any
// damaged records, as aligned columns, control characters escaped. The
// allocations and the claims of the DRA driver are one history, newest
// first, with a KIND column when there are claims; without claims the
// section is the allocations' alone.
func Print(w io.Writer, snap Snapshot, o PrintOptions) error {
	switch o.Format {
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
	t := table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0), wide: o.Format == "wide", headers: !o.NoHeaders}
	devicesOnly := snap.Allocations == nil && snap.HealthEvents == nil && snap.ConfigEvents == nil
	if !devicesOnly && t.headers {
		fmt.Fprintf(t.tw, "source: %s %s\n\n", snap.Source.Type, cell(snap.Source.Path))
	}
	t.devices(snap.Devices)
	if !devicesOnly {
		if len(snap.Claims) > 0 {
			t.history(snap.Allocations, snap.Claims)
		} else {
			t.allocations(snap.Allocations)
		}
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
func (t table) devices(devs []Device) {
	shared := slices.ContainsFunc(devs, func(d Device) bool { return d.Replicas != nil || (d.GPU != "" && d.MIG == "") })
	hasMIG := slices.ContainsFunc(devs, func(d Device) bool { return d.MIGDevices != nil || d.MIG != "" })
	var cols []string
	if t.wide {
		cols = []string{"DEVICE", "INDEX", "UUID", "NUMA", "TOPOLOGY NUMA", "HEALTH", "REASON", "SINCE", "HOLDER", "ALLOCATION"}
	} else {
		cols = []string{"DEVICE", "NUMA", "HEALTH", "REASON", "SINCE", "HOLDER"}
	}
	if shared {
		cols = slices.Insert(cols, slices.Index(cols, "HOLDER"), "REPLICAS")
	}
	if hasMIG {
		cols = slices.Insert(cols, slices.Index(cols, "HOLDER"), "MIG")
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
				row[at+1+boolInt(hasMIG)] = holders(u.Holders, holder)
				if t.wide {
					row[at+2+boolInt(hasMIG)] = holders(u.Holders, allocation)
				}
			}
		}
		if hasMIG {
			at := slices.Index(cols, "MIG")
			row = slices.Insert(row, at, migUse(d))
			if u := d.MIGDevices; u != nil {
				row[at+1] = holders(u.Holders, holder)
				if t.wide {
					row[at+2] = holders(u.Holders, allocation)
				}
			}
		}
		t.row(row...)
	}
}

// migUse is, for a GPU with MIG devices, "in use/total" of them; for a
// MIG device its profile; "-" otherwise.
func migUse(d Device) string {
	switch {
	case d.MIGDevices != nil:
		return replicaUse(d.MIGDevices)
	case d.MIG != "":
		return cell(d.MIG)
	}
	return "-"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// replicaUse is "in use/total" for a shared GPU, "-" otherwise.
func replicaUse(u *ReplicaUse) string {
	if u == nil {
		return "-"
	}
	return strconv.Itoa(u.InUse) + "/" + strconv.Itoa(u.Total)
}

// holders joins the holders of a shared GPU's replicas, each as show
// renders it, or "-" when none.
func holders(hs []Holder, show func(*Holder) string) string {
	if len(hs) == 0 {
		return "-"
	}
	out := make([]string, len(hs))
	for i := range hs {
		out[i] = show(&hs[i])
	}
	return strings.Join(out, ",")
}

func (t table) allocations(allocs []Allocation) {
	t.header(false, "SEQ", "TIME", "DEVICES", "STATE", "POD", "HELD SINCE", "RELEASED")
	for _, a := range allocs {
		t.row(strconv.FormatUint(a.Seq, 10), fmtTime(a.Time), cell(strings.Join(a.DeviceIDs, ",")), cell(a.State),
			pod(a.Namespace, a.Pod, a.Container), fmtTime(a.HeldSince), fmtTime(a.ReleasedAt))
	}
	if len(allocs) == 0 {
		t.empty("allocations")
	}
}

// Kinds of the history rows of allocations and claims: the KIND column.
const (
	kindAllocation = "allocation"
	kindClaim      = "claim"
)

// history prints the allocations and the claims as one history, newest
// first (an allocation by when Allocate answered, a claim by when it was
// prepared; an allocation first on a tie), each list keeping its own
// order. A claim's NAME is its namespace/name, its POD the consumers it
// is reserved for, its RELEASED when it was unprepared; wide adds the
// claim's uid and its consumers' uids.
func (t table) history(allocs []Allocation, claims []Claim) {
	cols := []string{"SEQ", "KIND", "TIME", "DEVICES", "STATE", "NAME", "POD", "HELD SINCE", "RELEASED"}
	if t.wide {
		cols = []string{"SEQ", "KIND", "TIME", "DEVICES", "STATE", "NAME", "UID", "POD", "POD UIDS", "HELD SINCE", "RELEASED"}
	}
	t.header(false, cols...)
	i, j := 0, 0
	for i < len(allocs) || j < len(claims) {
		if j == len(claims) || i < len(allocs) && !claims[j].PreparedAt.After(allocs[i].Time) {
			a := allocs[i]
			row := []string{strconv.FormatUint(a.Seq, 10), kindAllocation, fmtTime(a.Time), cell(strings.Join(a.DeviceIDs, ",")), cell(a.State), "-",
				pod(a.Namespace, a.Pod, a.Container), fmtTime(a.HeldSince), fmtTime(a.ReleasedAt)}
			if t.wide {
				row = slices.Insert(row, 6, "-")
				row = slices.Insert(row, 8, "-")
			}
			t.row(row...)
			i++
			continue
		}
		c := claims[j]
		row := []string{strconv.FormatUint(c.Seq, 10), kindClaim, fmtTime(c.PreparedAt), cell(strings.Join(c.DeviceIDs, ",")), cell(c.State),
			cell(c.Namespace + "/" + c.Name), consumers(c), "-", fmtTime(c.UnpreparedAt)}
		if t.wide {
			row = slices.Insert(row, 6, cell(c.UID))
			row = slices.Insert(row, 8, consumerUIDs(c))
		}
		t.row(row...)
		j++
	}
}

// consumers lists the consumers of a claim: namespace/name of each pod,
// followed by " (resource)" for another kind; "-" when none.
func consumers(c Claim) string {
	if len(c.ReservedFor) == 0 {
		return "-"
	}
	out := make([]string, len(c.ReservedFor))
	for i, r := range c.ReservedFor {
		out[i] = cell(c.Namespace + "/" + r.Name)
		if r.Resource != store.ConsumerPods {
			out[i] += " (" + cell(r.Resource) + ")"
		}
	}
	return strings.Join(out, ",")
}

// consumerUIDs lists the uids of a claim's consumers; "-" when none.
func consumerUIDs(c Claim) string {
	if len(c.ReservedFor) == 0 {
		return "-"
	}
	out := make([]string, len(c.ReservedFor))
	for i, r := range c.ReservedFor {
		out[i] = cell(r.UID)
	}
	return strings.Join(out, ",")
}

func (t table) events(events []HealthEvent) {
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
func (t table) configEvents(events []ConfigEvent) {
	// The MIG column, only when a layout was ever in force.
	withMIG := slices.ContainsFunc(events, func(e ConfigEvent) bool { return e.MIGLayout != "" })
	mig := func(cells []string, e *ConfigEvent) []string {
		if !withMIG {
			return cells
		}
		v := "MIG"
		if e != nil {
			v = migLayout(*e)
		}
		return slices.Insert(cells, len(cells)-1, v)
	}
	if t.wide {
		t.header(false, mig([]string{"CONFIG EVENT", "TIME", "PROFILE", "PREVIOUS", "WHY", "DETAIL", "RESOURCE", "MACHINE", "DEVICES", "REPLICAS", "CHANGES"}, nil)...)
	} else {
		t.header(false, mig([]string{"CONFIG EVENT", "TIME", "PROFILE", "WHY", "MACHINE", "DEVICES", "CHANGES"}, nil)...)
	}
	for _, e := range events {
		seq, devices := strconv.FormatUint(e.Seq, 10), strconv.Itoa(e.Devices)
		if t.wide {
			t.row(mig([]string{seq, fmtTime(e.Time), cell(e.Profile), cell(e.PreviousProfile), cell(e.Why), cell(e.Detail), cell(e.ResourceName),
				cell(e.Machine), devices, replicas(e.Replicas), deviceChanges(e)}, &e)...)
		} else {
			t.row(mig([]string{seq, fmtTime(e.Time), cell(e.Profile), cell(e.Why), cell(e.Machine), devices, deviceChanges(e)}, &e)...)
		}
	}
	if len(events) == 0 {
		t.empty("config events")
	}
}

// migLayout is an event's MIG layout and strategy, "all-balanced (mixed)",
// or "-" without a layout.
func migLayout(e ConfigEvent) string {
	if e.MIGLayout == "" {
		return "-"
	}
	return cell(e.MIGLayout + " (" + e.MIGStrategy + ")")
}

// deviceChanges says which devices a configuration change added, removed
// and restored: "added fake-4,fake-5; removed fake-0", or "-".
func deviceChanges(e ConfigEvent) string {
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
func (t table) damaged(recs []DamagedRecord) {
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
func reportedNUMA(d Device) string {
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

func holder(h *Holder) string {
	switch {
	case h == nil:
		return "-"
	case h.Claim != "":
		return cell(h.Namespace+"/"+h.Claim) + " (claim)"
	case h.Pod == "":
		return fmt.Sprintf("#%d (%s)", h.Seq, cell(h.State))
	}
	return pod(h.Namespace, h.Pod, h.Container)
}

func allocation(h *Holder) string {
	switch {
	case h == nil:
		return "-"
	case h.Claim != "":
		return fmt.Sprintf("claim #%d %s", h.Seq, cell(h.State))
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
