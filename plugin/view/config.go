package view

import (
	"slices"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/cdi"
)

// Config is what a container of the plugin's GPUs gets besides its
// environment, and where the host files behind it are. The options package
// fills it; every path is absolute and clean. It is a plain value.
type Config struct {
	// DeviceListStrategies says how containers are told their devices, in
	// the order given, without repeats (default [envvar]).
	DeviceListStrategies []DeviceListStrategy
	// NvidiaSMI mounts the plugin's nvidia-smi (installed in ToolsDir)
	// read-only at /usr/bin/nvidia-smi in containers (default true).
	NvidiaSMI bool
	// VisibleDevicesEnv sets NVIDIA_VISIBLE_DEVICES to the containers' GPU
	// UUIDs (default false).
	VisibleDevicesEnv bool
	// DeviceNodes gives containers /dev/nvidia<minor> per GPU,
	// /dev/nvidiactl and /dev/nvidia-uvm in the Allocate answer (default
	// false).
	DeviceNodes bool
	// DeviceNodeSource is the host device node behind every container
	// device node (default /dev/null); with DeviceNodes or the cdi-cri
	// strategy, one of the harmless character devices, or, acknowledged
	// (-allow-unsafe-device-node-source), another character device; never
	// a block device.
	DeviceNodeSource string
	// ToolsDir is the host directory nvidia-smi is installed into (default
	// bin next to the state file).
	ToolsDir string
	// StatusDir is the host directory of the GPU status files, status next
	// to the state file.
	StatusDir string
	// CDISpecDir is the CDI spec directory (default /var/run/cdi); written
	// only with the cdi-cri strategy.
	CDISpecDir string
	// CDIKind is the CDI kind of the spec and of the device names in the
	// Allocate answer with the cdi-cri strategy: the resource name's
	// (cdi.KindOf; cdi.DefaultKind for the default resource), whatever the
	// sharing renames. The zero Kind without cdi-cri.
	CDIKind cdi.Kind
	// Owner names the instance whose CDI specs these are: its state file,
	// which one process holds at a time.
	Owner string
	// LoadSockets gives every allocation a load socket in LoadSocketDir,
	// mounted at loadsock.ContainerDir (-telemetry-writable).
	LoadSockets bool
	// LoadSocketDir is the host directory of the per-allocation load
	// sockets, load next to the state file.
	LoadSocketDir string
}

// DeviceListStrategy is how the plugin tells a container its devices, by
// NVIDIA's names.
type DeviceListStrategy string

// Device list strategies. NVIDIA's volume-mounts and cdi-annotations are
// not supported.
const (
	// DeviceListEnvVar passes the devices in environment variables, the
	// default.
	DeviceListEnvVar DeviceListStrategy = "envvar"
	// DeviceListCDICRI passes CDI device names in the CRI's CDIDevices
	// field.
	DeviceListCDICRI DeviceListStrategy = "cdi-cri"
)

// Uses reports whether the strategies include s.
func (c *Config) Uses(s DeviceListStrategy) bool { return slices.Contains(c.DeviceListStrategies, s) }
