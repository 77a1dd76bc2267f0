package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"
)

// Defaults of dirWatch.
const (
	// defaultProfilePoll is the fallback check of the profiles directory,
	// in case an event is missed or the directory is replaced (a kubelet
	// updates a mounted ConfigMap within about a minute anyway).
	defaultProfilePoll = 10 * time.Second
	// profileSettle is how long the directory must be quiet after an event
	// before it is read: a file written in several steps is read once,
	// whole.
	profileSettle = 100 * time.Millisecond
)

// dirWatch reports changes of a directory of profiles: a regular file
// edited, added, removed or replaced, a symbolic link pointed elsewhere,
// and a mounted ConfigMap's update (the kubelet writes a new ..<timestamp>
// directory and swaps the ..data symbolic link to it). It watches the
// directory with fsnotify and, as a fallback, compares a fingerprint of it
// (names, link targets, sizes, modification times, inodes) every poll. A
// dirWatch is used by one goroutine (Run).
type dirWatch struct {
	dir  string
	poll time.Duration // default defaultProfilePoll
	log  zerolog.Logger
}

// Run calls changed, on Run's goroutine, whenever the directory's
// fingerprint differs from the one it had when Run started or changed was
// last called, until ctx ends; it returns nil then. If the directory
// cannot be watched it says so once and polls only.
func (w *dirWatch) Run(ctx context.Context, changed func()) error {
	poll := w.poll
	if poll <= 0 {
		poll = defaultProfilePoll
	}
	last := fingerprint(w.dir)
	var events chan fsnotify.Event
	var errs chan error
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		if err = fw.Add(w.dir); err != nil {
			fw.Close()
		}
	}
	if err != nil {
		w.log.Warn().Err(err).Str("dir", w.dir).Dur("poll", poll).Msg("cannot watch the profiles directory; checking it by polling only")
	} else {
		defer fw.Close()
		events, errs = fw.Events, fw.Errors
	}
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	check := func() {
		if now := fingerprint(w.dir); now != last {
			last = now
			changed()
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			settle.Reset(profileSettle)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.log.Warn().Err(err).Str("dir", w.dir).Msg("profiles directory watch error; relying on polling")
		case <-settle.C:
			check()
		case <-ticker.C:
			check()
		}
	}
}

// fingerprint describes what of dir a change of its profiles changes: for
// every entry, its name and, following symbolic links, its size,
// modification time and inode, plus the link's target. A directory that
// cannot be read has its error as its fingerprint.
func fingerprint(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		fmt.Fprintf(&b, "%s", e.Name())
		if target, err := os.Readlink(path); err == nil {
			fmt.Fprintf(&b, " -> %s", target)
		}
		if fi, err := os.Stat(path); err == nil {
			fmt.Fprintf(&b, " %v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				fmt.Fprintf(&b, " %d:%d", st.Dev, st.Ino)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
