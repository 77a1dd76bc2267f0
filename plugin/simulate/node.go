package simulate

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/admin"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/faults"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/simulate/scope"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// node is one simulated node: its agent, state file, fault plan and
// target, running until stop.
type node struct {
	name string
	uid  types.UID
	api  agent.KubeletAPI
	st   *store.Store
	ag   *agent.Agent
	tgt  *target
	feed *labelFeed
	adm  http.Handler
	log  zerolog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup

	// warned remembers the pods whose allocation could not be recorded,
	// so that it is logged once.
	warned map[string]bool
}

// startNode opens n's state file and starts its agent under kubelet API
// api. The node's labels select its profile, as a real node's plugin
// reads them.
func (s *Simulator) startNode(parent context.Context, obj *corev1.Node, api agent.KubeletAPI) (*node, error) {
	name := obj.Name
	log := s.log.With().Str("node", name).Logger()
	st, err := store.Open(scope.StatePath(s.cfg.StateDir, name), store.Options{
		RecoveryHint: "move it aside (or delete it) to start this node afresh"})
	if err != nil {
		return nil, err
	}
	identity, _, err := topology.NodeIdentity(name, "")
	if err != nil {
		st.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(parent)
	n := &node{name: name, uid: obj.UID, api: api, st: st, feed: newLabelFeed(obj.Labels), log: log, cancel: cancel, warned: map[string]bool{}}
	n.ag = agent.New(agent.Options{Store: st, Source: s.src, Identity: identity,
		API: &nodeAPI{client: s.cfg.Client, feed: n.feed, retry: s.cfg.Retry}, NodeName: name, LabelNode: true, Logger: log})
	n.tgt = &target{node: name, api: api, st: st, driver: s.cfg.DriverName, log: log, changed: func() { s.queue.Add(name) }}
	fail := func(err error) (*node, error) {
		cancel()
		n.wg.Wait()
		st.Close()
		return nil, err
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); _ = n.ag.WatchNode(ctx) }()
	n.ag.WaitLabels(ctx, time.Second) // the feed has them: at once
	set, stored, err := n.ag.Begin()
	if err != nil {
		return fail(err)
	}
	if err := n.tgt.begin(set, stored); err != nil {
		return fail(err)
	}
	plan := faults.NewRunner(n.ag.HealthSetter(store.CauseFaultInjection), log)
	if err := n.ag.Start(ctx, agent.Parts{Faults: plan, Targets: []agent.Target{n.tgt}}); err != nil {
		return fail(err)
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); _ = plan.Run(ctx) }()
	n.adm = admin.NewServer(admin.ServerConfig{Source: admin.StoreSource{Store: st}, Reported: n.ag.Devices,
		Health: n.ag.HealthSetter(store.CauseAdmin), Logger: log}).Handler()
	return n, nil
}

// stop ends the node's agent and fault plan and closes its state file.
func (n *node) stop() error {
	n.cancel()
	n.wg.Wait()
	if err := n.st.Close(); err != nil {
		return fmt.Errorf("close state of node %q: %w", n.name, err)
	}
	return nil
}
