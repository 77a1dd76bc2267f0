// Package cdi describes the plugin's virtual GPUs as a Container Device
// Interface (CDI) spec: the file a CDI-enabled container runtime (containerd
// 1.7+ and 2.x, CRI-O) reads to add device nodes and mounts to a container
// when the kubelet passes it CDI device names from a device plugin's Allocate
// answer (ContainerAllocateResponse.CdiDevices, -device-list-strategy=cdi-cri).
//
// # The spec
//
// One spec holds one CDI device per GPU, named by the GPU's device id. Its
// kind is the plugin's resource name (KindOf: the domain is the vendor, the
// name the class), so two plugins with two resource names write two specs,
// and the default resource's is DefaultKind: unicore.mcyou.cc/gpu, its
// devices fully qualified unicore.mcyou.cc/gpu=fake-0.
// The CDI specification applies a device's containerEdits for each requested
// device and the spec's own containerEdits once per container that gets at
// least one device of the spec. So:
//
//   - a device carries only its GPU's own edit: its device node
//     /dev/nvidia<minor>, backed by a host device node (DefaultNodeSource,
//     /dev/null, unless GPU.HostNode names another);
//   - the spec's containerEdits carry what every GPU container shares, once:
//     the shared device nodes (/dev/nvidiactl and /dev/nvidia-uvm, see
//     DefaultSharedNodes) and the read-only bind mounts (the nvidia-smi binary
//     and the status directory).
//
// The spec has no environment variables: CDI joins the env of all requested
// devices in order and a later KEY=value overwrites an earlier one, so one
// variable listing all of a container's GPUs (VIRTUAL_GPU_IDS) cannot come
// from per-device edits. The plugin keeps those in its Allocate answer.
//
// Device nodes carry the cgroup permissions DevicePermissions ("rw", not
// the runtimes' default "rwm") and no type or major/minor numbers: the
// runtime reads them from the host node when it creates the container (so
// they are always the real node's), and fails that container if the node
// has gone. Build refuses
// a host node that is missing or not a device node up front. All host paths
// are paths as the container runtime sees them (the node's mount namespace),
// not as a containerized plugin sees them.
//
// The spec's cdiVersion is the lowest version that can express it
// (specs-go MinimumRequiredVersion), so older runtimes read it too. The
// content is a pure function of the Config: GPUs are ordered by minor
// number, shared nodes and mounts keep the given order.
//
// # The file
//
// A Writer writes the spec of one kind into a spec directory
// (DefaultSpecDir, /var/run/cdi, one of the directories runtimes scan by
// default) as Kind.SpecFileName, unicore.mcyou.cc-gpu.yaml for the default
// kind: the name the CDI library gives a vendor/class spec
// (GenerateSpecName) plus the YAML extension runtimes read. The file starts
// with an owner mark, a YAML comment naming the instance that wrote it (the
// plugin's state file); a Writer replaces only a file its Owner wrote, or
// an unmarked one its Owner adopts (a spec of an earlier version of the
// same instance), and refuses anything else with ErrForeignSpec, so two
// instances sharing a spec directory and a kind never overwrite each
// other's spec. Each write is atomic (a temporary file whose name runtimes ignore, mode
// 0644, fsync, validated by the CDI library's own loader, renamed over the
// spec, directory fsync), and a write of identical content leaves the file
// alone, so a runtime watching the directory sees no change. Nothing removes
// the file, not at shutdown, nor when the resource name changes (the new
// kind gets its own file): the kubelet replays cached Allocate answers
// (with their CDI names, of the kind they were given under) on container
// restarts and after its own restart, so the spec must outlive the plugin
// process and its configuration.
//
// Validation uses the CNCF CDI library (tags.cncf.io/container-device-interface),
// the reference implementation of the specification that containerd and
// CRI-O use to load specs and inject devices: names, kind, versions and edits
// are checked by the same code that will read the file.
package cdi
