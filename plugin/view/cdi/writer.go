package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/atomicfile"
)

// File and directory modes: container runtimes read the spec as root, other
// tools (nvidia-ctk cdi list, a user's inspection) as anyone.
const (
	// FileMode is the mode of the spec file.
	FileMode fs.FileMode = 0o644
	// DirMode is the mode of a spec directory the Writer creates.
	DirMode fs.FileMode = 0o755
)

// The owner mark: the first lines of every spec file a Writer writes, YAML
// comments a CDI loader skips. Spec annotations would say it too, but they
// need cdiVersion 0.6.0, which runtimes built with CDI library versions
// before 0.6 (containerd 1.7.0, say) refuse: a comment keeps the spec at
// the lowest version its content needs.
const (
	markIntro   = "# Written by virtual-gpu-device-plugin. Only its owner replaces it.\n"
	ownerPrefix = "# owner: "
)

// Owner is the instance a Writer writes for: the owner marked in its spec
// files, the only one that replaces them.
type Owner struct {
	// ID names the instance, uniquely on the host: the plugin uses its
	// state file's path (locked while it runs, so one instance per path).
	// Required; any string (the mark quotes it).
	ID string
	// Adopt reports whether an existing spec without an owner mark is the
	// instance's own, written before specs were marked, so the Writer may
	// replace it. It is called with the parsed spec. Nil: no unmarked spec
	// is adopted.
	Adopt func(*specs.Spec) bool
}

// Writer writes the spec file of one kind, Kind.SpecFileName, into a spec
// directory, for one Owner. Each write replaces the file atomically: a
// runtime loading it sees the old spec or the new one, never a mix. It
// replaces only a file its owner wrote (or adopts): a spec of another
// owner is left alone, and the write fails with ErrForeignSpec. It never
// removes the file (not at shutdown either): containers whose cached
// Allocate answer names its devices need it for as long as they may be
// restarted. A Writer is safe for concurrent use; build one with
// NewWriter. It holds no open files.
type Writer struct {
	dir   string
	kind  Kind
	owner Owner
	mu    sync.Mutex // serializes writes
}

// NewWriter returns a Writer of kind's spec (the zero Kind means
// DefaultKind) for owner in the spec directory dir, creating dir with its
// parents if needed (the directory itself gets DirMode whatever the umask);
// an existing directory keeps its mode (it may be shared with other
// vendors' specs). dir must be an absolute, clean path of a directory (or a
// symbolic link to one); anything else there fails with syscall.ENOTDIR.
// An invalid kind wraps ErrInvalidKind, an empty owner ID ErrInvalidConfig.
func NewWriter(dir string, kind Kind, owner Owner) (*Writer, error) {
	kind = kind.orDefault()
	if err := kind.Validate(); err != nil {
		return nil, err
	}
	if owner.ID == "" {
		return nil, fmt.Errorf("cdi spec writer: no owner: %w", ErrInvalidConfig)
	}
	if err := makeSpecDir(dir); err != nil {
		return nil, err
	}
	return &Writer{dir: dir, kind: kind, owner: owner}, nil
}

// makeSpecDir creates the spec directory dir with its parents if needed
// (see NewWriter).
func makeSpecDir(dir string) error {
	if err := checkPath(dir); err != nil {
		return fmt.Errorf("cdi spec directory: %w", err)
	}
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("create cdi spec directory %q: %w", dir, err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		// Created here: give it DirMode whatever the umask.
		if err := os.Chmod(dir, DirMode); err != nil {
			return fmt.Errorf("set mode %v on cdi spec directory %q: %w", DirMode, dir, err)
		}
	}
	return nil
}

// Dir returns the spec directory.
func (w *Writer) Dir() string { return w.dir }

// Kind returns the kind of the spec the Writer writes.
func (w *Writer) Kind() Kind { return w.kind }

// Path returns the spec file's path, <dir>/<Kind.SpecFileName>.
func (w *Writer) Path() string { return filepath.Join(w.dir, w.kind.SpecFileName()) }

// tmpPrefix starts the names of the Writer's temporary files. Their names
// do not end in .yaml or .json, which CDI runtimes skip when they scan a
// spec directory, so a runtime never loads a half-written spec.
func (w *Writer) tmpPrefix() string { return "." + w.kind.Vendor + "-" + w.kind.Class + ".tmp-" }

