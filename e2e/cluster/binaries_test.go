package cluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// kubeGoModExcerpt has the shape of k8s.io/kubernetes's go.mod: requires, then one replace block of
// staging modules (k8s.io/sample-cli-plugin among them), and a lone replace line.
const kubeGoModExcerpt = `// This is a generated file. Do not edit directly.

module k8s.io/kubernetes

go 1.24.0

godebug default=go1.24

require (
	github.com/spf13/cobra v1.9.1
	k8s.io/api v0.0.0
	k8s.io/client-go v0.0.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/apimachinery => ./staging/src/k8s.io/apimachinery
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	k8s.io/kubelet => ./staging/src/k8s.io/kubelet
	k8s.io/sample-cli-plugin => ./staging/src/k8s.io/sample-cli-plugin
	github.com/example/pinned => github.com/example/pinned v1.2.3
)

replace k8s.io/cri-streaming => ./staging/src/k8s.io/cri-streaming
`

func TestKubeBuildGoMod(t *testing.T) {
	for _, tc := range []struct {
		name, gomod, version string
		want                 []string // lines the result must have
		notWant              []string // substrings it must not have
		wantErr              error    // nil: any error fails; errNone: must fail, any error
	}{
		{
			name: "v1.34.4", gomod: kubeGoModExcerpt, version: "v1.34.4",
			want: []string{
				"module vgpu-e2e-kube-build",
				"go 1.24.0",
				"godebug default=go1.24",
				"require k8s.io/kubernetes v1.34.4",
				"\tk8s.io/api => k8s.io/api v0.34.4",
				"\tk8s.io/apimachinery => k8s.io/apimachinery v0.34.4",
				"\tk8s.io/client-go => k8s.io/client-go v0.34.4",
				"\tk8s.io/kubelet => k8s.io/kubelet v0.34.4",
				"\tk8s.io/cri-streaming => k8s.io/cri-streaming v0.34.4",
			},
			notWant: []string{"sample-cli-plugin", "github.com/example/pinned", "cobra", "./staging"},
		},
		{
			name: "v1.37.2", gomod: kubeGoModExcerpt, version: "v1.37.2",
			want: []string{"require k8s.io/kubernetes v1.37.2", "\tk8s.io/api => k8s.io/api v0.37.2"},
		},
		{name: "pre-release", gomod: kubeGoModExcerpt, version: "v1.37.0-rc.1", wantErr: ErrKubernetesVersion},
		{name: "no v", gomod: kubeGoModExcerpt, version: "1.34.4", wantErr: ErrKubernetesVersion},
		{name: "v2", gomod: kubeGoModExcerpt, version: "v2.0.0", wantErr: ErrKubernetesVersion},
		{name: "not kubernetes", gomod: "module example.com/x\n\ngo 1.24\n\nreplace k8s.io/api => ./staging/src/k8s.io/api\n", version: "v1.34.4", wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kubeBuildGoMod([]byte(tc.gomod), tc.version)
			switch {
			case tc.wantErr == errAny:
				if err == nil {
					t.Fatalf("kubeBuildGoMod: no error, got\n%s", got)
				}
				t.Logf("error: %v", err)
				return
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("kubeBuildGoMod: error %v, want %v", err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			lines := strings.Split(string(got), "\n")
			for _, w := range tc.want {
				if !slices.Contains(lines, w) {
					t.Errorf("no line %q in\n%s", w, got)
				}
			}
			for _, nw := range tc.notWant {
				if strings.Contains(string(got), nw) {
					t.Errorf("has %q:\n%s", nw, got)
				}
			}
		})
	}
}

var errAny = errors.New("any error")

// TestKubeBuildGoMod_PinnedVersion generates the build module for the version the e2e go.mod pins,
// from that version's real go.mod in the module cache (skipped when it is not there), and checks that
// it replaces exactly the staging modules the e2e go.mod replaces by hand, by the same versions: the
// generated module of another version is built the way the pinned one is.
func TestKubeBuildGoMod_PinnedVersion(t *testing.T) {
	moduleDir, err := ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := KubernetesVersion(moduleDir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	kubeGoMod, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "cache", "download", "k8s.io", "kubernetes", "@v", pinned+".mod"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("k8s.io/kubernetes@%s not in the module cache", pinned)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := kubeBuildGoMod(kubeGoMod, pinned)
	if err != nil {
		t.Fatal(err)
	}
	e2eGoMod, err := os.ReadFile(filepath.Join(moduleDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// A staging module's replacement: by itself at v0.<minor>.<patch> of the pinned release.
	replaced := regexp.MustCompile(`(?m)^\s*(k8s\.io/[A-Za-z0-9._-]+) => (k8s\.io/[A-Za-z0-9._-]+ v0\.\S+)$`)
	staging := " v0." + strings.TrimPrefix(pinned, "v1.")
	set := func(b []byte) []string {
		var s []string
		for _, m := range replaced.FindAllStringSubmatch(string(b), -1) {
			if m[2] == m[1]+staging {
				s = append(s, m[1]+" => "+m[2])
			}
		}
		slices.Sort(s)
		return s
	}
	if g, w := set(got), set(e2eGoMod); !slices.Equal(g, w) || len(g) < 30 {
		t.Errorf("generated staging replacements (%d):\n%s\nthe e2e go.mod's (%d):\n%s", len(g), strings.Join(g, "\n"), len(w), strings.Join(w, "\n"))
	}
}

func TestWantedKubernetesVersion(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/e2e\n\nrequire (\n\tk8s.io/kubernetes v1.36.3 // indirect\n)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env, want string
		wantErr         bool
	}{
		{"unset: go.mod's", "", "v1.36.3", false},
		{"set", "v1.34.4", "v1.34.4", false},
		{"newer", "v1.37.2", "v1.37.2", false},
		{"no v", "1.34.4", "", true},
		{"minor only", "v1.34", "", true},
		{"pre-release", "v1.37.0-beta.0", "", true},
		{"space", "v1.34.4 ", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvKubernetesVersion, tc.env)
			got, err := WantedKubernetesVersion(dir)
			if tc.wantErr {
				if !errors.Is(err, ErrKubernetesVersion) || !strings.Contains(err.Error(), EnvKubernetesVersion) {
					t.Fatalf("WantedKubernetesVersion: %q, %v; want an error naming %s", got, err, EnvKubernetesVersion)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("WantedKubernetesVersion = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestKubeMinor(t *testing.T) {
	for v, want := range map[string]int{"v1.34.4": 34, "v1.36.3": 36, "v1.37.2": 37, "v1.4.0": 4, "1.34.4": 0, "v1.34": 0, "": 0, "v1.37.0-rc.0": 0} {
		if got := KubeMinor(v); got != want {
			t.Errorf("KubeMinor(%q) = %d, want %d", v, got, want)
		}
	}
}

func TestParseFeatureGates(t *testing.T) {
	for _, tc := range []struct {
		in, flag, wantErr string
	}{
		{"", "", ""},
		{"DRADeviceTaints=true", "DRADeviceTaints=true", ""},
		{" DRAExtendedResource=true, DRADeviceTaints=false ,", "DRADeviceTaints=false,DRAExtendedResource=true", ""},
		{"DRADeviceTaints", "", "not Name=true|false"},
		{"DRADeviceTaints=yes", "", `value "yes"`},
		{"dra=true", "", "not Name=true|false"},
		{"A=true,A=false", "", "given twice"},
	} {
		gates, err := ParseFeatureGates(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseFeatureGates(%q): %v, want an error with %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseFeatureGates(%q): %v", tc.in, err)
			continue
		}
		if got := featureGatesFlag(gates); got != tc.flag {
			t.Errorf("featureGatesFlag(ParseFeatureGates(%q)) = %q, want %q", tc.in, got, tc.flag)
		}
	}
}

func TestRuntimeConfigArgs(t *testing.T) {
	for _, tc := range []struct {
		version string
		gates   map[string]bool
		want    []string
	}{
		{"v1.36.3", nil, nil},
		{"v1.34.4", nil, nil},
		{"v1.34.4", map[string]bool{"DRADeviceTaints": true, "DRAExtendedResource": true}, []string{"--runtime-config=resource.k8s.io/v1alpha3=true"}},
		{"v1.34.4", map[string]bool{"DRADeviceTaints": false}, nil},
		{"v1.36.3", map[string]bool{"DRADeviceTaints": true}, nil},
		{"v1.36.3", map[string]bool{"DRADeviceTaintRules": true}, []string{"--runtime-config=resource.k8s.io/v1beta2=true"}},
		{"v1.37.2", map[string]bool{"DRADeviceTaintRules": true, "DRADeviceTaints": true}, nil},
	} {
		if got := runtimeConfigArgs(tc.version, tc.gates); !slices.Equal(got, tc.want) {
			t.Errorf("runtimeConfigArgs(%s, %v) = %q, want %q", tc.version, tc.gates, got, tc.want)
		}
	}
}
