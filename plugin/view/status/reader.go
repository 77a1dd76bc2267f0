package status

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// Read reads and validates the status file of the GPU uuid from fsys (the
// status directory, as os.DirFS(dir)). A missing file gives an error wrapping
// fs.ErrNotExist; a file that is not a regular file, is larger than
// MaxFileBytes, does not decode or validate, or describes another UUID an
// error wrapping ErrInvalidStatus (ErrUnsupportedVersion for another
// apiVersion); an invalid uuid an error wrapping ErrInvalidUUID. Read opens
// only <uuid>.json, so it never sees a Writer's temporary files, and a file
// replaced while being read is read whole, old or new.
func Read(fsys fs.FS, uuid string) (*GPU, error) {
	if !ValidUUID(uuid) {
		return nil, fmt.Errorf("read status of %q: %w", uuid, ErrInvalidUUID)
	}
	name := FileName(uuid)
	fi, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("read status of %s: %w", uuid, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read status of %s: %s is a %s, not a regular file: %w", uuid, name, fi.Mode().Type(), ErrInvalidStatus)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read status of %s: %w", uuid, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read status of %s: %w", uuid, err)
	}
	g, err := Unmarshal(data)
	if err != nil {
		return nil, fmt.Errorf("read status of %s: %w", uuid, err)
	}
	if g.UUID != uuid {
		return nil, fmt.Errorf("read status of %s: %s describes %s: %w", uuid, name, g.UUID, ErrInvalidStatus)
	}
	return g, nil
}

// ReadGPUs reads the status files of uuids (see Read). The result has one
// entry per uuid, in order, nil where a file could not be read; the error
// joins the errors of those files (nil if every file was read). A caller that
// can live with missing GPUs uses the entries and reports the error.
func ReadGPUs(fsys fs.FS, uuids []string) ([]*GPU, error) {
	gpus := make([]*GPU, len(uuids))
	var errs []error
	for i, u := range uuids {
		g, err := Read(fsys, u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		gpus[i] = g
	}
	return gpus, errors.Join(errs...)
}
