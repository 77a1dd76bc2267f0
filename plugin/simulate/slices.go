package simulate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// SpecHashAnnotation is the annotation of a simulated node's
// ResourceSlice holding the hash of the content it was written with: a
// slice is written again only when what the node publishes changes (or
// the slice was written for another Node of that name), whatever the API
// server's defaulting does to its spec.
const SpecHashAnnotation = "unicore.mcyou.cc/simulate-spec-hash"

// Why not a resourceslice controller per node: each has an informer, a
// watch, a mutation cache and nine goroutines of its own; measured at 500
// DRA nodes they held most of the simulator's heap. One watch of the
// driver's slices for all nodes, and the same publishing rules, cost a
// fraction: the pool's slices named by index, its generation bumped on
// every change, every slice owned by the Node.

// sliceName is slice i of node's pool: "<node>-gpu-<i>", the node's name
// cut and hashed when the whole would pass the API's 253 characters.
func sliceName(node, driver string, i int) string {
	kind, _, _ := strings.Cut(driver, ".")
	suffix := fmt.Sprintf("-%s-%d", kind, i)
	if len(node)+len(suffix) > 253 {
		sum := sha256.Sum256([]byte(node))
		node = node[:253-len(suffix)-9] + "-" + hex.EncodeToString(sum[:4])
	}
	return node + suffix
}

// wantSlices returns the slices of node's pool as res describes them,
// each with the hash of its content (generation aside).
func wantSlices(node, driver string, res resourceslice.DriverResources) ([]resourcev1.ResourceSliceSpec, []string, error) {
	pool, ok := res.Pools[node]
	if !ok {
		return nil, nil, nil
	}
	specs := make([]resourcev1.ResourceSliceSpec, len(pool.Slices))
	hashes := make([]string, len(pool.Slices))
	for i, s := range pool.Slices {
		name := node
		specs[i] = resourcev1.ResourceSliceSpec{Driver: driver, NodeName: &name,
			Pool:    resourcev1.ResourcePool{Name: node, ResourceSliceCount: int64(len(pool.Slices))},
			Devices: s.Devices, SharedCounters: s.SharedCounters, PerDeviceNodeSelection: s.PerDeviceNodeSelection}
		b, err := json.Marshal(specs[i])
		if err != nil {
			return nil, nil, err
		}
		sum := sha256.Sum256(b)
		hashes[i] = hex.EncodeToString(sum[:12])
	}
	return specs, hashes, nil
}

// writeSlices makes node's ResourceSlices those its simulation publishes:
// nothing when every slice is there with its hash and owned by this Node;
// else the pool's generation moves on and every slice is created or
// updated, and slices past the pool's count are deleted.
func (s *Simulator) writeSlices(ctx context.Context, node *corev1.Node, sim *node) error {
	res, err := sim.tgt.resources()
	if err != nil {
		return err
	}
	specs, hashes, err := wantSlices(node.Name, s.cfg.DriverName, res)
	if err != nil {
		return err
	}
	objs, err := s.slices.ByIndex(byNode, node.Name)
	if err != nil {
		return err
	}
	have := map[string]*resourcev1.ResourceSlice{}
	var gen int64
	for _, o := range objs {
		sl := o.(*resourcev1.ResourceSlice)
		have[sl.Name] = sl
		gen = max(gen, sl.Spec.Pool.Generation)
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr(true)}
	same := len(have) == len(specs)
	for i := range specs {
		sl := have[sliceName(node.Name, s.cfg.DriverName, i)]
		if sl == nil || sl.Annotations[SpecHashAnnotation] != hashes[i] || !slices.ContainsFunc(sl.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == node.UID }) {
			same = false
		}
	}
	if same {
		return nil
	}
	gen++
	client := s.cfg.Client.ResourceV1().ResourceSlices()
	var errs []error
	keep := map[string]bool{}
	for i, spec := range specs {
		name := sliceName(node.Name, s.cfg.DriverName, i)
		keep[name] = true
		spec.Pool.Generation = gen
		obj := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{owner},
			Annotations: map[string]string{SpecHashAnnotation: hashes[i]}}, Spec: spec}
		s.stats.sliceWrites.Add(1)
		var written *resourcev1.ResourceSlice
		if old := have[name]; old != nil {
			obj.ResourceVersion = old.ResourceVersion
			written, err = client.Update(ctx, obj, metav1.UpdateOptions{})
		} else {
			written, err = client.Create(ctx, obj, metav1.CreateOptions{})
		}
		switch {
		case err == nil:
			kept, _ := trim(written)
			s.slices.Mutation(kept)
		case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
			// Written meanwhile, by an earlier write the watch has not
			// brought yet: compared again once it has.
			s.queue.AddAfter(node.Name, time.Second)
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("ResourceSlice %s of node %q: %w", name, node.Name, err))
		}
	}
	for name := range have {
		if !keep[name] {
			s.stats.sliceWrites.Add(1)
			err := client.Delete(ctx, name, metav1.DeleteOptions{})
			switch {
			case err == nil || apierrors.IsNotFound(err):
				s.slices.OnDelete(have[name])
			default:
				errs = append(errs, fmt.Errorf("delete ResourceSlice %s of node %q: %w", name, node.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func ptr[T any](v T) *T { return &v }
