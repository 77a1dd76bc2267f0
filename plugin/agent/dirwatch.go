package agent

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

// Defaults of DirWatch.
const (
	// DefaultProfilePoll is the fallback check of the profiles directory,
	// in case an event is missed or the directory is replaced (a kubelet
	// updates a mounted ConfigMap within about a minute anyway).
	DefaultProfilePoll = 10 * time.Second
	// profileSettle is how long the directory must be quiet after an event
	// before it is read: a file written in several steps is read once,
	// whole.
	profileSettle = 100 * time.Millisecond
)

// DirWatch reports changes of a directory of profiles: a regular file
// edited, added, removed or replaced, a symbolic link pointed elsewhere,
// and a mounted ConfigMap's update (the kubelet writes a new ..<timestamp>
// directory and swaps the ..data symbolic link to it). It watches the
// directory with fsnotify and, as a fallback, compares a fingerprint of it
// (names, link targets, sizes, modification times, inodes) every poll.
//
// The directory itself may go and come back (removed and created again,
// renamed away and replaced, a symbolic link to it pointed at another):
// the watch is armed again on the new directory as soon as it is seen —
// its own removal or rename event, the parent directory's event creating
// it again (the parent is watched while the directory is missing), an
// fsnotify error, or the poll finding another inode at the path. A
// DirWatch is used by one goroutine (Run).
type DirWatch struct {
	// Dir is the directory watched.
	Dir string
	// Poll is the fallback check's period (default DefaultProfilePoll).
	Poll time.Duration
	// Since is the directory's Fingerprint when its profiles were read;
	// a change between that read and Run is reported as soon as Run
	// starts. "" takes the fingerprint Run starts with.
	Since string
	// Log receives the watch's failures; the zero Logger discards.
	Log zerolog.Logger
	// ticks, if set, replaces the poll's ticker (tests).
	ticks <-chan time.Time
}

// Run calls changed, on Run's goroutine, whenever the directory's
// fingerprint differs from Since (the one it had when Run started, without
// Since) or from the one when changed was last called, until ctx ends; it
// returns nil then. If the directory cannot be watched it says so once and
// polls only.
func (w *DirWatch) Run(ctx context.Context, changed func()) error {
	poll := w.Poll
	if poll <= 0 {
		poll = DefaultProfilePoll
	}
	last := w.Since
	if last == "" {
		last = Fingerprint(w.Dir)
	}
	ticks := w.ticks
	if ticks == nil {
		ticker := time.NewTicker(poll)
		defer ticker.Stop()
		ticks = ticker.C
	}
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	check := func() {
		if now := Fingerprint(w.Dir); now != last {
			last = now
			changed()
		}
	}
	var events chan fsnotify.Event
	var errs chan error
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		w.Log.Warn().Err(err).Str("dir", w.Dir).Dur("poll", poll).Msg("cannot watch the profiles directory; checking it by polling only")
	} else {
		defer fw.Close()
		events, errs = fw.Events, fw.Errors
	}
	a := &dirArm{fw: fw, dir: filepath.Clean(w.Dir)}
	if err := a.arm(); err != nil {
		w.Log.Warn().Err(err).Str("dir", w.Dir).Dur("poll", poll).Msg("cannot watch the profiles directory; checking it by polling only")
	}
	check() // a change since the profiles were read (Since), made before the watch was armed
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch {
			case ev.Name == a.dir && ev.Has(fsnotify.Remove|fsnotify.Rename):
				a.armed = false // the watch went with the directory
				_ = a.arm()     // on a new one there already, else on the parent
			case ev.Name == a.dir && ev.Has(fsnotify.Create):
				_ = a.arm() // the parent's event: the directory is back
			case filepath.Dir(ev.Name) == filepath.Dir(a.dir) && ev.Name != a.dir:
				continue // another entry of the parent: nothing of ours
			}
			settle.Reset(profileSettle)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.Log.Warn().Err(err).Str("dir", w.Dir).Msg("profiles directory watch error; watching it again, and polling")
			a.armed = false // events may be lost: start afresh
			_ = a.arm()
			settle.Reset(profileSettle)
		case <-settle.C:
			check()
		case <-ticks:
			if !a.current() {
				_ = a.arm()
			}
			check()
		}
	}
}

// dirArm keeps an fsnotify watch on a directory that may be replaced,
// and on its parent while the directory is missing. Used by Run's
// goroutine only.
type dirArm struct {
	fw            *fsnotify.Watcher // nil: polling only
	dir           string            // cleaned
	armed         bool              // dir is watched: the directory id was at the path
	id            string            // dirID when armed
	parentWatched bool              // the parent is watched, for dir's return
}

// arm watches the directory at dir again (the one there now); while there
// is none it watches the parent, whose event says when one comes. It
// returns why neither can be watched.
func (a *dirArm) arm() error {
	if a.fw == nil {
		return nil
	}
	if a.armed {
		_ = a.fw.Remove(a.dir) // a watch on an inode no longer at the path
		a.armed = false
	}
	err := a.watchDir()
	if err == nil {
		return nil
	}
	if !a.parentWatched {
		if perr := a.fw.Add(filepath.Dir(a.dir)); perr != nil {
			return fmt.Errorf("%w; and its parent: %w", err, perr)
		}
		a.parentWatched = true
	}
	_ = a.watchDir() // created between the two: no event would say so
	return nil
}

// watchDir adds the watch on dir and, once it holds, drops the parent's.
func (a *dirArm) watchDir() error {
	id := dirID(a.dir)
	if err := a.fw.Add(a.dir); err != nil {
		return err
	}
	a.armed, a.id = true, id
	if a.parentWatched {
		_ = a.fw.Remove(filepath.Dir(a.dir))
		a.parentWatched = false
	}
	return nil
}

// current reports whether the watch is on the directory at dir now: armed,
// on the same inode.
func (a *dirArm) current() bool {
	return a.fw == nil || a.armed && dirID(a.dir) == a.id
}

// dirID identifies the directory at path, following symbolic links: its
// device and inode; "" when there is none.
func dirID(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	}
	return ""
}

// Fingerprint describes what of dir a change of its profiles changes: for
// every entry, its name and, following symbolic links, its size,
// modification time and inode, plus the link's target. A directory that
// cannot be read has its error as its fingerprint.
func Fingerprint(dir string) string {
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
