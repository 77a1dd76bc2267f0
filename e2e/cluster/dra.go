package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Dynamic Resource Allocation (resource.k8s.io/v1) helpers: the objects a DRA scenario applies, the
// ResourceSlices a driver publishes, the kubelet's plugin registrations. The cluster serves DRA with
// the defaults of its Kubernetes version (see Options.FeatureGates for the gates a version has off),
// and its kube-controller-manager runs the resourceclaim controller, which creates a pod's claims from
// its ResourceClaimTemplates and deletes them after the pod.

// DRARegisteredLog is the message the plugin logs (JSON) each time the kubelet registers it as a DRA
// driver (NotifyRegistrationStatus, registered).
const DRARegisteredLog = "registered with the kubelet"

// ClaimName is the name NewClaimPod gives the pod's claim (pod.spec.resourceClaims[].name) and the
// request NewResourceClaim and NewResourceClaimTemplate give their one device request.
const ClaimName = "gpus"

// NewDeviceClass returns a DeviceClass called name that selects every device of driver (CEL
// `device.driver == "<driver>"`).
func NewDeviceClass(name, driver string) *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.DeviceClassSpec{
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver == " + strconv.Quote(driver)}}},
		},
	}
}

// claimSpec is a claim of count devices of class, in one request named ClaimName.
func claimSpec(class string, count int64) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{
		Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{
				Name: ClaimName,
				Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: class,
					AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
					Count:           count,
				},
			}},
		},
	}
}

// NewResourceClaim returns a ResourceClaim namespace/name of count devices of DeviceClass class, in one
// request named ClaimName.
func NewResourceClaim(namespace, name, class string, count int64) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       claimSpec(class, count),
	}
}

// NewResourceClaimTemplate returns a ResourceClaimTemplate namespace/name whose claims ask for count
// devices of DeviceClass class, in one request named ClaimName.
func NewResourceClaimTemplate(namespace, name, class string, count int64) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: claimSpec(class, count)},
	}
}

// PodClaim is the source of a pod's claim: exactly one of an existing ResourceClaim's name or a
// ResourceClaimTemplate's name (the resourceclaim controller then creates a claim for the pod).
type PodClaim struct {
	ResourceClaimName         string
	ResourceClaimTemplateName string
}

// NewClaimPod is NewPod (no extended resource) whose one container uses one claim named ClaimName,
// from claim. Submit it with Node.SchedulePod or Cluster.SubmitPod: the scheduler allocates the claim,
// a pod bound with spec.nodeName (Node.CreatePod) would bypass that.
func NewClaimPod(name string, claim PodClaim, script string) *corev1.Pod {
	pod := NewPod(name, 0, script)
	pc := corev1.PodResourceClaim{Name: ClaimName}
	if claim.ResourceClaimName != "" {
		pc.ResourceClaimName = &claim.ResourceClaimName
	}
	if claim.ResourceClaimTemplateName != "" {
		pc.ResourceClaimTemplateName = &claim.ResourceClaimTemplateName
	}
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{pc}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: ClaimName}}
	return pod
}

// SchedulePod submits pod for the scheduler with a nodeSelector for this node
// (kubernetes.io/hostname), defaulting the namespace to "default": unlike CreatePod, the scheduler
// allocates the pod's ResourceClaims.
func (n *Node) SchedulePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pod = pod.DeepCopy()
	if pod.Spec.NodeSelector == nil {
		pod.Spec.NodeSelector = map[string]string{}
	}
	pod.Spec.NodeSelector[corev1.LabelHostname] = n.Name
	return n.c.SubmitPod(ctx, pod)
}

// strictDecoder decodes the built-in kinds of client-go's scheme (resource.k8s.io/v1 among them),
// failing on unknown and duplicate fields.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// DecodeObjects decodes a YAML (or JSON) stream of Kubernetes objects, documents separated by `---`,
// into typed objects of client-go's scheme; empty documents are skipped. Unknown kinds and unknown or
// duplicate fields are errors naming the document.
func DecodeObjects(r io.Reader) ([]runtime.Object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var objs []runtime.Object
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := strictDecoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		objs = append(objs, obj)
	}
}

