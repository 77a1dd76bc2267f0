package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// The specs of DRA claims. A DRA driver prepares a ResourceClaim by
// writing a spec of its own for the claim, named after the claim's UID,
// and removes it when the claim is unprepared; the kubelet hands the
// runtime the claim's CDI device names. Unlike the device plugin's one spec
// per kind, which lists every GPU, a claim's spec holds the edits of that
// claim alone, so its devices may carry the environment: a container gets
// one device per request of the claim it uses, with that request's
// VIRTUAL_GPU_IDS.

// ClaimClass is the CDI class of claim specs: NVIDIA's DRA driver names
// its claim devices k8s.gpu.nvidia.com/claim=<uid>-<device>.
const ClaimClass = "claim"

// ClaimKind returns the kind of the claim specs of the DRA driver named
// driver: vendor "k8s.<driver>", class ClaimClass, as NVIDIA's driver
// (k8s.gpu.nvidia.com/claim). An error wraps ErrInvalidKind.
func ClaimKind(driver string) (Kind, error) {
	k := Kind{Vendor: "k8s." + driver, Class: ClaimClass}
	if err := k.Validate(); err != nil {
		return Kind{}, err
	}
	return k, nil
}

// ClaimDevice is one CDI device of a claim's spec: what a container using
// one request of the claim gets besides the spec's shared edits.
type ClaimDevice struct {
	// Name is the device's name, unique in the spec and, since the spec is
	// the claim's, in the kind: "<claim uid>-<request>". A valid CDI device
	// name.
	Name string
	// Envs are its environment variables.
	Envs map[string]string
	// Nodes are its device nodes (the GPUs' /dev/nvidia<minor>).
	Nodes []DeviceNode
}

// ClaimConfig is what BuildClaim turns into a claim's spec.
type ClaimConfig struct {
	// Kind is the spec's kind (ClaimKind); required.
	Kind Kind
	// UID is the claim's UID; required, a valid part of a CDI device name.
	UID string
	// Devices are the spec's devices; at least one.
	Devices []ClaimDevice
	// SharedNodes and Mounts are added once to every container that gets
	// one of the devices (the spec's containerEdits), as in Config.
	SharedNodes []DeviceNode
	Mounts      []Mount
}

// BuildClaim returns the spec of a claim, checked as Build checks the
// device plugin's: every host device node must exist and be one
// (ErrDeviceNode), container paths are absolute, clean and used once per
// container (a device's nodes may repeat a path of another device, which
// a container using both gets once), and other bad input wraps
// ErrInvalidConfig. Environment variables are written sorted by name.
func BuildClaim(cfg ClaimConfig) (*specs.Spec, error) {
	if err := cfg.Kind.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := parser.ValidateDeviceName(cfg.UID); err != nil {
		return nil, fmt.Errorf("claim uid %q: %w: %w", cfg.UID, ErrInvalidConfig, err)
	}
	if len(cfg.Devices) == 0 {
		return nil, fmt.Errorf("claim %s: no devices: %w", cfg.UID, ErrInvalidConfig)
	}
	spec := &specs.Spec{Kind: cfg.Kind.String()}
	shared := containerPaths{} // across the spec's edits
	if err := addShared(spec, cfg.SharedNodes, cfg.Mounts, shared); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, d := range cfg.Devices {
		what := fmt.Sprintf("claim device %q", d.Name)
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", what, ErrInvalidConfig, err)
		}
		if names[d.Name] {
			return nil, fmt.Errorf("%s twice: %w", what, ErrInvalidConfig)
		}
		names[d.Name] = true
		dev := specs.Device{Name: d.Name}
		own := map[string]bool{}
		for _, n := range d.Nodes {
			node, err := deviceNode(what, n.Path, n.HostNode)
			if err != nil {
				return nil, err
			}
			if err := checkPath(n.Path); err != nil {
				return nil, fmt.Errorf("%s: container path: %w", what, err)
			}
			if other, dup := shared[n.Path]; dup || own[n.Path] {
				if !dup {
					other = "another of its nodes"
				}
				return nil, fmt.Errorf("%s: container path %s is also %s: %w", what, n.Path, other, ErrInvalidConfig)
			}
			own[n.Path] = true
			dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, node)
		}
		for _, k := range slices.Sorted(maps.Keys(d.Envs)) {
			if k == "" || strings.Contains(k, "=") {
				return nil, fmt.Errorf("%s: environment variable %q: %w", what, k, ErrInvalidConfig)
			}
			dev.ContainerEdits.Env = append(dev.ContainerEdits.Env, k+"="+d.Envs[k])
		}
		spec.Devices = append(spec.Devices, dev)
	}
	return finish(spec)
}

