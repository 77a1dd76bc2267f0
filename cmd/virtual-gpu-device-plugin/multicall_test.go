package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestBinary_NvidiaSMI runs the plugin binary under the name nvidia-smi, as
// containers do through the mounted /usr/bin/nvidia-smi: it is then the fake
// nvidia-smi, whatever its arguments, with the real tool's exit codes.
func TestBinary_NvidiaSMI(t *testing.T) {
	link := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, ids string
		args      []string
		want      string
		wantCode  int
	}{
		{"list", "fake-0,fake-1", []string{"-L"}, "GPU 0: N/A (UUID: N/A)\nGPU 1: N/A (UUID: N/A)\n", 0},
		{"no devices", "", []string{"-L"}, "No devices were found\n", 6},
		{"a plugin command is an unknown option", "fake-0", []string{"serve"}, "ERROR: Option serve is not recognized. Please run 'nvidia-smi -h' for help.\n", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(link, tc.args...)
			cmd.Env = []string{"VIRTUAL_GPU_IDS=" + tc.ids, "VIRTUAL_GPU_STATUS_DIR=" + t.TempDir()}
			out, err := cmd.Output()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want || code != tc.wantCode {
				t.Errorf("nvidia-smi %q: exit %d, output %q; want %d, %q", tc.args, code, out, tc.wantCode, tc.want)
			}
		})
	}
}
