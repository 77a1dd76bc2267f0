package main

import (
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// crashSeed replays a run of TestBinary_KillDuringLiveChange (its seed is
// logged); 0 draws one.
var crashSeed = flag.Uint64("crash-seed", 0, "seed of TestBinary_KillDuringLiveChange's kill points (0: a new one)")

// TestBinary_KillDuringLiveChange kills the plugin (SIGKILL) at random
// moments of a live profile change, flipping the profile between 8 and 6
// devices, and starts it again, round after round. After every kill the
// state file must explain itself: replaying the configuration events'
// added, removed and restored devices gives exactly the devices stored,
// removed or not, and no device is restored without a removal before (a
// device change without its event, the bug, shows as a removal or a
// restore nobody recorded).
func TestBinary_KillDuringLiveChange(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -crash-seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	rounds := 12
	if testing.Short() {
		rounds = 4
	}

	dir := plugintest.ShortTempDir(t)
	profiles := filepath.Join(dir, "profiles")
	if err := os.Mkdir(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	devices := 8
	writeProfile := func() {
		t.Helper()
		body := []byte("version: v1\nflags:\n  devices: " + strconv.Itoa(devices) + "\n")
		tmp := filepath.Join(profiles, ".tmp")
		if err := os.WriteFile(tmp, body, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(profiles, "p.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	writeProfile()
	state := filepath.Join(dir, "state", "state.db")
	args := []string{"-device-plugin-path=" + dir, "-state=" + state, "-pod-resources-socket=" + filepath.Join(dir, "pr.sock"),
		"-config=" + profiles, "-config-default=p"}

	for round := range rounds {
		p := startBinary(t, args...)
		p.logs.waitLine(t, `"message":"starting"`) // SIGHUP is taken from here on
		if devices == 8 {
			devices = 6
		} else {
			devices = 8
		}
		writeProfile()
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil { // the watch may have missed it
			t.Fatal(err)
		}
		// A random moment of the change: after it starts, or right after
		// the catalog is swapped (where the history used to lag behind).
		var after string
		var delay time.Duration
		if rng.IntN(2) == 0 {
			after, delay = "reading the profiles again", time.Duration(rng.IntN(20_000))*time.Microsecond
		} else {
			after, delay = `"message":"device catalog replaced"`, time.Duration(rng.IntN(3_000))*time.Microsecond
		}
		p.logs.waitLine(t, after)
		time.Sleep(delay) // the kill point, drawn from the seed
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		t.Logf("round %d: %d devices, killed %v after %s", round, devices, delay, after)
		checkConfigHistory(t, state)
		storetest.CheckFile(t, state)
	}
}

// checkConfigHistory opens the state file at path read-only and checks
// that its configuration events explain its devices: replayed oldest
// first, an added device is new, a removed one was present, a restored
// one was removed, and the result is the stored devices, each removed or
// present as stored.
func checkConfigHistory(t *testing.T, path string) {
	t.Helper()
	st, err := store.Open(path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open after SIGKILL: %v", err)
	}
	defer st.Close()
	devs, err := st.Devices()
	if err != nil {
		t.Fatal(err)
	}
	events, err := st.ConfigEvents(store.ConfigFilter{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(events) // oldest first
	present := map[string]bool{}
	for _, e := range events {
		for _, id := range e.Added {
			if _, known := present[id]; known {
				t.Errorf("event %d adds %s, which an earlier event added", e.Seq, id)
			}
			present[id] = true
		}
		for _, id := range e.Removed {
			if !present[id] {
				t.Errorf("event %d removes %s, which is not present", e.Seq, id)
			}
			present[id] = false
		}
		for _, id := range e.Restored {
			if p, known := present[id]; !known || p {
				t.Errorf("event %d restores %s, which no event removed (two restores without a removal between)", e.Seq, id)
			}
			present[id] = true
		}
	}
	for _, d := range devs {
		p, known := present[d.ID]
		switch {
		case !known:
			t.Errorf("device %s is stored, but no configuration event added it", d.ID)
		case p == d.Removed:
			t.Errorf("device %s is stored removed=%v, the configuration events say present=%v", d.ID, d.Removed, p)
		}
		delete(present, d.ID)
	}
	for id := range present {
		t.Errorf("configuration events name %s, which is not stored", id)
	}
	if t.Failed() {
		t.FailNow()
	}
}
