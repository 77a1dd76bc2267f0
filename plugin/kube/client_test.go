package kube

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// testEnv is an environment without KUBECONFIG, with an empty home and not
// in a pod; fields override it.
func testEnv(t *testing.T, vars map[string]string, home string, inCluster func() (*rest.Config, error)) env {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	if inCluster == nil {
		inCluster = func() (*rest.Config, error) { return nil, rest.ErrNotInCluster }
	}
	return env{getenv: func(k string) string { return vars[k] }, home: home, inCluster: inCluster}
}

func TestNewClient_FindsTheAPIServerAsKubectlDoes(t *testing.T) {
	const (
		explicitURL = "https://explicit.example:6443"
		envURL      = "https://env.example:6443"
		homeURL     = "https://home.example:6443"
		podURL      = "https://10.96.0.1:443"
	)
	explicit := writeKubeconfig(t, explicitURL)
	fromEnv := writeKubeconfig(t, envURL)
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(writeKubeconfig(t, homeURL), filepath.Join(home, ".kube", "config")); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte("clusters: [[[\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	inPod := func() (*rest.Config, error) { return &rest.Config{Host: podURL}, nil }
	podBroken := func() (*rest.Config, error) { return nil, fs.ErrPermission }

	tests := []struct {
		name      string
		flag      string
		vars      map[string]string
		home      string
		inCluster func() (*rest.Config, error)
		wantHost  string
		wantErr   error  // errors.Is
		errHas    string // in the message
	}{
		{name: "explicit file wins over everything", flag: explicit, vars: map[string]string{"KUBECONFIG": fromEnv}, home: home, inCluster: inPod, wantHost: explicitURL},
		{name: "KUBECONFIG wins over home and pod", vars: map[string]string{"KUBECONFIG": fromEnv}, home: home, inCluster: inPod, wantHost: envURL},
		{name: "KUBECONFIG path list skips missing files", vars: map[string]string{"KUBECONFIG": missing + string(filepath.ListSeparator) + fromEnv}, wantHost: envURL},
		{name: "home kubeconfig wins over pod", home: home, inCluster: inPod, wantHost: homeURL},
		{name: "in a pod", inCluster: inPod, wantHost: podURL},
		{name: "kubeconfig without a cluster falls back to the pod", vars: map[string]string{"KUBECONFIG": empty}, inCluster: inPod, wantHost: podURL},
		{name: "nothing", wantErr: ErrNoAPIAccess, errHas: "not in a pod and no kubeconfig"},
		{name: "KUBECONFIG files all missing", vars: map[string]string{"KUBECONFIG": missing}, wantErr: ErrNoAPIAccess, errHas: missing},
		{name: "explicit file missing", flag: missing, inCluster: inPod, wantErr: fs.ErrNotExist, errHas: missing},
		{name: "explicit file without a cluster", flag: empty, inCluster: inPod, errHas: "no current context with a cluster server"},
		{name: "explicit file unreadable as kubeconfig", flag: garbage, inCluster: inPod, errHas: garbage},
		{name: "service account unreadable", inCluster: podBroken, wantErr: fs.ErrPermission, errHas: "in-cluster configuration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := newClient(Options{Kubeconfig: tt.flag}, testEnv(t, tt.vars, tt.home, tt.inCluster))
			if tt.wantHost != "" {
				if err != nil {
					t.Fatalf("got error %v, want host %s", err, tt.wantHost)
				}
				if c.Host() != tt.wantHost {
					t.Errorf("host %s, want %s (source %s)", c.Host(), tt.wantHost, c.Source())
				}
				return
			}
			if err == nil {
				t.Fatalf("got a client for %s (%s), want an error", c.Host(), c.Source())
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v, want errors.Is %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("error %q does not mention %q", err, tt.errHas)
			}
		})
	}
}

