package cluster

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPluginArgs(t *testing.T) {
	c := &Cluster{Dir: "/tmp/vgpu-e2e-x", Kubeconfig: "/tmp/vgpu-e2e-x/kubeconfig"}
	n := newNode(c, 1, NodeOptions{Name: "node-b"})
	state := "/tmp/vgpu-e2e-x/plugin-3/state.db"
	root := "/tmp/vgpu-e2e-x/node-1/kubelet"
	common := []string{
		"-state=" + state,
		"-admin-socket=/tmp/vgpu-e2e-x/plugin-3/admin.sock",
		"-pod-resources-socket=" + root + "/pod-resources/kubelet.sock",
		"-log-format=json",
		"-log-level=info",
	}
	devicePlugin := []string{
		"-device-plugin-path=/tmp/vgpu-e2e-x/node-1/device-plugins",
		"-socket-name=" + PluginSocket,
		"-resource-name=" + ResourceName,
	}
	dra := []string{
		"-kubelet-api=dra",
		"-node-name=node-b",
		"-kubeconfig=/tmp/vgpu-e2e-x/kubeconfig",
		"-kubelet-registry-dir=" + root + "/plugins_registry",
		"-kubelet-plugins-dir=" + root + "/plugins",
		"-cdi-spec-dir=/tmp/vgpu-e2e-x/node-1/cdi",
	}
	cat := func(parts ...[]string) []string {
		return slices.Concat(append([][]string{{"/bin/plugin"}}, parts...)...)
	}
	for _, tc := range []struct {
		name       string
		opts       PluginOptions
		want       []string
		wantAPI    KubeletAPI
		wantDriver string
		wantErr    string
	}{
		{name: "device plugin default", opts: PluginOptions{}, want: cat(devicePlugin, common, []string{"-devices=4"}), wantAPI: KubeletAPIDevicePlugin},
		{name: "device plugin named", opts: PluginOptions{KubeletAPI: KubeletAPIDevicePlugin, Topology: "dgx-a100"},
			want: cat([]string{"-kubelet-api=device-plugin"}, devicePlugin, common, []string{"-topology=dgx-a100"}), wantAPI: KubeletAPIDevicePlugin},
		{name: "dra", opts: PluginOptions{KubeletAPI: KubeletAPIDRA, Devices: 8, Args: []string{"-label-node"}},
			want: cat(dra, common, []string{"-devices=8", "-label-node"}), wantAPI: KubeletAPIDRA, wantDriver: DRADriverName},
		{name: "dra driver name", opts: PluginOptions{KubeletAPI: KubeletAPIDRA, DriverName: "gpu.example.com", Devices: -1},
			want: cat(dra, []string{"-dra-driver-name=gpu.example.com"}, common), wantAPI: KubeletAPIDRA, wantDriver: "gpu.example.com"},
		{name: "driver name without dra", opts: PluginOptions{DriverName: "gpu.example.com"}, wantErr: "only with kubelet API"},
		{name: "unknown api", opts: PluginOptions{KubeletAPI: "csi"}, wantErr: `kubelet API "csi"`},
		{name: "no binary", opts: PluginOptions{Binary: "-"}, wantErr: "no binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.StatePath = state
			switch opts.Binary {
			case "":
				opts.Binary = "/bin/plugin"
			case "-":
				opts.Binary = ""
			}
			argv, api, driver, err := n.pluginArgs(opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("pluginArgs: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(argv, tc.want) || api != tc.wantAPI || driver != tc.wantDriver {
				t.Errorf("pluginArgs = %q, %q, %q\nwant %q, %q, %q", argv, api, driver, tc.want, tc.wantAPI, tc.wantDriver)
			}
		})
	}
	p := &Plugin{Node: n, KubeletAPI: KubeletAPIDRA, DriverName: DRADriverName}
	if got, want := p.RegistrationSocket(), filepath.Join(root, "plugins_registry", DRADriverName+"-reg.sock"); got != want {
		t.Errorf("RegistrationSocket = %s, want %s", got, want)
	}
	if got := (&Plugin{Node: n, KubeletAPI: KubeletAPIDevicePlugin}).RegistrationSocket(); got != "" {
		t.Errorf("device plugin's RegistrationSocket = %q, want empty", got)
	}
}

func slice(name, pool string, gen, count int64, devices ...string) resourcev1.ResourceSlice {
	s := resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourcev1.ResourceSliceSpec{Driver: DRADriverName, Pool: resourcev1.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: count}},
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d})
	}
	return s
}