// Write builds the spec of cfg (see Build; its errors are returned as they
// are; cfg.Kind must be zero or the Writer's kind, and is the Writer's)
// and makes it the content of Path, behind the owner mark: unchanged if
// the file already holds exactly these bytes; refused with ErrForeignSpec,
// the file untouched, if the file there is not the owner's (see Owner);
// otherwise through a temporary file in the same directory that is
// written, set to FileMode, flushed (fsync), loaded and validated with the
// CDI library's ReadSpec (a refusal wraps ErrInvalidSpec), renamed over
// Path, and the directory flushed. On error the previous file is untouched
// and the temporary file removed. Two Writers of different owners racing
// on one path are not excluded: the check and the rename are two steps.
func (w *Writer) Write(cfg Config) error {
	if cfg.Kind != (Kind{}) && cfg.Kind != w.kind {
		return fmt.Errorf("config of CDI kind %s given to the writer of %s: %w", cfg.Kind, w.kind, ErrInvalidConfig)
	}
	cfg.Kind = w.kind
	spec, err := Build(cfg)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return writeOwned(w.dir, w.Path(), w.tmpPrefix(), w.owner, spec)
}

// writeOwned makes the spec the content of the file final in dir, behind
// the owner mark (see Writer.Write), its temporary file named with
// tmpPrefix.
func writeOwned(dir, final, tmpPrefix string, owner Owner, spec *specs.Spec) error {
	body, err := Marshal(spec)
	if err != nil {
		return err
	}
	data := append([]byte(markIntro+ownerPrefix+strconv.Quote(owner.ID)+"\n"), body...)
	old, err := os.ReadFile(final)
	switch {
	case err == nil && bytes.Equal(old, data):
		return nil
	case err == nil:
		if err := checkOwner(owner, final, old); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read cdi spec: %w", err)
	}
	if err := replace(final, tmpPrefix, data); err != nil {
		return err
	}
	return syncDir(dir)
}

// checkOwner returns nil if the spec file at path, whose content is old,
// may be replaced: its mark names owner, or it has none and owner adopts
// it. Otherwise an error wrapping ErrForeignSpec names the file and its
// owner.
func checkOwner(owner Owner, path string, old []byte) error {
	id, marked, err := ownerOf(old)
	switch {
	case err != nil:
		return fmt.Errorf("cdi spec %s: unreadable owner mark (%w): %w", path, err, ErrForeignSpec)
	case marked && id == owner.ID:
		return nil
	case marked:
		return fmt.Errorf("cdi spec %s is owned by %q, not by %q: %w", path, id, owner.ID, ErrForeignSpec)
	}
	var spec specs.Spec
	if err := yaml.Unmarshal(old, &spec); err != nil {
		return fmt.Errorf("cdi spec %s has no owner mark and is not %q's (not a CDI spec: %w): %w", path, owner.ID, err, ErrForeignSpec)
	}
	if owner.Adopt == nil || !owner.Adopt(&spec) {
		return fmt.Errorf("cdi spec %s has no owner mark and is not %q's (kind %q): %w", path, owner.ID, spec.Kind, ErrForeignSpec)
	}
	return nil
}

// ownerOf returns the owner marked in the spec file data: the ID, and
// whether there is a mark. A file whose leading comment lines hold no
// "# owner: " line has none.
func ownerOf(data []byte) (id string, marked bool, err error) {
	for line := range bytes.Lines(data) {
		if !bytes.HasPrefix(line, []byte("#")) {
			break
		}
		if rest, ok := bytes.CutPrefix(line, []byte(ownerPrefix)); ok {
			id, err := strconv.Unquote(string(bytes.TrimRight(rest, "\r\n")))
			if err != nil {
				return "", true, fmt.Errorf("owner %s: %w", bytes.TrimSpace(rest), err)
			}
			return id, true, nil
		}
	}
	return "", false, nil
}

// replace writes data into a temporary file named with tmpPrefix,
// validates it with the CDI library and renames it over final.
func replace(final, tmpPrefix string, data []byte) error {
	err := atomicfile.Replace(final, atomicfile.Options{Prefix: tmpPrefix, Mode: FileMode, Check: func(tmp string) error {
		if _, err := cdilib.ReadSpec(tmp, 0); err != nil {
			return fmt.Errorf("load with the cdi library: %w: %w", ErrInvalidSpec, err)
		}
		return nil
	}}, atomicfile.Bytes(data))
	if err != nil {
		return fmt.Errorf("write cdi spec: %w", err)
	}
	return nil
}

// syncDir flushes the directory, making the rename durable.
func syncDir(dir string) error {
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("cdi spec: %w", err)
	}
	return nil
}

// RemoveTemporaryFiles removes temporary files a crashed Writer of the same
// kind left in the spec directory (never a spec). The plugin calls it once
// its first Write succeeded: the kind is then its own.
func (w *Writer) RemoveTemporaryFiles() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("list cdi spec directory %q: %w", w.dir, err)
	}
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), w.tmpPrefix()) {
			continue
		}
		if err := os.Remove(filepath.Join(w.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove temporary cdi spec: %w", err))
		}
	}
	return errors.Join(errs...)
}
