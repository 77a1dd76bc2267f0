package deploy_test

import (
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/options"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate/scope"
)

// The simulator (`virtual-gpu-device-plugin simulate`, deploy/components/simulate and the
// chart's simulate values): one Deployment for the whole cluster, publishing the GPUs of the
// fake nodes it selects.
const (
	// simulatorComponent is the app.kubernetes.io/component label of its objects.
	simulatorComponent = "simulator"
	// kwokNodeTaint is the taint KWOK's nodes carry: the simulator must not tolerate it, it
	// runs on a real node.
	kwokNodeTaint = "kwok.x-k8s.io/node"
)

// simulateOwnFlags are the flags of `virtual-gpu-device-plugin simulate` that the plugin's
// serve has not; every other flag of simulate is serve's, read by the options package.
var simulateOwnFlags = map[string]bool{"node-selector": true, "state": true, "admin-socket": true, "workers": true}

// simulatorManifests are the manifest sets that run the simulator: the overlay and the chart
// renders with simulate.enabled. No other renders one.
var simulatorManifests = []string{"chart/simulate", "chart/simulate-profiles", "deploy/overlays/simulate"}

// isSimulator reports whether o is one of the simulator's objects (by its component label).
func isSimulator(o object) bool {
	meta, _ := o["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	return labels["app.kubernetes.io/component"] == simulatorComponent
}

// parseSimulateArgs reads the simulator container's args: "simulate", then flags written
// -name=value or -name, each simulate's own or one the plugin's options parser accepts (it
// parses them all, as simulate does). It returns the flags by name.
func parseSimulateArgs(t *testing.T, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "simulate" {
		t.Fatalf("args %v: the first is not the subcommand simulate", args)
	}
	out := map[string]string{}
	var rest []string
	for _, a := range args[1:] {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			t.Errorf("arg %q is not a flag", a)
			continue
		}
		if _, dup := out[name]; dup {
			t.Errorf("args %v: -%s twice", args, name)
		}
		out[name] = value
		if !simulateOwnFlags[name] {
			rest = append(rest, a)
		}
	}
	if _, err := options.Parse(rest, func(string) string { return "" }); err != nil {
		t.Errorf("args %v: the plugin's flags %v: %v", args, rest, err)
	}
	return out
}

// TestDeploy_Simulator checks the simulator wherever it is rendered, and only there: one
// Deployment in the DaemonSet's namespace, one replica, Recreate (the state directory is locked
// by one process), the image make builds; args that simulate accepts, its -state at its default
// and the state volume mounted there, a PersistentVolumeClaim (ReadWriteOnce) where the output
// has one; no host path, not root, nothing privileged, no toleration of KWOK's taint; probes and
// metrics on the named port -metrics-address listens on; the profiles, when -config is set,
// from the DaemonSet's ConfigMap at the DaemonSet's path; a service account token, and exactly
// the RBAC the simulator needs.
func TestDeploy_Simulator(t *testing.T) {
	mk := mustRead(t, filepath.Join(repoRoot, "Makefile"))
	image := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if image == nil {
		t.Fatal("Makefile: no IMAGE ?= line")
	}
	var found []string
	for _, m := range manifestSets(t) {
		var deps []object
		for _, o := range m.objs {
			if o["kind"] == "Deployment" && isSimulator(o) {
				deps = append(deps, o)
			}
		}
		if len(deps) == 0 {
			for _, o := range m.objs {
				if isSimulator(o) {
					t.Errorf("%s: %s %s of the simulator, without its Deployment", m.where, o["kind"], name(o))
				}
			}
			continue
		}
		found = append(found, m.where)
		t.Run(strings.ReplaceAll(m.where, "/", "_"), func(t *testing.T) {
			if len(deps) != 1 {
				t.Fatalf("%d simulator Deployments, want 1", len(deps))
			}
			var d appsv1.Deployment
			if err := decodeStrict(deps[0], &d); err != nil {
				t.Fatal(err)
			}
			ds := daemonSetOf(t, m.where, m.objs)
			checkSimulatorDeployment(t, &d, ds, string(image[1]))
			checkSimulatorObjects(t, m.objs, &d, ds)
		})
	}
	if slices.Sort(found); !slices.Equal(found, simulatorManifests) {
		t.Errorf("the simulator is rendered by %v, want %v (the chart only with simulate.enabled)", found, simulatorManifests)
	}
	// The kustomize overlay's Deployment is the one the README names.
	for _, o := range mustRender(t, "deploy/overlays/simulate") {
		if o["kind"] == "Deployment" && isSimulator(o) {
			meta := o["metadata"].(map[string]any)
			if name(o) != "virtual-gpu-simulator" || meta["namespace"] != "kube-system" {
				t.Errorf("deploy/overlays/simulate: Deployment %v/%s, want kube-system/virtual-gpu-simulator", meta["namespace"], name(o))
			}
		}
	}
}

