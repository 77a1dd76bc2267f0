package kube

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// ConfigLabel is the Node label that names the node's profile, as
// nvidia.com/device-plugin.config names the configuration of NVIDIA's
// device plugin. The cluster operator sets it
// (`kubectl label node <node> unicore.mcyou.cc/device-plugin.config=<profile>`);
// the plugin only reads it.
const ConfigLabel = "unicore.mcyou.cc/device-plugin.config"

// MIGConfigLabel is the Node label that names the node's MIG layout, as
// GPU Operator's nvidia.com/mig.config does: a layout of the mig-parted
// configuration (-mig-config-file or the built-in one) that replaces
// -mig-config. The cluster operator sets it; the plugin only reads it and
// says in LabelMIGConfigState whether it took effect.
const MIGConfigLabel = "unicore.mcyou.cc/mig.config"

// LabelPrefix starts the GPU labels this package writes. It mirrors the
// "nvidia.com/gpu." labels of NVIDIA's GPU feature discovery (GFD). With
// the MIG labels (GFD's "nvidia.com/mig-<profile>.", mig.capable and
// mig.strategy, and mig-manager's mig.config.state) they are the labels
// it owns (Owned): it writes or removes no other.
const LabelPrefix = "unicore.mcyou.cc/gpu."

// migResourcePrefix starts the labels of a MIG resource of the mixed
// strategy, as GFD's "nvidia.com/mig-1g.10gb.count".
const migResourcePrefix = "unicore.mcyou.cc/mig-"

// The MIG labels of the node as a whole.
const (
	// LabelMIGCapable says whether the GPUs' product has MIG (GFD's
	// nvidia.com/mig.capable).
	LabelMIGCapable = "unicore.mcyou.cc/mig.capable"
	// LabelMIGStrategy is the device plugin's MIG strategy, single or
	// mixed, while a layout is in force (GFD's nvidia.com/mig.strategy).
	LabelMIGStrategy = "unicore.mcyou.cc/mig.strategy"
	// LabelMIGConfigState says whether the layout MIGConfigLabel names is
	// in force: MIGStateSuccess or MIGStateFailed (mig-manager's
	// nvidia.com/mig.config.state); absent without that label.
	LabelMIGConfigState = "unicore.mcyou.cc/mig.config.state"
)

// Values of LabelMIGConfigState.
const (
	MIGStateSuccess = "success"
	MIGStateFailed  = "failed"
)

// Owned reports whether k is a label this package writes and removes:
// LabelPrefix, a MIG resource's, or one of the node's MIG labels. The
// labels the operator sets (ConfigLabel, MIGConfigLabel) are not.
func Owned(k string) bool {
	switch k {
	case LabelMIGCapable, LabelMIGStrategy, LabelMIGConfigState:
		return true
	}
	return strings.HasPrefix(k, LabelPrefix) || strings.HasPrefix(k, migResourcePrefix)
}

// The GPU labels GPULabels computes. The first nine are GFD's, with GFD's
// meaning and value format; the last three are ours.
const (
	// LabelCount is the number of physical GPUs ("8"), replicas not counted.
	LabelCount = LabelPrefix + "count"
	// LabelProduct is the GPU's product name as nvidia-smi prints it,
	// sanitized as GFD does ("NVIDIA-A100-SXM4-40GB"), with "-SHARED"
	// appended when GPUs are shared under the same resource name.
	LabelProduct = LabelPrefix + "product"
	// LabelMemory is the memory of one GPU in MiB ("40960").
	LabelMemory = LabelPrefix + "memory"
	// LabelFamily is the architecture ("ampere", "ada-lovelace", "hopper").
	LabelFamily = LabelPrefix + "family"
	// LabelComputeMajor is the major CUDA compute capability ("8").
	LabelComputeMajor = LabelPrefix + "compute.major"
	// LabelComputeMinor is the minor CUDA compute capability ("0").
	LabelComputeMinor = LabelPrefix + "compute.minor"
	// LabelMachine is the machine type ("DGX-A100"): where GFD reads the
	// system's DMI product name, it is the topology's name in upper case,
	// sanitized like the product.
	LabelMachine = LabelPrefix + "machine"
	// LabelReplicas is the number of devices advertised per GPU: "1"
	// unless GPUs are shared.
	LabelReplicas = LabelPrefix + "replicas"
	// LabelSharingStrategy is SharingNone or SharingTimeSlicing.
	LabelSharingStrategy = LabelPrefix + "sharing-strategy"
	// LabelTopology is the preset the machine is ("dgx-a100"),
	// TopologyCustom for a topology file or TopologyGeneric for the
	// -devices=N layout.
	LabelTopology = LabelPrefix + "topology"
	// LabelNVLink is "true" when any two GPUs are linked by NVLink
	// (NVSwitch included), else "false".
	LabelNVLink = LabelPrefix + "nvlink"
	// LabelProfile is the profile in force; absent without profiles.
	LabelProfile = LabelPrefix + "profile"
)

