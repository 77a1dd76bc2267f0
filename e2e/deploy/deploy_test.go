package deploy_test

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/e2e/chart"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// repoRoot is the repository, two levels above this package.
const repoRoot = "../.."

// kubeletRootDirs is the kubelet --root-dir each overlay in deploy/overlays is for: that
// distribution's, from its source (cited in the overlay), and the default one for the overlays
// that change what the plugin serves (dra) or add the simulator (simulate). The kubelet serves
// PodResources under its root directory, and has its plugin directories there; its
// device-plugin directory is fixed.
var kubeletRootDirs = map[string]string{
	"k0s":      "/var/lib/k0s/kubelet",
	"microk8s": "/var/snap/microk8s/common/var/lib/kubelet",
	"dra":      "/var/lib/kubelet",
	"simulate": "/var/lib/kubelet",
}

// ---------------------------------------------------------------------------------------------
// Rendering kustomizations, the simple way.

// object is one Kubernetes object as decoded JSON (maps, slices, float64, string, bool).
type object = map[string]any

// kustomization is the part of kustomize's Kustomization (and of its Component) that deploy/
// uses. Decoding is strict: any other field fails the test, so render never silently ignores
// one.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources,omitempty"`
	Components []string `json:"components,omitempty"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
	Patches []struct {
		Path   string `json:"path,omitempty"`
		Patch  string `json:"patch,omitempty"`
		Target *struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"target,omitempty"`
	} `json:"patches,omitempty"`
	ConfigMapGenerator []struct {
		Name     string   `json:"name"`
		Files    []string `json:"files,omitempty"`
		Literals []string `json:"literals,omitempty"`
		Options  *struct {
			Labels map[string]string `json:"labels,omitempty"`
		} `json:"options,omitempty"`
	} `json:"configMapGenerator,omitempty"`
}

// clusterScoped are the kinds kustomize's namespace leaves alone. DeviceClass is cluster-scoped
// too, but kustomize (v5.5 and sigs.k8s.io/kustomize/api v0.21) does not know it and gives it
// the namespace: checkDeviceClass (TestDeploy_DaemonSetInvariants) fails on one with a namespace.
var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true,
	"PriorityClass": true, "StorageClass": true, "PersistentVolume": true,
}

// generatedName is the name kustomize gives a generated ConfigMap: its name, a dash and the
// first 10 hexadecimal digits of the SHA-256 of its JSON encoding {"data", "kind", "name"},
// with 0, 1, 3, a and e replaced by g, h, k, m and t (sigs.k8s.io/kustomize/api hasher,
// Hasher.Hash and encodeConfigMap). The encoded name is always "": kustomize looks it up as
// one field named "metadata/name", which no object has.
func generatedName(name string, data map[string]string) (string, error) {
	b, err := json.Marshal(map[string]any{"kind": "ConfigMap", "name": "", "data": data})
	if err != nil {
		return "", err
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(b))
	enc := []rune(sum[:10])
	for i, r := range enc {
		switch r {
		case '0':
			enc[i] = 'g'
		case '1':
			enc[i] = 'h'
		case '3':
			enc[i] = 'k'
		case 'a':
			enc[i] = 'm'
		case 'e':
			enc[i] = 't'
		}
	}
	return name + "-" + string(enc), nil
}

// jsonPatchOp is one RFC 6902 operation of the kinds deploy/ uses.
type jsonPatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// The kinds of kustomization.yaml, with their apiVersion.
const (
	kindKustomization = "Kustomization"
	kindComponent     = "Component"
)

var kustomizeAPIVersions = map[string]string{
	kindKustomization: "kustomize.config.k8s.io/v1beta1",
	kindComponent:     "kustomize.config.k8s.io/v1alpha1",
}

// readKustomization reads dir/kustomization.yaml (dir relative to the repository), strictly.
func readKustomization(dir string) (*kustomization, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml uses more than render supports (resources, components, namespace, images, JSON 6902 patches): %w", dir, err)
	}
	if v, ok := kustomizeAPIVersions[k.Kind]; !ok || k.APIVersion != v {
		return nil, fmt.Errorf("%s/kustomization.yaml: %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization or kustomize.config.k8s.io/v1alpha1 Component", dir, k.APIVersion, k.Kind)
	}
	return &k, nil
}

// render builds the kustomization in dir (relative to the repository) as kustomize would.
func render(dir string) ([]object, error) {
	return build(dir, kindKustomization, nil)
}

// build builds the kustomization in dir, of the given kind, over objs: a Kustomization over
// nothing, a Component over what the kustomization that names it has accumulated so far
// (its resources, and the components before it), as kustomize does: the component's resources
// join them, and its patches apply to all of them.
func build(dir, kind string, objs []object) ([]object, error) {
	full := filepath.Join(repoRoot, dir)
	k, err := readKustomization(dir)
	if err != nil {
		return nil, err
	}
	if k.Kind != kind {
		return nil, fmt.Errorf("%s/kustomization.yaml is a %s, want a %s here", dir, k.Kind, kind)
	}
	var generated []object
	for _, r := range k.Resources {
		p := path.Join(dir, r)
		info, err := os.Stat(filepath.Join(repoRoot, p))
		if err != nil {
			return nil, fmt.Errorf("%s: resource %s: %w", dir, r, err)
		}
		if info.IsDir() {
			sub, err := render(p)
			if err != nil {
				return nil, err
			}
			objs = append(objs, sub...)
			continue
		}
		docs, err := readObjects(p)
		if err != nil {
			return nil, err
		}
		objs = append(objs, docs...)
	}
	for _, c := range k.Components {
		if objs, err = build(path.Join(dir, c), kindComponent, objs); err != nil {
			return nil, err
		}
	}
	for _, g := range k.ConfigMapGenerator {
		data := map[string]string{}
		for _, f := range g.Files {
			key, file, ok := strings.Cut(f, "=")
			if !ok {
				key, file = path.Base(f), f
			}
			b, err := os.ReadFile(filepath.Join(full, file))
			if err != nil {
				return nil, fmt.Errorf("%s: configMapGenerator %s: %w", dir, g.Name, err)
			}
			data[key] = string(b)
		}
		for _, l := range g.Literals {
			key, value, ok := strings.Cut(l, "=")
			if !ok {
				return nil, fmt.Errorf("%s: configMapGenerator %s: literal %q is not key=value", dir, g.Name, l)
			}
			data[key] = value
		}
		meta := map[string]any{"name": g.Name}
		if g.Options != nil && len(g.Options.Labels) > 0 {
			meta["labels"] = toAny(g.Options.Labels)
		}
		cm := object{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": toAny(data)}
		generated = append(generated, cm)
		objs = append(objs, cm)
	}
	for i, p := range k.Patches {
		text := p.Patch
		if p.Path != "" {
			b, err := os.ReadFile(filepath.Join(full, p.Path))
			if err != nil {
				return nil, fmt.Errorf("%s: patch %d: %w", dir, i, err)
			}
			text = string(b)
		}
		var ops []jsonPatchOp
		if err := yaml.UnmarshalStrict([]byte(text), &ops); err != nil {
			return nil, fmt.Errorf("%s: patch %d is not a JSON 6902 patch (the only kind render applies): %w", dir, i, err)
		}
		if p.Target == nil || p.Target.Kind == "" || p.Target.Name == "" {
			return nil, fmt.Errorf("%s: patch %d: a JSON 6902 patch needs a target kind and name", dir, i)
		}
		matched := false
		for j, o := range objs {
			if o["kind"] != p.Target.Kind || name(o) != p.Target.Name {
				continue
			}
			matched = true
			patched, err := applyJSONPatch(o, ops)
			if err != nil {
				return nil, fmt.Errorf("%s: patch %d on %s/%s: %w", dir, i, p.Target.Kind, p.Target.Name, err)
			}
			objs[j] = patched
		}
		if !matched {
			return nil, fmt.Errorf("%s: patch %d: no %s/%s to patch", dir, i, p.Target.Kind, p.Target.Name)
		}
	}
	for _, o := range objs {
		if k.Namespace != "" && !clusterScoped[o["kind"].(string)] {
			meta, _ := o["metadata"].(map[string]any)
			meta["namespace"] = k.Namespace
		}
		for _, img := range k.Images {
			for _, c := range containersOf(o) {
				c["image"] = setImage(c["image"].(string), img.Name, img.NewName, img.NewTag, img.Digest)
			}
		}
	}
	// Generated ConfigMaps get their hashed names, and the volumes naming them follow.
	for _, cm := range generated {
		old := name(cm)
		data := map[string]string{}
		for k, v := range cm["data"].(map[string]any) {
			data[k] = v.(string)
		}
		newName, err := generatedName(old, data)
		if err != nil {
			return nil, err
		}
		cm["metadata"].(map[string]any)["name"] = newName
		for _, o := range objs {
			for _, v := range volumesOf(o) {
				if ref, ok := v["configMap"].(map[string]any); ok && ref["name"] == old {
					ref["name"] = newName
				}
			}
		}
	}
	return objs, nil
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// volumesOf returns the volumes of a Pod or of a workload's pod template.
func volumesOf(o object) []map[string]any {
	spec, _ := o["spec"].(map[string]any)
	if tmpl, ok := spec["template"].(map[string]any); ok {
		spec, _ = tmpl["spec"].(map[string]any)
	}
	list, _ := spec["volumes"].([]any)
	out := make([]map[string]any, 0, len(list))
	for _, v := range list {
		out = append(out, v.(map[string]any))
	}
	return out
}

// readObjects reads the YAML documents of a file (relative to the repository).
func readObjects(p string) ([]object, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, p))
	if err != nil {
		return nil, err
	}
	return parseObjects(p, b)
}

