package options_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLoad_DirectoriesDoNotOverlap: the plugin's directories where one
// would break another are refused, naming both, through symlinks too; the
// nestings that harm nothing are accepted.
func TestLoad_DirectoriesDoNotOverlap(t *testing.T) {
	root := t.TempDir()
	stateDir := filepath.Join(root, "state")
	state := filepath.Join(stateDir, "state.db")
	dp := filepath.Join(root, "dp")
	status, loadDirPath := filepath.Join(stateDir, "status"), filepath.Join(stateDir, "load")
	for _, d := range []string{stateDir, dp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	toState := filepath.Join(root, "to-state") // a symlink to the state file's directory
	if err := os.Symlink(stateDir, toState); err != nil {
		t.Fatal(err)
	}
	const (
		statusWhy = "every GPU container gets it mounted, and the plugin removes stale status files from it"
		loadWhy   = "the plugin mounts its allocations' directories into containers and removes them when the allocations end"
	)
	statusDir := "the status directory " + status + " (next to -state)"
	loadDir := "the load socket directory " + loadDirPath + " (next to -state)"
	for _, tc := range []struct {
		name string
		args []string
		want string // "" accepted
	}{
		{"defaults", nil, ""},
		{"tools dir is the status dir", []string{"-tools-dir=" + status},
			`invalid -tools-dir="` + status + `": must be neither ` + statusDir + " nor inside it: " + statusWhy},
		{"tools dir inside the status dir", []string{"-tools-dir=" + status + "/bin"}, `invalid -tools-dir="` + status + `/bin": must be neither ` + statusDir},
		{"tools dir is the status dir through a symlink", []string{"-tools-dir=" + toState + "/status"}, `invalid -tools-dir="` + toState + `/status": must be neither ` + statusDir},
		{"tools dir inside the load dir", []string{"-tools-dir=" + loadDirPath + "/7"},
			`invalid -tools-dir="` + loadDirPath + `/7": must be neither ` + loadDir + " nor inside it: " + loadWhy},
		{"cdi dir is the status dir", []string{"-device-list-strategy=cdi-cri", "-cdi-spec-dir=" + status}, `invalid -cdi-spec-dir="` + status + `": must be neither ` + statusDir},
		{"cdi dir is the load dir", []string{"-device-list-strategy=cdi-cri", "-cdi-spec-dir=" + loadDirPath}, `invalid -cdi-spec-dir="` + loadDirPath + `": must be neither ` + loadDir},
		{"cdi dir is the status dir, without cdi", []string{"-cdi-spec-dir=" + status}, ""},
		{"device-plugin dir is the status dir", []string{"-device-plugin-path=" + status}, `invalid -device-plugin-path="` + status + `": must be neither ` + statusDir},
		{"admin socket in the status dir", []string{"-admin-socket=" + status + "/admin.sock"},
			`invalid the directory of -admin-socket="` + status + `/admin.sock": must be neither ` + statusDir},
		{"admin socket in the load dir", []string{"-admin-socket=" + loadDirPath + "/admin.sock"}, `must be neither ` + loadDir},
		{"tools dir is the device-plugin dir", []string{"-tools-dir=" + dp},
			`invalid -tools-dir="` + dp + `": must not be -device-plugin-path="` + dp + `": the kubelet's directory holds sockets, the tools directory the plugin's nvidia-smi`},
		{"tools dir below the device-plugin dir", []string{"-tools-dir=" + dp + "/bin"}, ""},
		{"cdi dir is the device-plugin dir", []string{"-device-list-strategy=cdi-cri", "-cdi-spec-dir=" + dp},
			`invalid -cdi-spec-dir="` + dp + `": must not be -device-plugin-path="` + dp + `"`},
		{"cdi dir is the tools dir", []string{"-device-list-strategy=cdi-cri", "-cdi-spec-dir=" + root + "/bin", "-tools-dir=" + root + "/bin"},
			`invalid -cdi-spec-dir="` + root + `/bin": must not be -tools-dir="` + root + `/bin": container runtimes read the spec directory`},
		{"cdi dir is the default tools dir", []string{"-device-list-strategy=cdi-cri", "-cdi-spec-dir=" + stateDir + "/bin"},
			`must not be -tools-dir (default ` + stateDir + `/bin, next to -state)`},
		{"cdi dir is the tools dir through a symlink", []string{"-device-list-strategy=cdi-cri", "-cdi-spec-dir=" + toState + "/bin"},
			`invalid -cdi-spec-dir="` + toState + `/bin": must not be -tools-dir`},
		{"tools dir is the state dir", []string{"-tools-dir=" + stateDir}, ""},
		{"cdi dir inside the tools dir", []string{"-device-list-strategy=cdi-cri", "-cdi-spec-dir=" + stateDir + "/bin/cdi"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-state=" + state, "-device-plugin-path=" + dp, "-cdi-spec-dir=" + root + "/cdi"}, tc.args...)
			_, err := load(args, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			checkInvalid(t, err, tc.want)
		})
	}
}

// A bind mount of the status directory is the status directory.
func TestLoad_DirectoriesDoNotOverlap_BindMount(t *testing.T) {
	root := t.TempDir()
	status, elsewhere := filepath.Join(root, "state", "status"), filepath.Join(root, "tools")
	for _, d := range []string{status, elsewhere} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount(status, elsewhere, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v (needs root)", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(elsewhere, 0); err != nil {
			t.Errorf("unmount %s: %v", elsewhere, err)
		}
	})
	for _, tools := range []string{elsewhere, elsewhere + "/bin"} {
		_, err := load([]string{"-state=" + filepath.Join(root, "state", "state.db"), "-tools-dir=" + tools}, nil)
		checkInvalid(t, err, `invalid -tools-dir="`+tools+`": must be neither the status directory `+status)
	}
}
