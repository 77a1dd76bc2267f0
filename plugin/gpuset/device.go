package gpuset

// Device is one device a configuration advertises, with its health: a
// whole GPU, or a replica of a shared one. It is the agent's own device
// type, the one every kubelet API serves (the device plugin's
// ListAndWatch, a DRA ResourceSlice) and every service reads (metrics,
// telemetry, the admin API). It is a plain value.
type Device struct {
	// ID is the device id the kubelet sees, e.g. "fake-0", or "fake-0::1"
	// for a replica of a shared GPU.
	ID string
	// Index orders devices: ListAndWatch, VIRTUAL_GPU_IDS, GetPreferred-
	// Allocation's answer and the device lists handed to a catalog's
	// functions are sorted by it. For a Set's devices it is GPU index ×
	// replicas per GPU + replica number (see Set); other catalogs give it
	// their own meaning beyond the order.
	Index int
	// NUMA is the NUMA node reported to the kubelet; a negative value
	// reports no topology for the device.
	NUMA int
	// Healthy devices are reported "Healthy"; the others "Unhealthy".
	Healthy bool
	// Reason says why a device is unhealthy (empty when healthy).
	Reason string
	// Resource is the extended resource the device is advertised under
	// (gpuset.Set.Resources); "" for devices of other catalogs.
	Resource string
}
