package chart_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/unicore/virtual-gpu-device-plugin/e2e/chart"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate/scope"
)

// simulatorObjects are the objects of the simulator (component label simulator) by kind.
func simulatorObjects(objs []*unstructured.Unstructured) map[string][]*unstructured.Unstructured {
	out := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/component"] == "simulator" {
			out[o.GetKind()] = append(out[o.GetKind()], o)
		}
	}
	return out
}

// simulator returns the simulator's Deployment, its one container and its volumes.
func simulator(t *testing.T, objs []*unstructured.Unstructured) (*unstructured.Unstructured, map[string]any, []any) {
	t.Helper()
	deps := simulatorObjects(objs)["Deployment"]
	if len(deps) != 1 {
		t.Fatalf("%d simulator Deployments, want 1 (kinds %v)", len(deps), kinds(objs))
	}
	d := deps[0]
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	return d, cs[0].(map[string]any), vols
}

// TestChart_Simulate: the simulator renders only with simulate.enabled, then as a Deployment
// of one replica, Recreate, running `simulate` with -state at its default, where its state
// volume is mounted; selectNodes becomes -node-selector where it is not the default; the
// profiles are the DaemonSet's ConfigMap, and the default profile simulate.configDefault, else
// defaultProfile; persistence picks a claim of the chart's, the user's, or an emptyDir; the
// metrics port moves with metrics.port; rbac.create and serviceAccount.create leave out its
// RBAC and ServiceAccount; the names follow the release.
func TestChart_Simulate(t *testing.T) {
	if got := simulatorObjects(render(t, nil)); len(got) > 0 {
		t.Errorf("default values render simulator objects %v", got)
	}
	if got := simulatorObjects(render(t, values(t, "simulate: {enabled: false, selectNodes: a=b}"))); len(got) > 0 {
		t.Errorf("simulate.enabled false renders simulator objects %v", got)
	}

	chartValues := values(t, string(mustRead(t, filepath.Join(chartDir, "values.yaml"))))
	if sel, _, _ := unstructured.NestedString(chartValues, "simulate", "selectNodes"); sel != scope.DefaultSelector {
		t.Errorf("values.yaml simulate.selectNodes %q, the default of -node-selector %q", sel, scope.DefaultSelector)
	}

	objs := render(t, values(t, "simulate: {enabled: true}"))
	d, c, vols := simulator(t, objs)
	if d.GetName() != "virtual-gpu-simulator" || d.GetNamespace() != chart.Namespace {
		t.Errorf("Deployment %s/%s, want %s/virtual-gpu-simulator", d.GetNamespace(), d.GetName(), chart.Namespace)
	}
	if r, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); fmt.Sprint(r) != "1" {
		t.Errorf("replicas %v, want 1", r)
	}
	if s, _, _ := unstructured.NestedString(d.Object, "spec", "strategy", "type"); s != "Recreate" {
		t.Errorf("strategy %q, want Recreate", s)
	}
	a, _, _ := unstructured.NestedStringSlice(c, "args")
	if want := []string{"simulate", "-state=" + scope.DefaultStateDir, "-metrics-address=:9401", "-log-format=json", "-devices=4"}; !slices.Equal(a, want) {
		t.Errorf("args %v, want %v", a, want)
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	stateVol := ""
	for _, m := range mounts {
		if m := m.(map[string]any); m["mountPath"] == scope.DefaultStateDir {
			stateVol, _ = m["name"].(string)
		}
	}
	var claim string
	for _, v := range vols {
		v := v.(map[string]any)
		if _, ok := v["hostPath"]; ok {
			t.Errorf("volume %v: a hostPath", v)
		}
		if v["name"] == stateVol {
			claim, _, _ = unstructured.NestedString(v, "persistentVolumeClaim", "claimName")
		}
	}
	pvcs := simulatorObjects(objs)["PersistentVolumeClaim"]
	if claim != "virtual-gpu-simulator" || len(pvcs) != 1 || pvcs[0].GetName() != claim {
		t.Errorf("state volume %q claims %q; the chart's claims %v", stateVol, claim, pvcs)
	} else {
		modes, _, _ := unstructured.NestedStringSlice(pvcs[0].Object, "spec", "accessModes")
		size, _, _ := unstructured.NestedString(pvcs[0].Object, "spec", "resources", "requests", "storage")
		_, hasClass, _ := unstructured.NestedFieldNoCopy(pvcs[0].Object, "spec", "storageClassName")
		if !slices.Equal(modes, []string{"ReadWriteOnce"}) || size != "1Gi" || hasClass {
			t.Errorf("claim: access modes %v, size %q, a storage class %v; want ReadWriteOnce, 1Gi, the default class", modes, size, hasClass)
		}
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
		if got := simulatorObjects(objs)[k]; len(got) != 1 || got[0].GetName() != "virtual-gpu-simulator" {
			t.Errorf("simulator %s: %v, want one named virtual-gpu-simulator", k, got)
		}
	}
	if tol, ok, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "tolerations"); ok {
		t.Errorf("tolerations %v: the simulator runs on a real node", tol)
	}

	// Flags from values; only those away from their defaults.
	for _, c := range []struct {
		values string
		want   []string // the args after -log-format: the machine without profiles, as the DaemonSet's
	}{
		{"simulate: {enabled: true, selectNodes: " + scope.DefaultSelector + "}", []string{"-devices=4"}},
		{"simulate: {enabled: true, selectNodes: 'type=kwok,!real'}", []string{"-devices=4", "-node-selector=type=kwok,!real"}},
		{"simulate: {enabled: true, logLevel: debug}", []string{"-log-level=debug", "-devices=4"}},
		{"{simulate: {enabled: true}, topology: dgx-a100}", []string{"-topology=dgx-a100"}},
		{"{simulate: {enabled: true}, devices: 8, kubeletAPI: dra, dra: {driverName: gpu.example.com}}",
			[]string{"-devices=8", "-kubelet-api=dra", "-dra-driver-name=gpu.example.com"}},
		{"{simulate: {enabled: true}, profiles: {a: {version: v1}}}", []string{"-config=/etc/virtual-gpu/profiles"}},
		{"{simulate: {enabled: true}, profiles: {a: {version: v1}}, defaultProfile: a}", []string{"-config=/etc/virtual-gpu/profiles", "-config-default=a"}},
		{"{simulate: {enabled: true, configDefault: b}, profiles: {a: {version: v1}, b: {version: v1}}, defaultProfile: a}",
			[]string{"-config=/etc/virtual-gpu/profiles", "-config-default=b"}},
	} {
		_, ctr, _ := simulator(t, render(t, values(t, c.values)))
		a, _, _ := unstructured.NestedStringSlice(ctr, "args")
		if i := slices.Index(a, "-log-format=json"); i < 0 || !slices.Equal(a[i+1:], c.want) {
			t.Errorf("values %s: args %v, want %v after -log-format=json", c.values, a, c.want)
		}
	}

	// The profiles are the DaemonSet's ConfigMap, mounted where the DaemonSet mounts it.
	objs = render(t, values(t, "{simulate: {enabled: true}, profiles: {a: {version: v1}}, rollOnProfileChange: true}"))
	_, c, vols = simulator(t, objs)
	profilesAt := func(c map[string]any, vols []any) string {
		mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
		for _, m := range mounts {
			m := m.(map[string]any)
			if m["mountPath"] != "/etc/virtual-gpu/profiles" || m["readOnly"] != true {
				continue
			}
			for _, v := range vols {
				if v := v.(map[string]any); v["name"] == m["name"] {
					n, _, _ := unstructured.NestedString(v, "configMap", "name")
					return n
				}
			}
		}
		return ""
	}
	dsVols, _, _ := unstructured.NestedSlice(podSpec(t, objs), "volumes")
	if mine, theirs := profilesAt(c, vols), profilesAt(container(t, objs), dsVols); mine == "" || mine != theirs {
		t.Errorf("the simulator's profiles ConfigMap %q, the DaemonSet's %q", mine, theirs)
	}
	sum := func(o *unstructured.Unstructured) string {
		a, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "annotations")
		return a["checksum/profiles"]
	}
	if d, _, _ := simulator(t, objs); sum(d) == "" || sum(d) != sum(one(t, objs, "DaemonSet")) {
		t.Errorf("rollOnProfileChange: the simulator's checksum %q, the DaemonSet's %q", sum(d), sum(one(t, objs, "DaemonSet")))
	}

	// Persistence: the chart's claim with a class, the user's claim, or an emptyDir.
	for _, c := range []struct {
		values      string
		claim       string // the state volume's claim; "" an emptyDir
		chartsClaim bool
		class       any // the claim's storageClassName; nil: none
	}{
		{"simulate: {enabled: true, persistence: {storageClass: fast, size: 5Gi}}", "virtual-gpu-simulator", true, "fast"},
		{"simulate: {enabled: true, persistence: {storageClass: '-'}}", "virtual-gpu-simulator", true, ""},
		{"simulate: {enabled: true, persistence: {existingClaim: mine}}", "mine", false, nil},
		{"simulate: {enabled: true, persistence: {enabled: false}}", "", false, nil},
	} {
		objs := render(t, values(t, c.values))
		_, _, vols := simulator(t, objs)
		var claim string
		empty := false
		for _, v := range vols {
			if v := v.(map[string]any); v["name"] == "state" {
				claim, _, _ = unstructured.NestedString(v, "persistentVolumeClaim", "claimName")
				_, empty = v["emptyDir"]
			}
		}
		if claim != c.claim || empty != (c.claim == "") {
			t.Errorf("values %s: state claim %q (emptyDir %v), want %q", c.values, claim, empty, c.claim)
		}
		pvcs := simulatorObjects(objs)["PersistentVolumeClaim"]
		if (len(pvcs) == 1) != c.chartsClaim || len(pvcs) > 1 {
			t.Errorf("values %s: %d claims of the chart, want one: %v", c.values, len(pvcs), c.chartsClaim)
			continue
		}
		if c.chartsClaim {
			class, ok, _ := unstructured.NestedFieldNoCopy(pvcs[0].Object, "spec", "storageClassName")
			if !ok {
				class = nil
			}
			if class != c.class {
				t.Errorf("values %s: storageClassName %v, want %v", c.values, class, c.class)
			}
		}
	}

	// The metrics port, the pod's node selector, the names, what rbac and serviceAccount leave out.
	_, c, _ = simulator(t, render(t, values(t, "{simulate: {enabled: true}, metrics: {port: 9500}}")))
	a, _, _ = unstructured.NestedStringSlice(c, "args")
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	if !slices.Contains(a, "-metrics-address=:9500") || len(ports) != 1 || fmt.Sprint(ports[0].(map[string]any)["containerPort"]) != "9500" {
		t.Errorf("metrics.port 9500: args %v, ports %v", a, ports)
	}
	d, _, _ = simulator(t, render(t, values(t, "simulate: {enabled: true, podNodeSelector: {kubernetes.io/os: linux}}")))
	if sel, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "spec", "nodeSelector"); sel["kubernetes.io/os"] != "linux" || len(sel) != 1 {
		t.Errorf("podNodeSelector: nodeSelector %v", sel)
	}
	ms, err := chart.Template(chartDir, values(t, "simulate: {enabled: true}"), "lab", chart.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	labObjs, err := chart.Objects(ms)
	if err != nil {
		t.Fatal(err)
	}
	for k, list := range simulatorObjects(labObjs) {
		for _, o := range list {
			if o.GetName() != "lab-virtual-gpu-simulator" {
				t.Errorf("release lab: %s %s, want lab-virtual-gpu-simulator", k, o.GetName())
			}
		}
	}
	got := simulatorObjects(render(t, values(t, "{simulate: {enabled: true}, rbac: {create: false}, serviceAccount: {create: false}}")))
	if ks := strings.Join(slices.Sorted(maps.Keys(got)), ","); ks != "Deployment,PersistentVolumeClaim" {
		t.Errorf("rbac.create and serviceAccount.create false: simulator kinds %s, want Deployment,PersistentVolumeClaim", ks)
	}
}
