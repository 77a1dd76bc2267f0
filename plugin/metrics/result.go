package metrics

import "strconv"

// Result is how one container request ended, as the metrics count it: the result label of allocations_total.
type Result int

const (
	// ResultOK means the request was answered.
	ResultOK Result = iota
	// ResultRejected means a container request was refused for
	// what it asked: no, unknown, repeated or unhealthy ids, more devices
	// than the catalog's Limit, or a device another container request of
	// the call asked for (InvalidArgument or FailedPrecondition).
	ResultRejected
	// ResultFailed means a valid request could not be answered: the
	// allocation was not recorded (Unavailable), the catalog's Respond
	// failed or broke its rules (Internal), or the preference policy failed
	// or broke its contract.
	ResultFailed
)

// String returns "ok", "rejected" or "failed" (the metrics' label values).
func (r Result) String() string {
	switch r {
	case ResultOK:
		return "ok"
	case ResultRejected:
		return "rejected"
	case ResultFailed:
		return "failed"
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}
