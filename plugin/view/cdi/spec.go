package cdi

import (
	"bytes"
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Defaults and fixed values of the plugin's CDI spec.
const (
	// DefaultSpecDir is the spec directory: the dynamic-spec directory CDI
	// runtimes scan by default (the library's DefaultDynamicDir).
	DefaultSpecDir = "/var/run/cdi"
	// DefaultNodeSource is the host device node that backs a virtual GPU's
	// device nodes unless GPU.HostNode or DeviceNode.HostNode names another:
	// a character device every host has, harmless to open.
	DefaultNodeSource = "/dev/null"
	// ControlDevicePath and UVMDevicePath are the container paths of the
	// device nodes every NVIDIA GPU container gets besides its GPUs' own.
	ControlDevicePath = "/dev/nvidiactl"
	UVMDevicePath     = "/dev/nvidia-uvm"
	// MaxMinor is the highest GPU minor number: NVIDIA's driver gives its
	// control device minor 255, so GPUs use 0-254.
	MaxMinor = 254
	// DevicePermissions are the cgroup permissions of every device node of
	// the spec: read and write, no mknod. Without them a runtime allows
	// "rwm". The cgroup device controller checks open and mknod only: a
	// stat, ls or [ -c ] passes with any permissions, and NVIDIA's driver
	// library and nvidia-smi open /dev/nvidiactl and /dev/nvidia<N>
	// read-write, so "r" would turn their probe into EPERM; the runtime
	// creates the node, so the container never needs mknod. The device
	// plugin API's answer uses the same (plugin.DeviceNode's default).
	DevicePermissions = "rw"
)

// Kind is the kind of a CDI spec, "<vendor>/<class>": the first part of
// its devices' fully qualified names ("<vendor>/<class>=<device>") and,
// through the CDI library's GenerateSpecName, of its file's name. The
// plugin's kind is its resource name (KindOf): the resource name's domain
// is the vendor, its name the class. A Kind is a comparable value; the zero
// Kind is not valid (Config reads it as DefaultKind).
type Kind struct {
	Vendor, Class string
}

// DefaultKind is the kind of the default resource unicore.mcyou.cc/gpu:
// its spec file is unicore.mcyou.cc-gpu.yaml and its devices are named
// unicore.mcyou.cc/gpu=<id>.
var DefaultKind = Kind{Vendor: "unicore.mcyou.cc", Class: "gpu"}

// KindOf returns the kind of the extended resource name "<domain>/<name>":
// vendor domain, class name. A name that does not make a valid CDI kind
// (the CDI library's rules: vendor and class begin with a letter, end with
// a letter or digit, and hold only letters, digits, '-', '_' and '.') is an
// error wrapping ErrInvalidKind that says which part breaks which rule. A
// class with a '.' needs cdiVersion 0.6.0, which runtimes built with CDI
// library versions before 0.6 (containerd 1.7.0, say) do not read; Build
// writes the lowest version its spec needs.
func KindOf(resourceName string) (Kind, error) {
	vendor, class, ok := strings.Cut(resourceName, "/")
	if !ok {
		return Kind{}, fmt.Errorf("resource name %q has no '/' to split into a CDI vendor and class: %w", resourceName, ErrInvalidKind)
	}
	k := Kind{Vendor: vendor, Class: class}
	if err := k.Validate(); err != nil {
		return Kind{}, err
	}
	return k, nil
}

// Validate checks k with the CDI library's vendor and class rules; an error
// wraps ErrInvalidKind.
func (k Kind) Validate() error {
	if err := parser.ValidateVendorName(k.Vendor); err != nil {
		return fmt.Errorf("%w %q: vendor %q: %w", ErrInvalidKind, k.String(), k.Vendor, err)
	}
	if err := parser.ValidateClassName(k.Class); err != nil {
		return fmt.Errorf("%w %q: class %q: %w", ErrInvalidKind, k.String(), k.Class, err)
	}
	return nil
}

// String returns "<vendor>/<class>", the spec's kind field.
func (k Kind) String() string { return k.Vendor + "/" + k.Class }

// SpecFileName returns the file name of k's spec in a spec directory: the
// CDI library's name for a vendor/class spec (GenerateSpecName,
// "<vendor>-<class>") with the YAML extension runtimes read.
func (k Kind) SpecFileName() string { return k.Vendor + "-" + k.Class + ".yaml" }

// QualifiedName returns the fully qualified CDI name of the device id,
// "<vendor>/<class>=<id>", without checking id.
func (k Kind) QualifiedName(id string) string { return parser.QualifiedName(k.Vendor, k.Class, id) }

// QualifiedNames returns the fully qualified CDI names of the device ids, in
// the same order: what Allocate answers in CdiDevices. An id that is not a
// valid CDI device name is an error wrapping ErrInvalidConfig.
func (k Kind) QualifiedNames(ids []string) ([]string, error) {
	names := make([]string, len(ids))
	for i, id := range ids {
		if err := parser.ValidateDeviceName(id); err != nil {
			return nil, fmt.Errorf("device id %q: %w: %w", id, ErrInvalidConfig, err)
		}
		names[i] = k.QualifiedName(id)
	}
	return names, nil
}

// orDefault returns k, or DefaultKind for the zero Kind.
func (k Kind) orDefault() Kind {
	if k == (Kind{}) {
		return DefaultKind
	}
	return k
}

// MountOptions are the options of every mount of the spec: read-only, no
// setuid binaries or device files through it, a recursive bind mount that
// propagates nothing (as NVIDIA's CDI specs mount driver files).
var MountOptions = []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}

