package main

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/lifecycle"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// repoRoot is the repository, two levels above this package.
const repoRoot = "../.."

// manifests reads every YAML document under deploy/, by file.
func manifests(t *testing.T) map[string][][]byte {
	t.Helper()
	docs := map[string][][]byte{}
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(doc) != "" {
				docs[path] = append(docs[path], []byte(doc))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no manifests under deploy/")
	}
	return docs
}

// decodeStrict decodes a manifest into out, failing on unknown fields.
func decodeStrict(t *testing.T, path string, doc []byte, out any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestDeploy_ManifestsDecodeStrictly(t *testing.T) {
	for path, docs := range manifests(t) {
		for _, doc := range docs {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			switch meta.Kind {
			case "DaemonSet":
				decodeStrict(t, path, doc, &appsv1.DaemonSet{})
			case "Deployment":
				decodeStrict(t, path, doc, &appsv1.Deployment{})
			case "Pod":
				var pod corev1.Pod
				decodeStrict(t, path, doc, &pod)
				checkGPURequests(t, path, pod.Spec)
			case "ConfigMap":
				var cm corev1.ConfigMap
				decodeStrict(t, path, doc, &cm)
				for name, data := range cm.Data {
					if _, err := topology.Parse(name, strings.NewReader(data)); err != nil {
						t.Errorf("%s: topology in the ConfigMap: %v", path, err)
					}
				}
			case "Kustomization":
			default:
				t.Errorf("%s: unexpected kind %q", path, meta.Kind)
			}
		}
	}
}

// checkGPURequests: an extended resource's request must equal its limit.
func checkGPURequests(t *testing.T, path string, spec corev1.PodSpec) {
	t.Helper()
	for _, c := range spec.Containers {
		lim, req := c.Resources.Limits[defaultResourceName], c.Resources.Requests[defaultResourceName]
		if !lim.Equal(req) {
			t.Errorf("%s: container %s: %s limit %s != request %s", path, c.Name, defaultResourceName, lim.String(), req.String())
		}
	}
}

func daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	path := filepath.Join(repoRoot, "deploy", "base", "daemonset.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	decodeStrict(t, path, b, &ds)
	return &ds
}

func TestDeploy_DaemonSetMatchesTheBinary(t *testing.T) {
	ds := daemonSet(t)
	if ds.Name != "virtual-gpu-device-plugin" || ds.Namespace != "kube-system" || ds.Spec.Template.Labels["app"] != "virtual-gpu-device-plugin" {
		t.Errorf("identity: %s/%s labels %v", ds.Namespace, ds.Name, ds.Spec.Template.Labels)
	}
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "device-plugin" {
		t.Fatalf("containers = %v", spec.Containers)
	}
	c := spec.Containers[0]
	if c.Image != "unicore/virtual-gpu-device-plugin:dev" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
	}

	// The args parse with the binary's own parser, environment included.
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	cfg, err := parseConfig(c.Args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("args %v: %v", c.Args, err)
	}
	if cfg.devices != 4 {
		t.Errorf("devices = %d, want the seed's 4", cfg.devices)
	}

	// Every hostPath is mounted where the flag defaults point.
	wantMounts := map[string]corev1.HostPathType{
		defaultDevicePluginPath:               corev1.HostPathDirectory,
		filepath.Dir(defaultStatePath):        corev1.HostPathDirectoryOrCreate,
		filepath.Dir(lifecycle.DefaultSocket): corev1.HostPathDirectory,
	}
	if filepath.Dir(cfg.adminSocket) != filepath.Dir(defaultStatePath) {
		t.Errorf("admin socket %s is not next to the state file", cfg.adminSocket)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		want, ok := wantMounts[v.HostPath.Path]
		if !ok {
			t.Errorf("hostPath %s matches no flag default", v.HostPath.Path)
			continue
		}
		if v.HostPath.Type == nil || *v.HostPath.Type != want {
			t.Errorf("hostPath %s type %v, want %s", v.HostPath.Path, v.HostPath.Type, want)
		}
		if mounts[v.Name] != v.HostPath.Path {
			t.Errorf("hostPath %s mounted at %q, want the same path", v.HostPath.Path, mounts[v.Name])
		}
		delete(wantMounts, v.HostPath.Path)
	}
	if len(wantMounts) > 0 {
		t.Errorf("hostPaths missing: %v", wantMounts)
	}

	// Resources as the seed asked.
	r := c.Resources
	if r.Requests.Cpu().String() != "50m" || r.Requests.Memory().String() != "50Mi" || r.Limits.Memory().String() != "100Mi" {
		t.Errorf("resources = %v", r)
	}
	// What a production DaemonSet of this kind has.
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName = %q", spec.PriorityClassName)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("update strategy = %s", ds.Spec.UpdateStrategy.Type)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil ||
		!*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("securityContext = %+v", sc)
	}
	if len(spec.Tolerations) == 0 {
		t.Error("no tolerations")
	}
	// The probes ask the metrics listener the args configure.
	_, port, _ := net.SplitHostPort(cfg.metricsAddress)
	var portName string
	for _, p := range c.Ports {
		if p.ContainerPort > 0 && port == strconv.Itoa(int(p.ContainerPort)) {
			portName = p.Name
		}
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != portName || portName == "" {
			t.Errorf("%s probe %+v does not ask the metrics port %s", name, p, port)
			continue
		}
		if want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]; p.HTTPGet.Path != want {
			t.Errorf("%s probe path %s, want %s", name, p.HTTPGet.Path, want)
		}
	}
}

func TestDeploy_KustomizeBuilds(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: kustomize build not checked")
	}
	for _, dir := range []string{"deploy/base", "deploy/examples/topology"} {
		out, err := exec.Command(kubectl, "kustomize", filepath.Join(repoRoot, dir)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
		}
		if !bytes.Contains(out, []byte("name: virtual-gpu-device-plugin")) || !bytes.Contains(out, []byte("namespace: kube-system")) {
			t.Errorf("kustomize %s output lacks the DaemonSet:\n%s", dir, out)
		}
	}
}

// TestDockerfile_BuildsWithMake checks that the image builds the binary with
// the Makefile's one build command, and builds it that way: static,
// trimmed, version stamped.
func TestDockerfile_BuildsWithMake(t *testing.T) {
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	run := regexp.MustCompile(`(?m)^RUN (make build.*)$`).FindSubmatch(dockerfile)
	if run == nil {
		t.Fatal("the Dockerfile does not build with `make build`")
	}
	if !regexp.MustCompile(`(?m)^FROM golang:1\.26\.\d+-\S+ AS build$`).Match(dockerfile) {
		t.Error("the builder is not a pinned Go 1.26 image")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	out := t.TempDir()
	args := append(strings.Fields(string(run[1]))[1:], "VERSION=v9.9.9-test", "BIN="+out)
	cmd := exec.Command("make", args...)
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %v: %v\n%s", args, err, b)
	}
	bin := filepath.Join(out, "virtual-gpu-device-plugin")
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings = %v", settings)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked")
		}
	}
	if v, err := exec.Command(bin, "-version").Output(); err != nil || !strings.HasPrefix(string(v), "version: v9.9.9-test\n") {
		t.Errorf("-version = %q, %v", v, err)
	}
}