func TestClient_IdentifiesItselfAndAsksForProtobuf(t *testing.T) {
	f := newFakeAPIServer(t, testNode("gpu-1", nil))
	c := testClient(t, f, nil)
	if err := c.PatchNodeLabels(t.Context(), "gpu-1", map[string]string{LabelCount: "4"}, nil); err != nil {
		t.Fatal(err)
	}
	startWatch(t, c, "gpu-1", nil).waitCalls(t, 1)
	waitWatching(t, f, 1)
	want := "virtual-gpu-device-plugin/v9.9.9 (" + runtime.GOOS + "/" + runtime.GOARCH + ")"
	for _, r := range f.log() {
		if r.UserAgent != want {
			t.Errorf("%s %s: User-Agent %q, want %q", r.Method, r.Path, r.UserAgent, want)
		}
		if !strings.HasPrefix(r.Accept, "application/vnd.kubernetes.protobuf") {
			t.Errorf("%s %s: Accept %q, want protobuf first", r.Method, r.Path, r.Accept)
		}
	}
	if n := len(f.log()); n < 3 {
		t.Errorf("%d requests, want a patch, a list and a watch", n)
	}
}

func TestPatchNodeLabels_SendsOnlyOurKeys(t *testing.T) {
	tests := []struct {
		name   string
		set    map[string]string
		remove []string
		want   string // the patch body; "" = no request
		err    error
	}{
		{
			name:   "set and remove",
			set:    map[string]string{LabelCount: "8", LabelProduct: "NVIDIA-A100-SXM4-40GB"},
			remove: []string{LabelProfile},
			want:   `{"metadata":{"labels":{"unicore.mcyou.cc/gpu.count":"8","unicore.mcyou.cc/gpu.product":"NVIDIA-A100-SXM4-40GB","unicore.mcyou.cc/gpu.profile":null}}}`,
		},
		{name: "nothing to do", want: ""},
		{name: "the profile label is not ours", set: map[string]string{ConfigLabel: "x"}, err: ErrForeignLabel},
		{name: "removing a foreign label", remove: []string{"kubernetes.io/hostname"}, err: ErrForeignLabel},
		{name: "the bare prefix domain is not ours", remove: []string{"unicore.mcyou.cc/gpu"}, err: ErrForeignLabel},
		{name: "invalid value", set: map[string]string{LabelProduct: "NVIDIA A100"}, err: ErrInvalidLabel},
		{name: "invalid key", set: map[string]string{LabelPrefix + "a b": "1"}, err: ErrInvalidLabel},
		{name: "set and removed", set: map[string]string{LabelCount: "8"}, remove: []string{LabelCount}, err: ErrInvalidLabel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPIServer(t, testNode("gpu-1", map[string]string{"zone": "a", ConfigLabel: "p", LabelProfile: "p"}))
			c := testClient(t, f, nil)
			err := c.PatchNodeLabels(t.Context(), "gpu-1", tt.set, tt.remove)
			if !errors.Is(err, tt.err) {
				t.Fatalf("got %v, want %v", err, tt.err)
			}
			patches := f.log()
			if tt.want == "" {
				if len(patches) != 0 {
					t.Errorf("sent %d requests, want none", len(patches))
				}
				return
			}
			if len(patches) != 1 || patches[0].ContentType != "application/merge-patch+json" {
				t.Fatalf("requests %+v, want one merge patch", patches)
			}
			if !jsonEqual(t, patches[0].Body, tt.want) {
				t.Errorf("patch %s, want %s", patches[0].Body, tt.want)
			}
			if got := patches[0].Query["fieldManager"]; got != "virtual-gpu-device-plugin" {
				t.Errorf("fieldManager %q, want virtual-gpu-device-plugin", got)
			}
			got := f.labels("gpu-1")
			if got["zone"] != "a" || got[ConfigLabel] != "p" {
				t.Errorf("labels after the patch %v: other labels changed", got)
			}
		})
	}
}

func TestPatchNodeLabels_ReportsServerErrors(t *testing.T) {
	f := newFakeAPIServer(t)
	c := testClient(t, f, nil)
	err := c.PatchNodeLabels(t.Context(), "gpu-9", map[string]string{LabelCount: "1"}, nil)
	if err == nil || !strings.Contains(err.Error(), `patch labels of node "gpu-9"`) || !strings.Contains(err.Error(), "not found") {
		t.Errorf("got %v, want a not-found error naming the node", err)
	}
	if err := c.PatchNodeLabels(t.Context(), "", map[string]string{LabelCount: "1"}, nil); !errors.Is(err, ErrNoNodeName) {
		t.Errorf("got %v, want ErrNoNodeName", err)
	}
}

// jsonEqual reports whether two JSON texts have the same value.
func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return string(xs) == string(ys)
}