// Values of LabelSharingStrategy, as GFD writes them.
const (
	SharingNone        = "none"
	SharingTimeSlicing = "time-slicing"
)

// Values of LabelTopology other than a preset's name.
const (
	// TopologyCustom is a machine read from a file (YAML or nvidia-smi
	// topo -m output).
	TopologyCustom = "custom"
	// TopologyGeneric is the generic layout of -devices=N without
	// -topology.
	TopologyGeneric = "generic"
)

// sharedSuffix is what GFD appends to the product of shared GPUs.
const sharedSuffix = "-SHARED"

// LabelSpec is what the GPU labels describe. The zero value is not valid:
// Machine is required.
type LabelSpec struct {
	// Machine is the fake machine the plugin advertises. Required.
	Machine *topology.Machine
	// Topology is the -topology value the machine came from: "" for the
	// generic layout, a preset name (topology.PresetNames) or a file path.
	// It decides LabelTopology; the path itself never shows in a label.
	Topology string
	// Replicas is the number of devices advertised per GPU; 0 and 1 both
	// mean GPUs are not shared. At most topology.MaxReplicas.
	Replicas int
	// Renamed reports that shared GPUs are advertised under a resource name
	// of their own, so LabelProduct keeps the plain product name (GFD's
	// rule: "-SHARED" only for shared GPUs that keep the resource name).
	Renamed bool
	// Profile is the profile in force, "" without profiles (LabelProfile
	// is then absent). It must be a valid label value.
	Profile string
	// MIG is what the MIG labels describe.
	MIG MIGSpec
}

// MIGSpec is what the MIG labels describe, as GFD labels a node with MIG:
// the zero value is a product without MIG.
type MIGSpec struct {
	// Capable reports that the product has MIG (LabelMIGCapable=true;
	// absent otherwise).
	Capable bool
	// Strategy is the device plugin's strategy while a layout is in force,
	// "single" or "mixed"; "" writes no MIG device labels.
	Strategy string
	// Whole is the number of GPUs advertised whole: the GPUs' count
	// under mixed.
	Whole int
	// Profiles are the advertised MIG devices by profile: under single the
	// one profile, described by the GPU labels; under mixed one resource's
	// labels each, under Resource ("unicore.mcyou.cc/mig-1g.10gb").
	Profiles []MIGProfileSpec
}

// MIGProfileSpec describes the advertised MIG devices of one profile, with
// the attributes GFD labels (NVML's MIG device attributes).
type MIGProfileSpec struct {
	// Name is the profile (1g.10gb) and Resource the resource its devices
	// are advertised under.
	Name, Resource string
	// Count is the number of its devices on the node.
	Count int
	// MemoryMiB, Multiprocessors, Slices (the GPU and the compute
	// instance's: the "g" of the name) and the engines of one device.
	MemoryMiB, Multiprocessors, Slices           int
	CopyEngines, Decoders, Encoders, JPEGs, OFAs int
}

