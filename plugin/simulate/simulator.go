package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate/scope"
)

// DefaultRetry is the default of Config.Retry: the first wait before a
// failed node is tried again (then doubling, up to a minute).
const DefaultRetry = time.Second

// Config configures a Simulator. Client, Source, Selector and StateDir are
// required.
type Config struct {
	// Client reaches the API server: Nodes (watch, label and status
	// patches), Pods and ResourceClaims (watch), ResourceSlices.
	Client kubernetes.Interface
	// Source resolves a node's profile and MIG layout labels, as the
	// plugin's does (the -config directory, -config-default, flags); the
	// Simulator calls it one call at a time.
	Source agent.Source
	// Selector picks the nodes to simulate.
	Selector scope.Selector
	// StateDir holds a state file per node (scope.StatePath), created when
	// missing; each stays after its node is gone, for its history.
	StateDir string
	// DriverName is the DRA driver the nodes with a DRA profile publish
	// as (the plugin's -dra-driver-name).
	DriverName string
	// Workers bounds the nodes reconciled at once (default
	// scope.DefaultWorkers).
	Workers int
	// Retry is the first wait before a failed node is tried again, and
	// before a node's agent is given labels it failed to apply again
	// (default DefaultRetry).
	Retry time.Duration
	// Logger receives what the Simulator and each node's agent do (the
	// latter with a "node" field); the zero Logger discards.
	Logger zerolog.Logger
}

// Simulator publishes the GPUs of the simulated nodes. Build it with New;
// Run it once.
type Simulator struct {
	cfg   Config
	log   zerolog.Logger
	src   *lockedSource
	queue workqueue.TypedRateLimitingInterface[string]

	nodes  cache.Indexer
	pods   cache.Indexer
	claims cache.Indexer       // nil when the API server has no resource.k8s.io/v1
	slices cache.MutationCache // the driver's ResourceSlices, with the ones just written; nil as claims

	mu      sync.Mutex
	sims    map[string]*node
	synced  bool
	running bool

	stats stats
}

// New returns the Simulator of cfg, or an error naming what cfg lacks.
func New(cfg Config) (*Simulator, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("simulate: no API client")
	case cfg.Source == nil:
		return nil, errors.New("simulate: no configuration source")
	case cfg.Selector.IsZero():
		return nil, errors.New("simulate: no node selector")
	case !filepath.IsAbs(cfg.StateDir):
		return nil, fmt.Errorf("simulate: state directory %q: must be an absolute path", cfg.StateDir)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = scope.DefaultWorkers
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.Retry, time.Minute)
	return &Simulator{cfg: cfg, log: cfg.Logger, src: &lockedSource{src: cfg.Source, cache: map[agent.Selection]cachedChoice{}},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: "simulate"}),
		sims:  map[string]*node{}}, nil
}

// Index names of the informers' indexers.
const (
	byNode = "node" // pods by spec.nodeName; claims by the node pools of their allocation; slices by spec.nodeName
)

