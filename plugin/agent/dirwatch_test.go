package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

// watched runs a dirWatch on dir until the test ends, with a poll that
// never fires unless the test sends on the returned channel; it returns
// the fingerprints the watch reported changes at. Without polls, every
// change it reports came through fsnotify. A send on tick returns once
// the watch has started and taken it.
func watched(t *testing.T, dir string) (seen func() []string, tick chan<- time.Time) {
	t.Helper()
	ticks := make(chan time.Time)
	var (
		mu  sync.Mutex
		got []string
	)
	w := &DirWatch{Dir: dir, Poll: time.Hour, ticks: ticks, Log: zerolog.New(zerolog.NewTestWriter(t))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, Fingerprint(dir))
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}, ticks
}

// waitSeen waits until a reported change's fingerprint names file.
func waitSeen(t *testing.T, seen func() []string, file string) {
	t.Helper()
	plugintest.WaitFor(t, 30*time.Second, "a change with "+file, func() bool {
		for _, fp := range seen() {
			if strings.Contains(fp, file) {
				return true
			}
		}
		return false
	})
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDirWatch_DirectoryReplaced: the profiles directory removed (or
// renamed away) and created again is watched again at once: its new files
// are seen without a poll, and so are later edits.
func TestDirWatch_DirectoryReplaced(t *testing.T) {
	for _, tc := range []struct {
		name string
		gone func(dir string) error
	}{
		{"removed", os.RemoveAll},
		{"renamed away", func(dir string) error { return os.Rename(dir, dir+".old") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "profiles")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "a.yaml"), "version: v1\n")
			seen, tick := watched(t, dir)
			tick <- time.Now() // taken: the watch runs; no poll from here on

			if err := tc.gone(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "b.yaml"), "version: v1\n")
			waitSeen(t, seen, "b.yaml")
			write(t, filepath.Join(dir, "c.yaml"), "version: v1\n") // on the new directory's own watch
			waitSeen(t, seen, "c.yaml")
		})
	}
}

// TestDirWatch_ConfigMapSwap: a ConfigMap's update swaps ..data inside the
// directory, which stays: seen without a poll.
func TestDirWatch_ConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"..v1", "..v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(dir, "..v1", "a.yaml"), "version: v1\n")
	write(t, filepath.Join(dir, "..v2", "a.yaml"), "version: v1\nflags:\n  devices: 2\n")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "a.yaml"), filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	seen, tick := watched(t, dir)
	tick <- time.Now() // taken: the watch runs; no poll from here on
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitSeen(t, seen, "..data -> ..v2")
}

// TestDirWatch_LinkRepointed: -config a symbolic link pointed at another
// directory gives no event (the watch is on the old one); the poll finds
// another inode at the path and watches the new directory, whose edits are
// then seen without a poll.
func TestDirWatch_LinkRepointed(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"one", "two"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(root, "two", "two.yaml"), "version: v1\n")
	link := filepath.Join(root, "profiles")
	if err := os.Symlink("one", link); err != nil {
		t.Fatal(err)
	}
	seen, tick := watched(t, link)
	tick <- time.Now() // taken: the watch runs
	if err := os.Symlink("two", link+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(link+".tmp", link); err != nil {
		t.Fatal(err)
	}
	tick <- time.Now()
	waitSeen(t, seen, "two.yaml")
	write(t, filepath.Join(root, "two", "later.yaml"), "version: v1\n")
	waitSeen(t, seen, "later.yaml")
}

// TestDirWatch_ChangedBeforeRun: a profile edited after the profiles were
// read (Since) and before the watch was armed is reported at once, not at
// the next unrelated change or poll.
func TestDirWatch_ChangedBeforeRun(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("flags: {devices: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	since := Fingerprint(dir) // the profiles are read here
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("flags: {devices: 4}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := &DirWatch{Dir: dir, Poll: time.Hour, Since: since, ticks: make(chan time.Time), Log: zerolog.New(zerolog.NewTestWriter(t))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func() { changed <- struct{}{} }) }()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the change made before Run was not reported")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
