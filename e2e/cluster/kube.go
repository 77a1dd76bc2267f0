package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"sigs.k8s.io/yaml"
)

// Get returns the node's Node object.
func (n *Node) Get(ctx context.Context) (*corev1.Node, error) {
	node, err := n.c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", n.Name, err)
	}
	return node, nil
}

// NodeResource returns the Node's capacity and allocatable quantity of resource name (0 if absent).
func (n *Node) NodeResource(ctx context.Context, name corev1.ResourceName) (capacity, allocatable int64, err error) {
	node, err := n.Get(ctx)
	if err != nil {
		return 0, 0, err
	}
	capQ, allocQ := node.Status.Capacity[name], node.Status.Allocatable[name]
	return capQ.Value(), allocQ.Value(), nil
}

// WaitNodeAllocatable polls the Node (every 50 ms) until its allocatable ResourceName equals want, or
// until timeout. It returns when it saw the value.
func (n *Node) WaitNodeAllocatable(ctx context.Context, timeout time.Duration, want int64) (time.Time, error) {
	return n.WaitNodeResource(ctx, timeout, ResourceName, -1, want)
}

// WaitNodeResource polls the Node (every 50 ms) until its capacity (unless wantCapacity < 0) and
// allocatable of name equal the wanted values, or until timeout. It returns when it saw them.
func (n *Node) WaitNodeResource(ctx context.Context, timeout time.Duration, name corev1.ResourceName, wantCapacity, wantAllocatable int64) (time.Time, error) {
	var seenAt time.Time
	err := poll(ctx, timeout, 50*time.Millisecond, func() (bool, string, error) {
		capacity, alloc, err := n.NodeResource(ctx, name)
		if err != nil {
			return false, err.Error(), nil
		}
		seenAt = time.Now()
		return alloc == wantAllocatable && (wantCapacity < 0 || capacity == wantCapacity),
			fmt.Sprintf("%s capacity %d allocatable %d", name, capacity, alloc), nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("wait for node %s %s allocatable %d: %w", n.Name, name, wantAllocatable, err)
	}
	return seenAt, nil
}

// LoadPod reads a Pod manifest (YAML or JSON).
func LoadPod(path string) (*corev1.Pod, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read pod manifest: %w", err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(b, &pod); err != nil {
		return nil, fmt.Errorf("decode pod manifest %s: %w", path, err)
	}
	return &pod, nil
}

// NewPod returns a pod (no node chosen) running ShellImage with `sh -c script`, asking for gpus
// devices of ResourceName (none if 0), with host networking (there is no CNI) and a 1 s termination
// grace period.
func NewPod(name string, gpus int64, script string) *corev1.Pod {
	grace := int64(1)
	ctr := corev1.Container{
		Name:            "main",
		Image:           ShellImage,
		ImagePullPolicy: corev1.PullNever,
		Command:         []string{"sh", "-c", script},
	}
	if gpus > 0 {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		ctr.Resources = corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{ResourceName: q},
			Requests: corev1.ResourceList{ResourceName: q},
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{ctr},
		},
	}
}

// CreatePod creates pod bound to this node (spec.nodeName: the scheduler is bypassed, the kubelet
// admits or rejects it), defaulting the namespace to "default".
func (n *Node) CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pod = pod.DeepCopy()
	pod.Spec.NodeName = n.Name
	return n.c.SubmitPod(ctx, pod)
}

// SubmitPod creates pod as it is, defaulting the namespace to "default": without spec.nodeName the
// scheduler chooses its node (see WaitPodScheduled and WaitPodUnschedulable).
func (c *Cluster) SubmitPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pod = pod.DeepCopy()
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	created, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return created, nil
}

