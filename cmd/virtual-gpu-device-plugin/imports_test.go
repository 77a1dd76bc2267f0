package main

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
	"plugin":                {"plugin/agent", "plugin/atomicfile", "plugin/gpuset", "plugin/metrics", "plugin/telemetry", "plugin/unixsock", "plugin/view", "store", "topology"},
	"plugin/plugintest":     {"allocator", "plugin/gpuset", "plugin/view", "store", "topology", "topology/mig"},
	"plugin/dra/endpoint":   {"plugin/unixsock"},
	"plugin/simulate/scope": nil,
	"plugin/simulate": {"plugin/admin", "plugin/agent", "plugin/dra", "plugin/faults", "plugin/gpuset", "plugin/kube", "plugin/simulate/scope",
		"store", "topology"},
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

// The e2e module builds the kubelet and the API server from Kubernetes'
// own release (e2e/go.mod pins k8s.io/dynamic-resource-allocation to it),
// and imports some packages of ours (e2eImports reads which from its
// sources): none of them may depend on the DRA libraries, which this
// module takes at a newer version whose API the e2e module's lacks
// (plugin/dra/endpoint and plugin/simulate/scope exist for this).
const draLibraries = "k8s.io/dynamic-resource-allocation/"

// e2eImports returns the packages of this module, outside e2e/, that the
// e2e module's Go files import, relative to the module's path.
func e2eImports(t *testing.T) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(filepath.Join("..", "..", "e2e"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if rel, ours := strings.CutPrefix(p, module+"/"); ours && rel != "e2e" && !strings.HasPrefix(rel, "e2e/") && !slices.Contains(found, rel) {
				found = append(found, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the e2e module's imports: %v", err)
	}
	if len(found) == 0 {
		t.Fatal("the e2e module imports no package of this module: the walk read the wrong directory")
	}
	slices.Sort(found)
	return found
}

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
	e2eImported := e2eImports(t)
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
		if slices.Contains(e2eImported, rel) {
			for _, dep := range p.Deps {
				if strings.HasPrefix(dep, draLibraries) || dep == module+"/plugin/dra" {
					t.Errorf("%s depends on %s: the e2e module imports it, and builds against an older DRA library", rel, dep)
				}
			}
		}
		checked = append(checked, rel)
	}
	if len(checked) < len(allowedImports) {
		t.Errorf("go list found %d packages, the rules place %d: a package went missing", len(checked), len(allowedImports))
	}
	t.Logf("import rules hold for %d packages (%d outside cmd/, each within its allowed imports; the device-plugin API only in %s; client-go only in %s; no DRA library under %s)",
		len(checked), len(allowedImports), strings.Join(devicePluginAPIUsers, ", "), strings.Join(clientGoUsers, ", "), strings.Join(e2eImported, ", "))
}