// Run simulates the selected nodes until ctx ends: it watches the Nodes,
// the Pods bound to nodes and the ResourceClaims, and reconciles each
// selected node when any of them changes. It returns nil when ctx ends,
// after every node stopped; an error only when it cannot start (the state
// directory, the API server refusing the first lists).
func (s *Simulator) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("simulate: Run called twice")
	}
	s.running = true
	s.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(s.cfg.StateDir, scope.NodesDir), 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := s.cfg.Client
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trim))
	nodeInf := factory.Core().V1().Nodes().Informer()
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trim),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	podInf := podFactory.Core().V1().Pods().Informer()
	if err := podInf.AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	var claimInf, sliceInf cache.SharedIndexInformer
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trim),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.driver", s.cfg.DriverName).String()
		}))
	if s.hasDRA() {
		sliceInf = sliceFactory.Resource().V1().ResourceSlices().Informer()
		if err := sliceInf.AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
			if sl, ok := obj.(*resourcev1.ResourceSlice); ok && sl.Spec.NodeName != nil {
				return []string{*sl.Spec.NodeName}, nil
			}
			return nil, nil
		}}); err != nil {
			return err
		}
		claimInf = factory.Resource().V1().ResourceClaims().Informer()
		if err := claimInf.AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
			c, ok := obj.(*resourcev1.ResourceClaim)
			if !ok {
				return nil, nil
			}
			return claimNodes(c, s.cfg.DriverName), nil
		}}); err != nil {
			return err
		}
	} else {
		s.log.Warn().Msg("the API server serves no resource.k8s.io/v1: nodes with a DRA profile get no ResourceSlices and no claim history")
	}
	enqueueNode := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			s.queue.Add(n.Name)
		} else if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			s.queue.Add(t.Key)
		}
	}
	enqueuePod := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			s.queue.Add(p.Spec.NodeName)
		}
	}
	enqueueClaim := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if c, ok := obj.(*resourcev1.ResourceClaim); ok {
			for _, n := range claimNodes(c, s.cfg.DriverName) {
				s.queue.Add(n)
			}
		}
	}
	handlers := func(f func(any)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{AddFunc: f, DeleteFunc: f, UpdateFunc: func(old, obj any) { f(old); f(obj) }}
	}
	if _, err := nodeInf.AddEventHandler(handlers(enqueueNode)); err != nil {
		return err
	}
	if _, err := podInf.AddEventHandler(handlers(enqueuePod)); err != nil {
		return err
	}
	if claimInf != nil {
		if _, err := claimInf.AddEventHandler(handlers(enqueueClaim)); err != nil {
			return err
		}
		s.claims = claimInf.GetIndexer()
		// The slices written are seen before the watch brings them: a
		// reconcile right after a write must not write them again.
		s.slices = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), sliceInf.GetIndexer(),
			cache.MutationCacheOptions{TTL: time.Minute, Indexer: sliceInf.GetIndexer(), IncludeAdds: true, MaxCacheSize: 1 << 16})
		enqueueSlice := func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if sl, ok := obj.(*resourcev1.ResourceSlice); ok && sl.Spec.NodeName != nil {
				s.queue.Add(*sl.Spec.NodeName)
			}
		}
		sliceHandlers := handlers(enqueueSlice)
		sliceHandlers.DeleteFunc = func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if sl, ok := obj.(*resourcev1.ResourceSlice); ok {
				s.slices.OnDelete(sl) // a slice written, then deleted by someone: gone, not just unseen
			}
			enqueueSlice(obj)
		}
		if _, err := sliceInf.AddEventHandler(sliceHandlers); err != nil {
			return err
		}
	}
	s.nodes, s.pods = nodeInf.GetIndexer(), podInf.GetIndexer()
	factory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	sliceFactory.Start(ctx.Done())
	defer factory.Shutdown()
	defer podFactory.Shutdown()
	defer sliceFactory.Shutdown()
	synced := []cache.InformerSynced{nodeInf.HasSynced, podInf.HasSynced}
	if claimInf != nil {
		synced = append(synced, claimInf.HasSynced, sliceInf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		s.queue.ShutDown()
		return nil // ctx ended
	}
	s.mu.Lock()
	s.synced = true
	s.mu.Unlock()
	s.log.Info().Str("selector", s.cfg.Selector.String()).Int("nodes", len(s.nodes.ListKeys())).Str("state", s.cfg.StateDir).
		Msg("simulating the selected nodes")
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s.work(ctx) {
			}
		}()
	}
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
	s.mu.Lock()
	sims := s.sims
	s.sims = map[string]*node{}
	s.mu.Unlock()
	var errs []error
	for _, n := range sims {
		if err := n.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Error().Err(err).Msg("state files not all closed")
	}
	return nil
}

// Reload reads the profiles again (the -config directory changed, or
// SIGHUP: cause says which, as agent.CauseDirChanged and CauseSIGHUP do),
// once for all nodes, and has every node apply what its labels select
// from them; a node whose kubelet API changes is started again. Profiles
// that do not all resolve change nothing: they are logged, and the ones in
// force stay.
func (s *Simulator) Reload(ctx context.Context, cause string) {
	if err := s.src.reloadNow(); err != nil {
		s.log.Error().Err(err).Str("cause", cause).Msg(cause + ": profiles not applied: the ones in force stay")
		return
	}
	s.mu.Lock()
	sims := make([]*node, 0, len(s.sims))
	for _, n := range s.sims {
		sims = append(sims, n)
	}
	s.mu.Unlock()
	for _, n := range sims {
		n.ag.Reload(ctx, cause)
		s.queue.Add(n.name)
	}
	s.log.Info().Str("cause", cause).Int("nodes", len(sims)).Msg(cause + ": profiles read again and applied to every simulated node")
}

// hasDRA reports whether the API server serves resource.k8s.io/v1.
func (s *Simulator) hasDRA() bool {
	_, err := s.cfg.Client.Discovery().ServerResourcesForGroupVersion(resourcev1.SchemeGroupVersion.String())
	return err == nil
}

