package telemetry

import "time"

// UpdateAt writes the readings at now into the live sink, as Run does every
// second: the tests drive the seconds themselves.
func (t *Service) UpdateAt(now time.Time) { t.update(now) }

// LoadGPUs is loadGPUs, for the tests.
var LoadGPUs = loadGPUs

// Exporter is the exporter in force, nil without one.
func (t *Service) Exporter() *Exporter {
	if st := t.state.Load(); st != nil {
		return st.exp
	}
	return nil
}
