package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// RunPluginCLI runs the plugin binary's subcommand (`dump`, `health`, …) with args, the harness's
// environment minus VGPU_* variables, and returns its standard output; an exit status other than 0 is
// an error carrying its standard error. It gives up after 15 s (the CLI promises ~2 s).
func RunPluginCLI(ctx context.Context, binary string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = pluginEnv()
	cmd.SysProcAttr = childAttr()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", binary, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// CLI runs a subcommand of the plugin's binary against this plugin: args, then -state and
// -admin-socket of this plugin (flags may follow positional arguments).
func (p *Plugin) CLI(ctx context.Context, args ...string) (string, error) {
	return RunPluginCLI(ctx, p.Binary, append(slices.Clone(args), "-state="+p.StatePath, "-admin-socket="+p.AdminSocket)...)
}

// Dump runs `dump -o json` against this plugin and decodes it.
func (p *Plugin) Dump(ctx context.Context) (*DumpDoc, error) {
	return DumpState(ctx, p.Binary, "-state="+p.StatePath, "-admin-socket="+p.AdminSocket)
}

// DumpState runs `<binary> dump -o json <args>` (e.g. -state=<file>) and decodes its output.
func DumpState(ctx context.Context, binary string, args ...string) (*DumpDoc, error) {
	out, err := RunPluginCLI(ctx, binary, append([]string{"dump", "-o", "json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var d DumpDoc
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		return nil, fmt.Errorf("decode dump -o json: %w: %q", err, out)
	}
	return &d, nil
}

// DumpDoc is the output of `dump -o json` (the plugin's README documents its shape; fields are only
// ever added, so unknown ones are ignored here).
type DumpDoc struct {
	APIVersion   string            `json:"apiVersion"`
	Kind         string            `json:"kind"`
	Source       DumpSource        `json:"source"`
	Devices      []DumpDevice      `json:"devices"`
	Allocations  []DumpAllocation  `json:"allocations"`
	HealthEvents []DumpHealthEvent `json:"healthEvents"`
	ConfigEvents []DumpConfigEvent `json:"configEvents"`
	// Claims are the claims a DRA driver prepared (absent on a device-plugin node), newest first.
	Claims []DumpClaim `json:"claims"`
}

// DumpClaim is one claim record of DumpDoc (a DRA driver's).
type DumpClaim struct {
	Seq          uint64              `json:"seq"`
	UID          string              `json:"uid"`
	Namespace    string              `json:"namespace"`
	Name         string              `json:"name"`
	DeviceIDs    []string            `json:"deviceIDs"`
	Envs         map[string]string   `json:"envs"`
	ReservedFor  []DumpClaimConsumer `json:"reservedFor"`
	State        string              `json:"state"`
	PreparedAt   time.Time           `json:"preparedAt"`
	UnpreparedAt time.Time           `json:"unpreparedAt"`
}

// DumpClaimConsumer is a consumer a claim was reserved for when prepared.
type DumpClaimConsumer struct {
	Resource string `json:"resource"`
	Name     string `json:"name"`
	UID      string `json:"uid"`
}

// ClaimsOf returns the claim records of the claim uid, newest first.
func (d *DumpDoc) ClaimsOf(uid string) []DumpClaim {
	var out []DumpClaim
	for _, c := range d.Claims {
		if c.UID == uid {
			out = append(out, c)
		}
	}
	return out
}

// DumpSource says where a dump was read: Type "plugin" (the running plugin's admin socket at Path) or
// "file" (the state file at Path, read while no plugin runs).
type DumpSource struct {
	Type string `json:"type"`
	Path string `json:"path"`
}

// DumpDevice is a device of DumpDoc.
type DumpDevice struct {
	ID      string      `json:"id"`
	Index   int         `json:"index"`
	NUMA    int         `json:"numaNode"`
	Healthy bool        `json:"healthy"`
	Reason  string      `json:"reason"`
	Since   time.Time   `json:"since"`
	Holder  *DumpHolder `json:"holder"`
	UUID    string      `json:"uuid"`
	Removed bool        `json:"removed"`
}

// DumpHolder is a device's current holder.
type DumpHolder struct {
	Seq       uint64 `json:"seq"`
	State     string `json:"state"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Claim, ClaimUID and Pods name a DRA claim holding the device (State "prepared").
	Claim    string   `json:"claim"`
	ClaimUID string   `json:"claimUID"`
	Pods     []string `json:"pods"`
}

// DumpAllocation is one allocation record of DumpDoc.
type DumpAllocation struct {
	Seq        uint64            `json:"seq"`
	Time       time.Time         `json:"time"`
	DeviceIDs  []string          `json:"deviceIDs"`
	Envs       map[string]string `json:"envs"`
	State      string            `json:"state"`
	Namespace  string            `json:"namespace"`
	Pod        string            `json:"pod"`
	Container  string            `json:"container"`
	HeldSince  time.Time         `json:"heldSince"`
	ReleasedAt time.Time         `json:"releasedAt"`
}

// DumpHealthEvent is one health event of DumpDoc.
type DumpHealthEvent struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	DeviceID string    `json:"deviceID"`
	Healthy  bool      `json:"healthy"`
	Reason   string    `json:"reason"`
	Cause    string    `json:"cause"`
}

// DumpConfigEvent is one configuration change of DumpDoc (newest first in the dump).
type DumpConfigEvent struct {
	Seq             uint64    `json:"seq"`
	Time            time.Time `json:"time"`
	Profile         string    `json:"profile"`
	PreviousProfile string    `json:"previousProfile"`
	Why             string    `json:"why"`
	Detail          string    `json:"detail"`
	ResourceName    string    `json:"resourceName"`
	Machine         string    `json:"machine"`
	Devices         int       `json:"devices"`
	Added           []string  `json:"added"`
	Removed         []string  `json:"removed"`
	Restored        []string  `json:"restored"`
}

// Device returns the device with id (nil if absent).
func (d *DumpDoc) Device(id string) *DumpDevice {
	for i := range d.Devices {
		if d.Devices[i].ID == id {
			return &d.Devices[i]
		}
	}
	return nil
}

// Allocation returns the allocation record with sequence number seq (nil if absent).
func (d *DumpDoc) Allocation(seq uint64) *DumpAllocation {
	for i := range d.Allocations {
		if d.Allocations[i].Seq == seq {
			return &d.Allocations[i]
		}
	}
	return nil
}

// AllocationsOf returns the allocation records of a pod's container, newest first (the dump's order).
func (d *DumpDoc) AllocationsOf(namespace, pod, container string) []DumpAllocation {
	var out []DumpAllocation
	for _, a := range d.Allocations {
		if a.Namespace == namespace && a.Pod == pod && a.Container == container {
			out = append(out, a)
		}
	}
	return out
}

// SortedIDs returns the record's device ids sorted.
func (a DumpAllocation) SortedIDs() []string {
	return slices.Sorted(slices.Values(a.DeviceIDs))
}

// WaitDump runs Dump every interval until cond accepts it, cond returns an error, or timeout; it returns
// the last dump.
func (p *Plugin) WaitDump(ctx context.Context, timeout, interval time.Duration, cond func(*DumpDoc) (bool, string, error)) (*DumpDoc, error) {
	var last *DumpDoc
	err := poll(ctx, timeout, interval, func() (bool, string, error) {
		d, err := p.Dump(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		last = d
		return cond(d)
	})
	return last, err
}
