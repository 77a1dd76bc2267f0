package cluster

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAssignedIDs(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		want      []string
		wantErr   bool
	}{
		{"two", "assigned virtual gpus: fake-0,fake-3\n", []string{"fake-0", "fake-3"}, false},
		{"later line", "hello\nassigned virtual gpus: fake-2\n", []string{"fake-2"}, false},
		{"empty env", "assigned virtual gpus: \n", []string{}, false},
		{"no line", "something else\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AssignedIDs(tc.log)
			if (err != nil) != tc.wantErr {
				t.Fatalf("AssignedIDs(%q) error %v, want error %v", tc.log, err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("AssignedIDs(%q) = %q, want %q", tc.log, got, tc.want)
			}
		})
	}
}

func TestFindKlog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.log")
	log := `=== harness: starting kubelet
I0102 15:04:05.123456   12345 server.go:161] "Got registration request from device plugin with resource" resourceName="unicore.mcyou.cc/gpu"
not a klog line with Got registration request
E0102 15:04:06.000001   12345 client.go:94] "ListAndWatch ended unexpectedly for device plugin"
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := findKlog(path, "Got registration request")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1: %v", len(lines), lines)
	}
	got := lines[0].Time
	want := time.Date(time.Now().Year(), time.January, 2, 15, 4, 5, 123456000, time.Local)
	if !got.Equal(want) {
		t.Errorf("time %s, want %s", got, want)
	}
}

func TestWriteBusyboxImage(t *testing.T) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox")
	}
	var buf bytes.Buffer
	if err := writeBusyboxImage(&buf, busybox, imageSpec{name: ShellImage, cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Size        int               `json:"size"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != ShellImage {
		t.Fatalf("index.json: %s", files["index.json"])
	}
	m := index.Manifests[0]
	manifest, ok := files["blobs/sha256/"+strings.TrimPrefix(m.Digest, "sha256:")]
	if !ok || len(manifest) != m.Size || digest(manifest) != m.Digest {
		t.Fatalf("manifest blob %s missing or wrong size/digest", m.Digest)
	}
	// Every blob is stored under its digest.
	for name, b := range files {
		if strings.HasPrefix(name, "blobs/sha256/") && len(b) > 0 && digest(b) != "sha256:"+strings.TrimPrefix(name, "blobs/sha256/") {
			t.Errorf("blob %s has digest %s", name, digest(b))
		}
	}
}

func TestWriteBinaryImage(t *testing.T) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox")
	}
	var buf bytes.Buffer
	spec := imageSpec{name: "docker.io/unicore/virtual-gpu-device-plugin:dev", entrypoint: []string{"/usr/bin/plugin"}}
	if err := writeBinaryImage(&buf, busybox, "/usr/bin/plugin", spec); err != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		blobs[h.Name] = b
	}
	// The layer is the blob that is a tar holding usr/bin/plugin.
	var layer map[string]*tar.Header
	for name, b := range blobs {
		if !strings.HasPrefix(name, "blobs/sha256/") {
			continue
		}
		entries := map[string]*tar.Header{}
		lr := tar.NewReader(bytes.NewReader(b))
		for {
			h, err := lr.Next()
			if err != nil {
				break
			}
			entries[h.Name] = h
		}
		if entries["usr/bin/plugin"] != nil {
			layer = entries
		}
	}
	if layer == nil {
		t.Fatal("no layer with usr/bin/plugin")
	}
	for name, typ := range map[string]byte{"usr/": tar.TypeDir, "usr/bin/": tar.TypeDir, "bin/": tar.TypeDir, "tmp/": tar.TypeDir, "usr/bin/plugin": tar.TypeReg} {
		if h := layer[name]; h == nil || h.Typeflag != typ {
			t.Errorf("layer entry %s: %+v, want type %c", name, h, typ)
		}
	}
	if h := layer["usr/bin/plugin"]; h != nil && h.Mode&0o111 == 0 {
		t.Errorf("usr/bin/plugin mode %o, want executable", h.Mode)
	}
	var config struct {
		Config struct{ Entrypoint []string }
	}
	for name, b := range blobs {
		if strings.HasPrefix(name, "blobs/") && json.Unmarshal(b, &config) == nil && len(config.Config.Entrypoint) > 0 {
			break
		}
	}
	if !slices.Equal(config.Config.Entrypoint, spec.entrypoint) {
		t.Errorf("entrypoint %q, want %q", config.Config.Entrypoint, spec.entrypoint)
	}
}
