package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// allocateLoad calls Allocate for ids and returns the answer's load socket
// directory on the host and the allocation's sequence number.
func allocateLoad(t *testing.T, reg *plugintest.Registration, ids ...string) (string, uint64) {
	t.Helper()
	resp, err := reg.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatalf("Allocate(%v): %v", ids, err)
	}
	for _, m := range resp.ContainerResponses[0].Mounts {
		if m.ContainerPath == loadsock.ContainerDir {
			seq, err := strconv.ParseUint(filepath.Base(m.HostPath), 10, 64)
			if err != nil {
				t.Fatalf("load socket directory %q", m.HostPath)
			}
			return m.HostPath, seq
		}
	}
	t.Fatalf("Allocate(%v): no load socket mounted: %v", ids, resp.ContainerResponses[0])
	return "", 0
}

// connects reports whether the load socket in dir takes a connection.
func connects(dir string) bool {
	c, err := net.DialTimeout("unix", filepath.Join(dir, loadsock.SocketName), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestServe_LoadSocketsBounded: with no container ever seen (nothing is
// released or abandoned), 120 Allocates of the same two GPUs keep two load
// sockets open, not 120: an allocation whose devices a newer one took is
// over. Its directory stays while its record is active; the newest
// allocation's socket answers.
func TestServe_LoadSocketsBounded(t *testing.T) {
	n := newLiveNode(t)
	reg := n.start(t, nil, "-telemetry-address=127.0.0.1:0", "-telemetry-writable")
	plugintest.NextList(t, reg, 10*time.Second)
	first, _ := allocateLoad(t, reg, "fake-0")
	before := plugintest.OpenSockets(t)
	var last [2]string
	for i := range 120 {
		last[i%2], _ = allocateLoad(t, reg, "fake-"+strconv.Itoa(i%2))
	}
	if got := plugintest.OpenSockets(t) - before; got > 2 {
		t.Errorf("%d more sockets open after 120 Allocates of 2 GPUs, want at most 2 (the first's closed, one more for fake-1)", got)
	}
	for _, dir := range last {
		if !connects(dir) {
			t.Errorf("the newest allocation's socket %s does not answer", dir)
		}
	}
	if connects(first) {
		t.Errorf("allocation %s, whose GPU a newer one took, still answers", first)
	}
	if fi, err := os.Stat(first); err != nil || !fi.IsDir() {
		t.Errorf("directory of the first allocation: %v, want it kept while its record is active", err)
	}
}

// TestServe_LoadSocketLater: a load socket that cannot be created when
// Allocate runs does not fail it: the record is stored and active and the
// answer mounts its directory, as the dump says; the cause is logged once,
// not once per Allocate; the socket appears in the directory once it can
// be created.
func TestServe_LoadSocketLater(t *testing.T) {
	n := newLiveNode(t)
	reg := n.start(t, nil, "-telemetry-address=127.0.0.1:0", "-telemetry-writable")
	plugintest.NextList(t, reg, 10*time.Second)
	loadDir := filepath.Join(filepath.Dir(n.state), "load")
	if err := os.RemoveAll(loadDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(loadDir, nil, 0o600); err != nil { // no directory can be made in it
		t.Fatal(err)
	}
	dirA, seqA := allocateLoad(t, reg, "fake-0")
	dirB, seqB := allocateLoad(t, reg, "fake-1")
	snap := n.snapshot(t)
	states := map[uint64]string{}
	for _, a := range snap.Allocations {
		states[a.Seq] = a.State
	}
	if states[seqA] != store.StateAllocated || states[seqB] != store.StateAllocated {
		t.Errorf("records after Allocate answered: %v, want %d and %d allocated", states, seqA, seqB)
	}
	const warning = "load socket of a new allocation not opened"
	if got := n.logs.Count(warning); got != 1 {
		t.Errorf("%d warnings %q for two Allocates of the same cause, want 1", got, warning)
	}
	if err := os.Remove(loadDir); err != nil {
		t.Fatal(err)
	}
	plugintest.WaitFor(t, 10*time.Second, "both load sockets to answer", func() bool { return connects(dirA) && connects(dirB) })
}
