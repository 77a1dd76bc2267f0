//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// TestBinary_StatusFiles_WrittenAgainAfterAFullDisk: with the status
// directory's file system full, two GPUs are set unhealthy (the store takes
// it) and the profile grows from 4 GPUs to 6; the status files cannot be
// written, which is said once. Once space is freed they are written again,
// without anything else happening, with the newest stored health and the
// new profile's GPUs, and that is said once too. They once stayed as they
// were (all healthy) until the next health change.
func TestBinary_StatusFiles_WrittenAgainAfterAFullDisk(t *testing.T) {
	n := newNode(t)
	statusDir := filepath.Join(filepath.Dir(n.state), "status")
	storetest.MountSmallFS(t, statusDir, 256<<10)
	profiles := filepath.Join(n.dir, "profiles")
	if err := os.Mkdir(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	writeProfile := func(devices int) {
		t.Helper()
		tmp := filepath.Join(profiles, ".tmp")
		if err := os.WriteFile(tmp, fmt.Appendf(nil, "version: v1\nflags:\n  devices: %d\n", devices), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(profiles, "p.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	writeProfile(4)
	p, _ := n.start(t, "-node-name=node-a", "-config="+profiles, "-config-default=p")
	var lines []string // every log line read so far, in order
	waitLine := func(s string) {
		t.Helper()
		deadline := time.After(processWait)
		for {
			select {
			case l := <-p.logs.lines:
				lines = append(lines, l)
				if strings.Contains(l, s) {
					return
				}
			case <-deadline:
				t.Fatalf("no log line with %q within %v", s, processWait)
			}
		}
	}
	waitLine(`"message":"starting"`)
	uuid := func(i int) string { return topology.DeriveUUID("node-a", fmt.Sprintf("fake-%d", i)) }
	health := func(i int) (status.Health, error) {
		g, err := status.Read(os.DirFS(statusDir), uuid(i))
		if err != nil {
			return status.Health{}, err
		}
		return g.Health, nil
	}
	for i := range 4 {
		if h, err := health(i); err != nil || !h.Healthy {
			t.Fatalf("status of fake-%d at start: %+v, %v", i, h, err)
		}
	}

	filler := storetest.FillFS(t, statusDir)
	for _, id := range []string{"fake-1", "fake-2"} {
		if _, errOut, code := cli(t, "health", "set", id, "unhealthy", "--reason", "XID 79", "-state="+n.state); code != 0 {
			t.Fatalf("health set %s on a full status directory: exit %d: %s (the store is elsewhere and takes it)", id, code, errOut)
		}
	}
	waitLine("status file not updated")
	writeProfile(6)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLine(`"message":"configuration applied"`)
	if h, err := health(1); err != nil || !h.Healthy {
		t.Fatalf("fake-1's status file on the full file system = %+v, %v; want the old (healthy) file", h, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	plugintest.WaitFor(t, 10*time.Second, "the status files written again", func() bool {
		for i := range 6 {
			h, err := health(i)
			if err != nil || h.Healthy == (i == 1 || i == 2) || (!h.Healthy && h.Reason != "XID 79") {
				return false
			}
		}
		return true
	})
	waitLine("status files written again")
	// Whatever else was logged meanwhile, up to now.
	for {
		select {
		case l := <-p.logs.lines:
			lines = append(lines, l)
			continue
		default:
		}
		break
	}
	var warned, recovered int
	for _, l := range lines {
		switch {
		case strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "status"):
			warned++
		case strings.Contains(l, "status files written again"):
			recovered++
		}
	}
	if warned != 1 || recovered != 1 {
		t.Errorf("%d warnings about the status files and %d recoveries logged, want one of each", warned, recovered)
	}
	p.stop(t)
}