func checkSimulatorDeployment(t *testing.T, d *appsv1.Deployment, ds *appsv1.DaemonSet, image string) {
	t.Helper()
	if d.Namespace != ds.Namespace {
		t.Errorf("namespace %q, the DaemonSet's is %q", d.Namespace, ds.Namespace)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1: the state directory is locked by one process", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q, want Recreate: a new pod cannot take the state directory's lock while the old one holds it", d.Spec.Strategy.Type)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the template labels %v", k, v, d.Spec.Template.Labels)
		}
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] == v {
			t.Errorf("the DaemonSet's selector %s=%s picks the simulator's pods too", k, v)
		}
	}
	checkRecommendedLabels(t, "simulator pod template", d.Spec.Template.Labels)
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) > 0 {
		t.Fatalf("%d containers, %d init containers: want the simulator alone", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	if c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s (%s), want %s, the DaemonSet's, IfNotPresent", c.Image, c.ImagePullPolicy, image)
	}
	if c.Image != ds.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("image %s, the DaemonSet runs %s", c.Image, ds.Spec.Template.Spec.Containers[0].Image)
	}
	if len(c.Command) > 0 {
		t.Errorf("command %v: the image's entrypoint is the binary, the args start with simulate", c.Command)
	}
	flags := parseSimulateArgs(t, c.Args)

	// The Go runtime's memory settings, which the scale test (e2e/sim) runs the simulator with:
	// GOGC a number, GOMEMLIMIT the container's own memory limit, which it has.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if g, err := strconv.Atoi(env["GOGC"].Value); err != nil || g < 25 || g > 100 {
		t.Errorf("env GOGC=%q: want a percentage from 25 to 100 (the README's measurement is of 50)", env["GOGC"].Value)
	}
	if ref := env["GOMEMLIMIT"].ValueFrom; ref == nil || ref.ResourceFieldRef == nil || ref.ResourceFieldRef.Resource != "limits.memory" ||
		ref.ResourceFieldRef.ContainerName != c.Name {
		t.Errorf("env GOMEMLIMIT %+v: want the container's limits.memory (resourceFieldRef, containerName %s)", env["GOMEMLIMIT"], c.Name)
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Errorf("no memory limit: GOMEMLIMIT would be the node's allocatable memory")
	}

	// The state directory: -state at its default, the state volume mounted there.
	if got := flags["state"]; got != scope.DefaultStateDir {
		t.Errorf("-state=%q, want simulate's default %s", got, scope.DefaultStateDir)
	}
	if a, ok := flags["admin-socket"]; ok && filepath.Dir(a) != flags["state"] {
		t.Errorf("-admin-socket %s is not in the state directory %s", a, flags["state"])
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
		if v.HostPath != nil {
			t.Errorf("volume %s: hostPath %s: the simulator needs no host access", v.Name, v.HostPath.Path)
		}
	}
	var state *corev1.Volume
	for _, m := range c.VolumeMounts {
		if m.MountPath == scope.DefaultStateDir {
			v, ok := vols[m.Name]
			if !ok {
				t.Fatalf("mount %s: no volume %s", m.MountPath, m.Name)
			}
			if m.ReadOnly || m.SubPath != "" {
				t.Errorf("state mount %+v: read-only or a subPath", m)
			}
			state = &v
		}
	}
	if state == nil {
		t.Fatalf("no volume mounted at %s (mounts %v): the state would be on the read-only root", scope.DefaultStateDir, c.VolumeMounts)
	}
	if state.PersistentVolumeClaim == nil && state.EmptyDir == nil {
		t.Errorf("state volume %+v: want a PersistentVolumeClaim (or an emptyDir)", state.VolumeSource)
	}

	// Security: nothing of the host, not root, nothing more than a process needs.
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("host namespaces: network %v, pid %v, ipc %v", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-root runAsUser", psc)
	}
	if psc != nil && state.PersistentVolumeClaim != nil && psc.FSGroup == nil {
		t.Error("no fsGroup: a non-root user may not write a fresh claim")
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no container securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
	if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		t.Error("the container runs as root")
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
	for what, seccomp := range map[string]*corev1.SeccompProfile{"container": sc.SeccompProfile, "pod": nil} {
		if what == "pod" && psc != nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s seccompProfile %+v, want RuntimeDefault", what, seccomp)
		}
	}
	// On a real node: KWOK's nodes carry its taint, and have no kubelet to run the pod.
	for _, tol := range spec.Tolerations {
		if tol.Key == kwokNodeTaint || (tol.Key == "" && tol.Operator == corev1.TolerationOpExists) {
			t.Errorf("toleration %+v: the simulator would be scheduled on a fake node", tol)
		}
	}
	if spec.NodeName != "" {
		t.Errorf("nodeName %q: let the scheduler place it", spec.NodeName)
	}

	// Metrics and probes on the port -metrics-address listens on.
	_, port, err := net.SplitHostPort(flags["metrics-address"])
	if err != nil {
		t.Fatalf("-metrics-address %q: %v: the probes need it", flags["metrics-address"], err)
	}
	var metrics *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "metrics" {
			metrics = &c.Ports[i]
		}
	}
	if metrics == nil || port != strconv.Itoa(int(metrics.ContainerPort)) {
		t.Errorf("container ports %v: want metrics on %s, -metrics-address's port", c.Ports, port)
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v, want GET %s on the port metrics", p.what, p.probe, p.path)
		}
	}

	// Resources: requests, and a memory limit no lower than the request.
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("resources %v: want cpu and memory requests and a memory limit", r)
	} else if r.Limits.Memory().Cmp(*r.Requests.Memory()) < 0 {
		t.Errorf("memory limit %s below the request %s", r.Limits.Memory(), r.Requests.Memory())
	}

	// Profiles: the DaemonSet's -config directory, from the same ConfigMap.
	dsFlags := containerFlags(t, ds.Spec.Template.Spec.Containers[0])
	cfg, hasConfig := flags["config"]
	if hasConfig != (dsFlags.configPath != "") || cfg != dsFlags.configPath {
		t.Errorf("-config %q, the DaemonSet's %q: the simulator uses the same profiles", cfg, dsFlags.configPath)
	}
	if _, ok := flags["config-default"]; ok && !hasConfig {
		t.Errorf("-config-default=%s without -config", flags["config-default"])
	}
	if hasConfig {
		cm := func(spec corev1.PodSpec, c corev1.Container) string {
			for _, m := range c.VolumeMounts {
				if m.MountPath == cfg {
					for _, v := range spec.Volumes {
						if v.Name == m.Name && v.ConfigMap != nil {
							return v.ConfigMap.Name
						}
					}
				}
			}
			return ""
		}
		mine, theirs := cm(spec, c), cm(ds.Spec.Template.Spec, ds.Spec.Template.Spec.Containers[0])
		if mine == "" || mine != theirs {
			t.Errorf("-config %s: ConfigMap %q mounted there, the DaemonSet's %q", cfg, mine, theirs)
		}
	}
}

