package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// dumpTimeout bounds every wait of dump and health: the admin call, the
// read-only lock.
const dumpTimeout = 2 * time.Second

// inspectFlags are the flags shared by dump and health.
type inspectFlags struct {
	statePath   string
	adminSocket string
	output      string
}

func (f *inspectFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.statePath, "state", defaultStatePath, "state file, read when no plugin answers on the admin socket")
	fs.StringVar(&f.adminSocket, "admin-socket", "", "the running plugin's admin socket (default: admin.sock next to -state)")
	fs.StringVar(&f.output, "o", "table", "output: table or json")
}

func (f *inspectFlags) validate() error {
	if f.output != "table" && f.output != "json" {
		return usagef("invalid -o=%q: must be table or json", f.output)
	}
	if !filepath.IsAbs(f.statePath) {
		return usagef("invalid -state=%q: must be an absolute path", f.statePath)
	}
	var err error
	f.adminSocket, err = adminSocketPath(f.adminSocket, f.statePath)
	return err
}

// parseSubcommand parses args of a subcommand whose flags may come before,
// between or after its positional arguments, filling flags from their
// environment twins, and returns the positional arguments.
func parseSubcommand(fs *flag.FlagSet, args []string, getenv func(string) string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && !set[f.Name] && envErr == nil && len(f.Name) > 1 {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = usagef("invalid %s=%q: %v", envName(f.Name), v, err)
			}
		}
	})
	return pos, envErr
}

