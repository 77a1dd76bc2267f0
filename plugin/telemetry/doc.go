// Package telemetry serves fake GPU telemetry with the names, labels and
// types of NVIDIA's dcgm-exporter, coherent with the cluster: a GPU a pod
// holds is busy and carries the pod's labels, a free GPU idles, a failed GPU
// shows its XID.
//
// It follows dcgm-exporter release 4.5.3-4.8.2 (DCGM 4.5.3) with its
// default counters file: all 25 of its fields, in DCGM field id order, with
// the file's types and help (clocks, temperatures, power and energy,
// utilizations, XID, framebuffer, remapped rows, NVLink traffic, the vGPU
// licence, and the profiling fields GR engine, tensor, DRAM and PCIe). A
// field DCGM has no value for on the product is left out, as dcgm-exporter
// leaves blank values out: the memory temperature on GDDR boards, the
// remapped rows where pages are retired or there is no ECC, the profiling
// fields on GeForce, workstation and pre-Volta GPUs. [ParseCollectors]
// reads a collectors file in dcgm-exporter's -f format to choose the set.
//
// Samples are labelled gpu, UUID, pci_bus_id, device ("nvidia<gpu>"),
// modelName, Hostname, DCGM_FI_DRIVER_VERSION, and namespace, pod,
// container while a container holds the GPU (see
// [Exporter.AppendExposition] for shared GPUs and [Config.PerPod]);
// XID_ERRORS also carries err_code and err_msg. A MIG-enabled GPU is
// reported per MIG device of the layout in force, as dcgm-exporter reports
// GPU instances: GPU_I_PROFILE and GPU_I_ID after modelName, the
// instance's memory and profiling ratios and its holders' labels, the
// GPU's values for the device-level fields, and no GPU_UTIL or
// MEM_COPY_UTIL (see [MIGInstance]).
//
// Values come from a pure load model ([Model]: idle, steady, wave,
// random-walk), a function of the seed, the holder, the GPU and the second
// of an injected clock; derived series agree with each other (see sample in
// physics.go). The counters (energy, NVLink traffic) add up every second
// since the last reading ([Counters]). An [Exporter] computes everything at read time, without
// goroutines: [Exporter.Handler] serves the exposition, [Exporter.Readings]
// gives the same values to a status writer (the fake nvidia-smi). A holder
// may drive its own share with [Exporter.SetOverride].
//
// An unhealthy GPU whose reason names a lost GPU (topology.ParseFault)
// behaves as a GPU that fell off the bus does under dcgm-exporter: DCGM
// returns blank values for it, which dcgm-exporter leaves out, so only
// DCGM_FI_DEV_XID_ERRORS remains. One with an ECC or a thermal fault
// answers, with its remapped rows or its heat and halved clock. Unlike DCGM, which
// keeps the last XID for good and reports none before the first, the XID
// series is always present and returns to 0 when the GPU heals, so that an
// alert on DCGM_FI_DEV_XID_ERRORS > 0 fires and clears with the fault.
//
// The series are dcgm-exporter's, not Prometheus style (camelCase labels, no
// unit suffixes): serve them on their own listener, never on the plugin's
// promlint-clean registry.
package telemetry