// parseObjects decodes the YAML documents of file p, read as b.
func parseObjects(p string, b []byte) ([]object, error) {
	var objs []object
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

func stripComments(doc string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")
}

func name(o object) string {
	meta, _ := o["metadata"].(map[string]any)
	n, _ := meta["name"].(string)
	return n
}

// containersOf returns the containers of a Pod or of a workload's pod template.
func containersOf(o object) []map[string]any {
	spec, _ := o["spec"].(map[string]any)
	if tmpl, ok := spec["template"].(map[string]any); ok {
		spec, _ = tmpl["spec"].(map[string]any)
	}
	var out []map[string]any
	for _, key := range []string{"initContainers", "containers"} {
		list, _ := spec[key].([]any)
		for _, c := range list {
			out = append(out, c.(map[string]any))
		}
	}
	return out
}

// setImage applies a kustomize images entry to one image reference.
func setImage(ref, name, newName, newTag, digest string) string {
	repo, tag := ref, ""
	if i := strings.Index(ref, "@"); i >= 0 {
		repo, tag = ref[:i], ref[i:]
	} else if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag = ref[:i], ref[i:]
	}
	if repo != name {
		return ref
	}
	if newName != "" {
		repo = newName
	}
	switch {
	case digest != "":
		tag = "@" + digest
	case newTag != "":
		tag = ":" + newTag
	}
	return repo + tag
}

// applyJSONPatch applies RFC 6902 test, add, replace and remove operations.
func applyJSONPatch(o object, ops []jsonPatchOp) (object, error) {
	var doc any = o
	for _, op := range ops {
		if !strings.HasPrefix(op.Path, "/") {
			return nil, fmt.Errorf("%s %q: path must start with /", op.Op, op.Path)
		}
		tokens := strings.Split(op.Path[1:], "/")
		for i, tok := range tokens {
			tokens[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		var value any
		if op.Op != "remove" {
			if len(op.Value) == 0 {
				return nil, fmt.Errorf("%s %s: no value", op.Op, op.Path)
			}
			if err := json.Unmarshal(op.Value, &value); err != nil {
				return nil, fmt.Errorf("%s %s: %w", op.Op, op.Path, err)
			}
		}
		var err error
		doc, err = patchAt(doc, tokens, op.Op, value)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", op.Op, op.Path, err)
		}
	}
	return doc.(object), nil
}

// patchAt applies one operation at tokens below node and returns the new node.
func patchAt(node any, tokens []string, op string, value any) (any, error) {
	tok := tokens[0]
	last := len(tokens) == 1
	switch n := node.(type) {
	case map[string]any:
		child, ok := n[tok]
		if !last {
			if !ok {
				return nil, fmt.Errorf("no %q", tok)
			}
			sub, err := patchAt(child, tokens[1:], op, value)
			n[tok] = sub
			return n, err
		}
		switch op {
		case "test":
			if !ok || !reflect.DeepEqual(child, value) {
				return nil, fmt.Errorf("test failed: %v, want %v", child, value)
			}
		case "add":
			n[tok] = value
		case "replace":
			if !ok {
				return nil, fmt.Errorf("no %q to replace", tok)
			}
			n[tok] = value
		case "remove":
			if !ok {
				return nil, fmt.Errorf("no %q to remove", tok)
			}
			delete(n, tok)
		default:
			return nil, fmt.Errorf("operation %q not supported", op)
		}
		return n, nil
	case []any:
		i := len(n)
		if tok != "-" {
			var err error
			if i, err = strconv.Atoi(tok); err != nil || i < 0 || i > len(n) || (i == len(n) && (op != "add" || !last)) {
				return nil, fmt.Errorf("index %q out of range (%d items)", tok, len(n))
			}
		} else if op != "add" || !last {
			return nil, errors.New(`"-" only appends`)
		}
		if !last {
			sub, err := patchAt(n[i], tokens[1:], op, value)
			n[i] = sub
			return n, err
		}
		switch op {
		case "test":
			if !reflect.DeepEqual(n[i], value) {
				return nil, fmt.Errorf("test failed: %v, want %v", n[i], value)
			}
		case "add":
			return slices.Insert(n, i, value), nil
		case "replace":
			n[i] = value
		case "remove":
			return slices.Delete(n, i, i+1), nil
		default:
			return nil, fmt.Errorf("operation %q not supported", op)
		}
		return n, nil
	default:
		return nil, fmt.Errorf("%q below a %T", tok, node)
	}
}

// decodeStrict decodes an object into its typed API struct, failing on unknown fields.
func decodeStrict(o object, out any) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return yaml.UnmarshalStrict(b, out)
}

// ---------------------------------------------------------------------------------------------
// What deploy/ holds.

// kustomizations lists every directory under deploy/ with a kustomization.yaml of kind
// Kustomization: what kubectl apply -k builds.
func kustomizations(t *testing.T) []string {
	t.Helper()
	dirs := kustomizationDirs(t, kindKustomization)
	if !slices.Contains(dirs, "deploy/base") {
		t.Fatalf("no deploy/base/kustomization.yaml among %v", dirs)
	}
	return dirs
}

// kustomizationDirs lists the directories under deploy/ whose kustomization.yaml is of the
// given kind: Kustomization, or Component (built only as part of a Kustomization).
func kustomizationDirs(t *testing.T, kind string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "kustomization.yaml" {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		k, err := readKustomization(rel)
		if err != nil {
			return err
		}
		if k.Kind == kind {
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// overlays lists the directories under deploy/overlays.
func overlays(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repoRoot, "deploy", "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// standaloneExamples lists the YAML files directly in deploy/examples and in
// deploy/examples/dra (the DRA claims), applied with kubectl -f.
func standaloneExamples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in deploy/examples (%v)", err)
	}
	dra, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "examples", "dra", "*.yaml"))
	if err != nil || len(dra) == 0 {
		t.Fatalf("no examples in deploy/examples/dra (%v)", err)
	}
	files = append(files, dra...)
	for i, f := range files {
		rel, _ := filepath.Rel(repoRoot, f)
		files[i] = filepath.ToSlash(rel)
	}
	return files
}

func mustRender(t *testing.T, dir string) []object {
	t.Helper()
	objs, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// chartDir is the Helm chart; chartTestdata holds its renders (see the package documentation).
var (
	chartDir      = chart.Dir(repoRoot)
	chartTestdata = filepath.Join("testdata", "chart")
)

// chartRenderCommand regenerates the renders of the chart.
const chartRenderCommand = "cd e2e && go test ./chart -run TestChart_Testdata -update"

// chartRenders reads the chart's renders, testdata/chart/<case>.yaml, by case name, and fails
// unless each was rendered from the chart as it is now.
func chartRenders(t *testing.T) map[string][]object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartTestdata, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no renders of the chart in %s (%v): %s", chartTestdata, err, chartRenderCommand)
	}
	digest, err := chart.Digest(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`\(chart digest sha256:([0-9a-f]{64})\)`)
	out := map[string][]object{}
	for _, f := range files {
		b := mustRead(t, f)
		first, _, _ := bytes.Cut(b, []byte("\n"))
		if m := re.FindSubmatch(first); m == nil || string(m[1]) != digest {
			t.Fatalf("%s was rendered from another version of %s: %s", f, chartDir, chartRenderCommand)
		}
		objs, err := parseObjects(f, b)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = objs
	}
	if _, ok := out["default"]; !ok {
		t.Fatalf("no render of the chart's default values in %s: %s", chartTestdata, chartRenderCommand)
	}
	return out
}

// manifestSet is what one kustomization or one render of the chart produces.
type manifestSet struct {
	// where names it: the kustomization's directory, or chart/<case>.
	where string
	objs  []object
}

// manifestSets renders every kustomization and reads every render of the chart.
func manifestSets(t *testing.T) []manifestSet {
	t.Helper()
	var out []manifestSet
	for _, dir := range kustomizations(t) {
		out = append(out, manifestSet{dir, mustRender(t, dir)})
	}
	renders := chartRenders(t)
	for _, c := range slices.Sorted(maps.Keys(renders)) {
		out = append(out, manifestSet{"chart/" + c, renders[c]})
	}
	return out
}

