package telemetry

// Settings are what a configuration says of the telemetry of its GPUs:
// the load model and whether workloads may drive it. The listener's
// address is the process's, not part of them. It is a plain value.
type Settings struct {
	// Model is the load model of held GPUs (default steady).
	Model Model
	// Seed seeds the load model (default 0).
	Seed uint64
	// PerPod gives a GPU several containers share one series per holder
	// (default false).
	PerPod bool
	// Writable lets containers set their GPUs' load over a per-allocation
	// socket (default false).
	Writable bool
}
