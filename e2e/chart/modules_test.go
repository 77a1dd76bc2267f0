package chart_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// kubeCommands are the Kubernetes binaries the suite builds from this module (cluster.EnsureKubeBinaries).
var kubeCommands = []string{
	"k8s.io/kubernetes/cmd/kubelet",
	"k8s.io/kubernetes/cmd/kube-apiserver",
	"k8s.io/kubernetes/cmd/kube-scheduler",
	"k8s.io/kubernetes/cmd/kube-controller-manager",
}

// buildModules lists, as `go list -deps -mod=<mode>` resolves them in the module in dir, the
// module and version (after replacements) of every package the Kubernetes binaries are built from.
func buildModules(t *testing.T, dir, mode string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f",
		"{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}"}, kubeCommands...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod="+mode, "CGO_ENABLED=0", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list in %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !seen[l] {
			seen[l] = true
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestModules_KubernetesBuildsAsWithoutHelm: Helm (and the plugin) in this module's graph change
// nothing the kubelet, kube-apiserver, kube-scheduler and kube-controller-manager are built from:
// every module of theirs has the version a module requiring k8s.io/kubernetes alone resolves (with
// the same staging replacements). The e2e go.mod pins back each module Helm would raise; a new one
// fails here, naming the module. Needs the go command and the module cache or proxy.
func TestModules_KubernetesBuildsAsWithoutHelm(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves the Kubernetes module graph twice (a few seconds)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	gomod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	kube := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)`).FindSubmatch(gomod)
	staging := regexp.MustCompile(`(?ms)^replace \(\n(\s*k8s\.io/api => .*?)^\)`).FindSubmatch(gomod)
	if kube == nil || staging == nil {
		t.Fatal("e2e/go.mod: no k8s.io/kubernetes requirement or no staging replace block")
	}
	alone := t.TempDir()
	mod := "module kubernetesalone\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes " + string(kube[1]) + "\n\nreplace (\n" + string(staging[1]) + ")\n"
	if err := os.WriteFile(filepath.Join(alone, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	// This module's checksums cover every module the lone one needs.
	if err := os.WriteFile(filepath.Join(alone, "go.sum"), mustRead(t, filepath.Join("..", "go.sum")), 0o644); err != nil {
		t.Fatal(err)
	}
	// The lone module resolves its graph (mod); this one must already be complete (readonly).
	want, got := buildModules(t, alone, "mod"), buildModules(t, "..", "readonly")
	if got != want {
		w, g := map[string]bool{}, map[string]bool{}
		for _, l := range strings.Split(want, "\n") {
			w[l] = true
		}
		for _, l := range strings.Split(got, "\n") {
			g[l] = true
		}
		for l := range g {
			if !w[l] {
				t.Errorf("the Kubernetes binaries would build with %s here, not as k8s.io/kubernetes alone resolves it: pin it back in e2e/go.mod", l)
			}
		}
		for l := range w {
			if !g[l] {
				t.Errorf("k8s.io/kubernetes alone builds with %s", l)
			}
		}
	}
	t.Logf("%d modules, the same with and without Helm", strings.Count(got, "\n")+1)
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