// checkSimulatorObjects: the simulator's state claim, ServiceAccount and RBAC in objs.
func checkSimulatorObjects(t *testing.T, objs []object, d *appsv1.Deployment, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := d.Spec.Template.Spec
	for _, o := range objs {
		if !isSimulator(o) {
			continue
		}
		labels := map[string]string{}
		meta, _ := o["metadata"].(map[string]any)
		l, _ := meta["labels"].(map[string]any)
		for k, v := range l {
			labels[k], _ = v.(string)
		}
		checkRecommendedLabels(t, o["kind"].(string)+" "+name(o), labels)
	}
	// The claim, when the output has the one the Deployment names.
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		var pvc *corev1.PersistentVolumeClaim
		for _, o := range objs {
			if o["kind"] == "PersistentVolumeClaim" && name(o) == v.PersistentVolumeClaim.ClaimName {
				pvc = &corev1.PersistentVolumeClaim{}
				if err := decodeStrict(o, pvc); err != nil {
					t.Fatal(err)
				}
			}
		}
		if pvc == nil {
			continue // a claim of the user's (the chart's simulate.persistence.existingClaim)
		}
		if pvc.Namespace != d.Namespace {
			t.Errorf("PersistentVolumeClaim %s in %q, the Deployment in %q", pvc.Name, pvc.Namespace, d.Namespace)
		}
		if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
			t.Errorf("PersistentVolumeClaim %s: access modes %v, want ReadWriteOnce", pvc.Name, pvc.Spec.AccessModes)
		}
		if s := pvc.Spec.Resources.Requests.Storage(); s.IsZero() {
			t.Errorf("PersistentVolumeClaim %s: no storage request", pvc.Name)
		}
	}

	// Its own service account, with a token.
	sa := spec.ServiceAccountName
	if sa == "" || sa == "default" || sa == ds.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("serviceAccountName %q: want the simulator's own", sa)
	}
	if spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not true: the simulator uses the API")
	}
	if !slices.ContainsFunc(objs, func(o object) bool {
		meta, _ := o["metadata"].(map[string]any)
		return o["kind"] == "ServiceAccount" && name(o) == sa && meta["namespace"] == d.Namespace
	}) {
		t.Errorf("no ServiceAccount %s/%s in the output", d.Namespace, sa)
	}
	// Exactly the verbs it needs, by "<API group>/<resource>".
	verbs := map[string][]string{}
	for _, b := range objs {
		if b["kind"] == "RoleBinding" || b["kind"] == "Role" {
			t.Errorf("%s %s: the simulator's rights are cluster-wide", b["kind"], name(b))
		}
		if b["kind"] != "ClusterRoleBinding" {
			continue
		}
		var crb rbacv1.ClusterRoleBinding
		if err := decodeStrict(b, &crb); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(crb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: d.Namespace}) {
			continue
		}
		for _, r := range objs {
			if r["kind"] != "ClusterRole" || name(r) != crb.RoleRef.Name || crb.RoleRef.Kind != "ClusterRole" {
				continue
			}
			var cr rbacv1.ClusterRole
			if err := decodeStrict(r, &cr); err != nil {
				t.Fatal(err)
			}
			for _, rule := range cr.Rules {
				if len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
					t.Errorf("ClusterRole %s rule %+v: resource names and URLs are none of the simulator's", cr.Name, rule)
				}
				for _, g := range rule.APIGroups {
					if g == "" {
						g = "core"
					}
					for _, res := range rule.Resources {
						verbs[g+"/"+res] = append(verbs[g+"/"+res], rule.Verbs...)
					}
				}
			}
		}
	}
	want := map[string][]string{
		"core/nodes":                     {"get", "list", "watch", "patch"},
		"core/nodes/status":              {"patch"},
		"core/pods":                      {"get", "list", "watch"},
		"resource.k8s.io/resourceclaims": {"get", "list", "watch"},
		"resource.k8s.io/resourceslices": {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"},
		"core/events":                    {"create", "patch"},
		"events.k8s.io/events":           {"create", "patch"},
	}
	for k, v := range verbs {
		verbs[k] = slices.Compact(slices.Sorted(slices.Values(v)))
	}
	for k, v := range want {
		want[k] = slices.Sorted(slices.Values(v))
	}
	if !maps.EqualFunc(verbs, want, slices.Equal) {
		t.Errorf("the service account %s may %v, want %v", sa, verbs, want)
	}
}