// LoadObjects is DecodeObjects of the file at path.
func LoadObjects(path string) ([]runtime.Object, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load objects: %w", err)
	}
	defer f.Close()
	objs, err := DecodeObjects(f)
	if err != nil {
		return nil, fmt.Errorf("load objects %s: %w", path, err)
	}
	return objs, nil
}

// stripComments drops the YAML comment lines of doc (a document of comments only is empty).
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// Apply creates each object, or updates it where it exists (with its current resourceVersion; a
// ResourceClaim's spec is immutable, so changing one is the API server's error). It supports the
// kinds DRA scenarios apply: DeviceClass, ResourceClaim, ResourceClaimTemplate (namespace defaulted to
// "default") and Pod (created only: a Pod that exists is an error). Each object is updated in place
// with what the API server returned.
func (c *Cluster) Apply(ctx context.Context, objs ...runtime.Object) error {
	for _, obj := range objs {
		if err := c.apply(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) apply(ctx context.Context, obj runtime.Object) error {
	r := c.Client.ResourceV1()
	switch o := obj.(type) {
	case *resourcev1.DeviceClass:
		return applyOne(ctx, "DeviceClass", o, r.DeviceClasses().Create, r.DeviceClasses().Get, r.DeviceClasses().Update)
	case *resourcev1.ResourceClaim:
		defaultNamespace(&o.ObjectMeta)
		api := r.ResourceClaims(o.Namespace)
		return applyOne(ctx, "ResourceClaim", o, api.Create, api.Get, api.Update)
	case *resourcev1.ResourceClaimTemplate:
		defaultNamespace(&o.ObjectMeta)
		api := r.ResourceClaimTemplates(o.Namespace)
		return applyOne(ctx, "ResourceClaimTemplate", o, api.Create, api.Get, api.Update)
	case *corev1.Pod:
		created, err := c.SubmitPod(ctx, o)
		if err != nil {
			return err
		}
		*o = *created
		return nil
	default:
		return fmt.Errorf("apply %T: %w", obj, ErrUnsupportedKind)
	}
}

func defaultNamespace(m *metav1.ObjectMeta) {
	if m.Namespace == "" {
		m.Namespace = metav1.NamespaceDefault
	}
}

// applyOne creates o, or where it exists updates it with the existing object's resourceVersion, and
// copies the result into o.
func applyOne[T interface {
	*E
	metav1.Object
}, E any](ctx context.Context, kind string, o T,
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
) error {
	name := o.GetName()
	if ns := o.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	got, err := create(ctx, o, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur T
		if cur, err = get(ctx, o.GetName(), metav1.GetOptions{}); err != nil {
			return fmt.Errorf("apply %s %s: get: %w", kind, name, err)
		}
		o.SetResourceVersion(cur.GetResourceVersion())
		got, err = update(ctx, o, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("apply %s %s: %w", kind, name, err)
	}
	*o = *got
	return nil
}

// Delete deletes each object (the kinds Apply supports) and, with timeout > 0, waits until it is gone
// (a Pod's containers stopped, a claim's finalizer removed by the controller); objects already gone
// are fine.
func (c *Cluster) Delete(ctx context.Context, timeout time.Duration, objs ...runtime.Object) error {
	var errs []error
	for _, obj := range objs {
		kind, get, del, err := c.deleter(obj)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m, _ := obj.(metav1.Object)
		name := m.GetName()
		if ns := m.GetNamespace(); ns != "" {
			name = ns + "/" + name
		}
		if err := del(ctx); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", kind, name, err))
			continue
		}
		if timeout <= 0 {
			continue
		}
		err = poll(ctx, timeout, 50*time.Millisecond, func() (bool, string, error) {
			err := get(ctx)
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			if err != nil {
				return false, err.Error(), nil
			}
			return false, "still there", nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", kind, name, err))
		}
	}
	return errors.Join(errs...)
}

// deleter returns the kind of obj and functions that get and delete it.
func (c *Cluster) deleter(obj runtime.Object) (kind string, get, del func(context.Context) error, err error) {
	r := c.Client.ResourceV1()
	switch o := obj.(type) {
	case *resourcev1.DeviceClass:
		api := r.DeviceClasses()
		return "DeviceClass",
			func(ctx context.Context) error { _, err := api.Get(ctx, o.Name, metav1.GetOptions{}); return err },
			func(ctx context.Context) error { return api.Delete(ctx, o.Name, metav1.DeleteOptions{}) }, nil
	case *resourcev1.ResourceClaim:
		api := r.ResourceClaims(namespaceOr(o.Namespace))
		return "ResourceClaim",
			func(ctx context.Context) error { _, err := api.Get(ctx, o.Name, metav1.GetOptions{}); return err },
			func(ctx context.Context) error { return api.Delete(ctx, o.Name, metav1.DeleteOptions{}) }, nil
	case *resourcev1.ResourceClaimTemplate:
		api := r.ResourceClaimTemplates(namespaceOr(o.Namespace))
		return "ResourceClaimTemplate",
			func(ctx context.Context) error { _, err := api.Get(ctx, o.Name, metav1.GetOptions{}); return err },
			func(ctx context.Context) error { return api.Delete(ctx, o.Name, metav1.DeleteOptions{}) }, nil
	case *corev1.Pod:
		api := c.Client.CoreV1().Pods(namespaceOr(o.Namespace))
		return "Pod",
			func(ctx context.Context) error { _, err := api.Get(ctx, o.Name, metav1.GetOptions{}); return err },
			func(ctx context.Context) error { return api.Delete(ctx, o.Name, metav1.DeleteOptions{}) }, nil
	default:
		return "", nil, nil, fmt.Errorf("delete %T: %w", obj, ErrUnsupportedKind)
	}
}

func namespaceOr(ns string) string {
	if ns == "" {
		return metav1.NamespaceDefault
	}
	return ns
}

// ResourceSlices returns the ResourceSlices of driver for node nodeName (field selectors spec.driver
// and spec.nodeName), sorted by name.
func (c *Cluster) ResourceSlices(ctx context.Context, driver, nodeName string) ([]resourcev1.ResourceSlice, error) {
	sel := fields.Set{resourcev1.ResourceSliceSelectorDriver: driver, resourcev1.ResourceSliceSelectorNodeName: nodeName}.AsSelector().String()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices (%s): %w", sel, err)
	}
	items := list.Items
	slices.SortFunc(items, func(a, b resourcev1.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
	return items, nil
}

// Pool is one resource pool as a driver published it: the slices of its newest generation.
type Pool struct {
	// Name is the pool's name (spec.pool.name).
	Name string
	// Generation is the newest generation among its slices.
	Generation int64
	// Slices are the pool's slices of that generation, sorted by name.
	Slices []resourcev1.ResourceSlice
	// Devices are the devices of those slices, in slice order.
	Devices []resourcev1.Device
}

// DeviceNames returns the names of the pool's devices, in order.
func (p Pool) DeviceNames() []string {
	names := make([]string, len(p.Devices))
	for i, d := range p.Devices {
		names[i] = d.Name
	}
	return names
}

// CompletePool returns the pool called name among slices as a consumer of the API reads it: the slices
// of its newest generation, which must number that generation's resourceSliceCount; otherwise (a
// driver in the middle of publishing) ErrPoolIncomplete. No slice of the pool at all is ErrNoPool.
func CompletePool(slices []resourcev1.ResourceSlice, name string) (Pool, error) {
	p := Pool{Name: name, Generation: -1}
	var want int64
	for _, s := range slices {
		if s.Spec.Pool.Name != name {
			continue
		}
		switch g := s.Spec.Pool.Generation; {
		case g > p.Generation:
			p.Generation, want, p.Slices = g, s.Spec.Pool.ResourceSliceCount, []resourcev1.ResourceSlice{s}
		case g == p.Generation:
			p.Slices = append(p.Slices, s)
		}
	}
	if p.Generation < 0 {
		return Pool{}, fmt.Errorf("pool %q: %w", name, ErrNoPool)
	}
	if int64(len(p.Slices)) != want {
		return Pool{}, fmt.Errorf("pool %q generation %d: %d of %d slices: %w", name, p.Generation, len(p.Slices), want, ErrPoolIncomplete)
	}
	slicesSortByName(p.Slices)
	for _, s := range p.Slices {
		p.Devices = append(p.Devices, s.Spec.Devices...)
	}
	return p, nil
}

func slicesSortByName(s []resourcev1.ResourceSlice) {
	slices.SortFunc(s, func(a, b resourcev1.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
}

// ResourcePool returns the complete pool of driver for this node: by the plugin's convention the pool
// is named after the node (see CompletePool for the errors).
func (n *Node) ResourcePool(ctx context.Context, driver string) (Pool, error) {
	s, err := n.c.ResourceSlices(ctx, driver, n.Name)
	if err != nil {
		return Pool{}, err
	}
	return CompletePool(s, n.Name)
}

// WaitResourcePool waits until driver's pool for this node is complete with devices devices and
// returns it.
func (n *Node) WaitResourcePool(ctx context.Context, timeout time.Duration, driver string, devices int) (Pool, error) {
	var pool Pool
	err := poll(ctx, timeout, 50*time.Millisecond, func() (bool, string, error) {
		p, err := n.ResourcePool(ctx, driver)
		if err != nil {
			return false, err.Error(), nil
		}
		pool = p
		return len(p.Devices) == devices, fmt.Sprintf("pool %q generation %d: %d devices in %d slices", p.Name, p.Generation, len(p.Devices), len(p.Slices)), nil
	})
	if err != nil {
		return Pool{}, fmt.Errorf("wait for %s's pool of %d devices on node %s: %w", driver, devices, n.Name, err)
	}
	return pool, nil
}

// RegisteredPluginSockets returns the registration sockets of the plugins (DRA drivers, CSI drivers)
// the node's kubelet has registered, from its plugin_manager_total_plugins metric (state
// actual_state_of_world), sorted. A socket is the path the kubelet's plugin watcher saw, under
// PluginsRegistryDir.
func (n *Node) RegisteredPluginSockets(ctx context.Context) ([]string, error) {
	samples, err := n.KubeletMetricSamples(ctx, "plugin_manager_total_plugins")
	if err != nil {
		return nil, err
	}
	var socks []string
	for _, s := range samples {
		if s.Labels["state"] == "actual_state_of_world" && s.Value > 0 {
			socks = append(socks, s.Labels["socket_path"])
		}
	}
	slices.Sort(socks)
	return slices.Compact(socks), nil
}

// WaitDRAPluginRegistered waits until the node's kubelet has registered the DRA plugin p (its
// registration socket is among RegisteredPluginSockets).
func (c *Cluster) WaitDRAPluginRegistered(ctx context.Context, p *Plugin, timeout time.Duration) error {
	return c.waitRegistration(ctx, p, timeout, true)
}

// WaitDRAPluginUnregistered waits until the node's kubelet no longer lists the DRA plugin p as
// registered (after the plugin stopped and its registration socket went away).
func (c *Cluster) WaitDRAPluginUnregistered(ctx context.Context, p *Plugin, timeout time.Duration) error {
	return c.waitRegistration(ctx, p, timeout, false)
}

func (c *Cluster) waitRegistration(ctx context.Context, p *Plugin, timeout time.Duration, want bool) error {
	sock := p.RegistrationSocket()
	if sock == "" {
		return fmt.Errorf("plugin %s: not a DRA plugin", p.LogPath)
	}
	err := poll(ctx, timeout, 50*time.Millisecond, func() (bool, string, error) {
		if want && p.Exited() {
			return false, "", fmt.Errorf("plugin exited (%v); last log lines:\n%s", p.ExitErr(), p.Tail(10))
		}
		socks, err := p.Node.RegisteredPluginSockets(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return slices.Contains(socks, sock) == want, fmt.Sprintf("registered %v", socks), nil
	})
	if err != nil {
		verb := "register"
		if !want {
			verb = "unregister"
		}
		return fmt.Errorf("wait for node %s's kubelet to %s %s (plugin log %s): %w", p.Node.Name, verb, sock, p.LogPath, err)
	}
	return nil
}

// waitDRAPluginReady is WaitPluginReady of a DRA plugin.
func (c *Cluster) waitDRAPluginReady(ctx context.Context, p *Plugin, timeout time.Duration, devices int64) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	if err := c.WaitDRAPluginRegistered(ctx, p, timeout); err != nil {
		return time.Time{}, err
	}
	// The kubelet's metric names the registration socket, whose path a restarted driver reuses: it
	// still lists a killed driver until its reconciler notices. The driver's own log says when the
	// kubelet registered this process.
	if _, err := p.WaitLog(ctx, time.Until(deadline), DRARegisteredLog, 1); err != nil {
		return time.Time{}, fmt.Errorf("wait for node %s's kubelet to register the DRA plugin process (log %s): %w", p.Node.Name, p.LogPath, err)
	}
	var seenAt time.Time
	err := poll(ctx, time.Until(deadline), 50*time.Millisecond, func() (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("plugin exited (%v); last log lines:\n%s", p.ExitErr(), p.Tail(10))
		}
		pool, err := p.Node.ResourcePool(ctx, p.DriverName)
		if err != nil {
			return false, err.Error(), nil
		}
		seenAt = time.Now()
		return int64(len(pool.Devices)) == devices, fmt.Sprintf("pool %q: %d devices", pool.Name, len(pool.Devices)), nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("wait for the DRA plugin's %d devices on node %s (plugin log %s): %w", devices, p.Node.Name, p.LogPath, err)
	}
	return seenAt, nil
}

// PodClaimName returns the name of the ResourceClaim the pod's claim podClaim refers to: the
// ResourceClaim it names, or the one the resourceclaim controller generated from its template
// (pod.status.resourceClaimStatuses); "" while not generated yet.
func PodClaimName(pod *corev1.Pod, podClaim string) string {
	for _, c := range pod.Spec.ResourceClaims {
		if c.Name == podClaim && c.ResourceClaimName != nil {
			return *c.ResourceClaimName
		}
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == podClaim && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}

// WaitPodClaim waits until the pod namespace/name's claim podClaim exists (for a template, once the
// resourceclaim controller created it and named it in the pod's status) and cond (nil: none) holds for
// it, and returns the claim.
func (c *Cluster) WaitPodClaim(ctx context.Context, timeout time.Duration, namespace, name, podClaim string, cond func(*resourcev1.ResourceClaim) (bool, string)) (*resourcev1.ResourceClaim, error) {
	var claim *resourcev1.ResourceClaim
	err := poll(ctx, timeout, 50*time.Millisecond, func() (bool, string, error) {
		pod, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		claimName := PodClaimName(pod, podClaim)
		if claimName == "" {
			return false, "no claim named in the pod's status", nil
		}
		claim, err = c.Client.ResourceV1().ResourceClaims(namespace).Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if cond == nil {
			return true, "", nil
		}
		ok, seen := cond(claim)
		return ok, seen, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for the claim %s of pod %s/%s: %w", podClaim, namespace, name, err)
	}
	return claim, nil
}

// ClaimAllocated is a WaitPodClaim condition: the claim has an allocation.
func ClaimAllocated(claim *resourcev1.ResourceClaim) (bool, string) {
	if claim.Status.Allocation == nil {
		return false, fmt.Sprintf("claim %s not allocated", claim.Name)
	}
	return true, ""
}

// AllocatedDevices returns the names of the devices allocated to the claim (its allocation's results,
// in their order); nil if it is not allocated.
func AllocatedDevices(claim *resourcev1.ResourceClaim) []string {
	if claim.Status.Allocation == nil {
		return nil
	}
	var names []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		names = append(names, r.Device)
	}
	return names
}
