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
	// KubeletAPI is the kubelet API the devices are served through
	// (default KubeletAPIDevicePlugin). A profile may set it, so a node
	// pool chooses; it takes effect at the plugin's start.
	KubeletAPI KubeletAPI
	// GPUs is the machine and how it is advertised.
	GPUs gpuset.Config
	// View is what containers get besides their environment.
	View view.Config
	// Telemetry is the GPU telemetry's load model.
	Telemetry telemetry.Settings
	// Faults is the fault-injection plan.
	Faults faults.Plan
}

// KubeletAPI names a kubelet API the agent's devices are served through.
type KubeletAPI string

// The kubelet APIs.
const (
	// KubeletAPIDevicePlugin is the device plugin API (v1beta1): an
	// extended resource, Allocate.
	KubeletAPIDevicePlugin KubeletAPI = "device-plugin"
	// KubeletAPIDRA is Dynamic Resource Allocation (resource.k8s.io/v1):
	// ResourceSlices, ResourceClaims prepared through CDI.
	KubeletAPIDRA KubeletAPI = "dra"
)

// OrDefault returns k, or KubeletAPIDevicePlugin when k is empty.
func (k KubeletAPI) OrDefault() KubeletAPI {
	if k == "" {
		return KubeletAPIDevicePlugin
	}
	return k
}

// KubeletAPIs are the kubelet APIs, in the order the flag lists them.
var KubeletAPIs = []KubeletAPI{KubeletAPIDevicePlugin, KubeletAPIDRA}

// Choice is a configuration to serve, why it is the one, and what to say
// about it once: a Source's answer.
type Choice struct {
	// Config is the configuration.
	Config Config
	// Why says what chose it: one of store's Why constants; Detail says
	// more (the label and its value, the file). Both go into the history.
	Why, Detail string
	// Notes are logged when the configuration is applied; they are not
	// part of what is compared.
	Notes Notes
}

// Notes is what is said about a configuration when it is applied.
type Notes struct {
	// File is the file the values came from; "" none.
	File string
	// Overridden lists the fields of the file whose value the command line
	// or the environment replaced.
	Overridden []string
	// Ignored lists the fields of the file that have no effect here, with
	// where and why ("file:line: field: why").
	Ignored []string
	// Warnings are what the configuration allows that is unsafe, one
	// sentence each; logged at warn.
	Warnings []string
}

// Selection is what the node's labels choose: the profile
// (kube.ConfigLabel, followed when there are profiles) and the MIG layout
// (kube.MIGConfigLabel). The zero value is the labels' absence.
type Selection struct {
	Profile, MIGConfig string
}

// Source is where the configurations come from: the command line, the
// environment and the -config file or directory of profiles (the options
// package). The agent asks it which configuration a node's profile label
// selects, and to read the profiles again when they changed. Its methods
// are called with the agent's lock held, one at a time.
type Source interface {
	// Fallback is the configuration to serve when no label selects one:
	// the -config-default profile, the -config file, or flags only.
	Fallback() Choice
	// Profiles reports whether there are profiles for a label to select
	// from (-config is a directory of them).
	Profiles() bool
	// Select returns the configuration the node's labels select: the
	// profile (Selection.Profile, "" for no label: the default profile)
	// with the MIG layout Selection.MIGConfig names, if any, in place of
	// its own. An unknown profile or layout, or one that does not resolve,
	// is an error naming it.
	Select(sel Selection) (Choice, error)
	// Reload reads the profiles again; every one must resolve, as at
	// start. On an error the profiles in force stay.
	Reload() error
	// Dir names the profiles directory, for the log and the history.
	Dir() string
}
