// Package chart renders the project's manifests the way users do, with the tools' own Go APIs
// and no binaries: the Helm chart in deploy/helm/virtual-gpu-device-plugin as `helm template`
// does (Helm's chart loader, values coalescing and schema validation, template engine and
// manifest sorter), and the kustomizations under deploy/ as `kubectl kustomize` does
// (kustomize's krusty). Its tests (helm lint, the chart against the kustomize base, the chart's
// metadata and values schema, the renders package deploy's tests read) start no cluster and run
// as any user; the end-to-end scenarios apply what it renders to a real API server. Its
// functions keep no state and are safe for concurrent use.
package chart

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The release the tests render and the README installs:
//
//	helm install virtual-gpu-device-plugin deploy/helm/virtual-gpu-device-plugin -n kube-system
const (
	ReleaseName = "virtual-gpu-device-plugin"
	Namespace   = "kube-system"
)

// Dir is the chart's directory in the repository at repo.
func Dir(repo string) string {
	return filepath.Join(repo, "deploy", "helm", "virtual-gpu-device-plugin")
}

// Manifest is one rendered document: the template it came from and its YAML.
type Manifest struct {
	// Source is the template's path in the chart, e.g.
	// virtual-gpu-device-plugin/templates/daemonset.yaml.
	Source string
	// Content is the YAML of one object.
	Content string
}

// Template renders the chart in dir for a release as `helm template <release> <dir> -n
// <namespace> -f <values>` does: values (nil: the chart's defaults) coalesced with the chart's
// and validated against its values.schema.json, every template rendered without a cluster
// (lookup finds nothing), NOTES.txt left out, the manifests split into documents and sorted in
// Helm's install order. A failing `fail` in a template, a schema violation or a document that is
// not YAML is an error.
func Template(dir string, values map[string]any, release, namespace string) ([]Manifest, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	if values == nil {
		values = map[string]any{}
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, values); err != nil {
		return nil, fmt.Errorf("chart %s: dependencies: %w", ch.Name(), err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	if v := ch.Metadata.KubeVersion; v != "" && !chartutil.IsCompatibleRange(v, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart %s requires kubeVersion %s, not %s", ch.Name(), v, caps.KubeVersion.String())
	}
	top, err := chartutil.ToRenderValuesWithSchemaValidation(ch, values,
		chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, caps, false)
	if err != nil {
		return nil, fmt.Errorf("chart %s: values: %w", ch.Name(), err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, fmt.Errorf("chart %s: render: %w", ch.Name(), err)
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", ch.Name(), err)
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("chart %s renders %d hooks: Template does not handle hooks", ch.Name(), len(hooks))
	}
	out := make([]Manifest, len(manifests))
	for i, m := range manifests {
		out[i] = Manifest{Source: m.Name, Content: m.Content}
	}
	return out, nil
}

// Text joins manifests as `helm template` prints them.
func Text(ms []Manifest) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Source, m.Content)
	}
	return b.String()
}

// Objects decodes manifests into objects.
func Objects(ms []Manifest) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, 0, len(ms))
	for _, m := range ms {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(m.Content), &o); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Source, err)
		}
		if o == nil {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: o})
	}
	return out, nil
}

// Kustomize builds the kustomization in dir as `kubectl kustomize <dir>` does (kustomize's
// default options: no plugins, load restrictions on).
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		// Through JSON, as Objects decodes: numbers are float64 in both.
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize %s: %s: %w", dir, r.CurId(), err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("kustomize %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// ReadValues reads a values file, as `helm template -f <file>` does.
func ReadValues(file string) (map[string]any, error) {
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		return nil, fmt.Errorf("values %s: %w", file, err)
	}
	return v.AsMap(), nil
}

// Digest is the SHA-256 of the chart's directory, hex: every regular file's path (relative,
// with slashes) and content, in path order. The renders kept for package deploy's tests carry
// it, so those tests see when the chart changed after them.
func Digest(dir string) (string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("chart digest: %w", err)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			return "", fmt.Errorf("chart digest: %w", err)
		}
		io.WriteString(h, path.Clean(f))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
