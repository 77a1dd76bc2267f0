// Package mig models the MIG (Multi-Instance GPU) partitions of the fake
// GPUs: per product the GPU instance profiles NVIDIA documents. It is a pure library: no files, no logger, no state;
// everything is safe for concurrent use.
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
// What the model leaves out: compute-instance profiles (1c.3g.40gb: a GPU
// instance shared by several compute instances) and the GPU instance ids
// nvidia-smi assigns.
package mig