// daemonSetOf returns the one DaemonSet of objs, decoded strictly.
func daemonSetOf(t *testing.T, where string, objs []object) *appsv1.DaemonSet {
	t.Helper()
	var found []*appsv1.DaemonSet
	for _, o := range objs {
		if o["kind"] == "DaemonSet" {
			var ds appsv1.DaemonSet
			if err := decodeStrict(o, &ds); err != nil {
				t.Fatalf("%s: DaemonSet: %v", where, err)
			}
			found = append(found, &ds)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s renders %d DaemonSets, want 1", where, len(found))
	}
	return found[0]
}

// renderedDaemonSet renders dir and returns its one DaemonSet, decoded strictly.
func renderedDaemonSet(t *testing.T, dir string) (*appsv1.DaemonSet, []object) {
	t.Helper()
	objs := mustRender(t, dir)
	return daemonSetOf(t, dir, objs), objs
}

// pluginFlags is what the manifests must agree with: the value of every flag that names a host
// path or a port, and of those that choose the node, its labels and its profiles, as the
// binary's own parser reads the container's args and environment.
type pluginFlags struct {
	devicePluginPath   string
	statePath          string
	adminSocket        string
	podResourcesSocket string
	metricsAddress     string
	resourceName       string
	topology           string
	nodeName           string
	labelNode          bool
	configPath         string
	configDefault      string
	toolsDir           string
	statusDir          string
	cdiSpecDir         string
	loadSocketDir      string
	telemetryAddress   string
	telemetryWritable  bool
	// The DRA driver's: -kubelet-api, -dra-driver-name, -kubelet-registry-dir and
	// -kubelet-plugins-dir.
	kubeletAPI         string
	draDriverName      string
	kubeletRegistryDir string
	kubeletPluginsDir  string
}

// downwardNodeName is the node name the tests give an environment variable set from the
// downward API's spec.nodeName.
const downwardNodeName = "node-1"

// draDefaults are the defaults of the DRA driver's flags that the manifests assume: they mount the
// kubelet's directories at these paths and select the devices of this driver
// (TestDeploy_DRADefaults).
var draDefaults = struct{ kubeletAPI, driverName, registryDir, pluginsDir string }{
	"device-plugin", "gpu.unicore.mcyou.cc", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"}

// parsePluginFlags validates the flags as the binary does, but for the -topology file and the
// -config directory: they are in ConfigMaps, which checkTopologyVolume and checkProfiles read.
func parsePluginFlags(args []string, env map[string]string) (pluginFlags, error) {
	o, err := options.Parse(args, func(k string) string { return env[k] })
	if err != nil {
		return pluginFlags{}, err
	}
	s, err := o.Settings(nil)
	if err != nil {
		return pluginFlags{}, err
	}
	topo := s.Topology
	s.Topology = ""
	cfg, err := s.Validate()
	if err != nil {
		return pluginFlags{}, err
	}
	return pluginFlags{
		devicePluginPath:   cfg.DevicePluginPath,
		statePath:          cfg.StatePath,
		adminSocket:        cfg.AdminSocket,
		podResourcesSocket: cfg.PodResourcesSocket,
		metricsAddress:     cfg.MetricsAddress,
		resourceName:       cfg.GPUs.ResourceName,
		topology:           topo,
		nodeName:           o.NodeName,
		labelNode:          o.LabelNode,
		configPath:         o.ConfigPath,
		configDefault:      o.ConfigDefault,
		toolsDir:           cfg.View.ToolsDir,
		statusDir:          cfg.View.StatusDir,
		cdiSpecDir:         cfg.View.CDISpecDir,
		loadSocketDir:      cfg.View.LoadSocketDir,
		telemetryAddress:   cfg.TelemetryAddress,
		telemetryWritable:  cfg.Telemetry.Writable,
		kubeletAPI:         string(cfg.KubeletAPI.OrDefault()),
		draDriverName:      cfg.DRA.DriverName,
		kubeletRegistryDir: cfg.DRA.RegistryDir,
		kubeletPluginsDir:  cfg.DRA.PluginsDir,
	}, nil
}

// containerEnv is a container's environment as the kubelet sets it on node downwardNodeName:
// plain values, and spec.nodeName from the downward API. Any other source fails the test.
func containerEnv(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = downwardNodeName
		default:
			t.Errorf("env %s comes from %v: the test cannot check it", e.Name, e.ValueFrom)
		}
	}
	if len(c.EnvFrom) > 0 {
		t.Errorf("envFrom %v: the test cannot check it", c.EnvFrom)
	}
	return env
}

// containerFlags parses the flags of a DaemonSet's one container.
func containerFlags(t *testing.T, c corev1.Container) pluginFlags {
	t.Helper()
	env := containerEnv(t, c)
	f, err := parsePluginFlags(c.Args, env)
	if err != nil {
		t.Fatalf("args %v env %v: %v", c.Args, env, err)
	}
	return f
}