// GPU is one virtual GPU of the spec. The zero value is not valid: ID is
// required.
type GPU struct {
	// ID is the GPU's device id, also its CDI device name, e.g. "fake-0". It
	// must be a valid CDI device name: letters, digits, '-', '_', '.', ':',
	// beginning and ending with a letter or digit.
	ID string
	// Minor is the GPU's minor number: the container gets /dev/nvidia<Minor>.
	// 0 to MaxMinor, distinct per GPU.
	Minor int
	// HostNode is the host device node that backs /dev/nvidia<Minor>: an
	// absolute path to a character or block device. Default DefaultNodeSource.
	HostNode string
}

// DevicePath returns the GPU's device node path in a container,
// "/dev/nvidia<minor>".
func (g GPU) DevicePath() string { return "/dev/nvidia" + strconv.Itoa(g.Minor) }

// DeviceNode is a device node the spec adds to every container that gets at
// least one of its GPUs.
type DeviceNode struct {
	// Path is the node's absolute path in the container, e.g. /dev/nvidiactl.
	Path string
	// HostNode is the host device node that backs it. Default
	// DefaultNodeSource.
	HostNode string
}

// Mount is a read-only bind mount the spec adds to every container that gets
// at least one of its GPUs. Both paths are absolute; the host path need not
// exist when the spec is written, but must when a container is created.
type Mount struct {
	HostPath      string
	ContainerPath string
}

// Config is what Build turns into a spec. The zero value is not valid: a
// spec needs at least one GPU.
type Config struct {
	// Kind is the spec's kind; the zero Kind means DefaultKind.
	Kind Kind
	// GPUs are the spec's devices, one per GPU, in any order.
	GPUs []GPU
	// SharedNodes are added once to every container that gets GPUs, e.g.
	// DefaultSharedNodes(DefaultNodeSource).
	SharedNodes []DeviceNode
	// Mounts are added once to every container that gets GPUs, in this
	// order (a mount inside another comes after it): the nvidia-smi binary
	// and the status directory.
	Mounts []Mount
}

// DefaultSharedNodes returns /dev/nvidiactl and /dev/nvidia-uvm, both backed
// by hostNode ("" means DefaultNodeSource).
func DefaultSharedNodes(hostNode string) []DeviceNode {
	return []DeviceNode{{Path: ControlDevicePath, HostNode: hostNode}, {Path: UVMDevicePath, HostNode: hostNode}}
}

// Build returns the CDI spec of cfg (see the package doc), checked with the
// CDI library's validation of names, versions and container edits. It stats
// every host device node: one that is missing or not a device node is an
// error wrapping ErrDeviceNode. Other bad input wraps ErrInvalidConfig. The
// result depends only on cfg (and on the host nodes existing).
func Build(cfg Config) (*specs.Spec, error) {
	if len(cfg.GPUs) == 0 {
		return nil, fmt.Errorf("no GPUs: %w", ErrInvalidConfig)
	}
	gpus := slices.Clone(cfg.GPUs)
	slices.SortFunc(gpus, func(a, b GPU) int { return cmp.Or(cmp.Compare(a.Minor, b.Minor), cmp.Compare(a.ID, b.ID)) })
	paths := containerPaths{}
	kind := cfg.Kind.orDefault()
	if err := kind.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	spec := &specs.Spec{Kind: kind.String()}
	ids := map[string]bool{}
	for _, g := range gpus {
		what := fmt.Sprintf("gpu %q", g.ID)
		if err := parser.ValidateDeviceName(g.ID); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", what, ErrInvalidConfig, err)
		}
		if ids[g.ID] {
			return nil, fmt.Errorf("%s twice: %w", what, ErrInvalidConfig)
		}
		ids[g.ID] = true
		if g.Minor < 0 || g.Minor > MaxMinor {
			return nil, fmt.Errorf("%s: minor number %d not in 0-%d: %w", what, g.Minor, MaxMinor, ErrInvalidConfig)
		}
		node, err := deviceNode(what, g.DevicePath(), g.HostNode)
		if err != nil {
			return nil, err
		}
		if err := paths.claim(node.Path, what); err != nil {
			return nil, err
		}
		spec.Devices = append(spec.Devices, specs.Device{
			Name:           g.ID,
			ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node}},
		})
	}
	if err := addShared(spec, cfg.SharedNodes, cfg.Mounts, paths); err != nil {
		return nil, err
	}
	return finish(spec)
}