// PodScheduled returns the pod's PodScheduled condition (nil if it has none yet).
func PodScheduled(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// WaitPodScheduled waits until the pod is bound to a node (spec.nodeName set: by the scheduler, or at
// creation) and returns the pod and that node. A pod the scheduler reports unschedulable keeps it
// waiting: the scheduler retries when the cluster changes.
func (c *Cluster) WaitPodScheduled(ctx context.Context, timeout time.Duration, namespace, name string) (*corev1.Pod, *Node, error) {
	pod, err := c.WaitPod(ctx, timeout, namespace, name, func(p *corev1.Pod) (bool, error) {
		return p.Spec.NodeName != "", nil
	})
	if err != nil {
		if pod != nil {
			if cond := PodScheduled(pod); cond != nil && cond.Status == corev1.ConditionFalse {
				err = fmt.Errorf("%w (scheduler: %s: %s)", err, cond.Reason, cond.Message)
			}
		}
		return pod, nil, err
	}
	node := c.NodeNamed(pod.Spec.NodeName)
	if node == nil {
		return pod, nil, fmt.Errorf("pod %s/%s bound to %q, not a node of this cluster", namespace, name, pod.Spec.NodeName)
	}
	return pod, node, nil
}

// WaitPodUnschedulable waits until the scheduler has given up on placing the pod for now (its
// PodScheduled condition is False with reason Unschedulable) and returns that condition, whose message
// is the scheduler's reason, e.g. "0/2 nodes are available: 2 Insufficient unicore.mcyou.cc/gpu. ...".
// A pod that gets bound meanwhile is an error.
func (c *Cluster) WaitPodUnschedulable(ctx context.Context, timeout time.Duration, namespace, name string) (corev1.PodCondition, error) {
	var cond corev1.PodCondition
	_, err := c.WaitPod(ctx, timeout, namespace, name, func(p *corev1.Pod) (bool, error) {
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("%w: pod %s/%s was bound to node %s", ErrPodScheduled, namespace, name, p.Spec.NodeName)
		}
		if sc := PodScheduled(p); sc != nil && sc.Status == corev1.ConditionFalse && sc.Reason == corev1.PodReasonUnschedulable {
			cond = *sc
			return true, nil
		}
		return false, nil
	})
	return cond, err
}

// WaitPod polls the pod until cond returns true, an error, or timeout.
func (c *Cluster) WaitPod(ctx context.Context, timeout time.Duration, namespace, name string, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := poll(ctx, timeout, 100*time.Millisecond, func() (bool, string, error) {
		p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pod = p
		done, err := cond(p)
		return done, describePod(p), err
	})
	if err != nil {
		return pod, fmt.Errorf("wait for pod %s/%s: %w", namespace, name, err)
	}
	return pod, nil
}

// WaitPodPhase waits until the pod's phase is phase. A pod that ends Failed or Succeeded otherwise
// makes it return ErrPodPhase at once.
func (c *Cluster) WaitPodPhase(ctx context.Context, timeout time.Duration, namespace, name string, phase corev1.PodPhase) (*corev1.Pod, error) {
	return c.WaitPod(ctx, timeout, namespace, name, func(p *corev1.Pod) (bool, error) {
		if p.Status.Phase == phase {
			return true, nil
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("%w: %s", ErrPodPhase, describePod(p))
		}
		return false, nil
	})
}

func describePod(p *corev1.Pod) string {
	s := fmt.Sprintf("phase %s", p.Status.Phase)
	if p.Spec.NodeName != "" {
		s += " on " + p.Spec.NodeName
	} else if cond := PodScheduled(p); cond != nil && cond.Status == corev1.ConditionFalse {
		s += fmt.Sprintf(" not scheduled (%s: %s)", cond.Reason, cond.Message)
	}
	if p.Status.Reason != "" {
		s += fmt.Sprintf(" reason %s: %s", p.Status.Reason, p.Status.Message)
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf("; %s waiting %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf("; %s terminated %s exit %d", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		case cs.State.Running != nil:
			s += fmt.Sprintf("; %s running (restarts %d)", cs.Name, cs.RestartCount)
		}
	}
	return s
}

// PodLog returns the log of a container of a pod (through the API server and the kubelet, as
// `kubectl logs` does).
func (c *Cluster) PodLog(ctx context.Context, namespace, name, container string) (string, error) {
	b, err := c.Client.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of %s/%s %s: %w", namespace, name, container, err)
	}
	return string(b), nil
}