func TestCompletePool(t *testing.T) {
	for _, tc := range []struct {
		name        string
		slices      []resourcev1.ResourceSlice
		wantDevices []string
		wantGen     int64
		wantErr     error
	}{
		{"one slice", []resourcev1.ResourceSlice{slice("a", "n1", 1, 1, "fake-0", "fake-1")}, []string{"fake-0", "fake-1"}, 1, nil},
		{"two slices, sorted by name", []resourcev1.ResourceSlice{slice("b", "n1", 2, 2, "fake-128"), slice("a", "n1", 2, 2, "fake-0")}, []string{"fake-0", "fake-128"}, 2, nil},
		{"older generation ignored", []resourcev1.ResourceSlice{slice("old", "n1", 1, 1, "fake-9"), slice("new", "n1", 2, 1, "fake-0")}, []string{"fake-0"}, 2, nil},
		{"other pool ignored", []resourcev1.ResourceSlice{slice("x", "n2", 5, 1, "fake-7"), slice("a", "n1", 1, 1, "fake-0")}, []string{"fake-0"}, 1, nil},
		{"publishing: 1 of 2", []resourcev1.ResourceSlice{slice("a", "n1", 3, 2, "fake-0")}, nil, 0, ErrPoolIncomplete},
		{"newer generation half there", []resourcev1.ResourceSlice{slice("a", "n1", 1, 1, "fake-0"), slice("b", "n1", 2, 2, "fake-0")}, nil, 0, ErrPoolIncomplete},
		{"no slice", nil, nil, 0, ErrNoPool},
		{"only other pools", []resourcev1.ResourceSlice{slice("x", "n2", 1, 1)}, nil, 0, ErrNoPool},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := CompletePool(tc.slices, "n1")
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("CompletePool: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.DeviceNames(), tc.wantDevices) || p.Generation != tc.wantGen || p.Name != "n1" {
				t.Errorf("CompletePool = %s gen %d %v, want gen %d %v", p.Name, p.Generation, p.DeviceNames(), tc.wantGen, tc.wantDevices)
			}
		})
	}
}

func TestDecodeObjects(t *testing.T) {
	const good = `# the shipped class
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.unicore.mcyou.cc
spec:
  selectors:
  - cel:
      expression: device.driver == "gpu.unicore.mcyou.cc"
  extendedResourceName: unicore.mcyou.cc/gpu
---
# comments only
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: two-gpus
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.unicore.mcyou.cc
          count: 2
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: pair, namespace: team-a}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: gpu.unicore.mcyou.cc, count: 2}
    constraints:
    - matchAttribute: gpu.unicore.mcyou.cc/nvlinkDomain
`
	objs, err := DecodeObjects(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 {
		t.Fatalf("decoded %d objects, want 3", len(objs))
	}
	class, ok := objs[0].(*resourcev1.DeviceClass)
	if !ok || class.Name != "gpu.unicore.mcyou.cc" || class.Spec.ExtendedResourceName == nil || *class.Spec.ExtendedResourceName != "unicore.mcyou.cc/gpu" ||
		class.Spec.Selectors[0].CEL.Expression != `device.driver == "gpu.unicore.mcyou.cc"` {
		t.Errorf("object 1: %#v", objs[0])
	}
	if tmpl, ok := objs[1].(*resourcev1.ResourceClaimTemplate); !ok || tmpl.Spec.Spec.Devices.Requests[0].Exactly.Count != 2 {
		t.Errorf("object 2: %#v", objs[1])
	}
	claim, ok := objs[2].(*resourcev1.ResourceClaim)
	if !ok || claim.Namespace != "team-a" || *claim.Spec.Devices.Constraints[0].MatchAttribute != "gpu.unicore.mcyou.cc/nvlinkDomain" {
		t.Errorf("object 3: %#v", objs[2])
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: x}\nspec: {selector: []}\n", `unknown field "spec.selector"`},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: x}\n", "document 1"},
		{"second document bad", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: [\n", "document 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeObjects(strings.NewReader(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeObjects: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestNewClaimPod(t *testing.T) {
	tmpl := NewClaimPod("p", PodClaim{ResourceClaimTemplateName: "two-gpus"}, "true")
	if rc := tmpl.Spec.ResourceClaims; len(rc) != 1 || rc[0].Name != ClaimName || rc[0].ResourceClaimTemplateName == nil || *rc[0].ResourceClaimTemplateName != "two-gpus" || rc[0].ResourceClaimName != nil {
		t.Errorf("template pod's claims: %+v", rc)
	}
	if c := tmpl.Spec.Containers[0].Resources; len(c.Claims) != 1 || c.Claims[0].Name != ClaimName || len(c.Limits) != 0 {
		t.Errorf("container resources: %+v", c)
	}
	if got := PodClaimName(tmpl, ClaimName); got != "" {
		t.Errorf("PodClaimName before the controller: %q", got)
	}
	generated := "p-gpus-x7k2q"
	tmpl.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: ClaimName, ResourceClaimName: &generated}}
	if got := PodClaimName(tmpl, ClaimName); got != generated {
		t.Errorf("PodClaimName = %q, want %q", got, generated)
	}
	named := NewClaimPod("q", PodClaim{ResourceClaimName: "shared"}, "true")
	if got := PodClaimName(named, ClaimName); got != "shared" {
		t.Errorf("PodClaimName of a named claim = %q", got)
	}
	if got := PodClaimName(named, "other"); got != "" {
		t.Errorf("PodClaimName of an unknown pod claim = %q", got)
	}
	claim := NewResourceClaim("default", "shared", "cls", 3)
	if r := claim.Spec.Devices.Requests; len(r) != 1 || r[0].Name != ClaimName || r[0].Exactly.DeviceClassName != "cls" || r[0].Exactly.Count != 3 || r[0].Exactly.AllocationMode != resourcev1.DeviceAllocationModeExactCount {
		t.Errorf("claim requests: %+v", r)
	}
	if got := AllocatedDevices(claim); got != nil {
		t.Errorf("AllocatedDevices of an unallocated claim: %v", got)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{Device: "fake-3"}, {Device: "fake-1"}}}}
	if got := AllocatedDevices(claim); !slices.Equal(got, []string{"fake-3", "fake-1"}) {
		t.Errorf("AllocatedDevices = %v", got)
	}
}