func defaultFlags(t *testing.T) pluginFlags {
	t.Helper()
	f, err := parsePluginFlags(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// profileFlags are the flags a profile may set (options.FileFlags). A
// DaemonSet with profiles must set none of them: a flag or a variable
// overrides every profile.
func profileFlags(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range options.FileFlags() {
		out[f.Name] = f.InProfile
	}
	for _, f := range []string{"devices", "topology", "replicas"} {
		if !out[f] {
			t.Fatalf("the profile flags %v lack -%s", out, f)
		}
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// The manifests.

// TestDeploy_EveryManifestDecodesStrictly renders every kustomization, reads every render of
// the chart and every standalone example, decodes each object into its API type without
// unknown fields, and checks that no file under deploy/ is left unused.
func TestDeploy_EveryManifestDecodesStrictly(t *testing.T) {
	used := map[string]bool{}
	check := func(where string, o object) {
		t.Helper()
		var err error
		switch kind, _ := o["kind"].(string); kind {
		case "DaemonSet":
			err = decodeStrict(o, &appsv1.DaemonSet{})
		case "Deployment":
			// The simulator asks for no GPU: TestDeploy_Simulator checks it.
			var d appsv1.Deployment
			if err = decodeStrict(o, &d); err == nil && !isSimulator(o) {
				checkGPURequests(t, where, d.Spec.Template.Spec)
			}
		case "PersistentVolumeClaim":
			// The simulator's state directory: TestDeploy_Simulator checks it.
			err = decodeStrict(o, &corev1.PersistentVolumeClaim{})
		case "Pod":
			var pod corev1.Pod
			if err = decodeStrict(o, &pod); err == nil {
				checkGPURequests(t, where, pod.Spec)
			}
		case "ConfigMap":
			// Its data is checked where a DaemonSet mounts it: a topology file, or profiles.
			err = decodeStrict(o, &corev1.ConfigMap{})
		case "ServiceAccount":
			err = decodeStrict(o, &corev1.ServiceAccount{})
		case "Service":
			err = decodeStrict(o, &corev1.Service{})
		case "ClusterRole":
			err = decodeStrict(o, &rbacv1.ClusterRole{})
		case "ClusterRoleBinding":
			err = decodeStrict(o, &rbacv1.ClusterRoleBinding{})
		case "DeviceClass":
			// Checked against the DaemonSet's flags in TestDeploy_DaemonSetInvariants.
			err = decodeStrict(o, &resourcev1.DeviceClass{})
		case "ResourceClaim", "ResourceClaimTemplate":
			// Checked against the DeviceClass in TestDeploy_DRAExamples.
			if kind == "ResourceClaim" {
				err = decodeStrict(o, &resourcev1.ResourceClaim{})
			} else {
				err = decodeStrict(o, &resourcev1.ResourceClaimTemplate{})
			}
		case "PodMonitor", "ServiceMonitor":
			// Prometheus Operator types: checked against the DaemonSet in TestDeploy_Metrics.
		default:
			t.Errorf("%s: unexpected kind %q", where, kind)
		}
		if err != nil {
			t.Errorf("%s: %s %s: %v", where, o["kind"], name(o), err)
		}
	}
	for _, m := range manifestSets(t) {
		for _, o := range m.objs {
			check(m.where, o)
		}
	}
	components := kustomizationDirs(t, kindComponent)
	for _, dir := range append(kustomizations(t), components...) {
		used[dir+"/kustomization.yaml"] = true
		b, _ := os.ReadFile(filepath.Join(repoRoot, dir, "kustomization.yaml"))
		var k kustomization
		_ = yaml.Unmarshal(b, &k)
		for _, c := range k.Components {
			if !slices.Contains(components, path.Join(dir, c)) {
				t.Errorf("%s: component %s has no kustomization.yaml of kind Component", dir, c)
			}
		}
		for _, r := range k.Resources {
			used[path.Join(dir, r)] = true
		}
		for _, p := range k.Patches {
			if p.Path != "" {
				used[path.Join(dir, p.Path)] = true
			}
		}
		for _, g := range k.ConfigMapGenerator {
			for _, f := range g.Files {
				_, file, ok := strings.Cut(f, "=")
				if !ok {
					file = f
				}
				used[path.Join(dir, file)] = true
			}
		}
	}
	for _, f := range standaloneExamples(t) {
		used[f] = true
		objs, err := readObjects(f)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, o := range objs {
			check(f, o)
		}
	}
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		// deploy/config holds the -config file's schema and example, checked in the options
		// package; deploy/helm the chart, checked through its renders and by e2e/chart.
		rel = filepath.ToSlash(rel)
		if !used[rel] && !strings.HasPrefix(rel, "deploy/config/") && !strings.HasPrefix(rel, "deploy/helm/") {
			t.Errorf("%s is neither a kustomization, a resource, patch or generated file of one, nor an example in deploy/examples", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkGPURequests: a pod asks for GPUs, as the extended resource or through a DRA claim; an
// extended resource's request must equal its limit, or the API server refuses the pod.
func checkGPURequests(t *testing.T, where string, spec corev1.PodSpec) {
	t.Helper()
	asked := false
	for _, c := range spec.Containers {
		lim, hasLim := c.Resources.Limits[options.DefaultResourceName]
		req, hasReq := c.Resources.Requests[options.DefaultResourceName]
		if hasReq && (!hasLim || !lim.Equal(req)) {
			t.Errorf("%s: container %s: %s request %s != limit %s", where, c.Name, options.DefaultResourceName, req.String(), lim.String())
		}
		asked = asked || hasLim || len(c.Resources.Claims) > 0
	}
	if !asked {
		t.Errorf("%s: no container asks for %s or names a resource claim", where, options.DefaultResourceName)
	}
}

// TestDeploy_DaemonSetInvariants checks, for the base, everything built on it and every render
// of the chart, that the DaemonSet agrees with the binary it runs (its args and variables are
// flags the binary accepts, its hostPaths are their values, its profiles load), keeps its
// security settings, and has a service account token exactly when it uses the API.
func TestDeploy_DaemonSetInvariants(t *testing.T) {
	defaults := defaultFlags(t)
	for _, m := range manifestSets(t) {
		t.Run(strings.ReplaceAll(m.where, "/", "_"), func(t *testing.T) {
			ds := daemonSetOf(t, m.where, m.objs)
			spec := ds.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("%d containers, want the plugin alone", len(spec.Containers))
			}
			c := spec.Containers[0]
			if c.Name != "device-plugin" {
				t.Errorf("container %q: the README and the e2e tests call it device-plugin", c.Name)
			}
			flags := containerFlags(t, c)

			// The selector picks the template's pods.
			for k, v := range ds.Spec.Selector.MatchLabels {
				if ds.Spec.Template.Labels[k] != v {
					t.Errorf("selector %s=%s does not match the template labels %v", k, v, ds.Spec.Template.Labels)
				}
			}
			// The recommended labels, on the pods and on every object.
			for _, o := range m.objs {
				labels := map[string]string{}
				if meta, ok := o["metadata"].(map[string]any); ok {
					l, _ := meta["labels"].(map[string]any)
					for k, v := range l {
						labels[k] = fmt.Sprint(v)
					}
				}
				checkRecommendedLabels(t, fmt.Sprintf("%s %s", o["kind"], name(o)), labels)
			}
			checkRecommendedLabels(t, "pod template", ds.Spec.Template.Labels)

			// The kubelet's device-plugin directory is fixed, whatever its root directory.
			if flags.devicePluginPath != defaults.devicePluginPath {
				t.Errorf("-device-plugin-path %s: the kubelet always uses %s", flags.devicePluginPath, defaults.devicePluginPath)
			}
			if filepath.Dir(flags.adminSocket) != filepath.Dir(flags.statePath) {
				t.Errorf("admin socket %s is not next to the state file %s: dump and health inside the pod would miss it", flags.adminSocket, flags.statePath)
			}
			// The base and the chart's defaults leave every path (and the resource name) at its
			// flag default; they turn the metrics listener and labelling on and name the node.
			// So do the DRA overlay and the chart's DRA values, which set -kubelet-api=dra.
			switch want := defaults; m.where {
			case "deploy/overlays/dra", "chart/dra":
				want.kubeletAPI = "dra"
				fallthrough
			case "deploy/base", "chart/default":
				want.metricsAddress, want.labelNode, want.nodeName = flags.metricsAddress, true, downwardNodeName
				if flags != want {
					t.Errorf("a flag away from its default: %+v, want %+v", flags, want)
				}
			}

			dra := usesDRA(t, spec, c, m.objs, flags)
			checkHostPaths(t, spec, c, flags, dra)
			checkSecurity(t, spec, c)
			checkProbesAndMetrics(t, ds, c, flags)
			checkAPIAccess(t, m.objs, ds, flags, dra)
			checkDeviceClass(t, m.objs, flags, dra)

			// Requests and limits are set and consistent (their values are tuning, not checked).
			r := c.Resources
			if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
				t.Errorf("resources %v: want cpu and memory requests and a memory limit", r)
			} else if r.Limits.Memory().Cmp(*r.Requests.Memory()) < 0 {
				t.Errorf("memory limit %s below the request %s", r.Limits.Memory(), r.Requests.Memory())
			}
			// It must be running before pods are admitted after a reboot.
			if !strings.HasPrefix(spec.PriorityClassName, "system-") {
				t.Errorf("priorityClassName %q, want a system- priority class", spec.PriorityClassName)
			}
			if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
				t.Errorf("update strategy %s, want RollingUpdate", ds.Spec.UpdateStrategy.Type)
			}

			// A -topology file must come from a volume the rendered output provides.
			if flags.topology != "" && filepath.IsAbs(flags.topology) {
				checkTopologyVolume(t, spec, c, m.objs, flags.topology)
			}
			// Profiles come from a ConfigMap mounted as a directory, load as the binary loads
			// them, and no flag or variable overrides them.
			if flags.configPath != "" {
				checkProfiles(t, spec, c, m.objs, flags)
			}
		})
	}
}

// checkRecommendedLabels: the labels Kubernetes recommends (app.kubernetes.io/name, instance,
// component), and the base's app label the DaemonSet selects by.
func checkRecommendedLabels(t *testing.T, what string, labels map[string]string) {
	t.Helper()
	for _, k := range []string{"app", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} {
		if labels[k] == "" {
			t.Errorf("%s: no label %s (%v)", what, k, labels)
		}
	}
}

// usesDRA reports whether a node may serve its GPUs through DRA: -kubelet-api=dra, or a profile
// of the -config directory with flags.kubeletAPI: dra (checkProfiles loads them as the binary
// does).
func usesDRA(t *testing.T, spec corev1.PodSpec, c corev1.Container, objs []object, flags pluginFlags) bool {
	t.Helper()
	if flags.kubeletAPI == "dra" {
		return true
	}
	if flags.configPath == "" {
		return false
	}
	for key, data := range configMapAt(t, spec, c, objs, flags.configPath).Data {
		var p struct {
			Flags map[string]any `json:"flags"`
		}
		if err := yaml.Unmarshal([]byte(data), &p); err != nil {
			t.Fatalf("profile %s: %v", key, err)
		}
		if p.Flags["kubeletAPI"] == "dra" {
			return true
		}
	}
	return false
}

// checkHostPaths: every hostPath is mounted at its own path and is the value of a flag: the
// device-plugin directory, the state file's directory, the PodResources socket's directory,
// the CDI spec directory; where a node may serve DRA (dra), the kubelet's plugin registration
// directory and the driver's socket directory in the kubelet's plugins directory, and only
// then. The directories the plugin hands the kubelet as host paths of containers' mounts
// (nvidia-smi's, the status files') are in the state file's directory, so the plugin's path is
// the host's.
func checkHostPaths(t *testing.T, spec corev1.PodSpec, c corev1.Container, flags pluginFlags, dra bool) {
	t.Helper()
	type hostPath struct {
		typ      corev1.HostPathType
		readOnly bool
		flag     string
	}
	want := map[string]hostPath{
		flags.devicePluginPath:                 {corev1.HostPathDirectory, false, "-device-plugin-path"},
		filepath.Dir(flags.statePath):          {corev1.HostPathDirectoryOrCreate, false, "-state"},
		filepath.Dir(flags.podResourcesSocket): {corev1.HostPathDirectory, true, "-pod-resources-socket"},
		flags.cdiSpecDir:                       {corev1.HostPathDirectoryOrCreate, false, "-cdi-spec-dir"},
	}
	// The kubelet makes its registration directory at start; the driver's socket directory
	// is the driver's to make.
	draDirs := map[string]hostPath{
		flags.kubeletRegistryDir:                                    {corev1.HostPathDirectory, false, "-kubelet-registry-dir"},
		filepath.Join(flags.kubeletPluginsDir, flags.draDriverName): {corev1.HostPathDirectoryOrCreate, false, "-kubelet-plugins-dir/-dra-driver-name"},
	}
	if dra {
		maps.Copy(want, draDirs)
	}
	for _, d := range []struct{ path, what string }{{flags.toolsDir, "-tools-dir"}, {flags.statusDir, "the status directory"}, {flags.loadSocketDir, "the load sockets' directory"}} {
		if filepath.Dir(d.path) != filepath.Dir(flags.statePath) {
			t.Errorf("%s %s is not next to the state file %s: not in its hostPath", d.what, d.path, flags.statePath)
		}
	}
	mounts := map[string][]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = append(mounts[m.Name], m)
	}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		w, ok := want[v.HostPath.Path]
		if d, isDRA := draDirs[v.HostPath.Path]; !ok && isDRA {
			t.Errorf("hostPath %s (%s), but no node serves DRA (-kubelet-api, or a profile's kubeletAPI)", v.HostPath.Path, d.flag)
			continue
		}
		if !ok {
			t.Errorf("hostPath %s is no flag's value (%+v)", v.HostPath.Path, flags)
			continue
		}
		delete(want, v.HostPath.Path)
		if v.HostPath.Type == nil || *v.HostPath.Type != w.typ {
			got := "none"
			if v.HostPath.Type != nil {
				got = string(*v.HostPath.Type)
			}
			t.Errorf("hostPath %s (%s): type %s, want %s", v.HostPath.Path, w.flag, got, w.typ)
		}
		if len(mounts[v.Name]) != 1 || mounts[v.Name][0].MountPath != v.HostPath.Path {
			t.Errorf("hostPath %s (%s) mounted as %+v, want once at the same path", v.HostPath.Path, w.flag, mounts[v.Name])
			continue
		}
		if mounts[v.Name][0].ReadOnly != w.readOnly {
			t.Errorf("hostPath %s (%s): readOnly %v, want %v", v.HostPath.Path, w.flag, mounts[v.Name][0].ReadOnly, w.readOnly)
		}
	}
	for p, w := range want {
		t.Errorf("no hostPath for %s (%s)", p, w.flag)
	}
}

// checkSecurity: root for the kubelet's root-owned directories, and nothing more.
func checkSecurity(t *testing.T, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("host namespaces: network %v, pid %v, ipc %v", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v, want all dropped and none added", sc.Capabilities)
	}
	// The runtime's default seccomp filter, for the pod and the container.
	for what, seccomp := range map[string]*corev1.SeccompProfile{"container": sc.SeccompProfile, "pod": nil} {
		if what == "pod" && spec.SecurityContext != nil {
			seccomp = spec.SecurityContext.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s seccompProfile %+v, want RuntimeDefault", what, seccomp)
		}
	}
}

// checkAPIAccess: the plugin gets a service account token exactly when it uses the API — to
// label its Node (-label-node), to read the label that picks its profile (-config with a
// directory of profiles), or to serve DRA (dra) — and then its own service account, bound to a
// ClusterRole that reads nodes, patches them only with -label-node, and only with DRA reads
// ResourceClaims, updates their status and writes ResourceSlices (the RBAC of a DRA driver:
// kubeletplugin gets the claims it prepares, the resourceslice controller lists, watches,
// creates, updates and deletes the node's slices). It always knows its node's name, from the
// downward API. Without the API the output holds no RBAC.
func checkAPIAccess(t *testing.T, objs []object, ds *appsv1.DaemonSet, flags pluginFlags, dra bool) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	usesAPI := flags.labelNode || flags.configPath != "" || dra
	if flags.nodeName != downwardNodeName {
		t.Errorf("-node-name %q: want the node's name from the downward API (NODE_NAME from spec.nodeName): GPU UUIDs, labels and profiles need it", flags.nodeName)
	}
	token := spec.AutomountServiceAccountToken != nil && *spec.AutomountServiceAccountToken
	if token != usesAPI {
		t.Errorf("automountServiceAccountToken %v, but the plugin uses the API: %v (-label-node %v, -config %q, DRA %v)", token, usesAPI, flags.labelNode, flags.configPath, dra)
	}
	var roles, bindings []object
	for _, o := range objs {
		switch o["kind"] {
		case "ClusterRole", "Role":
			roles = append(roles, o)
		case "ClusterRoleBinding", "RoleBinding":
			bindings = append(bindings, o)
		}
	}
	if !usesAPI {
		if len(roles)+len(bindings) > 0 {
			t.Errorf("RBAC objects %d roles, %d bindings, but the plugin does not use the API", len(roles), len(bindings))
		}
		return
	}
	sa := spec.ServiceAccountName
	if sa == "" || sa == "default" {
		t.Fatalf("serviceAccountName %q: want the plugin's own", sa)
	}
	if !slices.ContainsFunc(objs, func(o object) bool {
		meta, _ := o["metadata"].(map[string]any)
		return o["kind"] == "ServiceAccount" && name(o) == sa && meta["namespace"] == ds.Namespace
	}) {
		t.Errorf("no ServiceAccount %s/%s in the output", ds.Namespace, sa)
	}
	// verbs are the verbs granted, by "<API group>/<resource>" ("core" for the core group).
	verbs := map[string][]string{}
	for _, b := range bindings {
		var crb rbacv1.ClusterRoleBinding
		if err := decodeStrict(b, &crb); err != nil {
			t.Fatal(err)
		}
		if b["kind"] != "ClusterRoleBinding" || !slices.Contains(crb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ds.Namespace}) {
			continue
		}
		for _, r := range roles {
			if r["kind"] != "ClusterRole" || name(r) != crb.RoleRef.Name || crb.RoleRef.Kind != "ClusterRole" {
				continue
			}
			var cr rbacv1.ClusterRole
			if err := decodeStrict(r, &cr); err != nil {
				t.Fatal(err)
			}
			for _, rule := range cr.Rules {
				if len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
					t.Errorf("ClusterRole %s rule %+v: resource names and URLs are none of the plugin's", cr.Name, rule)
				}
				for _, g := range rule.APIGroups {
					if g == "" {
						g = "core"
					}
					for _, r := range rule.Resources {
						verbs[g+"/"+r] = append(verbs[g+"/"+r], rule.Verbs...)
					}
				}
			}
		}
	}
	want := map[string][]string{"core/nodes": {"get", "list", "watch"}}
	if flags.labelNode {
		want["core/nodes"] = append(want["core/nodes"], "patch")
	}
	if dra {
		want["resource.k8s.io/resourceclaims"] = []string{"get", "list", "watch"}
		want["resource.k8s.io/resourceclaims/status"] = []string{"update"}
		want["resource.k8s.io/resourceslices"] = []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	}
	for k, v := range verbs {
		verbs[k] = slices.Compact(slices.Sorted(slices.Values(v)))
	}
	for k, v := range want {
		want[k] = slices.Sorted(slices.Values(v))
	}
	if !maps.EqualFunc(verbs, want, slices.Equal) {
		t.Errorf("the service account %s may %v, want %v (-label-node %v, DRA %v)", sa, verbs, want, flags.labelNode, dra)
	}
}

