package agent

import (
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/gpuset"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/telemetry"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/view"
)

// Config is what the agent serves: every setting a configuration (a
// profile) may change, composed of the configs of the packages that read
// them. It is a plain value: two Configs are the same configuration when
// reflect.DeepEqual says so, which is how a live change is told from a
// reload that changes nothing (a field added later is compared too). The
// options package fills it; the zero value is not valid.
type Config struct {
	// Profile is the name of the profile in force; "" without one.
	Profile string
	// GPUs is the machine and how it is advertised.
	GPUs gpuset.Config
	// View is what containers get besides their environment.
	View view.Config
	// Telemetry is the GPU telemetry's load model.
	Telemetry telemetry.Settings
	// Faults is the fault-injection plan.
	Faults faults.Plan
}
