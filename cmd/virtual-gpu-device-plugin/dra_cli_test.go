package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun_DRANeedsNodeNameAndAPI: -kubelet-api=dra without -node-name or
// without API access exits 2 with one line that says what is missing, and
// touches no state file.
func TestRun_DRANeedsNodeNameAndAPI(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "s.db")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no node name", []string{"-kubelet-api=dra"}, nil,
			"-kubelet-api=dra needs -node-name (or NODE_NAME, from the pod's spec.nodeName): the driver's pool and ResourceSlices are the node's"},
		{"no node name by env", nil, map[string]string{"VGPU_KUBELET_API": "dra"}, "-kubelet-api=dra needs -node-name"},
		// Outside a pod (no KUBERNETES_SERVICE_HOST) and without a
		// kubeconfig there is no API access.
		{"no API access", []string{"-kubelet-api=dra", "-node-name=node-1"}, nil,
			"-kubelet-api=dra needs API access (in a pod its service account; else -kubeconfig or KUBECONFIG): the driver publishes ResourceSlices and reads ResourceClaims: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-state=" + state, "-device-plugin-path=" + filepath.Join(dir, "dp"),
				"-kubelet-registry-dir=" + filepath.Join(dir, "registry"), "-kubelet-plugins-dir=" + filepath.Join(dir, "plugins")}, tc.args...)
			err := run(context.Background(), args, io.Discard, io.Discard, env(tc.env))
			var stderr bytes.Buffer
			if code := exitCode(err, &stderr); code != 2 || !strings.HasPrefix(stderr.String(), "virtual-gpu-device-plugin: "+tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
			if strings.Count(stderr.String(), "\n") != 1 || strings.Contains(stderr.String(), "%!") {
				t.Errorf("stderr is not one clean line: %q", stderr.String())
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("state file after the refusal: %v, want none", err)
			}
		})
	}
}
