package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The import rules of the module (README, "Layout and import rules"),
// checked as Kubernetes' import-restrictions are: on what `go list` says
// each package imports, so a package that breaks them fails here, naming
// the import.

const module = "github.com/unicore/virtual-gpu-device-plugin"

// allowedImports lists, for every package of the module outside cmd/, the
// packages of the module it may import directly ("" for the module's
// root). A package the table lacks fails the test: a new package states
// its place. The arrows point down: nothing here imports cmd/, and no
// package imports one that imports it.
var allowedImports = map[string][]string{
	"topology":              nil,
	"topology/mig":          nil,
	"store":                 nil,
	"store/storetest":       {"store"},
	"allocator":             {"topology"},
	"plugin/atomicfile":     nil,
	"plugin/unixsock":       {"plugin/atomicfile"},
	"plugin/view/loadsock":  nil,
	"plugin/view/status":    {"plugin/atomicfile", "topology", "topology/mig"},
	"plugin/view/cdi":       {"plugin/atomicfile"},
	"plugin/view/nvidiasmi": {"plugin/view/loadsock", "plugin/view/status", "topology"},
	"plugin/kube":           {"topology"},
	"plugin/podresources":   {"store"},
	"plugin/faults":         {"store", "topology"},
	"plugin/gpuset":         {"allocator", "store", "topology", "topology/mig"},
	"plugin/metrics":        {"plugin/gpuset", "store", "topology"},
	"plugin/telemetry":      {"plugin/gpuset", "plugin/view/loadsock", "store", "topology"},
	"plugin/view": {"plugin/atomicfile", "plugin/gpuset", "plugin/telemetry", "plugin/view/cdi", "plugin/view/loadsock",
		"plugin/view/status", "store", "topology"},
	"plugin/admin": {"plugin/gpuset", "plugin/unixsock", "store", "topology"},
	"plugin/agent": {"plugin/faults", "plugin/gpuset", "plugin/kube", "plugin/telemetry", "plugin/view", "plugin/view/loadsock",
		"store", "topology", "topology/mig"},
	"plugin":              {"plugin/agent", "plugin/atomicfile", "plugin/gpuset", "plugin/metrics", "plugin/telemetry", "plugin/unixsock", "plugin/view", "store", "topology"},
	"plugin/plugintest":   {"allocator", "plugin/gpuset", "plugin/view", "store", "topology", "topology/mig"},
	"plugin/dra/endpoint": {"plugin/unixsock"},
	"plugin/simulate":     {"plugin/admin", "plugin/agent", "plugin/dra", "plugin/faults", "plugin/gpuset", "plugin/kube", "store", "topology"},
	"plugin/dra": {"plugin/agent", "plugin/dra/endpoint", "plugin/gpuset", "plugin/metrics", "plugin/telemetry", "plugin/unixsock", "plugin/view/cdi",
		"store", "topology", "topology/mig"},
}

// The kubelet's device-plugin API is a leaf: only the device-plugin server
// (package plugin), its stand-in kubelet (plugintest) and cmd/ may depend
// on it, directly or through another package. client-go is imported by
// plugin/kube, which talks to the API server for the agent, and by
// plugin/dra, whose libraries (k8s.io/dynamic-resource-allocation) take
// a typed client.
const (
	devicePluginAPI = "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clientGo        = "k8s.io/client-go/"
)

var (
	devicePluginAPIUsers = []string{"plugin", "plugin/plugintest"}
	clientGoUsers        = []string{"plugin/kube", "plugin/dra", "plugin/simulate"}
)

// listedPackage is what the test reads of `go list -json`.
type listedPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// TestImportRules: every package of the module imports only what its
// place allows, and the device-plugin API and client-go stay where they
// belong.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var checked []string
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		inCmd := rel == "cmd" || strings.HasPrefix(rel, "cmd/")
		if !inCmd {
			allowed, known := allowedImports[rel]
			if !known {
				t.Errorf("%s: a package the import rules do not place: add it to allowedImports (and the README's layout)", rel)
			}
			for _, imp := range p.Imports {
				r, ours := strings.CutPrefix(imp, module+"/")
				switch {
				case !ours:
				case r == "cmd" || strings.HasPrefix(r, "cmd/"):
					t.Errorf("%s imports %s: nothing outside cmd/ imports cmd/", rel, r)
				case known && !slices.Contains(allowed, r):
					t.Errorf("%s imports %s: not among what it may import (%s)", rel, r, strings.Join(allowed, ", "))
				}
			}
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, clientGo) && !slices.Contains(clientGoUsers, rel) {
					t.Errorf("%s imports %s: client-go is imported by %s alone", rel, imp, strings.Join(clientGoUsers, " and "))
				}
			}
			if slices.Contains(p.Deps, devicePluginAPI) && !slices.Contains(devicePluginAPIUsers, rel) {
				t.Errorf("%s depends on the device-plugin API (%s): only %s may", rel, devicePluginAPI, strings.Join(devicePluginAPIUsers, ", "))
			}
		}
		checked = append(checked, rel)
	}
	if len(checked) < len(allowedImports) {
		t.Errorf("go list found %d packages, the rules place %d: a package went missing", len(checked), len(allowedImports))
	}
	t.Logf("import rules hold for %d packages (%d outside cmd/, each within its allowed imports; the device-plugin API only in %s; client-go only in %s)",
		len(checked), len(allowedImports), strings.Join(devicePluginAPIUsers, ", "), strings.Join(clientGoUsers, ", "))
}
