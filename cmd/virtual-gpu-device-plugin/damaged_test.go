package main

import (
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// One damaged record no longer hides the history: dump of the stopped
// plugin's file shows the readable rest and names the damaged record; the
// restarted plugin quarantines it, serves, answers dump and health set, and
// health set reports the change it made.
func TestBinary_DamagedRecord(t *testing.T) {
	n := newNode(t)
	p, reg := n.start(t)
	plugintest.NextList(t, reg, 10*time.Second)
	allocate(t, reg, "fake-0")
	allocate(t, reg, "fake-1")
	p.stop(t)
	storetest.Damage(t, n.state, "allocations", storetest.SeqKey(1), []byte("{not json"))

	hasDamage := func(s admin.Snapshot) bool {
		for _, d := range s.DamagedRecords {
			if d.Bucket == "allocations" && d.Key == "1" {
				return true
			}
		}
		return false
	}
	readable := func(s admin.Snapshot) bool {
		return len(s.Allocations) == 1 && s.Allocations[0].Seq == 2 && len(s.Devices) == 4
	}
	stopped := n.dump(t)
	if stopped.Source.Type != "file" || !readable(stopped) || !hasDamage(stopped) {
		t.Fatalf("dump of the stopped plugin's file: source %+v, allocations %+v, damaged %+v; want record 2 and record 1 named damaged",
			stopped.Source, stopped.Allocations, stopped.DamagedRecords)
	}
	table, errOut, code := cli(t, "dump", "-state="+n.state)
	if code != 0 || !strings.Contains(table, "DAMAGED RECORD") || !strings.Contains(table, "allocations") {
		t.Errorf("dump table: exit %d, %s\n%s\nwant a DAMAGED RECORD section naming the allocations record", code, errOut, table)
	}

	p2, reg2 := n.start(t)
	plugintest.NextList(t, reg2, 10*time.Second)
	p2.logs.waitLine(t, "quarantine")
	live := n.dump(t)
	if live.Source.Type != "plugin" || !readable(live) || !hasDamage(live) {
		t.Fatalf("dump of the running plugin: source %+v, allocations %+v, damaged %+v", live.Source, live.Allocations, live.DamagedRecords)
	}
	for _, args := range [][]string{{"dump", "--active"}, {"health", "list"}} {
		if out, errOut, code := cli(t, append(args, "-state="+n.state)...); code != 0 {
			t.Errorf("%v: exit %d: %s%s", args, code, out, errOut)
		}
	}
	out, errOut, code := cli(t, "health", "set", "fake-3", "unhealthy", "--reason", "XID 79", "-state="+n.state)
	if code != 0 {
		t.Fatalf("health set: exit %d: %s%s", code, out, errOut)
	}
	after := n.dump(t)
	if d := after.Devices[3]; d.Healthy || d.Reason != "XID 79" {
		t.Errorf("fake-3 after health set = %+v", d)
	}
	if len(after.HealthEvents) == 0 || after.HealthEvents[0].Cause != store.CauseAdmin {
		t.Errorf("newest health event = %+v", after.HealthEvents)
	}
}