// checkDeviceClass: where a node may serve DRA the output has the DeviceClasses of the plugin's
// driver (and has none otherwise): cluster-scoped, without a namespace; selecting the whole GPUs
// (type gpu) or the MIG partitions (type mig, a class named mig.…) of -dra-driver-name; and, when it names an extended resource, the one the device plugin
// advertises, so that the same pod runs on a node of either kind.
func checkDeviceClass(t *testing.T, objs []object, flags pluginFlags, dra bool) {
	t.Helper()
	var classes []resourcev1.DeviceClass
	for _, o := range objs {
		if o["kind"] != "DeviceClass" {
			continue
		}
		var dc resourcev1.DeviceClass
		if err := decodeStrict(o, &dc); err != nil {
			t.Fatal(err)
		}
		if dc.Namespace != "" {
			t.Errorf("DeviceClass %s: namespace %q on a cluster-scoped object (a kustomization with namespace: gives it one)", dc.Name, dc.Namespace)
		}
		classes = append(classes, dc)
	}
	if !dra {
		if len(classes) > 0 {
			t.Errorf("DeviceClass %s, but no node serves DRA (-kubelet-api, or a profile's kubeletAPI)", classes[0].Name)
		}
		return
	}
	if len(classes) != 2 {
		t.Fatalf("%d DeviceClasses, want the driver's two (whole GPUs, MIG partitions)", len(classes))
	}
	for _, dc := range classes {
		kind := "gpu"
		if dc.Spec.ExtendedResourceName == nil && strings.HasPrefix(dc.Name, "mig.") {
			kind = "mig"
		}
		want := []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].type == %q", flags.draDriverName, flags.draDriverName, kind)}}}
		if !reflect.DeepEqual(dc.Spec.Selectors, want) || len(dc.Spec.Config) > 0 {
			t.Errorf("DeviceClass %s: selectors %+v config %+v, want only the %s devices of the driver -dra-driver-name=%s", dc.Name, dc.Spec.Selectors, dc.Spec.Config, kind, flags.draDriverName)
		}
		if n := dc.Spec.ExtendedResourceName; n != nil && *n != flags.resourceName {
			t.Errorf("DeviceClass %s: extendedResourceName %s, but the device plugin advertises %s", dc.Name, *n, flags.resourceName)
		}
	}
}

// checkProbesAndMetrics: the probes and the scrape annotations ask the port -metrics-address
// listens on, at the paths the binary serves; it is not 9400, which GPU telemetry keeps.
func checkProbesAndMetrics(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container, flags pluginFlags) {
	t.Helper()
	_, port, err := net.SplitHostPort(flags.metricsAddress)
	if err != nil || port == "" {
		t.Fatalf("-metrics-address %q: the probes and metrics need it", flags.metricsAddress)
	}
	if port == strconv.Itoa(telemetryPort) {
		t.Errorf("-metrics-address %s: port %d is dcgm-exporter's, kept for the GPU telemetry", flags.metricsAddress, telemetryPort)
	}
	var portName string
	for _, p := range c.Ports {
		if strconv.Itoa(int(p.ContainerPort)) == port {
			portName = p.Name
		}
	}
	if portName != "metrics" {
		t.Errorf("containerPort %s for -metrics-address %s is named %q, want metrics", port, flags.metricsAddress, portName)
	}
	for what, want := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
		p := want.probe
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", what)
			continue
		}
		if got := p.HTTPGet.Port.String(); got != portName {
			t.Errorf("%s probe asks port %s, want the named port %s", what, got, portName)
		}
		if p.HTTPGet.Path != want.path {
			t.Errorf("%s probe path %s, want %s", what, p.HTTPGet.Path, want.path)
		}
	}
	a := ds.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != port || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v, want prometheus.io/scrape \"true\", port %s, path /metrics", a, port)
	}
	// The telemetry, when on, listens on the container port named telemetry.
	var telemetryPorts []string
	for _, p := range c.Ports {
		if p.Name == "telemetry" {
			telemetryPorts = append(telemetryPorts, strconv.Itoa(int(p.ContainerPort)))
		}
	}
	switch _, tport, _ := net.SplitHostPort(flags.telemetryAddress); {
	case flags.telemetryAddress == "" && len(telemetryPorts) > 0:
		t.Errorf("a telemetry port %v without -telemetry-address", telemetryPorts)
	case flags.telemetryAddress != "" && !slices.Equal(telemetryPorts, []string{tport}):
		t.Errorf("-telemetry-address %s: container ports named telemetry %v, want [%s]", flags.telemetryAddress, telemetryPorts, tport)
	}
}

// telemetryPort is dcgm-exporter's port, where the plugin's GPU telemetry goes.
const telemetryPort = 9400

// configMapAt returns the ConfigMap of objs mounted by c at mountPath (a directory), failing
// unless it is mounted read-only and whole.
func configMapAt(t *testing.T, spec corev1.PodSpec, c corev1.Container, objs []object, mountPath string) *corev1.ConfigMap {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath != mountPath {
			continue
		}
		if !m.ReadOnly || m.SubPath != "" {
			t.Errorf("volume %s at %s: want read-only and whole (a subPath never sees updates)", m.Name, mountPath)
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			for _, o := range objs {
				if o["kind"] != "ConfigMap" || name(o) != v.ConfigMap.Name {
					continue
				}
				var cm corev1.ConfigMap
				if err := decodeStrict(o, &cm); err != nil {
					t.Fatal(err)
				}
				return &cm
			}
		}
	}
	t.Fatalf("%s is no ConfigMap volume of the output", mountPath)
	return nil
}

// checkTopologyVolume: the -topology file is a key of a ConfigMap the output holds, mounted
// read-only, and parses.
func checkTopologyVolume(t *testing.T, spec corev1.PodSpec, c corev1.Container, objs []object, file string) {
	t.Helper()
	cm := configMapAt(t, spec, c, objs, filepath.Dir(file))
	data, ok := cm.Data[filepath.Base(file)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s for -topology=%s", cm.Name, filepath.Base(file), file)
	}
	if _, err := topology.Parse(file, strings.NewReader(data)); err != nil {
		t.Errorf("-topology=%s: %v", file, err)
	}
}

// checkProfiles: the -config directory is a ConfigMap mounted read-only and whole; its files,
// written to a directory as the kubelet would, load as the binary loads them at start (every
// profile parsed and resolved with the container's args and variables, the -config-default
// one selected); and the container sets no flag a profile sets, which would override every
// profile.
func checkProfiles(t *testing.T, spec corev1.PodSpec, c corev1.Container, objs []object, flags pluginFlags) {
	t.Helper()
	cm := configMapAt(t, spec, c, objs, flags.configPath)
	dir := t.TempDir()
	for key, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, key), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		if strings.HasPrefix(a, "-config=") {
			args[i] = "-config=" + dir
		}
	}
	env := containerEnv(t, c)
	o, err := options.Parse(args, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg, ps, err := o.Load()
	if err != nil {
		t.Fatalf("profiles of ConfigMap %s: %v", cm.Name, err)
	}
	if ps == nil || len(ps.Names())+len(ps.Skipped) != len(cm.Data) {
		t.Fatalf("ConfigMap %s keys %v: profiles %v", cm.Name, slices.Sorted(maps.Keys(cm.Data)), ps)
	}
	if flags.configDefault != "" && cfg.Profile != flags.configDefault {
		t.Errorf("at start the profile is %q, want -config-default %q", cfg.Profile, flags.configDefault)
	}
	configs, err := o.ResolveAll(ps)
	if err != nil {
		t.Fatal(err)
	}
	for name, pc := range configs {
		if len(pc.Overridden) > 0 {
			t.Errorf("profile %s: %v overridden by the DaemonSet", name, pc.Overridden)
		}
	}
	pf := profileFlags(t)
	for _, a := range c.Args {
		if f, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); pf[f] {
			t.Errorf("arg %s: with profiles a flag overrides every profile", a)
		}
	}
	for k := range env {
		if f := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, options.EnvPrefix), "_", "-")); strings.HasPrefix(k, options.EnvPrefix) && pf[f] {
			t.Errorf("variable %s: with profiles it overrides every profile", k)
		}
	}
}

