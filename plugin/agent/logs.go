package agent

import (
	"fmt"
	"sync"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// logConfig logs, once per configuration applied, where it came from, what
// in it has no effect (yet), and what it allows that is unsafe (at warn).
func logConfig(log zerolog.Logger, ch Choice) {
	n, cfg := ch.Notes, ch.Config
	if n.File != "" {
		c := log.With().Str("file", n.File)
		if cfg.Profile != "" {
			c = c.Str("profile", cfg.Profile)
		}
		if len(n.Overridden) > 0 {
			c = c.Strs("overridden", n.Overridden)
		}
		l := c.Logger()
		l.Info().Msg("configuration file")
	}
	if len(n.Ignored) > 0 {
		log.Info().Strs("fields", n.Ignored).Msg("fields of NVIDIA's device plugin configuration that have no effect here")
	}
	for _, w := range n.Warnings {
		log.Warn().Msg(w)
	}
	if sh := cfg.GPUs.Sharing; sh.Enabled() {
		gpus := "all"
		if sh.GPUs != nil {
			gpus = fmt.Sprint(sh.GPUs)
		}
		log.Info().Int("replicas", sh.Replicas).Str("resource", sh.ResourceName).Str("gpus", gpus).Str("policy", sh.PolicyName).
			Bool("fail_requests_greater_than_one", sh.FailRequestsGreaterThanOne).Msg("GPUs shared by time-slicing: each advertised as replicas")
	}
}

// logUnhealthy logs the configured GPUs that are unhealthy since before
// this start (stored after a reconcile: the devices not removed are the
// configured ones). A shared GPU's replicas, which have its health, are
// not logged one by one.
func logUnhealthy(log zerolog.Logger, stored []store.Device) {
	for _, d := range stored {
		if !d.Healthy && !d.Removed && !d.IsReplica() {
			log.Info().Str("device", d.ID).Str("reason", d.Reason).Time("since", d.Since).Msg("device unhealthy since before this start")
		}
	}
}

// logNUMA says what of the machine's NUMA nodes is not reported: the
// host's nodes could not be read, or it lacks some.
func logNUMA(log zerolog.Logger, set *Set) {
	numa := set.GPUs.NUMA()
	if numa.HostErr != nil {
		log.Warn().Err(numa.HostErr).Str("sysfs", set.Config.GPUs.SysfsRoot).Msg("cannot read the host's NUMA nodes; reporting none")
	}
	if len(numa.Dropped) > 0 {
		log.Info().Ints("host_numa_nodes", numa.Host).Ints("not_reported", numa.Dropped).
			Msg("the host lacks some topology NUMA nodes; those devices report no NUMA node (-numa-report=always to force)")
	}
}

// logDamaged warns about damaged records the store keeps in quarantine (at
// most maxLogged, then their number) and the devices added again because
// their record was among them.
func logDamaged(log zerolog.Logger, st *store.Store, report store.ReconcileReport) error {
	const maxLogged = 20
	damaged, err := st.Damaged()
	if err != nil {
		return err
	}
	for i, d := range damaged {
		if i == maxLogged {
			log.Warn().Int("more", len(damaged)-maxLogged).Msg("more damaged state records")
			break
		}
		log.Warn().Str("bucket", d.Bucket).Str("key", d.Key).Str("reason", d.Reason).Time("quarantined", d.Quarantined).
			Str("state", st.Path()).Msg("damaged state record kept in quarantine; the rest of the file is in use")
	}
	if len(report.Recreated) > 0 {
		log.Warn().Strs("devices", report.Recreated).
			Msg("devices whose stored record was damaged were added again as new and healthy; their stored health is lost")
	}
	return nil
}

// observeReconcile tells obs (nil: nobody) of the health events a
// reconcile stored: a new GPU is added healthy, cause reconcile. Replicas
// and restored devices get no health event.
func observeReconcile(obs Observer, report store.ReconcileReport) {
	if obs == nil {
		return
	}
	for _, id := range report.Added {
		if !topology.IsReplicaID(id) {
			obs.HealthChanged(id, true, store.CauseReconcile)
		}
	}
}

// causeLog logs an error at warn once per cause (loadsock.ErrorCause):
// what fails for every call logs once, not at every call. It is safe for
// concurrent use.
type causeLog struct {
	log  zerolog.Logger
	mu   sync.Mutex
	seen map[string]bool
}

func newCauseLog(log zerolog.Logger) *causeLog {
	return &causeLog{log: log, seen: map[string]bool{}}
}

// warn logs err with msg unless an error of its cause was logged before.
func (c *causeLog) warn(err error, msg string) {
	cause := loadsock.ErrorCause(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[cause] {
		return
	}
	c.seen[cause] = true
	c.log.Warn().Err(err).Str("cause", cause).Msg(msg)
}