// claimNodes returns the nodes whose pools (of driver) claim's allocation
// names devices of.
func claimNodes(c *resourcev1.ResourceClaim, driver string) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == driver && !slices.Contains(out, r.Pool) {
			out = append(out, r.Pool)
		}
	}
	return out
}

// trim keeps of the cached objects only what the Simulator reads, to
// keep its memory small with thousands of pods and nodes: a pod's name,
// deletion, node, phase and its containers' names and resources; a
// claim's name and status; a node's labels, annotations and extended
// resources; a slice's metadata and pool (writeSlices compares hashes).
func trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: o.UID,
			ResourceVersion: o.ResourceVersion, DeletionTimestamp: o.DeletionTimestamp},
			Spec: corev1.PodSpec{NodeName: o.Spec.NodeName}, Status: corev1.PodStatus{Phase: o.Status.Phase}}
		keep := func(cs []corev1.Container) []corev1.Container {
			out := make([]corev1.Container, len(cs))
			for i, c := range cs {
				out[i] = corev1.Container{Name: c.Name, Resources: c.Resources}
			}
			return out
		}
		p.Spec.InitContainers, p.Spec.Containers = keep(o.Spec.InitContainers), keep(o.Spec.Containers)
		return p, nil
	case *corev1.Node:
		o.ManagedFields = nil
		o.Status = corev1.NodeStatus{Capacity: o.Status.Capacity, Allocatable: o.Status.Allocatable}
	case *resourcev1.ResourceClaim:
		o.ManagedFields, o.Annotations, o.Labels = nil, nil, nil
		o.Spec = resourcev1.ResourceClaimSpec{}
	case *resourcev1.ResourceSlice: // what writeSlices compares: the hash, the owner, the generation
		o.ManagedFields = nil
		o.Spec.Devices, o.Spec.SharedCounters = nil, nil
	}
	return obj, nil
}

// work reconciles one queued node; false when the queue is shut down.
func (s *Simulator) work(ctx context.Context) bool {
	name, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(name)
	if err := s.reconcile(ctx, name); err != nil {
		if ctx.Err() != nil {
			return true
		}
		n := s.queue.NumRequeues(name)
		ev := s.log.Warn()
		if n > 0 {
			ev = s.log.Debug() // said once; the retries go on quietly
		}
		ev.Err(err).Str("node", name).Int("retries", n).Msg("node not brought up to date; retrying")
		s.queue.AddRateLimited(name)
		return true
	}
	s.queue.Forget(name)
	return true
}