// TestDeploy_OverlaysFollowTheKubeletRootDir: each overlay points the PodResources socket into
// its cluster's kubelet root directory, and so the kubelet's plugin directories where it serves
// DRA, and leaves the device-plugin directory alone.
func TestDeploy_OverlaysFollowTheKubeletRootDir(t *testing.T) {
	defaults := defaultFlags(t)
	names := overlays(t)
	for cluster, root := range kubeletRootDirs {
		if !slices.Contains(names, cluster) {
			t.Errorf("no deploy/overlays/%s for kubelet root dir %s", cluster, root)
		}
	}
	for _, cluster := range names {
		t.Run(cluster, func(t *testing.T) {
			root, ok := kubeletRootDirs[cluster]
			if !ok {
				t.Fatalf("deploy/overlays/%s: add its kubelet root directory (and the source saying so) to kubeletRootDirs", cluster)
			}
			ds, _ := renderedDaemonSet(t, "deploy/overlays/"+cluster)
			flags := containerFlags(t, ds.Spec.Template.Spec.Containers[0])
			if want := filepath.Join(root, "pod-resources", "kubelet.sock"); flags.podResourcesSocket != want {
				t.Errorf("-pod-resources-socket %s, want %s (the kubelet serves PodResources under its root directory)", flags.podResourcesSocket, want)
			}
			if flags.devicePluginPath != defaults.devicePluginPath {
				t.Errorf("-device-plugin-path %s, want %s: the kubelet does not move it with its root directory", flags.devicePluginPath, defaults.devicePluginPath)
			}
			if flags.kubeletAPI != "dra" {
				return
			}
			// pkg/kubelet/kubelet_getters.go: getPluginsRegistrationDir, getPluginsDir.
			for _, d := range []struct{ flag, got, name string }{
				{"-kubelet-registry-dir", flags.kubeletRegistryDir, "plugins_registry"},
				{"-kubelet-plugins-dir", flags.kubeletPluginsDir, "plugins"},
			} {
				if want := filepath.Join(root, d.name); d.got != want {
					t.Errorf("%s %s, want %s (the kubelet's plugin directories are under its root directory)", d.flag, d.got, want)
				}
			}
		})
	}
}

// TestDeploy_Metrics: the PodMonitor example scrapes the DaemonSet's pods on their metrics port.
func TestDeploy_Metrics(t *testing.T) {
	ds, _ := renderedDaemonSet(t, "deploy/base")
	c := ds.Spec.Template.Spec.Containers[0]
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	found := false
	for _, f := range standaloneExamples(t) {
		objs, err := readObjects(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o["kind"] != "PodMonitor" {
				continue
			}
			found = true
			var pm struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name      string            `json:"name"`
					Namespace string            `json:"namespace"`
					Labels    map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec struct {
					Selector struct {
						MatchLabels map[string]string `json:"matchLabels"`
					} `json:"selector"`
					PodMetricsEndpoints []struct {
						Port string `json:"port"`
						Path string `json:"path"`
					} `json:"podMetricsEndpoints"`
				} `json:"spec"`
			}
			if err := decodeStrict(o, &pm); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if pm.APIVersion != "monitoring.coreos.com/v1" {
				t.Errorf("%s: apiVersion %s", f, pm.APIVersion)
			}
			if pm.Metadata.Namespace != ds.Namespace {
				t.Errorf("%s: namespace %q: a PodMonitor without a namespaceSelector watches its own namespace only, the plugin runs in %s", f, pm.Metadata.Namespace, ds.Namespace)
			}
			if len(pm.Spec.Selector.MatchLabels) == 0 {
				t.Errorf("%s: empty selector", f)
			}
			for k, v := range pm.Spec.Selector.MatchLabels {
				if ds.Spec.Template.Labels[k] != v {
					t.Errorf("%s: selector %s=%s does not match the plugin's pods %v", f, k, v, ds.Spec.Template.Labels)
				}
			}
			if len(pm.Spec.PodMetricsEndpoints) == 0 {
				t.Errorf("%s: no endpoints", f)
			}
			for _, e := range pm.Spec.PodMetricsEndpoints {
				if !ports[e.Port] || e.Path != "/metrics" {
					t.Errorf("%s: endpoint port %q path %q, want a port of the container %v and /metrics", f, e.Port, e.Path, ports)
				}
			}
		}
	}
	if !found {
		t.Error("no PodMonitor example")
	}
}

// ---------------------------------------------------------------------------------------------
// Dynamic Resource Allocation.

// TestDeploy_DRADefaults: the DRA flags default to what the manifests assume (draDefaults).
func TestDeploy_DRADefaults(t *testing.T) {
	f, err := parsePluginFlags(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := struct{ kubeletAPI, driverName, registryDir, pluginsDir string }{f.kubeletAPI, f.draDriverName, f.kubeletRegistryDir, f.kubeletPluginsDir}
	if got != draDefaults {
		t.Errorf("the DRA flags default to %+v; deploy/ assumes %+v: change the manifests and draDefaults", got, draDefaults)
	}
}

// draExample is an object of deploy/examples/dra, decoded.
type draExample struct {
	where     string
	templates map[string]resourcev1.ResourceClaimTemplate
	claims    map[string]resourcev1.ResourceClaim
	pods      []corev1.Pod
}

func readDRAExamples(t *testing.T) draExample {
	t.Helper()
	ex := draExample{where: "deploy/examples/dra", templates: map[string]resourcev1.ResourceClaimTemplate{}, claims: map[string]resourcev1.ResourceClaim{}}
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "examples", "dra", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in deploy/examples/dra (%v)", err)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(repoRoot, f)
		objs, err := readObjects(rel)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			var err error
			switch o["kind"] {
			case "ResourceClaimTemplate":
				var rct resourcev1.ResourceClaimTemplate
				err = decodeStrict(o, &rct)
				ex.templates[rct.Name] = rct
			case "ResourceClaim":
				var rc resourcev1.ResourceClaim
				err = decodeStrict(o, &rc)
				ex.claims[rc.Name] = rc
			case "Pod":
				var pod corev1.Pod
				err = decodeStrict(o, &pod)
				ex.pods = append(ex.pods, pod)
			default:
				err = fmt.Errorf("kind %v: the DRA examples are claims, claim templates and pods", o["kind"])
			}
			if err != nil {
				t.Fatalf("%s: %s: %v", rel, name(o), err)
			}
		}
	}
	return ex
}

