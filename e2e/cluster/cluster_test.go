package cluster

import (
	"archive/tar"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
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

func TestDefaultNodes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []NodeOptions
		want    []string
		wantErr string
	}{
		{"none is one node", nil, []string{DefaultNodeName}, ""},
		{"defaults by index", make([]NodeOptions, 3), []string{DefaultNodeName, DefaultNodeName + "-1", DefaultNodeName + "-2"}, ""},
		{"named and default", []NodeOptions{{Name: "gpu-a"}, {}}, []string{"gpu-a", DefaultNodeName + "-1"}, ""},
		{"duplicate", []NodeOptions{{Name: "x"}, {Name: "x"}}, nil, `"x" used twice`},
		{"bad name", []NodeOptions{{Name: "Node_A"}}, nil, `name "Node_A"`},
		{"bad label key", []NodeOptions{{Labels: map[string]string{"a b": "c"}}}, nil, `label key "a b"`},
		{"bad label value", []NodeOptions{{Labels: map[string]string{"gpu": "a b"}}}, nil, `value "a b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before []string
			for _, o := range tc.in {
				before = append(before, o.Name)
			}
			got, err := defaultNodes(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("defaultNodes(%+v) error %v, want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range got {
				names = append(names, o.Name)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("names %q, want %q", names, tc.want)
			}
			for i, o := range tc.in {
				if o.Name != before[i] {
					t.Errorf("defaultNodes changed its argument: node %d named %q, was %q", i, o.Name, before[i])
				}
			}
		})
	}
}

func TestDefaultNodes_Runtime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      Runtime
		want    Runtime
		wantErr string
	}{
		{"default is Debian's containerd", "", RuntimeContainerd, ""},
		{"containerd", RuntimeContainerd, RuntimeContainerd, ""},
		{"containerd 2", RuntimeContainerd2, RuntimeContainerd2, ""},
		{"unknown", "cri-o", "", `runtime "cri-o"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := defaultNodes([]NodeOptions{{Runtime: tc.in}})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got[0].Runtime != tc.want {
				t.Errorf("runtime %q, want %q", got[0].Runtime, tc.want)
			}
		})
	}
}

func TestServingCerts(t *testing.T) {
	dir := t.TempDir()
	ips := []net.IP{net.ParseIP("192.0.2.2"), net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP)}
	caFile, certFile, keyFile, caPEM, err := servingCerts(dir, ips, []string{"kubernetes.default.svc"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(caFile); err != nil || !bytes.Equal(b, caPEM) {
		t.Fatalf("CA file %s does not hold the returned CA (err %v)", caFile, err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM does not parse")
	}
	for _, name := range []string{"192.0.2.2", "127.0.0.1", KubernetesServiceIP, "kubernetes.default.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("serving cert for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "198.18.0.2"}); err == nil {
		t.Error("serving cert verifies for an address it was not made for")
	}
}

func TestSumMetric(t *testing.T) {
	text := `# HELP pod_resources_endpoint_requests_total Number of requests to the PodResource endpoint.
# TYPE pod_resources_endpoint_requests_total counter
pod_resources_endpoint_requests_total{server_api_version="v1"} 17
pod_resources_endpoint_requests_total{server_api_version="v1alpha1"} 2
pod_resources_endpoint_requests_list{server_api_version="v1"} 15
pod_resources_endpoint_requests_total_other 99
plain_metric 3.5
`
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
		found  bool
	}{
		{"pod_resources_endpoint_requests_total", map[string]string{"server_api_version": "v1"}, 17, true},
		{"pod_resources_endpoint_requests_total", nil, 19, true},
		{"pod_resources_endpoint_requests_list", map[string]string{"server_api_version": "v1"}, 15, true},
		{"plain_metric", nil, 3.5, true},
		{"absent", nil, 0, false},
		{"pod_resources_endpoint_requests_total", map[string]string{"server_api_version": "v2"}, 0, false},
	} {
		if got, found := sumMetric(text, tc.name, tc.labels); got != tc.want || found != tc.found {
			t.Errorf("sumMetric(%s, %v) = %v, %v; want %v, %v", tc.name, tc.labels, got, found, tc.want, tc.found)
		}
	}
}
