package status_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/status"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

func TestRead_Errors(t *testing.T) {
	g := mustGPU(t, "hgx-h100", 0)
	other := mustGPU(t, "hgx-h100", 1)
	good, err := status.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	otherData, err := status.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	name := status.FileName(g.UUID)
	cases := []struct {
		name    string
		fsys    fstest.MapFS
		uuid    string
		wantErr error
	}{
		{"missing", fstest.MapFS{}, g.UUID, fs.ErrNotExist},
		{"invalid uuid", fstest.MapFS{}, "../../etc/passwd", status.ErrInvalidUUID},
		{"a directory", fstest.MapFS{name: {Mode: fs.ModeDir}}, g.UUID, status.ErrInvalidStatus},
		{"another GPU's document", fstest.MapFS{name: {Data: otherData}}, g.UUID, status.ErrInvalidStatus},
		{"too large", fstest.MapFS{name: {Data: []byte(strings.Repeat(" ", status.MaxFileBytes+1))}}, g.UUID, status.ErrInvalidStatus},
		{"garbage", fstest.MapFS{name: {Data: []byte("{")}}, g.UUID, status.ErrInvalidStatus},
		{"other version", fstest.MapFS{name: {Data: []byte(strings.Replace(string(good), "/v1", "/v9", 1))}}, g.UUID, status.ErrUnsupportedVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := status.Read(tc.fsys, tc.uuid); !errors.Is(err, tc.wantErr) || got != nil {
				t.Errorf("Read: %v, %v; want nil, %v", got, err, tc.wantErr)
			}
		})
	}
}

func TestReadGPUs_Partial(t *testing.T) {
	dir := t.TempDir()
	w := mustWriter(t, dir)
	a, b := mustGPU(t, "dgx2", 0), mustGPU(t, "dgx2", 9)
	if err := w.Write(a); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, status.FileName(b.UUID)), []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := topology.DeriveUUID("node-a", "fake-15")
	gpus, err := status.ReadGPUs(os.DirFS(dir), []string{a.UUID, b.UUID, missing})
	if len(gpus) != 3 || gpus[0] == nil || gpus[0].ID != "fake-0" || gpus[1] != nil || gpus[2] != nil {
		t.Fatalf("ReadGPUs = %v, want [fake-0 nil nil]", gpus)
	}
	if !errors.Is(err, status.ErrInvalidStatus) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadGPUs error %v, want one joining ErrInvalidStatus and fs.ErrNotExist", err)
	}
	if gpus, err := status.ReadGPUs(os.DirFS(dir), []string{a.UUID}); err != nil || gpus[0] == nil {
		t.Errorf("ReadGPUs of a present file: %v, %v", gpus, err)
	}
}
