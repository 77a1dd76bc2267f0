// Package telemetry serves fake GPU telemetry with the names, labels and
// types of NVIDIA's dcgm-exporter, coherent with the cluster: a GPU a pod
// holds is busy and carries the pod's labels, a free GPU idles, a failed GPU
// shows its XID.
//
// It follows dcgm-exporter release 4.5.3-4.8.2 (DCGM 4.5.3) with its
// default counters file, for these fields, in this order (all gauges):
//
//	DCGM_FI_DEV_SM_CLOCK           MHz: the family's idle clock when idle, boost..base when busy
//	DCGM_FI_DEV_GPU_TEMP           °C: rises with power
//	DCGM_FI_DEV_POWER_USAGE        W, 3 decimals: idle power .. power limit
//	DCGM_FI_DEV_GPU_UTIL           %, 0..100: the sum of the holders' loads, capped
//	DCGM_FI_DEV_MEM_COPY_UTIL      %, 0..100 (at most 60)
//	DCGM_FI_DEV_XID_ERRORS         the XID an unhealthy GPU's reason names, else 0
//	DCGM_FI_DEV_FB_FREE            MiB: memory − used
//	DCGM_FI_DEV_FB_USED            MiB, 0..memory
//	DCGM_FI_PROF_GR_ENGINE_ACTIVE  ratio 0..1: utilization / 100
//
// labelled gpu, UUID, pci_bus_id, device ("nvidia<gpu>"), modelName,
// Hostname, DCGM_FI_DRIVER_VERSION, and namespace, pod, container while a
// container holds the GPU (see [Exporter.AppendExposition] for shared GPUs
// and [Config.PerPod]); XID_ERRORS also carries err_code and err_msg.
//
// Values come from a pure load model ([Model]: idle, steady, wave,
// random-walk), a function of the seed, the holder, the GPU and the second
// of an injected clock; derived series agree with each other (see sample in
// physics.go). An [Exporter] computes everything at read time, without
// goroutines: [Exporter.Handler] serves the exposition, [Exporter.Readings]
// gives the same values to a status writer (the fake nvidia-smi). A holder
// may drive its own share with [Exporter.SetOverride].
//
// An unhealthy GPU behaves as a GPU that fell off the bus does under
// dcgm-exporter: DCGM returns blank values for it, which dcgm-exporter
// leaves out, so only DCGM_FI_DEV_XID_ERRORS remains. Unlike DCGM, which
// keeps the last XID for good and reports none before the first, the XID
// series is always present and returns to 0 when the GPU heals, so that an
// alert on DCGM_FI_DEV_XID_ERRORS > 0 fires and clears with the fault.
//
// The series are dcgm-exporter's, not Prometheus style (camelCase labels, no
// unit suffixes): serve them on their own listener, never on the plugin's
// promlint-clean registry.
package telemetry