// GPULabels returns the labels a node with this machine and profile should
// carry under LabelPrefix, as GFD would label a node with those GPUs:
//
//	count             number of GPUs                        8
//	product           sanitized product name (+"-SHARED")   NVIDIA-A100-SXM4-40GB
//	memory            MiB per GPU                           40960
//	family            architecture                          ampere
//	compute.major     compute capability, major             8
//	compute.minor     compute capability, minor             0
//	machine           topology name, upper case, sanitized  DGX-A100
//	replicas          devices per GPU                       1
//	sharing-strategy  none or time-slicing                  none
//	topology          preset, custom or generic             dgx-a100
//	nvlink            any NVLink between GPUs               true
//	profile           profile in force (absent if none)     a100-shared
//
// Sanitizing is GFD's (every character but letters, digits, '-', '_', '.'
// and spaces is dropped, runs of spaces become one '-'), plus what GFD
// leaves to chance: the value is cut to 63 characters and stripped of
// leading and trailing '-', '_' and '.', so it is always a valid label
// value ("-SHARED" is kept whole). GFD's "-SHARED" rule: replicas ≥ 2 and
// not Renamed. Every value is checked; an error wraps ErrInvalidLabel.
// The function is pure and safe for concurrent use.
func GPULabels(s LabelSpec) (map[string]string, error) {
	m := s.Machine
	switch {
	case m.Len() == 0:
		return nil, fmt.Errorf("gpu labels: no machine: %w", ErrInvalidLabel)
	case s.Replicas < 0 || s.Replicas > topology.MaxReplicas:
		return nil, fmt.Errorf("gpu labels: %d replicas per GPU, want 0..%d: %w", s.Replicas, topology.MaxReplicas, ErrInvalidLabel)
	}
	g := m.GPUModel()
	replicas, strategy := max(s.Replicas, 1), SharingNone
	shared := replicas > 1
	if shared {
		strategy = SharingTimeSlicing
	}
	labels := map[string]string{
		LabelCount:           strconv.Itoa(m.Len()),
		LabelProduct:         productValue(g.Product, shared && !s.Renamed),
		LabelMemory:          strconv.Itoa(g.MemoryMiB),
		LabelFamily:          g.Family,
		LabelComputeMajor:    strconv.Itoa(g.Compute.Major),
		LabelComputeMinor:    strconv.Itoa(g.Compute.Minor),
		LabelMachine:         MachineType(m.Name()),
		LabelReplicas:        strconv.Itoa(replicas),
		LabelSharingStrategy: strategy,
		LabelTopology:        TopologyKind(s.Topology),
		LabelNVLink:          strconv.FormatBool(hasNVLink(m)),
	}
	if s.Profile != "" {
		labels[LabelProfile] = s.Profile
	}
	migLabels(labels, g.Product, s.MIG)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := checkLabel(k, labels[k]); err != nil {
			return nil, fmt.Errorf("gpu labels: %w", err)
		}
	}
	return labels, nil
}

// migLabels adds the MIG labels of spec to labels, as GFD writes them:
// mig.capable when the product has MIG (GFD writes false too; a node
// selector asks for true); with single the GPU labels describe the MIG devices
// (count, product "<product>-MIG-<profile>", memory, and the attributes);
// with mixed the GPUs' count is the whole GPUs' and each profile's
// resource has labels of its own (<resource>.count, .replicas, .product,
// .memory and the attributes).
func migLabels(labels map[string]string, product string, spec MIGSpec) {
	if spec.Capable {
		labels[LabelMIGCapable] = "true"
	}
	attrs := func(prefix string, p MIGProfileSpec) {
		for k, v := range map[string]int{
			"count": p.Count, "memory": p.MemoryMiB, "multiprocessors": p.Multiprocessors,
			"slices.gi": p.Slices, "slices.ci": p.Slices, "engines.copy": p.CopyEngines, "engines.decoder": p.Decoders,
			"engines.encoder": p.Encoders, "engines.jpeg": p.JPEGs, "engines.ofa": p.OFAs,
		} {
			labels[prefix+k] = strconv.Itoa(v)
		}
		labels[prefix+"product"] = productValue(product+"-MIG-"+p.Name, false)
	}
	switch spec.Strategy {
	case "single":
		labels[LabelMIGStrategy] = spec.Strategy
		if len(spec.Profiles) == 1 {
			attrs(LabelPrefix, spec.Profiles[0])
		}
	case "mixed":
		labels[LabelMIGStrategy] = spec.Strategy
		labels[LabelCount] = strconv.Itoa(spec.Whole)
		for _, p := range spec.Profiles {
			attrs(p.Resource+".", p)
			labels[p.Resource+".replicas"] = "1"
		}
	}
}

// TopologyKind returns the LabelTopology value for a -topology value: the
// preset's name for a preset, TopologyGeneric for "" and TopologyCustom for
// anything else (a file), with the rule topology.Resolve uses.
func TopologyKind(spec string) string {
	switch {
	case spec == "":
		return TopologyGeneric
	case slices.Contains(topology.PresetNames(), spec):
		return spec
	}
	return TopologyCustom
}

// MachineType returns the LabelMachine value for a machine name: the name
// in upper case, sanitized as a product name. For the presets: dgx-a100 →
// DGX-A100, hgx-h100 → HGX-H100, dgx2 → DGX2, dgx1-volta → DGX1-VOLTA;
// a file's machine gets its own name, the generic layout GENERIC-<n>.
func MachineType(name string) string {
	return sanitize(strings.ToUpper(name), validation.LabelValueMaxLength)
}

// productValue is the LabelProduct value: the sanitized product, cut so
// that the value, with "-SHARED" if shared, fits a label value. An empty
// sanitized product stays empty, without the suffix, as in GFD.
func productValue(product string, shared bool) string {
	if !shared {
		return sanitize(product, validation.LabelValueMaxLength)
	}
	p := sanitize(product, validation.LabelValueMaxLength-len(sharedSuffix))
	if p == "" {
		return ""
	}
	return p + sharedSuffix
}

