package simulate

import (
	"sync"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
)

// lockedSource is the Source every node's agent shares: calls one at a
// time (a Source's contract), and each selection resolved once, since a
// thousand nodes share a few profiles. Reload empties the cache.
type lockedSource struct {
	mu    sync.Mutex
	src   agent.Source
	cache map[agent.Selection]cachedChoice
}

type cachedChoice struct {
	ch  agent.Choice
	err error
}

var _ agent.Source = (*lockedSource)(nil)

func (l *lockedSource) Fallback() agent.Choice {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src.Fallback()
}

func (l *lockedSource) Profiles() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src.Profiles()
}

func (l *lockedSource) Select(sel agent.Selection) (agent.Choice, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.cache[sel]; ok {
		return c.ch, c.err
	}
	ch, err := l.src.Select(sel)
	l.cache[sel] = cachedChoice{ch, err}
	return ch, err
}

func (l *lockedSource) Reload() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.src.Reload()
	if err == nil {
		clear(l.cache)
	}
	return err
}

func (l *lockedSource) Dir() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src.Dir()
}

// kubeletAPI returns the kubelet API the configuration a node's labels
// select is served through: the agent serves one for its lifetime (a
// real node's plugin restarts to change it), so the Simulator starts the
// node's simulation again when it changes. A selection that does not
// resolve falls back, as the agent does.
func (l *lockedSource) kubeletAPI(labels map[string]string) agent.KubeletAPI {
	var sel agent.Selection
	if l.Profiles() {
		sel.Profile, _ = kube.SelectedProfile(labels)
	}
	sel.MIGConfig, _ = kube.SelectedMIGConfig(labels)
	if sel != (agent.Selection{}) {
		if ch, err := l.Select(sel); err == nil {
			return ch.Config.KubeletAPI.OrDefault()
		}
	}
	return l.Fallback().Config.KubeletAPI.OrDefault()
}
