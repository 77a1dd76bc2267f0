// Package mig models the MIG (Multi-Instance GPU) partitions of the fake
// GPUs: per product the GPU instance profiles NVIDIA documents, the
// layouts of NVIDIA's mig-parted configuration, and where a layout puts
// each MIG device. It is a pure library: no files, no logger, no state;
// everything is safe for concurrent use except modifying a Config.
//
// The plugin's options resolve -mig-config with it (Resolve on the
// built-in and -mig-config-file layouts), and plugin/gpuset turns the
// result into MIG devices (gpuset.MIG) advertised by -mig-strategy.
//
// # The partition model
//
// LookupProduct returns a Product by its nvidia-smi name ("NVIDIA H100
// 80GB HBM3", the key topology's GPU model uses): its memory and compute
// slices, its PCI id, and its Profiles as nvidia-smi mig -lgip lists them
// (name, GPU instance profile id, memory in MiB and memory slices, compute
// slices, multiprocessors, copy engines, decoders, encoders, JPEG, OFA,
// instances) with their valid placements as -lgipp lists them. A product
// the model lacks is an error wrapping ErrNoMIG that names it. Products:
// NVIDIA A100-SXM4-40GB, A100-SXM4-80GB, A100 80GB PCIe, H100 80GB HBM3
// and H200.
//
// The facts live in products.yaml (embedded), each product with its
// sources: the NVIDIA MIG User Guide ("Supported MIG Profiles"), nvidia-smi
// mig -lgip output of real GPUs in NVIDIA's issue trackers (mig-parted
// issue 120: H200), nvidia-smi of real MIG-enabled H100 and H200 GPUs
// (utkuozdemir/nvidia_gpu_exporter internal/captures, driver 590.48.01) and
// NVIDIA's NVML mock (go-nvml pkg/nvml/mock/gpus) for the A100 memory
// sizes; testdata/README.md lists them per product and says which values
// are derived rather than recorded.
//
// # Layouts
//
// ParseConfig reads a mig-parted configuration (version: v1, mig-configs:
// name → entries of device-filter, devices, mig-enabled, mig-devices),
// strictly: an unknown field, a wrong type or a missing required field is
// a *ConfigError naming the file, the line, the layout, the entry and the
// field. BuiltinConfig is GPU Operator's default configuration
// (builtin-configs.yaml: all-disabled, all-enabled, all-1g.10gb, …,
// all-balanced), reproduced from GPU Operator's ConfigMap; Merge adds a
// user's layouts to it, a layout of the user's replacing the built-in one
// of the same name.
//
// Resolve applies a layout to a node of N GPUs of one product: per GPU
// the entry that applies (the last matching one, as mig-parted applies
// them in order), MIG on or off, and the MIG devices with their placements.
// Place chooses placements deterministically: mig-parted's order (larger
// profiles first), each at the free valid placement that leaves the most
// placements free, lowest start of equals, backtracking when that leaves a
// later device no room. That reproduces the placements real H100s and
// H200s show for all-balanced (3g at 4:4, 2g at 0:2, 1g at 2:1 and 3:1);
// NVIDIA does not document its driver's own choice. An invalid layout is
// an error naming the GPU and the profile: ErrUnknownProfile (1g.5gb on an
// H100), ErrDoesNotFit (too many instances, overlapping placements),
// ErrDeviceIndex, ErrNoMIG, ErrNoMatchingEntry.
//
// What the model leaves out: compute-instance profiles (1c.3g.40gb: a GPU
// instance shared by several compute instances) are refused as unknown
// profiles; the GPU instance ids nvidia-smi assigns are not modelled; the
// engines of the whole GPU (its NVDEC count) are not checked across
// instances, only each profile's instance limit and the placements.
package mig
