package cluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	pathpkg "path"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Local images, built from Debian's busybox-static and imported into containerd. No registry is
// reachable, so pods must use these names with imagePullPolicy Never (or IfNotPresent).
const (
	// ShellImage has /bin/sh and every busybox applet in /bin; its default command is sh.
	ShellImage = "vgpu-e2e.local/busybox:e2e"
	// PauseImage is the sandbox image: it sleeps forever.
	PauseImage = "vgpu-e2e.local/pause:e2e"
)

// imageSpec describes a single-layer image made of the static busybox.
type imageSpec struct {
	name       string
	entrypoint []string
	cmd        []string
}

// imageEntry is one entry of an image's single layer: a directory (data nil, link empty), a regular
// file or a symlink.
type imageEntry struct {
	name string // path in the image, without a leading slash
	mode int64
	data []byte
	link string // symlink target
	dir  bool
}

// baseDirs are the directories every local image has.
var baseDirs = []string{"bin", "dev", "etc", "proc", "sys", "tmp", "var", "root"}

// writeBusyboxImage writes an OCI image layout archive (for `ctr images import`) of a single layer
// holding busybox at /bin/busybox, a symlink /bin/<applet> for each applet and a few empty directories.
func writeBusyboxImage(w io.Writer, busybox string, spec imageSpec) error {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("read busybox: %w", err)
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	entries := []imageEntry{{name: "bin/busybox", mode: 0o755, data: bin}}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		entries = append(entries, imageEntry{name: "bin/" + applet, mode: 0o777, link: "busybox"})
	}
	return writeImage(w, spec, entries)
}

// writeBinaryImage writes an OCI image layout archive of a single layer holding the static binary
// hostBinary at path (e.g. "/usr/bin/virtual-gpu-device-plugin") and the base directories; spec gives
// its name, entrypoint and command.
func writeBinaryImage(w io.Writer, hostBinary, path string, spec imageSpec) error {
	bin, err := os.ReadFile(hostBinary)
	if err != nil {
		return fmt.Errorf("read %s: %w", hostBinary, err)
	}
	var entries []imageEntry
	dir := ""
	for _, part := range strings.Split(strings.Trim(pathpkg.Dir(path), "/"), "/") {
		if dir = pathpkg.Join(dir, part); dir != "" && !slices.Contains(baseDirs, dir) {
			entries = append(entries, imageEntry{name: dir, mode: 0o755, dir: true})
		}
	}
	entries = append(entries, imageEntry{name: strings.TrimPrefix(path, "/"), mode: 0o755, data: bin})
	return writeImage(w, spec, entries)
}

// writeImage writes an OCI image layout archive (for `ctr images import`) of a single layer holding the
// base directories and entries.
func writeImage(w io.Writer, spec imageSpec, entries []imageEntry) error {
	epoch := time.Unix(0, 0)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, d := range baseDirs {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: epoch}
		switch {
		case e.dir:
			h.Typeflag, h.Name, h.Size = tar.TypeDir, e.name+"/", 0
		case e.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerDigest := digest(layer.Bytes())

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Env":        []string{"PATH=/bin:/usr/bin"},
			"Entrypoint": spec.entrypoint,
			"Cmd":        spec.cmd,
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config, nil),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes(), nil)},
	})
	if err != nil {
		return err
	}
	_, tag, _ := strings.Cut(spec.name[strings.LastIndex(spec.name, "/")+1:], ":")
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []any{descriptor("application/vnd.oci.image.manifest.v1+json", manifest, map[string]string{
			"io.containerd.image.name":          spec.name,
			"org.opencontainers.image.ref.name": tag,
		})},
	})
	if err != nil {
		return err
	}

	aw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
		{blobPath(layer.Bytes()), layer.Bytes()},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := aw.Write(f.data); err != nil {
			return err
		}
	}
	return aw.Close()
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(b []byte) string {
	return pathpkg.Join("blobs", "sha256", strings.TrimPrefix(digest(b), "sha256:"))
}

func descriptor(mediaType string, b []byte, annotations map[string]string) map[string]any {
	d := map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
	if annotations != nil {
		d["annotations"] = annotations
	}
	return d
}