// TestDeploy_DRAExamples: the claims of deploy/examples/dra ask for devices of the DeviceClass
// that deploy/overlays/dra installs, their constraints name attributes of its driver or
// Kubernetes' standard ones, every claim a pod names is an example's and every container's
// claim is its pod's; and the examples the README lists are there: whole GPUs from a claim
// template, an NVLink-connected pair, the same NUMA node, a claim two pods share, and a pod
// asking for the class's extended resource exactly as the vgpu-demo pod asks the device plugin.
func TestDeploy_DRAExamples(t *testing.T) {
	ds, objs := renderedDaemonSet(t, "deploy/overlays/dra")
	flags := containerFlags(t, ds.Spec.Template.Spec.Containers[0])
	var class resourcev1.DeviceClass // the whole GPUs' class, with the extended resource
	classNames := map[string]bool{}  // every class the overlay installs: the MIG class too
	for _, o := range objs {
		if o["kind"] == "DeviceClass" {
			var dc resourcev1.DeviceClass
			if err := decodeStrict(o, &dc); err != nil {
				t.Fatal(err)
			}
			classNames[dc.Name] = true
			if dc.Spec.ExtendedResourceName != nil {
				class = dc
			}
		}
	}
	if class.Name == "" || class.Spec.ExtendedResourceName == nil {
		t.Fatalf("deploy/overlays/dra: no DeviceClass with an extendedResourceName (%+v)", class)
	}
	ex := readDRAExamples(t)

	constrained := map[string]bool{}
	checkClaim := func(what string, spec resourcev1.ResourceClaimSpec) {
		t.Helper()
		requests := map[string]bool{}
		for _, r := range spec.Devices.Requests {
			requests[r.Name] = true
			classes := []string{}
			if r.Exactly != nil {
				classes = append(classes, r.Exactly.DeviceClassName)
			}
			for _, sub := range r.FirstAvailable {
				classes = append(classes, sub.DeviceClassName)
			}
			if len(classes) == 0 || slices.ContainsFunc(classes, func(c string) bool { return !classNames[c] }) {
				t.Errorf("%s: request %s asks for devices of the classes %v, want those deploy/overlays/dra installs %v", what, r.Name, classes, slices.Sorted(maps.Keys(classNames)))
			}
		}
		if len(requests) == 0 {
			t.Errorf("%s: no request", what)
		}
		for _, c := range spec.Devices.Constraints {
			for _, r := range c.Requests {
				if !requests[r] {
					t.Errorf("%s: a constraint names the request %s, which the claim does not have", what, r)
				}
			}
			if c.MatchAttribute == nil {
				continue
			}
			attr := string(*c.MatchAttribute)
			if domain, _, ok := strings.Cut(attr, "/"); !ok || (domain != flags.draDriverName && domain != "resource.kubernetes.io") {
				t.Errorf("%s: matchAttribute %s: want an attribute of the driver %s/… or a standard resource.kubernetes.io/… one", what, attr, flags.draDriverName)
			}
			constrained[attr] = true
		}
	}
	for n, rct := range ex.templates {
		checkClaim("ResourceClaimTemplate "+n, rct.Spec.Spec)
	}
	for n, rc := range ex.claims {
		checkClaim("ResourceClaim "+n, rc.Spec)
	}

	usedTemplates, claimPods := map[string]bool{}, map[string]int{}
	var extended []corev1.Pod
	for _, pod := range ex.pods {
		what := "pod " + pod.Name
		podClaims := map[string]bool{}
		for _, rc := range pod.Spec.ResourceClaims {
			podClaims[rc.Name] = true
			switch {
			case (rc.ResourceClaimName == nil) == (rc.ResourceClaimTemplateName == nil):
				t.Errorf("%s: claim %s names %v claim and %v template: want one of the two", what, rc.Name, rc.ResourceClaimName, rc.ResourceClaimTemplateName)
			case rc.ResourceClaimName != nil:
				if _, ok := ex.claims[*rc.ResourceClaimName]; !ok {
					t.Errorf("%s: claim %s: no ResourceClaim %s in the examples", what, rc.Name, *rc.ResourceClaimName)
				}
				claimPods[*rc.ResourceClaimName]++
			default:
				if _, ok := ex.templates[*rc.ResourceClaimTemplateName]; !ok {
					t.Errorf("%s: claim %s: no ResourceClaimTemplate %s in the examples", what, rc.Name, *rc.ResourceClaimTemplateName)
				}
				usedTemplates[*rc.ResourceClaimTemplateName] = true
			}
		}
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			for _, cl := range c.Resources.Claims {
				if !podClaims[cl.Name] {
					t.Errorf("%s: container %s uses the claim %s, which the pod does not name", what, c.Name, cl.Name)
				}
			}
			if _, ok := c.Resources.Limits[corev1.ResourceName(*class.Spec.ExtendedResourceName)]; ok {
				extended = append(extended, pod)
			}
		}
	}
	for n := range ex.templates {
		if !usedTemplates[n] {
			t.Errorf("ResourceClaimTemplate %s: no pod of the examples uses it", n)
		}
	}
	for n := range ex.claims {
		if claimPods[n] < 2 {
			t.Errorf("ResourceClaim %s: %d pods name it, want the two that share it", n, claimPods[n])
		}
	}
	for _, attr := range []string{flags.draDriverName + "/nvlinkDomain", "resource.kubernetes.io/numaNode"} {
		if !constrained[attr] {
			t.Errorf("no example claim constrains its devices with matchAttribute %s", attr)
		}
	}
	if len(usedTemplates) == 0 || len(claimPods) == 0 {
		t.Errorf("claim templates used %v, shared claims %v: want both kinds", usedTemplates, claimPods)
	}

	// The extended resource: the same request as the device plugin's demo pod.
	demo, err := readObjects("deploy/examples/vgpu-demo.yaml")
	if err != nil || len(demo) != 1 {
		t.Fatalf("deploy/examples/vgpu-demo.yaml: %d objects, %v", len(demo), err)
	}
	var demoPod corev1.Pod
	if err := decodeStrict(demo[0], &demoPod); err != nil {
		t.Fatal(err)
	}
	if len(extended) != 1 {
		t.Fatalf("%d example pods ask for the extended resource %s, want 1", len(extended), *class.Spec.ExtendedResourceName)
	}
	got, want := extended[0].Spec.Containers, demoPod.Spec.Containers
	if len(got) != 1 || len(want) != 1 || !reflect.DeepEqual(got[0].Resources, want[0].Resources) {
		t.Errorf("pod %s asks for %+v, the vgpu-demo pod for %+v: want the same", extended[0].Name, got, want)
	}
	if _, ok := want[0].Resources.Limits[corev1.ResourceName(*class.Spec.ExtendedResourceName)]; !ok {
		t.Errorf("the vgpu-demo pod does not ask for the DeviceClass's extended resource %s", *class.Spec.ExtendedResourceName)
	}
}

// TestDeploy_ImageIsTheOneMakeBuilds: the DaemonSet runs the image `make image` tags, so
// `make image` and loading it into the cluster is all a local deploy needs.
func TestDeploy_ImageIsTheOneMakeBuilds(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no IMAGE ?= line")
	}
	for _, dir := range kustomizations(t) {
		ds, _ := renderedDaemonSet(t, dir)
		c := ds.Spec.Template.Spec.Containers[0]
		if c.Image != string(m[1]) {
			t.Errorf("%s: image %s, but make image builds %s", dir, c.Image, m[1])
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: imagePullPolicy %s: a locally loaded image needs IfNotPresent", dir, c.ImagePullPolicy)
		}
	}
}

// TestDeploy_RenderMatchesKubectlKustomize checks render against kustomize itself.
func TestDeploy_RenderMatchesKubectlKustomize(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: render is not compared with kustomize")
	}
	key := func(o object) string { return fmt.Sprintf("%s/%s", o["kind"], name(o)) }
	for _, dir := range kustomizations(t) {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			out, err := exec.Command(kubectl, "kustomize", filepath.Join(repoRoot, dir)).Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
				}
				t.Fatal(err)
			}
			var theirs []object
			for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
				if strings.TrimSpace(doc) == "" {
					continue
				}
				var o object
				if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
					t.Fatal(err)
				}
				theirs = append(theirs, o)
			}
			ours := mustRender(t, dir)
			for _, list := range [][]object{ours, theirs} {
				sort.Slice(list, func(i, j int) bool { return key(list[i]) < key(list[j]) })
			}
			if !reflect.DeepEqual(ours, theirs) {
				a, _ := json.MarshalIndent(ours, "", " ")
				b, _ := json.MarshalIndent(theirs, "", " ")
				t.Errorf("render %s differs from kubectl kustomize:\nrender:\n%s\nkustomize:\n%s", dir, a, b)
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// The Helm chart's renders (e2e/chart tests the chart itself).

// TestChart_DefaultsRenderTheBase: with its default values the chart renders the objects of
// deploy/base, but for Helm's own labels on each object's metadata, as the tests here see them:
// the render of the default values in testdata/chart against the base as render builds it.
// (e2e/chart's TestChart_DefaultsRenderTheKustomizeBase checks the same with kustomize and Helm
// themselves.)
func TestChart_DefaultsRenderTheBase(t *testing.T) {
	key := func(o object) string {
		meta, _ := o["metadata"].(map[string]any)
		return fmt.Sprintf("%s/%v/%s", o["kind"], meta["namespace"], name(o))
	}
	base := map[string]object{}
	for _, o := range mustRender(t, "deploy/base") {
		base[key(o)] = o
	}
	helm := map[string]object{}
	for _, o := range chartRenders(t)["default"] {
		labels := o["metadata"].(map[string]any)["labels"].(map[string]any)
		for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"} {
			if _, ok := labels[l]; !ok {
				t.Errorf("%s: no label %s", key(o), l)
			}
			delete(labels, l)
		}
		helm[key(o)] = o
	}
	if a, b := slices.Sorted(maps.Keys(base)), slices.Sorted(maps.Keys(helm)); !slices.Equal(a, b) {
		t.Fatalf("the base renders %v, the chart %v", a, b)
	}
	for k, o := range base {
		if !reflect.DeepEqual(o, helm[k]) {
			a, _ := json.MarshalIndent(o, "", " ")
			b, _ := json.MarshalIndent(helm[k], "", " ")
			t.Errorf("%s: the chart's differs from the base's:\nbase:\n%s\nchart:\n%s", k, a, b)
		}
	}
}

// ---------------------------------------------------------------------------------------------
// README and wording.

// TestDeploy_ReadmeMatchesTheManifests: the README's deploy commands label nodes the way the
// DaemonSet selects them, find it by its namespace and name, and name every overlay.
func TestDeploy_ReadmeMatchesTheManifests(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := renderedDaemonSet(t, "deploy/base")
	for k, v := range ds.Spec.Template.Spec.NodeSelector {
		if cmd := fmt.Sprintf("kubectl label node <node> %s=%s", k, v); !bytes.Contains(readme, []byte(cmd)) {
			t.Errorf("README does not say %q, and the DaemonSet runs only on such nodes", cmd)
		}
	}
	// The README's kubectl commands find the DaemonSet by namespace and name.
	if cmd := fmt.Sprintf("kubectl -n %s rollout status ds/%s", ds.Namespace, ds.Name); !bytes.Contains(readme, []byte(cmd)) {
		t.Errorf("README does not say %q", cmd)
	}
	for _, o := range overlays(t) {
		if !bytes.Contains(readme, []byte("deploy/overlays/"+o)) {
			t.Errorf("README does not mention deploy/overlays/%s", o)
		}
	}
	if !bytes.Contains(readme, []byte("Apache License 2.0")) {
		t.Error("README does not name the licence")
	}
}

// TestDeploy_NoInternalJargon: the README and everything under deploy/ speak to users.
func TestDeploy_NoInternalJargon(t *testing.T) {
	jargon := regexp.MustCompile(`(?i)\bthe seed\b|\bseed's\b|\bissues?\b|\bsketch\b|\bstop\b`)
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(repoRoot, p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := jargon.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: %s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// ---------------------------------------------------------------------------------------------
// The Dockerfile.

// dockerfile is the parsed Dockerfile: its instructions by stage.
type dockerfile struct {
	stages []*dockerStage
}

type dockerStage struct {
	from     string // FROM line after the instruction
	name     string // AS name
	args     map[string]string
	labels   map[string]string
	workdir  string
	runs     []string
	copies   []string
	entry    string
	platform string
}

func parseDockerfile(t *testing.T) *dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`\\\n(\s*#.*\n)*`).ReplaceAllString(string(b), " ")
	df := &dockerfile{}
	var st *dockerStage
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		if strings.ToUpper(instr) == "FROM" {
			st = &dockerStage{args: map[string]string{}, labels: map[string]string{}}
			df.stages = append(df.stages, st)
			f := strings.Fields(rest)
			if strings.HasPrefix(f[0], "--platform=") {
				st.platform, f = strings.TrimPrefix(f[0], "--platform="), f[1:]
			}
			st.from = f[0]
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			continue
		}
		if st == nil {
			if strings.ToUpper(instr) == "ARG" {
				continue // a global ARG before the first FROM
			}
			t.Fatalf("Dockerfile: %s before FROM", instr)
		}
		switch strings.ToUpper(instr) {
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			st.args[k] = v
		case "LABEL":
			for _, m := range regexp.MustCompile(`([\w.\-]+)="([^"]*)"`).FindAllStringSubmatch(rest, -1) {
				st.labels[m[1]] = m[2]
			}
		case "WORKDIR":
			st.workdir = rest
		case "RUN":
			st.runs = append(st.runs, rest)
		case "COPY":
			st.copies = append(st.copies, rest)
		case "ENTRYPOINT":
			st.entry = rest
		}
	}
	if len(df.stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a builder and a runtime", len(df.stages))
	}
	return df
}

