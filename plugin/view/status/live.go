package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"time"
)

// The live file: every GPU's live values in one document, which the plugin
// rewrites every second while its telemetry is on.
const (
	// LiveFileName is the live file's name in the status directory.
	LiveFileName = "telemetry.json"
	// LiveKind is the live file's kind.
	LiveKind = "GPUTelemetry"
	// MaxLiveBytes is the largest live file a reader accepts: 1,024 GPUs
	// take about 300 KiB.
	MaxLiveBytes = 1 << 20
	// maxLiveMemoryMiB bounds memory used in a live file, which does not
	// know the GPUs' memory (a reader checks it against the GPU's status).
	maxLiveMemoryMiB = 1 << 24
)

// Live is the live file: the live values of GPUs, by UUID, as of Updated.
// Where it has a GPU, its values replace the telemetry of the GPU's status
// file (which keeps the values of when it was last written: its identity
// and health are written on change only, and flushed; the live file is
// replaced every second without being flushed). The zero value is not
// valid; build one with NewLive.
type Live struct {
	// APIVersion is always APIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is always LiveKind.
	Kind string `json:"kind"`
	// Updated is when the values were taken.
	Updated time.Time `json:"updated"`
	// GPUs are the values by GPU UUID.
	GPUs map[string]Telemetry `json:"gpus"`
}

// NewLive returns an empty live file taken at updated.
func NewLive(updated time.Time) *Live {
	return &Live{APIVersion: APIVersion, Kind: LiveKind, Updated: updated.UTC(), GPUs: map[string]Telemetry{}}
}

// Validate checks the document type, every UUID and every value (memory
// used against maxLiveMemoryMiB only: Apply checks it against the GPU).
// The error wraps ErrUnsupportedVersion or ErrInvalidStatus.
func (l *Live) Validate() error {
	if l.APIVersion != APIVersion || l.Kind != LiveKind {
		return fmt.Errorf("apiVersion %q kind %q: want %s %s: %w", l.APIVersion, l.Kind, APIVersion, LiveKind, ErrUnsupportedVersion)
	}
	for uuid, t := range l.GPUs {
		if !ValidUUID(uuid) {
			return fmt.Errorf("live values of %q: %w", uuid, ErrInvalidUUID)
		}
		if err := t.validate("gpus."+uuid+".", maxLiveMemoryMiB); err != nil {
			return err
		}
	}
	return nil
}

// Apply replaces g's telemetry with its live values, if l has them and they
// fit g (memory used at most total − reserved); it reports whether it did.
// A nil l applies nothing.
func (l *Live) Apply(g *GPU) bool {
	if l == nil {
		return false
	}
	t, ok := l.GPUs[g.UUID]
	if !ok || t.validate("", g.MemoryTotalMiB-g.MemoryReservedMiB) != nil {
		return false
	}
	g.Telemetry = t
	return true
}

// WriteLive validates l and replaces the live file with it, atomically (a
// reader sees the old document or the new one) but without flushing it to
// disk: it is rewritten every second, and an fsync (or a file per GPU,
// each replaced) would cost the node's disk for values stale a second
// later. After a crash of the node the file may be the previous one, or
// empty, which readers ignore. Sync leaves it alone; RemoveLive removes it.
func (w *Writer) WriteLive(l *Live) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("live values: %w", err)
	}
	data, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encode live values: %w: %w", err, ErrInvalidStatus)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.replace(LiveFileName, append(data, '\n'), false)
}

// RemoveLive removes the live file, if there is one: without the plugin's
// telemetry, readers use the values of the status files.
func (w *Writer) RemoveLive() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.remove(LiveFileName)
}

// ReadLive reads and validates the live file of the status directory fsys.
// A missing file gives an error wrapping fs.ErrNotExist; one that is not a
// regular file, larger than MaxLiveBytes, or does not decode or validate
// an error wrapping ErrInvalidStatus (ErrUnsupportedVersion for another
// apiVersion or kind). Unknown fields are ignored.
func ReadLive(fsys fs.FS) (*Live, error) {
	fi, err := fs.Stat(fsys, LiveFileName)
	if err != nil {
		return nil, fmt.Errorf("read live values: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read live values: %s is a %s, not a regular file: %w", LiveFileName, fi.Mode().Type(), ErrInvalidStatus)
	}
	f, err := fsys.Open(LiveFileName)
	if err != nil {
		return nil, fmt.Errorf("read live values: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxLiveBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read live values: %w", err)
	}
	if len(data) > MaxLiveBytes {
		return nil, fmt.Errorf("read live values: more than %d bytes: %w", MaxLiveBytes, ErrInvalidStatus)
	}
	var l Live
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("read live values: %w: %w", err, ErrInvalidStatus)
	}
	if dec.More() {
		return nil, fmt.Errorf("read live values: data after the JSON object: %w", ErrInvalidStatus)
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("read live values: %w", err)
	}
	return &l, nil
}