// printUsage prints a subcommand's usage to w.
func printUsage(fs *flag.FlagSet, w io.Writer, synopsis string) {
	fmt.Fprintln(w, "Usage: virtual-gpu-device-plugin "+synopsis)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// openSource returns the running plugin's admin API if it answers, else the
// state file opened read-only; close releases it.
func openSource(f inspectFlags) (src admin.Source, origin string, close func(), err error) {
	client := admin.NewClient(f.adminSocket, dumpTimeout)
	_, err = client.Devices()
	if err == nil {
		return client, "plugin " + f.adminSocket, func() {}, nil
	}
	if !errors.Is(err, admin.ErrNoPlugin) {
		return nil, "", nil, err
	}
	st, serr := store.Open(f.statePath, store.Options{ReadOnly: true, Timeout: dumpTimeout})
	switch {
	case serr == nil:
		return st, "file " + f.statePath, func() { st.Close() }, nil
	case errors.Is(serr, fs.ErrNotExist):
		return nil, "", nil, fmt.Errorf("no plugin answers on %s and there is no state file at %s", f.adminSocket, f.statePath)
	case errors.Is(serr, store.ErrLocked):
		return nil, "", nil, fmt.Errorf("no plugin answers on %s, and %s is held by another process (a plugin with another -admin-socket?): %w", f.adminSocket, f.statePath, serr)
	default:
		return nil, "", nil, serr
	}
}

// dumpDoc is the JSON shape of dump -o json: stable; fields are only added.
type dumpDoc struct {
	// Source is "plugin <admin socket>" or "file <state file>".
	Source      string              `json:"source"`
	Devices     []dumpDevice        `json:"devices"`
	Allocations []store.Allocation  `json:"allocations"`
	Events      []store.HealthEvent `json:"health_events"`
}

// dumpDevice is a stored device with its current holder, where known.
type dumpDevice struct {
	store.Device
	// Holder is the newest active allocation of the device: its sequence
	// number, and namespace/pod/container once the lifecycle tracker knows.
	Holder *holder `json:"holder,omitempty"`
}

type holder struct {
	Seq       uint64 `json:"seq"`
	State     string `json:"state"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
}

// dump prints the devices and the history.
func dump(args []string, stdout io.Writer, getenv func(string) string) error {
	var (
		f      inspectFlags
		device string
		since  string
		limit  int
		active bool
	)
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	f.register(fs)
	fs.StringVar(&device, "device", "", "only history of this device")
	fs.StringVar(&since, "since", "", "only history since this RFC 3339 time or this long ago (e.g. 1h)")
	fs.IntVar(&limit, "limit", 0, "at most this many history records of each kind, newest first; 0 means all")
	fs.BoolVar(&active, "active", false, "only allocations that still hold their devices")
	pos, err := parseSubcommand(fs, args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(fs, stdout, "dump [-o table|json] [--device ID] [--since TIME|DURATION] [--limit N] [--active]")
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
	sinceT, err := parseSince(since, time.Now())
	if err != nil {
		return err
	}
	src, origin, closeSrc, err := openSource(f)
	if err != nil {
		return err
	}
	defer closeSrc()
	devs, err := readDevices(src)
	if err != nil {
		return err
	}
	if device != "" && !hasDevice(devs, device) {
		return fmt.Errorf("unknown device %q (devices: %s)", device, deviceList(devs))
	}
	allocs, err := src.Allocations(store.AllocationFilter{DeviceID: device, Since: sinceT, Limit: limit, Active: active})
	if err != nil {
		return err
	}
	events, err := src.HealthEvents(store.EventFilter{DeviceID: device, Since: sinceT, Limit: limit})
	if err != nil {
		return err
	}
	doc := dumpDoc{Source: origin, Devices: devs, Allocations: allocs, Events: events}
	if doc.Allocations == nil {
		doc.Allocations = []store.Allocation{}
	}
	if doc.Events == nil {
		doc.Events = []store.HealthEvent{}
	}
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	return writeDumpTable(stdout, doc)
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
	return time.Time{}, usagef("invalid --since=%q: want an RFC 3339 time (2026-11-30T08:00:00Z) or a duration (90m)", v)
}

// readDevices reads the devices with their current holders.
func readDevices(src admin.Source) ([]dumpDevice, error) {
	devs, err := src.Devices()
	if err != nil {
		return nil, err
	}
	active, err := src.Allocations(store.AllocationFilter{Active: true})
	if err != nil {
		return nil, err
	}
	return withHolders(devs, active), nil
}

func hasDevice(devs []dumpDevice, id string) bool {
	return slices.ContainsFunc(devs, func(d dumpDevice) bool { return d.ID == id })
}

func deviceList(devs []dumpDevice) string {
	ids := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.ID
	}
	return strings.Join(ids, ", ")
}

// withHolders pairs each device with its newest active allocation.
func withHolders(devs []store.Device, active []store.Allocation) []dumpDevice {
	out := make([]dumpDevice, len(devs))
	for i, d := range devs {
		out[i].Device = d
		for _, a := range active { // newest first
			if slices.Contains(a.DeviceIDs, d.ID) {
				out[i].Holder = &holder{Seq: a.Seq, State: a.State, Namespace: a.Namespace, Pod: a.Pod, Container: a.Container}
				break
			}
		}
	}
	return out
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (h *holder) String() string {
	if h == nil {
		return "-"
	}
	if h.Pod == "" {
		return fmt.Sprintf("#%d (%s)", h.Seq, h.State)
	}
	return fmt.Sprintf("%s/%s/%s", h.Namespace, h.Pod, h.Container)
}

func podOf(a store.Allocation) string {
	if a.Pod == "" {
		return "-"
	}
	return a.Namespace + "/" + a.Pod + "/" + a.Container
}

func healthWord(healthy bool) string {
	if healthy {
		return "Healthy"
	}
	return "Unhealthy"
}

// writeDumpTable prints doc as aligned tables.
func writeDumpTable(w io.Writer, doc dumpDoc) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "source: %s\n\n", doc.Source)
	writeDevices(tw, doc.Devices)
	fmt.Fprintf(tw, "\nSEQ\tTIME\tDEVICES\tSTATE\tPOD\tHELD SINCE\tRELEASED\n")
	for _, a := range doc.Allocations {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Seq, fmtTime(a.Time), strings.Join(a.DeviceIDs, ","), a.State, podOf(a), fmtTime(a.HeldSince), fmtTime(a.ReleasedAt))
	}
	if len(doc.Allocations) == 0 {
		fmt.Fprintln(tw, "(no allocations)")
	}
	fmt.Fprintf(tw, "\nEVENT\tTIME\tDEVICE\tHEALTH\tCAUSE\tREASON\n")
	for _, e := range doc.Events {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, fmtTime(e.Time), e.DeviceID, healthWord(e.Healthy), orDash(e.Cause), orDash(e.Reason))
	}
	if len(doc.Events) == 0 {
		fmt.Fprintln(tw, "(no health events)")
	}
	return tw.Flush()
}

// writeDevices prints the device table.
func writeDevices(tw io.Writer, devs []dumpDevice) {
	fmt.Fprintf(tw, "DEVICE\tNUMA\tHEALTH\tREASON\tSINCE\tHOLDER\n")
	for _, d := range devs {
		h := healthWord(d.Healthy)
		if d.Removed {
			h = "Removed"
		}
		numa := "-"
		if d.NUMA >= 0 {
			numa = fmt.Sprint(d.NUMA)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, numa, h, orDash(d.Reason), fmtTime(d.Since), d.Holder)
	}
}