// containerPaths maps the container paths of a spec's edits to what uses
// each, so that a container never gets one path twice.
type containerPaths map[string]string

// claim records that what uses path, which must be absolute and clean and
// not used already (an error naming both users).
func (p containerPaths) claim(path, what string) error {
	if err := checkPath(path); err != nil {
		return fmt.Errorf("%s: container path: %w", what, err)
	}
	if other, dup := p[path]; dup {
		return fmt.Errorf("%s: container path %s is also %s: %w", what, path, other, ErrInvalidConfig)
	}
	p[path] = what
	return nil
}

// addShared adds the device nodes and mounts every container of the spec
// gets to its container edits, their paths claimed in paths.
func addShared(spec *specs.Spec, nodes []DeviceNode, mounts []Mount, paths containerPaths) error {
	for _, n := range nodes {
		what := "shared device node " + n.Path
		node, err := deviceNode(what, n.Path, n.HostNode)
		if err != nil {
			return err
		}
		if err := paths.claim(n.Path, what); err != nil {
			return err
		}
		spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes, node)
	}
	for _, m := range mounts {
		what := "mount of " + m.HostPath
		if err := checkPath(m.HostPath); err != nil {
			return fmt.Errorf("%s: host path: %w", what, err)
		}
		if err := paths.claim(m.ContainerPath, what); err != nil {
			return err
		}
		spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, &specs.Mount{
			HostPath:      m.HostPath,
			ContainerPath: m.ContainerPath,
			Options:       slices.Clone(MountOptions),
		})
	}
	return nil
}

// finish sets the spec's CDI version, the lowest that has what it uses,
// and checks it as the CDI library would (validate).
func finish(spec *specs.Spec) (*specs.Spec, error) {
	version, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("cdi version: %w: %w", ErrInvalidSpec, err)
	}
	spec.Version = version
	if err := validate(spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// validate checks spec as the CDI library checks a spec it loads, short of
// reading a file (Writer.Write also loads the file it wrote with the
// library's ReadSpec before it replaces the spec).
func validate(spec *specs.Spec) error {
	if err := specs.ValidateVersion(spec); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	vendor, class := parser.ParseQualifier(spec.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return fmt.Errorf("kind %q: %w: %w", spec.Kind, ErrInvalidSpec, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return fmt.Errorf("kind %q: %w: %w", spec.Kind, ErrInvalidSpec, err)
	}
	if err := (&cdilib.ContainerEdits{ContainerEdits: &spec.ContainerEdits}).Validate(); err != nil {
		return fmt.Errorf("spec edits: %w: %w", ErrInvalidSpec, err)
	}
	for i := range spec.Devices {
		d := &spec.Devices[i]
		if err := (&cdilib.ContainerEdits{ContainerEdits: &d.ContainerEdits}).Validate(); err != nil {
			return fmt.Errorf("device %q: %w: %w", d.Name, ErrInvalidSpec, err)
		}
	}
	return nil
}

// deviceNode returns the spec's node for container path backed by hostNode
// ("" means DefaultNodeSource), after checking that hostNode is a device
// node. HostPath is left out when it equals the container path.
func deviceNode(what, path, hostNode string) (*specs.DeviceNode, error) {
	if hostNode == "" {
		hostNode = DefaultNodeSource
	}
	if err := checkPath(hostNode); err != nil {
		return nil, fmt.Errorf("%s: host device node: %w", what, err)
	}
	// Lstat, as the CDI library does when it injects the node: a symbolic
	// link is not a device node to it.
	fi, err := os.Lstat(hostNode)
	if err != nil {
		return nil, fmt.Errorf("%s: %s backed by %s: %w: %w", what, path, hostNode, ErrDeviceNode, err)
	}
	if fi.Mode()&fs.ModeDevice == 0 {
		return nil, fmt.Errorf("%s: %s backed by %s: %w: it is a %s, not a character or block device", what, path, hostNode, ErrDeviceNode, describeType(fi.Mode()))
	}
	node := &specs.DeviceNode{Path: path, Permissions: DevicePermissions}
	if hostNode != path {
		node.HostPath = hostNode
	}
	return node, nil
}

func describeType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	default:
		return m.Type().String()
	}
}

// checkPath requires an absolute, clean path.
func checkPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty path: %w", ErrInvalidConfig)
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%q is not an absolute, clean path: %w", p, ErrInvalidConfig)
	}
	return nil
}

// Marshal encodes spec as the YAML document a Writer writes: the CDI
// library's field names in their order, indented by two spaces.
func Marshal(spec *specs.Spec) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(spec); err != nil {
		return nil, fmt.Errorf("encode cdi spec: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode cdi spec: %w", err)
	}
	return buf.Bytes(), nil
}