// WaitPodLog waits until the container's log contains substr and returns the log.
func (c *Cluster) WaitPodLog(ctx context.Context, timeout time.Duration, namespace, name, container, substr string) (string, error) {
	var log string
	err := poll(ctx, timeout, 100*time.Millisecond, func() (bool, string, error) {
		l, err := c.PodLog(ctx, namespace, name, container)
		if err != nil {
			return false, err.Error(), nil
		}
		log = l
		return strings.Contains(l, substr), fmt.Sprintf("log %q", l), nil
	})
	return log, err
}

// DeletePod deletes the pod (grace period 1 s) and waits until it is gone from the API server (the
// kubelet removes it once its containers are stopped). A missing pod is not an error.
func (c *Cluster) DeletePod(ctx context.Context, timeout time.Duration, namespace, name string) error {
	grace := int64(1)
	err := c.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", namespace, name, err)
	}
	return poll(ctx, timeout, 100*time.Millisecond, func() (bool, string, error) {
		p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		return false, describePod(p), nil
	})
}

// WaitDaemonSetReady waits until the DaemonSet's status says it wants a pod on exactly want nodes and
// all of them are ready and up to date, and returns its pods (one per node).
func (c *Cluster) WaitDaemonSetReady(ctx context.Context, timeout time.Duration, namespace, name string, want int) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := poll(ctx, timeout, 200*time.Millisecond, func() (bool, string, error) {
		ds, err := c.Client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		st := ds.Status
		seen := fmt.Sprintf("generation %d observed %d, desired %d, scheduled %d, ready %d, updated %d", ds.Generation,
			st.ObservedGeneration, st.DesiredNumberScheduled, st.CurrentNumberScheduled, st.NumberReady, st.UpdatedNumberScheduled)
		if st.ObservedGeneration < ds.Generation || int(st.DesiredNumberScheduled) != want || int(st.NumberReady) != want || int(st.UpdatedNumberScheduled) != want {
			return false, seen, nil
		}
		list, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
		if err != nil {
			return false, err.Error(), nil
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && metav1.IsControlledBy(&p, ds) {
				pods = append(pods, p)
			}
		}
		return len(pods) == want, fmt.Sprintf("%s; %d pods", seen, len(pods)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for daemonset %s/%s ready on %d nodes: %w", namespace, name, want, err)
	}
	return pods, nil
}

// DeleteDaemonSet deletes the DaemonSet with background propagation (as kubectl does: the garbage
// collector deletes its pods) and waits until the pods it selected are gone from the API server.
// A DaemonSet that does not exist is not an error.
func (c *Cluster) DeleteDaemonSet(ctx context.Context, timeout time.Duration, namespace, name string) error {
	ds, err := c.Client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get daemonset %s/%s: %w", namespace, name, err)
	}
	background := metav1.DeletePropagationBackground
	err = c.Client.AppsV1().DaemonSets(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete daemonset %s/%s: %w", namespace, name, err)
	}
	selector := metav1.FormatLabelSelector(ds.Spec.Selector)
	err = poll(ctx, timeout, 200*time.Millisecond, func() (bool, string, error) {
		list, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error(), nil
		}
		var left []string
		for _, p := range list.Items {
			if metav1.IsControlledBy(&p, ds) {
				left = append(left, p.Name+" ("+describePod(&p)+")")
			}
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	if err != nil {
		return fmt.Errorf("pods of deleted daemonset %s/%s: %w", namespace, name, err)
	}
	return nil
}

// ContainerDevices is what the kubelet's PodResources API reports for one container.
type ContainerDevices struct {
	Namespace, Pod, Container string
	// Devices maps a resource name to its device ids, sorted.
	Devices map[string][]string
}

// PodResources calls List on the node's kubelet's PodResources API and returns every container that
// holds devices.
func (n *Node) PodResources(ctx context.Context) ([]ContainerDevices, error) {
	conn, err := grpc.NewClient("unix://"+n.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial pod resources: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources list: %w", err)
	}
	var out []ContainerDevices
	for _, p := range resp.PodResources {
		for _, ctr := range p.Containers {
			cd := ContainerDevices{Namespace: p.Namespace, Pod: p.Name, Container: ctr.Name, Devices: map[string][]string{}}
			for _, d := range ctr.Devices {
				ids := append(cd.Devices[d.ResourceName], d.DeviceIds...)
				slices.Sort(ids)
				cd.Devices[d.ResourceName] = ids
			}
			if len(cd.Devices) > 0 {
				out = append(out, cd)
			}
		}
	}
	return out, nil
}

// ContainerDeviceIDs returns the sorted ResourceName device ids the node's PodResources API reports for
// a container (nil if none).
func (n *Node) ContainerDeviceIDs(ctx context.Context, namespace, pod, container string) ([]string, error) {
	all, err := n.PodResources(ctx)
	if err != nil {
		return nil, err
	}
	for _, cd := range all {
		if cd.Namespace == namespace && cd.Pod == pod && cd.Container == container {
			return cd.Devices[ResourceName], nil
		}
	}
	return nil, nil
}

func mkdirFor(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create dir for %s: %w", path, err)
	}
	return nil
}

// NodeAllocatableStays polls the Node for the duration d and fails as soon as its allocatable
// ResourceName differs from want.
func (n *Node) NodeAllocatableStays(ctx context.Context, d time.Duration, want int64) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		_, alloc, err := n.NodeResource(ctx, ResourceName)
		if err != nil {
			return err
		}
		if alloc != want {
			return fmt.Errorf("node %s: %s allocatable changed to %d (want %d)", n.Name, ResourceName, alloc, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// HeldDeviceIDs returns every ResourceName device id the node's PodResources API reports as held by
// some container, sorted.
func (n *Node) HeldDeviceIDs(ctx context.Context) ([]string, error) {
	all, err := n.PodResources(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, cd := range all {
		ids = append(ids, cd.Devices[ResourceName]...)
	}
	slices.Sort(ids)
	return ids, nil
}

// SetNodeLabel sets (value != "") or removes (value == "") a label of the Node.
func (n *Node) SetNodeLabel(ctx context.Context, key, value string) error {
	v := "null"
	if value != "" {
		b, _ := json.Marshal(value)
		v = string(b)
	}
	k, _ := json.Marshal(key)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%s:%s}}}`, k, v)
	if _, err := n.c.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label node %s %s=%q: %w", n.Name, key, value, err)
	}
	return nil
}

// ContainerID returns the containerd id of a pod's container as its status reports it ("" if none yet).
func ContainerID(pod *corev1.Pod, container string) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			_, id, _ := strings.Cut(cs.ContainerID, "://")
			return id
		}
	}
	return ""
}

// PodReady reports the pod's Ready condition.
func PodReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// FreePort returns a TCP port that is free on all addresses now, below the kernel's ephemeral range.
func FreePort() (int, error) {
	p, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// WaitNodeResourceStable polls the Node (every 50 ms) until its capacity and allocatable of
// ResourceName have equalled the wanted values without interruption for stable, or until timeout. It
// returns when that last uninterrupted run began. Use it where a stale value from before a change may
// still be showing (the kubelet posts node status on its own schedule).
func (n *Node) WaitNodeResourceStable(ctx context.Context, timeout, stable time.Duration, wantCapacity, wantAllocatable int64) (time.Time, error) {
	var since time.Time
	err := poll(ctx, timeout, 50*time.Millisecond, func() (bool, string, error) {
		capacity, alloc, err := n.NodeResource(ctx, ResourceName)
		if err != nil {
			return false, err.Error(), nil
		}
		if capacity != wantCapacity || alloc != wantAllocatable {
			since = time.Time{}
			return false, fmt.Sprintf("capacity %d allocatable %d", capacity, alloc), nil
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= stable, fmt.Sprintf("capacity %d allocatable %d for %s", capacity, alloc, time.Since(since).Round(time.Millisecond)), nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("wait for node %s %s capacity %d allocatable %d for %s: %w", n.Name, ResourceName, wantCapacity, wantAllocatable, stable, err)
	}
	return since, nil
}