// expand substitutes ${NAME} and $NAME from vars, as the Dockerfile's shell form would.
func expand(s string, vars map[string]string) string {
	return os.Expand(s, func(k string) string { return vars[k] })
}

// TestDockerfile_PinsAndLabels: base images pinned (a Go release for the builder, a digest for
// the runtime, never latest), the builder cross-compiles on the build platform, the OCI labels
// are there and the default version is the VERSION file's.
func TestDockerfile_PinsAndLabels(t *testing.T) {
	df := parseDockerfile(t)
	build, final := df.stages[0], df.stages[len(df.stages)-1]
	for _, st := range df.stages {
		if strings.Contains(st.from, ":latest") || !regexp.MustCompile(`:[\w.\-]+$|@sha256:[0-9a-f]{64}$`).MatchString(st.from) {
			t.Errorf("FROM %s: want a named tag or a digest, not latest", st.from)
		}
	}

	goMod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	module := regexp.MustCompile(`(?m)^module (\S+)`).FindSubmatch(goMod)
	if goLine == nil || module == nil {
		t.Fatal("go.mod: no go or module line")
	}
	if m := regexp.MustCompile(`^golang:(\d+\.\d+)\.\d+-\w+$`).FindStringSubmatch(build.from); m == nil || m[1] != string(goLine[1]) {
		t.Errorf("builder FROM %s: want golang:<Go %s.patch>-<distro>", build.from, goLine[1])
	}
	if build.platform != "$BUILDPLATFORM" {
		t.Errorf("builder --platform=%q: want $BUILDPLATFORM, cross-compiling for the target", build.platform)
	}
	if !regexp.MustCompile(`@sha256:[0-9a-f]{64}$`).MatchString(final.from) {
		t.Errorf("runtime FROM %s: want a digest", final.from)
	}

	version, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*dockerStage{build, final} {
		if v, ok := st.args["VERSION"]; !ok || v != strings.TrimSpace(string(version)) {
			t.Errorf("stage %s: ARG VERSION=%q, want the VERSION file's %q", st.from, v, strings.TrimSpace(string(version)))
		}
		if _, ok := st.args["REVISION"]; !ok {
			t.Errorf("stage %s: no ARG REVISION", st.from)
		}
	}
	license, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\s*Apache License\s+Version 2\.0, January 2004`).Match(license) {
		t.Error("LICENSE is not the Apache License 2.0")
	}
	want := map[string]string{
		"org.opencontainers.image.source":   "https://" + string(module[1]),
		"org.opencontainers.image.version":  "${VERSION}",
		"org.opencontainers.image.revision": "${REVISION}",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	for k, v := range want {
		if final.labels[k] != v {
			t.Errorf("LABEL %s=%q, want %q", k, final.labels[k], v)
		}
	}
	// The image carries the licence text, as the licence asks of redistributions.
	if !slices.ContainsFunc(final.copies, func(c string) bool { return strings.HasPrefix(c, "LICENSE ") }) {
		t.Error("the image does not carry LICENSE")
	}
}

// TestDockerfile_BuildsWithMake runs the builder stage's `make build` the way Docker would: in a
// copy of the build context (the repository less .dockerignore, so without .git), with its
// TARGETOS/TARGETARCH and build arguments substituted. It builds for this machine's platform and
// for another one, and checks each binary: static, trimmed, for the right platform, at the path
// the runtime stage copies, with the version and revision stamped (its -version prints both).
func TestDockerfile_BuildsWithMake(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	df := parseDockerfile(t)
	build, final := df.stages[0], df.stages[len(df.stages)-1]
	var makeLine string
	for _, r := range build.runs {
		if strings.HasPrefix(r, "make build") {
			makeLine = r
		}
	}
	if makeLine == "" {
		t.Fatalf("the builder does not run `make build`: %q", build.runs)
	}
	// The runtime stage copies the binary from the builder: its path relative to WORKDIR.
	var binRel string
	for _, c := range final.copies {
		if f := strings.Fields(c); len(f) == 3 && f[0] == "--from="+build.name {
			binRel, _ = filepath.Rel(build.workdir, f[1])
			if ep := fmt.Sprintf(`["%s"]`, f[2]); final.entry != ep {
				t.Errorf("ENTRYPOINT %s, want the copied binary %s", final.entry, ep)
			}
		}
	}
	if binRel == "" || strings.HasPrefix(binRel, "..") {
		t.Fatalf("the runtime stage copies no binary from %s under %s: %q", build.name, build.workdir, final.copies)
	}
	ctx := buildContext(t)
	// makeArgs is the builder's make command line for a target and build arguments; the
	// arguments not given keep the Dockerfile's defaults.
	makeArgs := func(goos, goarch string, buildArgs map[string]string) []string {
		vars := map[string]string{}
		for k, v := range build.args {
			vars[k] = v
		}
		vars["TARGETOS"], vars["TARGETARCH"] = goos, goarch
		for k, v := range buildArgs {
			vars[k] = v
		}
		return strings.Fields(expand(makeLine, vars))[1:]
	}
	// dryRun returns the commands make would run in the build context.
	dryRun := func(args ...string) string {
		cmd := exec.Command("make", append([]string{"-n"}, args...)...)
		cmd.Dir = ctx
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	version := strings.TrimSpace(string(mustRead(t, filepath.Join(ctx, "VERSION"))))
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}

	// What reaches go build, with no build argument: the target platform, the VERSION file's
	// version, revision "unknown". A build from the context with no variables at all (a source
	// archive) falls back to the same, for this machine's platform.
	for _, c := range []struct {
		args     []string
		platform string
	}{
		{makeArgs("linux", runtime.GOARCH, nil), "GOOS=linux GOARCH=" + runtime.GOARCH + " "},
		{makeArgs("linux", other, nil), "GOOS=linux GOARCH=" + other + " "},
		{[]string{"build"}, ""},
	} {
		out := dryRun(c.args...)
		for _, want := range []string{c.platform, "-X main.version=" + version + " ", "-X main.revision=unknown"} {
			if !strings.Contains(out, want) {
				t.Errorf("make %v runs %q: want %q in it", c.args, out, want)
			}
		}
	}

	// Build arguments reach the stamped version and revision. -X on a variable that does not
	// exist is silently ignored, so look for both values in what -version prints: a renamed
	// main.version or main.revision (or one that stops being a string variable) shows here.
	stampVersion := fmt.Sprintf("v0.0.0-stamp.%d", os.Getpid())
	const stampRevision = "0123abcd"
	runIn(t, ctx, "make", makeArgs("linux", runtime.GOARCH, map[string]string{"VERSION": stampVersion, "REVISION": stampRevision})...)
	bin := filepath.Join(ctx, binRel)
	checkBinary(t, bin, "linux", runtime.GOARCH)
	if runtime.GOOS == "linux" {
		out, err := exec.Command(bin, "-version").Output()
		for what, want := range map[string]string{"version": stampVersion, "revision": stampRevision} {
			if err != nil || !strings.Contains(string(out), want) {
				t.Errorf("-version = %q, %v: want the stamped %s %s in it", out, err, what, want)
			}
		}
	}

	// Cross-compiled for another platform, as docker buildx --platform does.
	runIn(t, ctx, "make", makeArgs("linux", other, nil)...)
	checkBinary(t, bin, "linux", other)
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func runIn(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v in the build context: %v\n%s", name, args, err, out)
	}
}

// buildContext copies the repository as Docker sends it: without what .dockerignore excludes.
func buildContext(t *testing.T) string {
	t.Helper()
	var patterns []string
	for _, line := range strings.Split(string(mustRead(t, filepath.Join(repoRoot, ".dockerignore"))), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") || strings.Contains(line, "**") {
			t.Fatalf(".dockerignore: %q: buildContext handles plain patterns only", line)
		}
		patterns = append(patterns, strings.Trim(path.Clean(line), "/"))
	}
	if !slices.Contains(patterns, ".git") {
		t.Error(".dockerignore does not exclude .git")
	}
	ignored := func(rel string) bool {
		for p := rel; p != "."; p = path.Dir(p) {
			for _, pat := range patterns {
				if ok, _ := path.Match(pat, p); ok {
					return true
				}
			}
		}
		return false
	}
	dst := t.TempDir()
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if ignored(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, need := range []string{"go.mod", "go.sum", "Makefile", "VERSION", "LICENSE"} {
		if _, err := os.Stat(filepath.Join(dst, need)); err != nil {
			t.Errorf("the build context lacks %s: %v", need, err)
		}
	}
	return dst
}

// checkBinary: static, trimmed, for goos/goarch.
func checkBinary(t *testing.T, bin, goos, goarch string) {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["GOOS"] != goos || settings["GOARCH"] != goarch || settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("%s/%s build settings %v: want CGO_ENABLED=0 -trimpath", goos, goarch, settings)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
	if f.Machine != machine {
		t.Errorf("%s/%s binary is for %s", goos, goarch, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s/%s binary is dynamically linked", goos, goarch)
		}
	}
}