// reconcile brings node name up to date: started, restarted (a new Node
// of the same name, or another kubelet API chosen), stopped (deleted or
// no longer selected), its labels fed to its agent, its status written
// where it differs, and its history following the pods and claims.
func (s *Simulator) reconcile(ctx context.Context, name string) error {
	obj, exists, err := s.nodes.GetByKey(name)
	if err != nil {
		return err
	}
	var nodeObj *corev1.Node
	if exists {
		nodeObj, _ = obj.(*corev1.Node)
	}
	s.mu.Lock()
	sim := s.sims[name]
	s.mu.Unlock()
	selected := nodeObj != nil && s.cfg.Selector.Matches(nodeObj.Labels, nodeObj.Annotations)
	if !selected {
		if sim == nil {
			return nil
		}
		s.drop(name, sim)
		if nodeObj != nil { // still there, no longer selected: take back what was published
			return s.unpublish(ctx, nodeObj, sim)
		}
		s.log.Info().Str("node", name).Msg("node deleted: no longer simulated (its ResourceSlices go with it; its state file stays)")
		return nil
	}
	api := s.src.kubeletAPI(nodeObj.Labels)
	if sim != nil && (sim.uid != nodeObj.UID || sim.api != api) {
		why := "a new Node of the same name"
		if sim.uid == nodeObj.UID {
			why = fmt.Sprintf("its profile moved it from %s to %s", sim.api, api)
			if err := s.unpublish(ctx, nodeObj, sim); err != nil {
				return err
			}
		}
		s.log.Info().Str("node", name).Str("why", why).Msg("restarting the node's simulation")
		s.drop(name, sim)
		sim = nil
	}
	if sim == nil {
		if sim, err = s.startNode(ctx, nodeObj, api); err != nil {
			return err
		}
		s.mu.Lock()
		s.sims[name] = sim
		s.mu.Unlock()
		s.stats.started.Add(1)
	}
	sim.feed.set(nodeObj.Labels)
	var errs []error
	if err := s.writeStatus(ctx, nodeObj, sim); err != nil {
		errs = append(errs, err)
	}
	now := time.Now()
	switch sim.api {
	case agent.KubeletAPIDRA:
		if s.slices != nil {
			if err := s.writeSlices(ctx, nodeObj, sim); err != nil {
				errs = append(errs, err)
			}
		}
		if s.claims != nil {
			objs, err := s.claims.ByIndex(byNode, name)
			if err != nil {
				return err
			}
			claims := make([]*resourcev1.ResourceClaim, 0, len(objs))
			for _, o := range objs {
				claims = append(claims, o.(*resourcev1.ResourceClaim))
			}
			if err := sim.syncClaims(claims, s.cfg.DriverName, now); err != nil {
				errs = append(errs, err)
			}
		}
	default:
		objs, err := s.pods.ByIndex(byNode, name)
		if err != nil {
			return err
		}
		pods := make([]*corev1.Pod, 0, len(objs))
		for _, o := range objs {
			pods = append(pods, o.(*corev1.Pod))
		}
		if err := sim.syncAllocations(pods, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// drop stops sim and forgets it.
func (s *Simulator) drop(name string, sim *node) {
	s.mu.Lock()
	if s.sims[name] == sim {
		delete(s.sims, name)
	}
	s.mu.Unlock()
	if err := sim.stop(); err != nil {
		s.log.Error().Err(err).Str("node", name).Msg("node's state file not closed cleanly")
	}
}

// writeStatus patches the node's status to the extended resources its
// plugin would have the kubelet report, when they differ: one merge patch
// of the status subresource, naming only those resources (KWOK keeps
// them: it patches only what it owns).
func (s *Simulator) writeStatus(ctx context.Context, obj *corev1.Node, sim *node) error {
	capacity, allocatable, remove := sim.tgt.desiredStatus(obj)
	if capacity == nil || !statusDiffers(obj, capacity, allocatable, remove) {
		return nil
	}
	if err := s.patchStatus(ctx, obj.Name, capacity, allocatable, remove); err != nil {
		return err
	}
	sim.tgt.markPublished(capacity)
	return nil
}

// patchStatus sends the status patch: the counts to set, the names to
// remove (null).
func (s *Simulator) patchStatus(ctx context.Context, name string, capacity, allocatable map[string]int64, remove []string) error {
	c, a := map[string]any{}, map[string]any{}
	for k, v := range capacity {
		c[k] = fmt.Sprint(v)
	}
	for k, v := range allocatable {
		a[k] = fmt.Sprint(v)
	}
	for _, k := range remove {
		c[k], a[k] = nil, nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": c, "allocatable": a}})
	if err != nil {
		return err
	}
	s.stats.statusPatches.Add(1)
	if _, err := s.cfg.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile: the watch says so next
		}
		return fmt.Errorf("patch status of node %q: %w", name, err)
	}
	return nil
}

// unpublish takes back what sim published, for a node that stays but is
// no longer simulated that way: the extended resources of the device
// plugin API (those in its resource's domain), or the ResourceSlices of
// DRA, and the GPU labels.
func (s *Simulator) unpublish(ctx context.Context, obj *corev1.Node, sim *node) error {
	var errs []error
	switch sim.api {
	case agent.KubeletAPIDRA:
		if s.slices == nil {
			break
		}
		objs, err := s.slices.ByIndex(byNode, obj.Name)
		if err != nil {
			return err
		}
		for _, o := range objs {
			sl := o.(*resourcev1.ResourceSlice)
			s.stats.sliceWrites.Add(1)
			err := s.cfg.Client.ResourceV1().ResourceSlices().Delete(ctx, sl.Name, metav1.DeleteOptions{})
			switch {
			case err == nil || apierrors.IsNotFound(err):
				s.slices.OnDelete(sl)
			default:
				errs = append(errs, fmt.Errorf("delete ResourceSlice %s of node %q: %w", sl.Name, obj.Name, err))
			}
		}
	default:
		set, _ := sim.tgt.current()
		domain := resourceDomain(set.Resource())
		var remove []string
		for name := range obj.Status.Capacity {
			if domain != "" && resourceDomain(string(name)) == domain {
				remove = append(remove, string(name))
			}
		}
		if len(remove) > 0 {
			if err := s.patchStatus(ctx, obj.Name, nil, nil, remove); err != nil {
				errs = append(errs, err)
			}
		}
	}
	var remove []string
	for k := range obj.Labels {
		if kube.Owned(k) {
			remove = append(remove, k)
		}
	}
	if len(remove) > 0 {
		api := &nodeAPI{client: s.cfg.Client}
		if err := api.PatchNodeLabels(ctx, obj.Name, nil, remove); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
