package faults

// Plan is a configuration's fault plan: as given, and parsed. The zero
// value is no plan.
type Plan struct {
	// Text is the plan as given (-faults); "" is none.
	Text string
	// Faults is Text parsed (Parse) and checked against the machine's
	// devices (Check).
	Faults []Fault
}