// sanitize makes s a label value of at most maxLen characters: GFD's
// sanitise (keep letters, digits, '-', '_', '.', spaces; join the
// space-separated fields with '-'), then cut to maxLen and trimmed of
// non-alphanumerics at both ends.
func sanitize(s string, maxLen int) string {
	kept := strings.Map(func(r rune) rune {
		if isAlnum(r) || r == '-' || r == '_' || r == '.' || r == ' ' {
			return r
		}
		return -1
	}, s)
	v := strings.Join(strings.Fields(kept), "-")
	v = strings.TrimLeftFunc(v, func(r rune) bool { return !isAlnum(r) })
	if len(v) > maxLen {
		v = v[:maxLen] // ASCII only by now
	}
	return strings.TrimRightFunc(v, func(r rune) bool { return !isAlnum(r) })
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// hasNVLink reports whether any two GPUs of m share an NVLink.
func hasNVLink(m *topology.Machine) bool {
	n := m.Len()
	for i := range n {
		for j := i + 1; j < n; j++ {
			if m.Link(i, j).NVLinks > 0 {
				return true
			}
		}
	}
	return false
}

// checkLabel checks that k is one of our keys and a valid label key, and v
// a valid label value.
func checkLabel(k, v string) error {
	if err := checkKey(k); err != nil {
		return err
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return fmt.Errorf("label %s=%q: %s: %w", k, v, strings.Join(errs, "; "), ErrInvalidLabel)
	}
	return nil
}

// checkKey checks that k is ours (Owned) and a valid label key.
func checkKey(k string) error {
	if !Owned(k) {
		return fmt.Errorf("label %q: want the prefix %s or %s, or a MIG label of the node: %w", k, LabelPrefix, migResourcePrefix, ErrForeignLabel)
	}
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return fmt.Errorf("label key %q: %s: %w", k, strings.Join(errs, "; "), ErrInvalidLabel)
	}
	return nil
}

// SelectedMIGConfig returns the MIG layout the node's labels select: the
// value of MIGConfigLabel; ok is false when it is absent or empty (the
// configuration's own -mig-config applies).
func SelectedMIGConfig(labels map[string]string) (name string, ok bool) {
	name = labels[MIGConfigLabel]
	return name, name != ""
}

// SelectedProfile returns the profile the node's labels select: the value
// of ConfigLabel. ok is false when the label is absent or empty, which
// means "use the default profile", as NVIDIA's plugin falls back to its
// default configuration when its label is unset. It does not check that a
// profile of that name exists.
func SelectedProfile(labels map[string]string) (name string, ok bool) {
	name = labels[ConfigLabel]
	return name, name != ""
}

// LabelChanges returns what takes a node's labels current to desired, for
// our labels only: set holds the keys of desired whose value in current is
// missing or different, remove the keys with LabelPrefix in current that
// desired lacks (sorted). Both are empty when nothing needs to change.
// Labels without LabelPrefix in current are ignored; in desired they are
// an error wrapping ErrForeignLabel, as are invalid keys or values
// (ErrInvalidLabel).
func LabelChanges(current, desired map[string]string) (set map[string]string, remove []string, err error) {
	for k, v := range desired {
		if err := checkLabel(k, v); err != nil {
			return nil, nil, err
		}
		if cur, ok := current[k]; !ok || cur != v {
			if set == nil {
				set = make(map[string]string)
			}
			set[k] = v
		}
	}
	for k := range current {
		if _, ok := desired[k]; !ok && Owned(k) {
			remove = append(remove, k)
		}
	}
	slices.Sort(remove)
	return set, remove, nil
}

// LabelPatcher sets and removes labels of a Node; *Client implements it.
type LabelPatcher interface {
	// PatchNodeLabels sets the labels set and removes the labels remove of
	// Node name, and touches nothing else.
	PatchNodeLabels(ctx context.Context, name string, set map[string]string, remove []string) error
}

// SyncLabels makes the labels with LabelPrefix of Node name equal desired,
// given its current labels (as WatchNode delivers them): it sends one patch
// with exactly the keys to set and to remove, or nothing at all when they
// already match. It reports whether it patched. Errors are LabelChanges's
// or the patch's, wrapped.
func SyncLabels(ctx context.Context, p LabelPatcher, name string, current, desired map[string]string) (bool, error) {
	set, remove, err := LabelChanges(current, desired)
	if err != nil {
		return false, fmt.Errorf("sync labels of node %q: %w", name, err)
	}
	if len(set) == 0 && len(remove) == 0 {
		return false, nil
	}
	if err := p.PatchNodeLabels(ctx, name, set, remove); err != nil {
		return false, fmt.Errorf("sync labels: %w", err)
	}
	return true, nil
}
