package chart_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/e2e/chart"
)

var update = flag.Bool("update", false, "write the renders under e2e/deploy/testdata/chart")

var updateChartSchema = flag.Bool("update-chart-schema", false, "write the profile schema into the chart's values.schema.json")

// repo is the repository, two levels above this package.
const repo = "../.."

var chartDir = chart.Dir(repo)

// helmLabels are the labels the chart adds to every object's metadata and the kustomize base
// does not have: Helm's bookkeeping (chart, release tool, version). Everything else is equal.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"}

// render renders the chart for the README's release with values (nil: the defaults).
func render(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	ms, err := chart.Template(chartDir, values, chart.ReleaseName, chart.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := chart.Objects(ms)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// renderErr renders and returns the error (nil if it rendered).
func renderErr(values map[string]any) error {
	_, err := chart.Template(chartDir, values, chart.ReleaseName, chart.Namespace)
	return err
}

// values decodes YAML into a values map.
func values(t *testing.T, doc string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// ciValues are the chart's ci/<case>-values.yaml files by case name.
func ciValues(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci/*-values.yaml in %s (%v)", chartDir, err)
	}
	out := map[string]string{}
	for _, f := range files {
		out[strings.TrimSuffix(filepath.Base(f), "-values.yaml")] = f
	}
	return out
}

func mustReadValues(t *testing.T, file string) map[string]any {
	t.Helper()
	v, err := chart.ReadValues(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s/%s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// byKey indexes objects by kind, namespace and name, failing on duplicates.
func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if _, dup := m[key(o)]; dup {
			t.Fatalf("%s rendered twice", key(o))
		}
		m[key(o)] = o
	}
	return m
}

func keys(m map[string]*unstructured.Unstructured) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// withoutHelmLabels returns a copy of o without helmLabels in its metadata.
func withoutHelmLabels(o *unstructured.Unstructured) *unstructured.Unstructured {
	c := o.DeepCopy()
	labels := c.GetLabels()
	for _, l := range helmLabels {
		delete(labels, l)
	}
	c.SetLabels(labels)
	return c
}

// one returns the only object of a kind.
func one(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind())
	}
	sort.Strings(out)
	return out
}

// container is the DaemonSet's one container.
func container(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	ds := one(t, objs, "DaemonSet")
	cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	return cs[0].(map[string]any)
}

func args(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	a, _, _ := unstructured.NestedStringSlice(container(t, objs), "args")
	return a
}

func podSpec(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	s, _, _ := unstructured.NestedMap(one(t, objs, "DaemonSet").Object, "spec", "template", "spec")
	return s
}

// ---------------------------------------------------------------------------------------------

// TestChart_Lint: helm lint passes, with no warning, for the default values and every
// ci/*-values.yaml; with a value the chart refuses, it reports the chart's message as an error.
func TestChart_Lint(t *testing.T) {
	cases := map[string]map[string]any{"default": nil}
	for name, f := range ciValues(t) {
		cases[name] = mustReadValues(t, f)
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			l := lint.AllWithKubeVersionAndSchemaValidation(chartDir, v, chart.Namespace, nil, false)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
	// helm lint reports a template's fail only in its log, as information; a value the
	// schema refuses is an error.
	t.Run("refused", func(t *testing.T) {
		l := lint.AllWithKubeVersionAndSchemaValidation(chartDir, values(t, "labelnode: false"), chart.Namespace, nil, false)
		if l.HighestSeverity != support.ErrorSev || !slices.ContainsFunc(l.Messages, func(m support.Message) bool {
			return strings.Contains(m.Err.Error(), "labelnode")
		}) {
			t.Errorf("helm lint with a misspelt value: %v, want the schema's error", l.Messages)
		}
	})
}

// TestChart_DefaultsRenderTheKustomizeBase: with its default values the chart renders the
// objects `kubectl kustomize deploy/base` builds (rendered here with kustomize's Go API), equal
// field for field but for Helm's own labels on the objects' metadata.
func TestChart_DefaultsRenderTheKustomizeBase(t *testing.T) {
	base, err := chart.Kustomize(filepath.Join(repo, "deploy", "base"))
	if err != nil {
		t.Fatal(err)
	}
	compareObjects(t, base, render(t, nil))
}

// TestChart_KubeletRootDirRendersTheOverlays: for each overlay of deploy/overlays, the chart
// renders the overlay's objects: with the values of ci/<overlay>-values.yaml where there is one
// (dra: kubeletAPI), else with kubeletRootDir set to that cluster's kubelet root directory, read
// from the overlay (its PodResources hostPath's parent).
func TestChart_KubeletRootDirRendersTheOverlays(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(repo, "deploy", "overlays", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no overlays (%v)", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			overlay, err := chart.Kustomize(dir)
			if err != nil {
				t.Fatal(err)
			}
			if f, ok := ciValues(t)[filepath.Base(dir)]; ok {
				compareObjects(t, overlay, render(t, mustReadValues(t, f)))
				return
			}
			var root string
			vols, _, _ := unstructured.NestedSlice(one(t, overlay, "DaemonSet").Object, "spec", "template", "spec", "volumes")
			for _, v := range vols {
				if p, ok, _ := unstructured.NestedString(v.(map[string]any), "hostPath", "path"); ok && filepath.Base(p) == "pod-resources" {
					root = filepath.Dir(p)
				}
			}
			if root == "" || root == "/var/lib/kubelet" {
				t.Fatalf("overlay %s does not move the pod-resources hostPath (%q)", dir, root)
			}
			compareObjects(t, overlay, render(t, map[string]any{"kubeletRootDir": root}))
		})
	}
}

// compareObjects fails unless the chart's objects, less Helm's labels, equal want's.
func compareObjects(t *testing.T, want, helm []*unstructured.Unstructured) {
	t.Helper()
	w, h := byKey(t, want), byKey(t, helm)
	if !slices.Equal(keys(w), keys(h)) {
		t.Fatalf("the chart renders %v, kustomize %v", keys(h), keys(w))
	}
	for k, o := range h {
		for _, l := range helmLabels {
			if _, ok := o.GetLabels()[l]; !ok {
				t.Errorf("%s: no label %s", k, l)
			}
		}
		if d := cmp.Diff(w[k].Object, withoutHelmLabels(o).Object); d != "" {
			t.Errorf("%s differs (-kustomize +helm):\n%s", k, d)
		}
	}
}

// TestChart_Profiles: profiles become a ConfigMap, one <name>.yaml each with the profile's body,
// mounted read-only as the -config directory; defaultProfile is -config-default; no flag sets
// the machine's shape; rollOnProfileChange puts a checksum of the profiles on the pod template
// that changes with them and only with them.
func TestChart_Profiles(t *testing.T) {
	v := mustReadValues(t, filepath.Join(chartDir, "ci", "profiles-values.yaml"))
	objs := render(t, v)

	cm := one(t, objs, "ConfigMap")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	profiles := v["profiles"].(map[string]any)
	if len(data) != len(profiles) {
		t.Errorf("ConfigMap keys %v, want one per profile %v", data, profiles)
	}
	for name, body := range profiles {
		var got any
		if err := yaml.Unmarshal([]byte(data[name+".yaml"]), &got); err != nil {
			t.Fatalf("%s.yaml: %v", name, err)
		}
		if d := cmp.Diff(body, got); d != "" {
			t.Errorf("%s.yaml differs from the profile's values (-values +ConfigMap):\n%s", name, d)
		}
	}

	a := args(t, objs)
	for _, want := range []string{"-config=/etc/virtual-gpu/profiles", "-config-default=dgx-a100", "-label-node"} {
		if !slices.Contains(a, want) {
			t.Errorf("args %v: no %s", a, want)
		}
	}
	for _, arg := range a {
		if strings.HasPrefix(arg, "-devices") || strings.HasPrefix(arg, "-topology") {
			t.Errorf("args %v: %s would override every profile", a, arg)
		}
	}
	var mounted bool
	mounts, _, _ := unstructured.NestedSlice(container(t, objs), "volumeMounts")
	for _, m := range mounts {
		m := m.(map[string]any)
		if m["mountPath"] == "/etc/virtual-gpu/profiles" {
			mounted = true
			if m["readOnly"] != true || m["subPath"] != nil {
				t.Errorf("profiles mount %v: want read-only, the whole directory (a subPath never sees edits)", m)
			}
			vols, _, _ := unstructured.NestedSlice(podSpec(t, objs), "volumes")
			for _, vol := range vols {
				if vol := vol.(map[string]any); vol["name"] == m["name"] {
					if n, _, _ := unstructured.NestedString(vol, "configMap", "name"); n != cm.GetName() {
						t.Errorf("profiles volume %v, want ConfigMap %s", vol, cm.GetName())
					}
				}
			}
		}
	}
	if !mounted {
		t.Errorf("no mount at /etc/virtual-gpu/profiles: %v", mounts)
	}

	checksum := func(v map[string]any) string {
		ann, _, _ := unstructured.NestedStringMap(one(t, render(t, v), "DaemonSet").Object, "spec", "template", "metadata", "annotations")
		return ann["checksum/profiles"]
	}
	sum := checksum(v)
	if sum == "" {
		t.Fatal("rollOnProfileChange: no checksum/profiles annotation")
	}
	v2 := mustReadValues(t, filepath.Join(chartDir, "ci", "profiles-values.yaml"))
	v2["metrics"] = map[string]any{"port": 9411}
	if checksum(v2) != sum {
		t.Error("checksum/profiles changed with the metrics port")
	}
	v2["profiles"].(map[string]any)["workstation"].(map[string]any)["flags"].(map[string]any)["devices"] = 3
	if checksum(v2) == sum {
		t.Error("checksum/profiles did not change with a profile")
	}
	v2["rollOnProfileChange"] = false
	if c := checksum(v2); c != "" {
		t.Errorf("rollOnProfileChange false: checksum/profiles %q", c)
	}
}

// TestChart_APIAccess: the token, the RBAC objects and the patch rule follow what the plugin
// does with the API: reading its Node's profile label (profiles) and writing its GPU labels
// (labelNode). With neither, no token and no RBAC; NODE_NAME is always set (the GPU UUIDs'
// identity), from the downward API.
func TestChart_APIAccess(t *testing.T) {
	for _, c := range []struct {
		name             string
		values           string
		token, rbac      bool
		patch, labelNode bool
		dra              bool
	}{
		{"labels", "", true, true, true, true, false},
		{"labels and profiles", "profiles: {a: {version: v1}}", true, true, true, true, false},
		{"profiles only", "labelNode: false\nprofiles: {a: {version: v1}}", true, true, false, false, false},
		{"neither", "labelNode: false", false, false, false, false, false},
		{"rbac off", "rbac: {create: false}", true, false, false, true, false},
		{"labels and DRA", "kubeletAPI: dra", true, true, true, true, true},
		{"DRA only", "{labelNode: false, kubeletAPI: dra}", true, true, false, false, true},
		{"DRA, rbac off", "{kubeletAPI: dra, rbac: {create: false}}", true, false, false, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := render(t, values(t, c.values))
			spec := podSpec(t, objs)
			if got := spec["automountServiceAccountToken"]; got != c.token {
				t.Errorf("automountServiceAccountToken %v, want %v", got, c.token)
			}
			if spec["serviceAccountName"] != "virtual-gpu-device-plugin" {
				t.Errorf("serviceAccountName %v", spec["serviceAccountName"])
			}
			sa := one(t, objs, "ServiceAccount")
			if sa.Object["automountServiceAccountToken"] != false {
				t.Errorf("the ServiceAccount mounts tokens by default: %v", sa.Object)
			}
			if got := slices.Contains(args(t, objs), "-label-node"); got != c.labelNode {
				t.Errorf("-label-node in args: %v, want %v", got, c.labelNode)
			}
			env, _, _ := unstructured.NestedSlice(container(t, objs), "env")
			if !slices.ContainsFunc(env, func(e any) bool {
				p, _, _ := unstructured.NestedString(e.(map[string]any), "valueFrom", "fieldRef", "fieldPath")
				return e.(map[string]any)["name"] == "NODE_NAME" && p == "spec.nodeName"
			}) {
				t.Errorf("env %v: no NODE_NAME from spec.nodeName", env)
			}
			ks := kinds(objs)
			if got := slices.Contains(ks, "ClusterRole") && slices.Contains(ks, "ClusterRoleBinding"); got != c.rbac {
				t.Fatalf("kinds %v: RBAC %v, want %v", ks, got, c.rbac)
			}
			if !c.rbac {
				return
			}
			// The verbs, in rule order, by "<API group>/<resource>".
			rules, _, _ := unstructured.NestedSlice(one(t, objs, "ClusterRole").Object, "rules")
			verbs := map[string][]string{}
			for _, r := range rules {
				r := r.(map[string]any)
				groups, _, _ := unstructured.NestedStringSlice(r, "apiGroups")
				res, _, _ := unstructured.NestedStringSlice(r, "resources")
				vs, _, _ := unstructured.NestedStringSlice(r, "verbs")
				if len(groups) != 1 || len(res) != 1 {
					t.Errorf("rule %v: want one group and one resource a rule", r)
					continue
				}
				verbs[groups[0]+"/"+res[0]] = append(verbs[groups[0]+"/"+res[0]], vs...)
			}
			want := map[string][]string{"/nodes": {"get", "list", "watch"}}
			if c.patch {
				want["/nodes"] = append(want["/nodes"], "patch")
			}
			if c.dra {
				want["resource.k8s.io/resourceclaims"] = []string{"get", "list", "watch"}
				want["resource.k8s.io/resourceclaims/status"] = []string{"update"}
				want["resource.k8s.io/resourceslices"] = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
			}
			if d := cmp.Diff(want, verbs); d != "" {
				t.Errorf("verbs by group/resource (-want +got):\n%s", d)
			}
			subjects, _, _ := unstructured.NestedSlice(one(t, objs, "ClusterRoleBinding").Object, "subjects")
			if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != sa.GetName() || subjects[0].(map[string]any)["namespace"] != chart.Namespace {
				t.Errorf("binding subjects %v, want the ServiceAccount %s/%s", subjects, chart.Namespace, sa.GetName())
			}
		})
	}
}

// draDirs are the DaemonSet's hostPaths of DRA, by volume name, with their types.
func draDirs(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	vols, _, _ := unstructured.NestedSlice(podSpec(t, objs), "volumes")
	for _, v := range vols {
		v := v.(map[string]any)
		if n := v["name"].(string); n == "plugins-registry" || n == "dra-plugin" {
			p, _, _ := unstructured.NestedString(v, "hostPath", "path")
			typ, _, _ := unstructured.NestedString(v, "hostPath", "type")
			out[p] = typ
		}
	}
	mounts, _, _ := unstructured.NestedSlice(container(t, objs), "volumeMounts")
	for p := range out {
		if !slices.ContainsFunc(mounts, func(m any) bool { return m.(map[string]any)["mountPath"] == p }) {
			t.Errorf("hostPath %s is not mounted at its own path: %v", p, mounts)
		}
	}
	return out
}

// TestChart_DRA: where a node may serve DRA — kubeletAPI dra, or a profile with
// flags.kubeletAPI dra — the chart mounts the kubelet's registration directory and the
// driver's socket directory under kubeletRootDir, passes the DRA flags that are not at their
// defaults (-kubelet-api only without profiles), and installs the DeviceClass of the driver;
// elsewhere none of it. (The RBAC: TestChart_APIAccess.)
func TestChart_DRA(t *testing.T) {
	const driver = "gpu.unicore.mcyou.cc"
	draArgs := func(objs []*unstructured.Unstructured) []string {
		var out []string
		for _, a := range args(t, objs) {
			for _, f := range []string{"-kubelet-api", "-dra-driver-name", "-kubelet-registry-dir", "-kubelet-plugins-dir"} {
				if strings.HasPrefix(a, f+"=") {
					out = append(out, a)
				}
			}
		}
		return out
	}
	for _, c := range []struct {
		name, values string
		args         []string
		dirs         map[string]string
		class        string // the whole GPUs' DeviceClass's selector and extended resource; "" none
		className    string
		driver       string // of the MIG DeviceClass
		migName      string
	}{
		{"device plugin", "", nil, map[string]string{}, "", "", "", ""},
		{"dra", "kubeletAPI: dra", []string{"-kubelet-api=dra"},
			map[string]string{"/var/lib/kubelet/plugins_registry": "Directory", "/var/lib/kubelet/plugins/" + driver: "DirectoryOrCreate"},
			`device.driver == "` + driver + `" && device.attributes["` + driver + `"].type == "gpu" unicore.mcyou.cc/gpu`, driver, driver, "mig.unicore.mcyou.cc"},
		{"k0s", "{kubeletAPI: dra, kubeletRootDir: /var/lib/k0s/kubelet/}",
			[]string{"-kubelet-api=dra", "-kubelet-registry-dir=/var/lib/k0s/kubelet/plugins_registry", "-kubelet-plugins-dir=/var/lib/k0s/kubelet/plugins"},
			map[string]string{"/var/lib/k0s/kubelet/plugins_registry": "Directory", "/var/lib/k0s/kubelet/plugins/" + driver: "DirectoryOrCreate"},
			`device.driver == "` + driver + `" && device.attributes["` + driver + `"].type == "gpu" unicore.mcyou.cc/gpu`, driver, driver, "mig.unicore.mcyou.cc"},
		{"driver name", "{kubeletAPI: dra, dra: {driverName: gpu.example.com}}", []string{"-kubelet-api=dra", "-dra-driver-name=gpu.example.com"},
			map[string]string{"/var/lib/kubelet/plugins_registry": "Directory", "/var/lib/kubelet/plugins/gpu.example.com": "DirectoryOrCreate"},
			`device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].type == "gpu" unicore.mcyou.cc/gpu`, "gpu.example.com", "gpu.example.com", "mig.example.com"},
		{"classes named, no extended resource", "{kubeletAPI: dra, dra: {deviceClass: {name: vgpu, migName: vgpu-mig, extendedResourceName: ''}}}", []string{"-kubelet-api=dra"},
			map[string]string{"/var/lib/kubelet/plugins_registry": "Directory", "/var/lib/kubelet/plugins/" + driver: "DirectoryOrCreate"},
			`device.driver == "` + driver + `" && device.attributes["` + driver + `"].type == "gpu"`, "vgpu", driver, "vgpu-mig"},
		{"no class", "{kubeletAPI: dra, dra: {deviceClass: {create: false}}}", []string{"-kubelet-api=dra"},
			map[string]string{"/var/lib/kubelet/plugins_registry": "Directory", "/var/lib/kubelet/plugins/" + driver: "DirectoryOrCreate"}, "", "", "", ""},
		{"DRA settings without DRA", "{dra: {driverName: gpu.example.com}, kubeletRootDir: /var/lib/k0s/kubelet}", nil, map[string]string{}, "", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := render(t, values(t, c.values))
			if got := draArgs(objs); !slices.Equal(got, c.args) {
				t.Errorf("DRA args %v, want %v", got, c.args)
			}
			if got := draDirs(t, objs); !maps.Equal(got, c.dirs) {
				t.Errorf("DRA hostPaths %v, want %v", got, c.dirs)
			}
			var class, className, mig, migName string
			for _, o := range objs {
				if o.GetKind() != "DeviceClass" {
					continue
				}
				if o.GetNamespace() != "" {
					t.Errorf("DeviceClass %s in namespace %s: it is cluster-scoped", o.GetName(), o.GetNamespace())
				}
				var expr string
				sel, _, _ := unstructured.NestedSlice(o.Object, "spec", "selectors")
				for _, s := range sel {
					e, _, _ := unstructured.NestedString(s.(map[string]any), "cel", "expression")
					expr += e
				}
				if strings.HasSuffix(expr, `.type == "mig"`) {
					mig, migName = expr, o.GetName()
					continue
				}
				if n, ok, _ := unstructured.NestedString(o.Object, "spec", "extendedResourceName"); ok {
					expr += " " + n
				}
				class, className = expr, o.GetName()
			}
			if class != c.class || className != c.className {
				t.Errorf("DeviceClass %q: %q, want %q: %q", className, class, c.className, c.class)
			}
			if c.class != "" {
				d := c.driver
				if want := `device.driver == "` + d + `" && device.attributes["` + d + `"].type == "mig"`; mig != want || migName != c.migName {
					t.Errorf("MIG DeviceClass %q: %q, want %q: %q", migName, mig, c.migName, want)
				}
			}
		})
	}

	// A profile picks DRA for its node pool: everything DRA needs, but no -kubelet-api, which
	// would override every profile.
	for _, c := range []struct {
		profiles string
		dra      bool
	}{
		{"{a: {version: v1, flags: {kubeletAPI: dra}}, b: {version: v1}}", true},
		{"{a: {version: v1, flags: {kubeletAPI: device-plugin}}, b: {version: v1, flags: {devices: 2}}}", false},
	} {
		ms, err := chart.Template(chartDir, map[string]any{"profiles": values(t, c.profiles)}, chart.ReleaseName, chart.Namespace)
		if err != nil {
			t.Fatalf("profiles %s: %v", c.profiles, err)
		}
		objs, err := chart.Objects(ms)
		if err != nil {
			t.Fatal(err)
		}
		if got := draArgs(objs); len(got) > 0 {
			t.Errorf("profiles %s: args %v: a flag would override every profile", c.profiles, got)
		}
		if got := len(draDirs(t, objs)) == 2 && slices.Contains(kinds(objs), "DeviceClass"); got != c.dra {
			t.Errorf("profiles %s: DRA's hostPaths and DeviceClass %v, want %v (kinds %v)", c.profiles, got, c.dra, kinds(objs))
		}
	}
}

// TestChart_Metrics: the metrics port moves the flag, the containerPort, the scrape annotation
// and the Service together; the Service and ServiceMonitor appear when asked; telemetry renders
// nothing unless enabled, and then its flag, port, Service port and endpoint.
func TestChart_Metrics(t *testing.T) {
	objs := render(t, nil)
	text := chart.Text(mustTemplate(t, nil))
	if strings.Contains(text, "telemetry") || strings.Contains(text, "9400") {
		t.Errorf("telemetry is off by default, but the render mentions it:\n%s", text)
	}
	if ks := kinds(objs); slices.Contains(ks, "Service") || slices.Contains(ks, "ServiceMonitor") {
		t.Errorf("default kinds %v: no Service or ServiceMonitor unless asked", ks)
	}

	objs = render(t, values(t, `
metrics: {port: 9500, service: {enabled: true}, serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}
telemetry: {enabled: true, port: 9600}`))
	a := args(t, objs)
	for _, want := range []string{"-metrics-address=:9500", "-telemetry-address=:9600"} {
		if !slices.Contains(a, want) {
			t.Errorf("args %v: no %s", a, want)
		}
	}
	ports, _, _ := unstructured.NestedSlice(container(t, objs), "ports")
	if got := fmt.Sprint(ports); !strings.Contains(got, "containerPort:9500 name:metrics") || !strings.Contains(got, "containerPort:9600 name:telemetry") {
		t.Errorf("container ports %s", got)
	}
	ann, _, _ := unstructured.NestedStringMap(one(t, objs, "DaemonSet").Object, "spec", "template", "metadata", "annotations")
	if ann["prometheus.io/port"] != "9500" {
		t.Errorf("scrape annotations %v", ann)
	}
	svc := one(t, objs, "Service")
	if ip, _, _ := unstructured.NestedString(svc.Object, "spec", "clusterIP"); ip != "None" {
		t.Errorf("Service clusterIP %q, want headless", ip)
	}
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	podLabels, _, _ := unstructured.NestedStringMap(one(t, objs, "DaemonSet").Object, "spec", "template", "metadata", "labels")
	for k, v := range sel {
		if podLabels[k] != v {
			t.Errorf("Service selector %v does not select the pods %v", sel, podLabels)
		}
	}
	sports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if got := fmt.Sprint(sports); !strings.Contains(got, "name:metrics port:9500") || !strings.Contains(got, "name:telemetry port:9600") {
		t.Errorf("Service ports %s", got)
	}
	sm := one(t, objs, "ServiceMonitor")
	if sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor labels %v: no release: prom", sm.GetLabels())
	}
	smSel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range smSel {
		if svc.GetLabels()[k] != v {
			t.Errorf("ServiceMonitor selector %v does not select the Service %v", smSel, svc.GetLabels())
		}
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if got := fmt.Sprint(eps); len(eps) != 2 || !strings.Contains(got, "port:metrics") || !strings.Contains(got, "port:telemetry") || !strings.Contains(got, "interval:15s") {
		t.Errorf("ServiceMonitor endpoints %s", got)
	}

	// The telemetry's settings become its flags, only those set.
	for _, c := range []struct {
		values string
		want   []string
	}{
		{"telemetry: {enabled: true}", []string{"-telemetry-address=:9400"}},
		{"telemetry: {enabled: true, model: random-walk, seed: 0, perPod: true, writable: true}",
			[]string{"-telemetry-address=:9400", "-telemetry-model=random-walk", "-telemetry-seed=0", "-telemetry-per-pod", "-telemetry-writable"}},
		{"telemetry: {enabled: true, collectors: \"DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\"}",
			[]string{"-telemetry-address=:9400", "-telemetry-collectors=/etc/virtual-gpu/telemetry/collectors.csv"}},
	} {
		var got []string
		for _, arg := range args(t, render(t, values(t, c.values))) {
			if strings.HasPrefix(arg, "-telemetry") {
				got = append(got, arg)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("values %s: telemetry args %v, want %v", c.values, got, c.want)
		}
	}

	// A collectors file comes as a ConfigMap, mounted where the flag reads it; without the
	// telemetry it is refused.
	objs = render(t, values(t, "telemetry: {enabled: true, collectors: \"DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\\n\"}"))
	var csv string
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-telemetry-collectors") {
			csv, _, _ = unstructured.NestedString(o.Object, "data", "collectors.csv")
		}
	}
	if csv != "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n" {
		t.Errorf("collectors ConfigMap data %q", csv)
	}
	if _, err := chart.Template(chartDir, values(t, "telemetry: {collectors: \"x\"}"), chart.ReleaseName, chart.Namespace); err == nil ||
		!strings.Contains(err.Error(), "telemetry.collectors without telemetry.enabled") {
		t.Errorf("collectors without the telemetry: %v", err)
	}

	// A ServiceMonitor needs the Service: it comes with it.
	objs = render(t, values(t, "metrics: {serviceMonitor: {enabled: true}}"))
	if ks := kinds(objs); !slices.Contains(ks, "Service") {
		t.Errorf("kinds %v: a ServiceMonitor without its Service", ks)
	}
}

func mustTemplate(t *testing.T, v map[string]any) []chart.Manifest {
	t.Helper()
	ms, err := chart.Template(chartDir, v, chart.ReleaseName, chart.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestChart_MachineWithoutProfiles: without profiles the machine is -devices (4 by default),
// or -topology, or both when both are set.
func TestChart_MachineWithoutProfiles(t *testing.T) {
	for _, c := range []struct {
		values string
		want   []string
	}{
		{"", []string{"-devices=4"}},
		{"devices: 16", []string{"-devices=16"}},
		{"topology: dgx-a100", []string{"-topology=dgx-a100"}},
		{"{topology: dgx-a100, devices: 8}", []string{"-topology=dgx-a100", "-devices=8"}},
	} {
		a := args(t, render(t, values(t, c.values)))
		var got []string
		for _, arg := range a {
			if strings.HasPrefix(arg, "-devices") || strings.HasPrefix(arg, "-topology") || strings.HasPrefix(arg, "-config") {
				got = append(got, arg)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("values %q: machine args %v, want %v", c.values, got, c.want)
		}
	}
}

// TestChart_RefusesBadValues: what the chart cannot render fails the install with a message
// naming the value and what to do.
func TestChart_RefusesBadValues(t *testing.T) {
	for _, c := range []struct{ name, values, want string }{
		{"default profile without profiles", "defaultProfile: a100", `defaultProfile "a100": there are no profiles`},
		{"unknown default profile", "{profiles: {a100: {version: v1}, h100: {version: v1}}, defaultProfile: a10}", `defaultProfile "a10" is not one of the profiles (a100, h100)`},
		{"profile name not a label value", "profiles: {-bad: {version: v1}}", "-bad"},
		{"profile name too long", "profiles: {" + strings.Repeat("a", 64) + ": {version: v1}}", strings.Repeat("a", 64)},
		{"topology with profiles", "{topology: dgx-a100, profiles: {a: {version: v1}}}", `topology "dgx-a100" with profiles: -topology would override every profile`},
		{"devices with profiles", "{devices: 8, profiles: {a: {version: v1}}}", "devices 8 with profiles: -devices would override every profile"},
		{"profile field misspelt", "profiles: {a: {version: v1, flags: {topolgy: dgx-a100}}}", "topolgy"},
		{"profile sets an address", `profiles: {a: {version: v1, flags: {metricsAddress: ":1"}}}`, "metricsAddress"},
		{"profile of another version", "profiles: {a: {version: v2, flags: {devices: 2}}}", "version"},
		{"profile devices out of range", "profiles: {a: {version: v1, flags: {devices: 2000}}}", "/profiles/a/flags/devices"},
		{"one port for two listeners", "telemetry: {enabled: true, port: 9401}", "telemetry.port and metrics.port are both 9401"},
		{"telemetry setting without telemetry", "telemetry: {writable: true}", "telemetry.writable without telemetry.enabled"},
		{"telemetry model with profiles", "{telemetry: {enabled: true, model: wave}, profiles: {a: {version: v1}}}",
			"telemetry.model with profiles: the flag would override every profile; set flags.telemetryModel in the profiles instead"},
		{"telemetry seed with profiles", "{telemetry: {enabled: true, seed: 3}, profiles: {a: {version: v1}}}", "set flags.telemetrySeed in the profiles"},
		{"unknown telemetry model", "telemetry: {enabled: true, model: busy}", "model"},
		{"negative telemetry seed", "telemetry: {enabled: true, seed: -1}", "seed"},
		{"relative kubelet root", "kubeletRootDir: var/lib/kubelet", "kubeletRootDir"},
		{"misspelt value", "labelnode: false", "labelnode"},
		{"devices out of range", "devices: 0", "devices"},
		{"chart's flag in extraArgs", "extraArgs: [-metrics-address=:1]", "extraArgs: -metrics-address=:1 is set by the chart: use metrics.port"},
		{"chart's variable in extraEnv", "extraEnv: [{name: VGPU_LABEL_NODE, value: 'false'}]", "extraEnv: VGPU_LABEL_NODE is set by the chart: use labelNode"},
		{"node name in extraEnv", "extraEnv: [{name: NODE_NAME, value: x}]", "NODE_NAME is set by the chart"},
		{"kubelet API with profiles", "{kubeletAPI: dra, profiles: {a: {version: v1}}}",
			"kubeletAPI dra with profiles: -kubelet-api would override every profile; set flags.kubeletAPI: dra in the profiles of the nodes that serve DRA instead"},
		{"unknown kubelet API", "kubeletAPI: grpc", "kubeletAPI"},
		{"driver name not a DNS subdomain", "dra: {driverName: GPU_Driver}", "driverName"},
		{"extended resource without a domain", "dra: {deviceClass: {extendedResourceName: gpu}}", "extendedResourceName"},
		{"chart's DRA flag in extraArgs", "extraArgs: [-kubelet-api=dra]", "extraArgs: -kubelet-api=dra is set by the chart: use kubeletAPI"},
		{"simulator's default profile without profiles", "simulate: {enabled: true, configDefault: a100}", `simulate.configDefault "a100": there are no profiles`},
		{"simulator's default profile unknown", "{simulate: {enabled: true, configDefault: a10}, profiles: {a100: {version: v1}}}", `simulate.configDefault "a10" is not one of the profiles (a100)`},
		{"simulator's claim without persistence", "simulate: {enabled: true, persistence: {enabled: false, existingClaim: mine}}", "simulate.persistence.existingClaim without simulate.persistence.enabled"},
		{"simulator's selector empty", "simulate: {enabled: true, selectNodes: ''}", "selectNodes"},
		{"simulator's misspelt value", "simulate: {enabled: true, nodeSelector: {a: b}}", "nodeSelector"},
		{"simulator's claim size", "simulate: {enabled: true, persistence: {size: lots}}", "size"},
		{"chart's DRA variable in extraEnv", "extraEnv: [{name: VGPU_KUBELET_REGISTRY_DIR, value: /x}]", "extraEnv: VGPU_KUBELET_REGISTRY_DIR is set by the chart: use kubeletRootDir"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := renderErr(values(t, c.values))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("values %s: error %v, want %q in it", c.values, err, c.want)
			}
		})
	}
}

// configFlags are the flags a file may set (options.FileFlags, from the
// types the published schema is generated from).
func configFlags(t *testing.T) []options.FileFlag {
	t.Helper()
	out := options.FileFlags()
	if len(out) < 20 {
		t.Fatalf("the configuration file sets %d flags: %v", len(out), out)
	}
	return out
}

// TestChart_ProfilesOwnTheirFlags: with profiles, every flag a profile may set is refused in
// extraArgs and extraEnv (it would override every profile); the flags a profile may not set
// stay allowed, but those the chart sets itself. Without profiles a profile's flag is allowed.
// The list comes from the configuration file's types, so a new flag is covered.
func TestChart_ProfilesOwnTheirFlags(t *testing.T) {
	chartFlags := map[string]bool{"devices": true, "topology": true, "metrics-address": true, "log-format": true, "log-level": true, "pod-resources-socket": true,
		"telemetry-address": true, "telemetry-collectors": true, "telemetry-model": true, "telemetry-seed": true, "telemetry-per-pod": true, "telemetry-writable": true,
		"kubelet-api": true, "dra-driver-name": true, "kubelet-registry-dir": true, "kubelet-plugins-dir": true}
	for _, f := range configFlags(t) {
		t.Run(f.Name, func(t *testing.T) {
			env := "VGPU_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
			for _, how := range []struct{ what, values string }{
				{"-" + f.Name + "=x", fmt.Sprintf("extraArgs: [-%s=x]", f.Name)},
				{env, fmt.Sprintf("extraEnv: [{name: %s, value: x}]", env)},
			} {
				withProfiles := values(t, how.values)
				withProfiles["profiles"] = map[string]any{"a": map[string]any{"version": "v1"}}
				err := renderErr(withProfiles)
				switch {
				case chartFlags[f.Name]:
					if err == nil || !strings.Contains(err.Error(), "is set by the chart") {
						t.Errorf("%s: %v, want: set by the chart", how.what, err)
					}
				case f.InProfile:
					if err == nil || !strings.Contains(err.Error(), "with profiles would override every profile") {
						t.Errorf("%s with profiles: %v, want: would override every profile", how.what, err)
					}
					if err := renderErr(values(t, how.values)); err != nil {
						t.Errorf("%s without profiles: %v", how.what, err)
					}
				default:
					if err != nil {
						t.Errorf("%s with profiles (not a profile's flag): %v", how.what, err)
					}
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// The chart's own files: Chart.yaml, values.schema.json, and the README's values table.

// TestChart_Metadata: the chart's appVersion is the VERSION file's, and its default image tag
// the one `make image` builds (e2e/deploy's TestDeploy_ImageIsTheOneMakeBuilds checks the renders).
func TestChart_Metadata(t *testing.T) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Name       string `json:"name"`
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(chartDir, "Chart.yaml")), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.APIVersion != "v2" || meta.Name != filepath.Base(chartDir) || !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(meta.Version) {
		t.Errorf("Chart.yaml %+v: want apiVersion v2, the directory's name and a semantic version", meta)
	}
	if v := strings.TrimSpace(string(mustRead(t, filepath.Join(repo, "VERSION")))); meta.AppVersion != v {
		t.Errorf("Chart.yaml appVersion %q, want the VERSION file's %q", meta.AppVersion, v)
	}
}

// profileSchema is the schema of one profile in the chart's values.schema.json: the
// configuration file's (options.Schema) without its $id and $schema and without the fields a
// profile may not set (their description says "not in a profile"), so that helm refuses them
// by name (additional properties are not allowed).
func profileSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := options.Schema()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "$id")
	delete(doc, "$schema")
	doc["title"] = "a profile"
	doc["description"] = "One profile of the -config directory (a key of the chart's profiles), in the shape of the configuration file without what a profile may not set: " +
		"paths, addresses and what holds for the whole process."
	var prune func(any)
	prune = func(n any) {
		switch n := n.(type) {
		case map[string]any:
			if props, ok := n["properties"].(map[string]any); ok {
				for k, v := range props {
					if d, _ := v.(map[string]any)["description"].(string); strings.Contains(d, "not in a profile") {
						delete(props, k)
					}
				}
			}
			for _, v := range n {
				prune(v)
			}
		case []any:
			for _, v := range n {
				prune(v)
			}
		}
	}
	prune(doc)
	return doc
}

// TestChart_ValuesSchemaHasTheProfileSchema: values.schema.json checks each profile against
// the configuration file's schema, as generated from the Go types the binary parses
// (cd e2e && go test ./chart -run TestChart_ValuesSchema -update-chart-schema writes it). The file is kept in the
// encoding this test writes: sorted keys, two-space indent.
func TestChart_ValuesSchemaHasTheProfileSchema(t *testing.T) {
	file := filepath.Join(chartDir, "values.schema.json")
	got := mustRead(t, file)
	var doc map[string]any
	if err := json.Unmarshal(got, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	defs, _ := doc["$defs"].(map[string]any)
	if defs == nil {
		t.Fatalf("%s: no $defs", file)
	}
	defs["profile"] = profileSchema(t)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	if *updateChartSchema {
		if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		got = buf.Bytes()
	}
	if !bytes.Equal(got, buf.Bytes()) {
		t.Errorf("%s: $defs.profile is not the profile schema the Go types generate, or the file is not in its encoding: cd e2e && go test ./chart -run TestChart_ValuesSchema -update-chart-schema", file)
	}
	profiles, _ := doc["properties"].(map[string]any)["profiles"].(map[string]any)
	if each, _ := profiles["additionalProperties"].(map[string]any); each["$ref"] != "#/$defs/profile" {
		t.Errorf("%s: each of the profiles is not checked against #/$defs/profile: %v", file, profiles)
	}
}

// valuePaths lists the values of values.yaml as dotted paths, not descending into the maps
// and lists whose keys are the user's (profiles, resources, selectors, labels …).
func valuePaths(t *testing.T) []string {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(chartDir, "values.yaml")), &v); err != nil {
		t.Fatal(err)
	}
	userMaps := map[string]bool{"profiles": true, "resources": true, "nodeSelector": true, "affinity": true, "podAnnotations": true,
		"podLabels": true, "updateStrategy": true, "serviceAccount.annotations": true, "metrics.serviceMonitor.labels": true,
		"simulate.resources": true, "simulate.podNodeSelector": true}
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, val := range m {
			p := prefix + k
			if sub, ok := val.(map[string]any); ok && !userMaps[p] {
				walk(p+".", sub)
				continue
			}
			out = append(out, p)
		}
	}
	walk("", v)
	sort.Strings(out)
	return out
}

// TestChart_ReadmeListsEveryValue: the README's values table has a row for every value of
// values.yaml, and the README's Helm commands name the chart and the README's release.
func TestChart_ReadmeListsEveryValue(t *testing.T) {
	readme := string(mustRead(t, filepath.Join(repo, "README.md")))
	for _, p := range valuePaths(t) {
		if !strings.Contains(readme, "| `"+p+"` |") {
			t.Errorf("README: no row for the chart value `%s` in the values table", p)
		}
	}
	if cmd := "helm install virtual-gpu-device-plugin deploy/helm/virtual-gpu-device-plugin -n kube-system"; !strings.Contains(readme, cmd) {
		t.Errorf("README does not say %q", cmd)
	}
	if !strings.Contains(readme, options.ProfileLabel+"=") {
		t.Errorf("README does not show the profile label %s=<name>", options.ProfileLabel)
	}
}

// TestChart_Testdata: the renders the deploy tests check
// (e2e/deploy/testdata/chart/<case>.yaml, for the default values and each
// ci/<case>-values.yaml) are the chart's current output; -update writes them. Each carries the
// chart's digest, which those tests compare with the chart's files.
func TestChart_Testdata(t *testing.T) {
	dir := filepath.Join(repo, "e2e", "deploy", "testdata", "chart")
	digest, err := chart.Digest(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{"default": ""}
	for name, f := range ciValues(t) {
		cases[name] = f
	}
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, file := range cases {
		var v map[string]any
		with := "its default values"
		if file != "" {
			v = mustReadValues(t, file)
			with = "ci/" + filepath.Base(file)
		}
		header := fmt.Sprintf("# Rendered from deploy/helm/virtual-gpu-device-plugin (chart digest sha256:%s)\n"+
			"# with %s, release %s in %s, by e2e/chart: cd e2e && go test ./chart -run TestChart_Testdata -update\n",
			digest, with, chart.ReleaseName, chart.Namespace)
		want := []byte(header + chart.Text(mustTemplate(t, v)))
		path := filepath.Join(dir, name+".yaml")
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not the chart's render with %s (%v): run cd e2e && go test ./chart -run TestChart_Testdata -update", path, with, err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if _, ok := cases[strings.TrimSuffix(filepath.Base(f), ".yaml")]; !ok {
			t.Errorf("%s renders no case of the chart: remove it", f)
		}
	}
}