// ClaimWriter writes and removes the specs of claims, one file per claim,
// in a spec directory, for one Owner, with the guarantees of Writer but
// one: each write replaces the file atomically and only the owner's files
// are replaced or removed (ErrForeignSpec), but nothing is flushed to
// disk. A claim's spec is derived from its record, which the driver
// commits to its store first and which is what lasts: the driver writes
// the spec again when it is gone or damaged (Exists), as after a reboot,
// when the spec directory (/var/run/cdi) is a tmpfs anyway, and removes a
// spec without a prepared record. The file of claim uid is
// "<vendor>-<class>_<uid>.yaml", the CDI library's name of a transient
// spec (GenerateTransientSpecName). It is safe for concurrent use.
type ClaimWriter struct {
	dir   string
	kind  Kind
	owner Owner
	mu    sync.Mutex
}

// NewClaimWriter returns the ClaimWriter of kind's claim specs for owner
// in dir, creating dir as NewWriter does.
func NewClaimWriter(dir string, kind Kind, owner Owner) (*ClaimWriter, error) {
	if err := kind.Validate(); err != nil {
		return nil, err
	}
	if owner.ID == "" {
		return nil, fmt.Errorf("cdi claim spec writer: no owner: %w", ErrInvalidConfig)
	}
	if err := makeSpecDir(dir); err != nil {
		return nil, err
	}
	return &ClaimWriter{dir: dir, kind: kind, owner: owner}, nil
}

// Dir returns the spec directory.
func (w *ClaimWriter) Dir() string { return w.dir }

// Kind returns the kind of the specs.
func (w *ClaimWriter) Kind() Kind { return w.kind }

// prefix starts the file names of the kind's claim specs.
func (w *ClaimWriter) prefix() string { return w.kind.Vendor + "-" + w.kind.Class + "_" }

// Path returns the spec file of claim uid.
func (w *ClaimWriter) Path(uid string) string {
	return filepath.Join(w.dir, w.prefix()+uid+".yaml")
}

// tmpPrefix starts the names of the writer's temporary files (not .yaml:
// runtimes skip them).
func (w *ClaimWriter) tmpPrefix() string { return "." + w.kind.Vendor + "-" + w.kind.Class + ".tmp-" }

// Write builds the spec of cfg (BuildClaim; cfg.Kind must be zero or the
// writer's) and makes it the content of Path(cfg.UID), as Writer.Write.
func (w *ClaimWriter) Write(cfg ClaimConfig) error {
	if cfg.Kind != (Kind{}) && cfg.Kind != w.kind {
		return fmt.Errorf("claim config of CDI kind %s given to the writer of %s: %w", cfg.Kind, w.kind, ErrInvalidConfig)
	}
	cfg.Kind = w.kind
	spec, err := BuildClaim(cfg)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	path := w.Path(cfg.UID)
	if old, err := os.ReadFile(path); err == nil && damaged(old) {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove damaged cdi claim spec: %w", err)
		}
	}
	return writeOwned(w.dir, path, w.tmpPrefix(), w.owner, spec, false)
}

// damaged reports whether the content of a claim's spec file is what a
// crash of the machine leaves of a spec that never reached the disk: empty,
// or not YAML. Nobody else writes files of the claim's name (its UID is
// the API server's), so the writer replaces it.
func damaged(data []byte) bool {
	if len(bytes.TrimSpace(bytes.Trim(data, "\x00"))) == 0 {
		return true
	}
	var v any
	return yaml.Unmarshal(data, &v) != nil
}

// Exists reports whether the spec of claim uid is there and the CDI
// library loads it. A spec it cannot load (cut short by a crash of the
// machine before it reached the disk) is not: it is written again.
func (w *ClaimWriter) Exists(uid string) (bool, error) {
	path := w.Path(uid)
	_, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("cdi claim spec: %w", err)
	}
	if _, err := cdilib.ReadSpec(path, 0); err != nil {
		return false, nil
	}
	return true, nil
}

// Remove removes the spec of claim uid: true if there was one. A missing spec is not an error (unprepare is idempotent);
// a spec of another owner is left, with an error wrapping ErrForeignSpec.
func (w *ClaimWriter) Remove(uid string) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	path := w.Path(uid)
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read cdi claim spec: %w", err)
	}
	if err := checkOwner(w.owner, path, old); err != nil {
		return false, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("remove cdi claim spec: %w", err)
	}
	return true, nil
}

// UIDs returns the claims whose specs of the writer's kind are in the
// directory, sorted, whoever wrote them: what a restarted driver compares
// with the claims it has prepared. Temporary files a crashed writer left
// are removed on the way.
func (w *ClaimWriter) UIDs() ([]string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, fmt.Errorf("list cdi spec directory %q: %w", w.dir, err)
	}
	var uids []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, w.tmpPrefix()) {
			if err := os.Remove(filepath.Join(w.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove temporary cdi claim spec: %w", err))
			}
			continue
		}
		rest, ok := strings.CutPrefix(name, w.prefix())
		if !ok {
			continue
		}
		if uid, ok := strings.CutSuffix(rest, ".yaml"); ok && uid != "" {
			uids = append(uids, uid)
		}
	}
	return uids, errors.Join(errs...)
}
