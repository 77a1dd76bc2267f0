package view

import (
	"maps"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Container paths and variables of the view.
const (
	// nvidiaSMIContainerPath is where a container finds nvidia-smi.
	nvidiaSMIContainerPath = "/usr/bin/nvidia-smi"
	// nvidiaSMIName is the binary's name in -tools-dir: the multi-call
	// binary runs as nvidia-smi under that name (main).
	nvidiaSMIName = "nvidia-smi"
	// envVisibleDevices is NVIDIA's variable naming a container's GPUs
	// (-visible-devices-env); NVIDIA's plugin sets no CUDA_VISIBLE_DEVICES,
	// and neither does this one.
	envVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// selfExecutable is the running binary, the default source of the
	// installed nvidia-smi: readable even after the file was replaced or
	// deleted (an upgrade in place).
	selfExecutable = "/proc/self/exe"
	// toolTmpPrefix starts the names of the installer's temporary files.
	toolTmpPrefix = "." + nvidiaSMIName + ".tmp-"
)

// Container is what a container of some GPUs gets besides the stored
// environment of its allocation: more variables, mounts, device nodes, CDI
// device names and annotations. A kubelet API turns it into its own answer
// (the device plugin's ContainerAllocateResponse, a CDI spec of a claim).
type Container struct {
	// Envs are more environment variables. A name the stored record sets
	// too must have the same value.
	Envs map[string]string
	// Mounts are host paths mounted into the container.
	Mounts []Mount
	// DeviceNodes are host device files made available in the container.
	DeviceNodes []DeviceNode
	// CDIDevices are fully qualified CDI device names
	// ("vendor.com/class=name") the runtime injects.
	CDIDevices []string
	// Annotations are passed to the container runtime.
	Annotations map[string]string
}

// Mount is one bind mount of a Container.
type Mount struct {
	// ContainerPath is where it appears in the container; absolute, and
	// unique among the container's mounts and device nodes.
	ContainerPath string
	// HostPath is what is mounted; absolute.
	HostPath string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// DeviceNode is one device file of a Container.
type DeviceNode struct {
	// ContainerPath is the device file's path in the container, e.g.
	// /dev/nvidia0; absolute, and unique among the container's mounts and
	// device nodes.
	ContainerPath string
	// HostPath is the host's device file backing it; absolute.
	HostPath string
	// Permissions are the cgroup permissions, one or more of "r", "w" and
	// "m"; "" means "rw".
	Permissions string
}

// View is how one configuration answers for a container: its container
// settings (Config) over its GPU set. It is immutable and safe for
// concurrent use; build it with New.
type View struct {
	cfg     Config
	set     *gpuset.Set
	envvar  bool   // the envvar strategy: mounts and device nodes in the answer
	cdi     bool   // the cdi-cri strategy: CDI device names in the answer
	smiHost string // <tools-dir>/nvidia-smi on the host
	// migUUIDs are the UUIDs of the set's MIG devices by id, as the set
	// derives them (gpuset.Set.Specs).
	migUUIDs map[string]string
}

// New returns the view of cfg over set.
func New(cfg Config, set *gpuset.Set) *View {
	v := &View{cfg: cfg, set: set, envvar: cfg.Uses(DeviceListEnvVar), cdi: cfg.Uses(DeviceListCDICRI),
		smiHost: filepath.Join(cfg.ToolsDir, nvidiaSMIName)}
	for _, sp := range set.Specs() {
		if sp.MIG != "" && sp.UUID != "" {
			if v.migUUIDs == nil {
				v.migUUIDs = map[string]string{}
			}
			v.migUUIDs[sp.ID] = sp.UUID
		}
	}
	return v
}

// WithStored returns the view with the MIG devices' UUIDs as stored
// (a UUID is kept from when the device was first stored: after the node
// was renamed it differs from the one the set derives), for Answer and
// Claim to name what the status files name. v is unchanged.
func (v *View) WithStored(stored []store.Device) *View {
	w := *v
	w.migUUIDs = maps.Clone(v.migUUIDs)
	for _, d := range stored {
		if d.IsMIG() && d.UUID != "" && !d.Removed && w.migUUIDs != nil {
			if _, ok := w.migUUIDs[d.ID]; ok {
				w.migUUIDs[d.ID] = d.UUID
			}
		}
	}
	return &w
}

// Set returns the GPU set the view answers for.
func (v *View) Set() *gpuset.Set { return v.set }

// Config returns the view's settings.
func (v *View) Config() Config { return v.cfg }

// Env is the environment stored with an allocation of devs: the set's
// (gpuset.Set.Env) and, with load sockets, loadsock.EnvSocket, which says
// that the allocation has a load socket (Answer mounts it; the load
// sockets follow the records that have it), whatever the configuration in
// force later.
func (v *View) Env(devs []gpuset.Device) map[string]string {
	env := v.set.Env(devs)
	if v.cfg.LoadSockets {
		env = maps.Clone(env)
		env[loadsock.EnvSocket] = loadsock.ContainerPath
	}
	return env
}

// Answer returns what a container of devs (devices of the view's set,
// sorted by Index) gets for the allocation record seq whose stored
// environment is envs, its GPUs having the given UUIDs (by GPU index, as
// UUIDs reads them from the store; stored once and never changed, so the
// answer is a function of the record's devices). It adds:
//
//   - VIRTUAL_GPU_UUIDS, the GPUs' UUIDs in the order of VIRTUAL_GPU_IDS
//     (one per GPU: the names of their status files, a MIG device's its
//     GPU's), and with -visible-devices-env NVIDIA_VISIBLE_DEVICES, the
//     same list but for MIG devices, which are named by their own UUIDs
//     ("MIG-…", derived as the set derives them) as NVIDIA's plugin names
//     them; neither when a GPU has no UUID (no node identity);
//   - with the envvar strategy: nvidia-smi read-only at /usr/bin/nvidia-smi
//     (-nvidia-smi), the status directory read-only at /run/virtual-gpu,
//     and with -device-nodes /dev/nvidia<minor> per GPU, /dev/nvidiactl and
//     /dev/nvidia-uvm, all backed by the device node source, read-write
//     without mknod (cdi.DevicePermissions, as in the CDI spec);
//   - with the cdi-cri strategy: the GPUs' CDI device names, of the
//     kind of the resource name in force (the spec of that kind Files
//     writes carries the mounts and device nodes; an answer given under an
//     earlier resource name keeps naming that name's kind, whose spec
//     stays);
//   - for a record with a load socket (its variables have
//     loadsock.EnvSocket, -telemetry-writable), whatever the strategy: the
//     allocation's socket directory read-only at loadsock.ContainerDir.
//     The answer then differs per allocation (seq names the
//     directory).
func (v *View) Answer(uuids map[int]string, seq uint64, envs map[string]string, devs []gpuset.Device) (Container, error) {
	return v.answer(uuids, seq, envs, devs, v.envvar, v.cdi)
}

// Claim returns what a container of devs gets through a DRA claim, whose
// CDI spec carries it all: Answer's variables, and its mounts and device
// nodes as with the envvar strategy whatever the strategies in force (the
// device-list strategies are the device plugin's), without CDI device
// names of the device plugin's kind and without a load socket (DRA claims
// have none).
func (v *View) Claim(uuids map[int]string, devs []gpuset.Device) (Container, error) {
	return v.answer(uuids, 0, nil, devs, true, false)
}

func (v *View) answer(uuids map[int]string, seq uint64, envs map[string]string, devs []gpuset.Device, envvar, withCDI bool) (Container, error) {
	m := v.set.Machine()
	gpus := v.set.GPUs(devs)
	var spec Container
	if list, ok := joinUUIDs(gpus, uuids); ok {
		spec.Envs = map[string]string{status.EnvUUIDs: list}
		if v.cfg.VisibleDevicesEnv {
			if visible, ok := v.visibleDevices(gpus, uuids, devs); ok {
				spec.Envs[envVisibleDevices] = visible
			}
		}
	}
	if envvar {
		if v.cfg.NvidiaSMI {
			spec.Mounts = append(spec.Mounts, Mount{ContainerPath: nvidiaSMIContainerPath, HostPath: v.smiHost, ReadOnly: true})
		}
		spec.Mounts = append(spec.Mounts, Mount{ContainerPath: status.DefaultDir, HostPath: v.cfg.StatusDir, ReadOnly: true})
		if v.cfg.DeviceNodes {
			src := v.cfg.DeviceNodeSource
			spec.DeviceNodes = make([]DeviceNode, 0, len(gpus)+2)
			for _, i := range gpus {
				spec.DeviceNodes = append(spec.DeviceNodes, DeviceNode{ContainerPath: devicePath(minorOf(m, i)), HostPath: src, Permissions: cdi.DevicePermissions})
			}
			for _, p := range []string{cdi.ControlDevicePath, cdi.UVMDevicePath} {
				spec.DeviceNodes = append(spec.DeviceNodes, DeviceNode{ContainerPath: p, HostPath: src, Permissions: cdi.DevicePermissions})
			}
		}
	}
	if envs[loadsock.EnvSocket] != "" {
		spec.Mounts = append(spec.Mounts, Mount{ContainerPath: loadsock.ContainerDir, HostPath: loadsock.HostDir(v.cfg.LoadSocketDir, seq), ReadOnly: true})
	}
	if withCDI {
		ids := make([]string, len(gpus))
		for k, i := range gpus {
			ids[k] = topology.GPUID(i)
		}
		names, err := v.cfg.CDIKind.QualifiedNames(ids)
		if err != nil {
			return spec, err
		}
		spec.CDIDevices = names
	}
	return spec, nil
}

// visibleDevices is NVIDIA_VISIBLE_DEVICES for a container of devs on
// gpus: as NVIDIA's plugin sets it, the UUIDs of the MIG devices among
// devs ("MIG-…", in the order of devs) and of the whole GPUs, GPU by GPU;
// false if one has none.
func (v *View) visibleDevices(gpus []int, uuids map[int]string, devs []gpuset.Device) (string, bool) {
	migs := map[int][]string{}
	for _, d := range devs {
		if !topology.IsMIGID(d.ID) {
			continue
		}
		u := v.migUUIDs[d.ID]
		if u == "" {
			return "", false
		}
		i := v.set.GPU(d)
		migs[i] = append(migs[i], u)
	}
	if len(migs) == 0 {
		return joinUUIDs(gpus, uuids)
	}
	var list []string
	for _, i := range gpus {
		if m := migs[i]; m != nil {
			list = append(list, m...)
			continue
		}
		if uuids[i] == "" {
			return "", false
		}
		list = append(list, uuids[i])
	}
	return strings.Join(list, ","), true
}

// joinUUIDs joins the UUIDs of gpus with commas; false if one has none.
func joinUUIDs(gpus []int, uuids map[int]string) (string, bool) {
	var b strings.Builder
	for k, i := range gpus {
		u := uuids[i]
		if u == "" {
			return "", false
		}
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString(u)
	}
	return b.String(), len(gpus) > 0
}

// minorOf is the minor number of GPU i: the machine's, or, for a GPU the
// machine no longer has (held since an earlier configuration), its index,
// as topology numbers them.
func minorOf(m *topology.Machine, i int) int {
	if i < m.Len() {
		return m.MinorNumber(i)
	}
	return i
}

// devicePath is the device node of the GPU with the given minor number.
func devicePath(minor int) string { return "/dev/nvidia" + strconv.Itoa(minor) }
