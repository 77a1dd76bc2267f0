package topology

import (
	"regexp"
	"strconv"
)

// What a failed GPU shows, in one place: the health reason an operator or a
// fault plan gives a device says which fault it is, and every reader (the
// telemetry, the status files, nvidia-smi, the DRA taints) shows that fault
// where a real GPU with it would.

// xidRE finds an XID in a health reason: the word "xid" in any case, then
// optional spaces, ':', '=' or '#', then 1 to 6 decimal digits ending the
// number: "XID 79", "xid 48: double bit ECC", "Xid=13", "fault: XID:79".
var xidRE = regexp.MustCompile(`(?i)\bxid[\s:=#]*([0-9]{1,6})\b`)

// ParseXID returns the XID error number a health reason names, and whether
// it names one. The first match of the word "xid" (any case) followed by
// optional spaces, ':', '=' or '#' and a number of 1 to 6 digits counts:
// "XID 79" → 79, "xid 48: double bit ECC" → 48, "Xid=13" → 13. A reason
// without one ("fault injection: down:fake-1:after=30s", "xid", "XID 1234567")
// gives 0, false.
func ParseXID(reason string) (int, bool) {
	m := xidRE.FindStringSubmatch(reason)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil { // cannot happen: at most 6 digits
		return 0, false
	}
	return n, true
}

// FaultKind is how an unhealthy GPU fails.
type FaultKind int

const (
	// FaultLost is a GPU that fell off the bus (XID 79), or any failure
	// the reason does not name as one of the others: NVML cannot reach it,
	// so it answers nothing (nvidia-smi: "Unable to determine the device
	// handle"; DCGM: blank values, so only its XID series remains).
	FaultLost FaultKind = iota
	// FaultECC is a memory error (XID 48, 63, 64, 92, 94, 95, or the word
	// "ECC" without an XID): the GPU is unhealthy for the kubelet but still
	// answers, with its ECC counts, remapped rows (or retired pages) and
	// XID where a real GPU shows them.
	FaultECC
	// FaultThermal is a GPU held at its slowdown temperature (the word
	// "thermal" in the reason, without an XID of another kind): it answers,
	// hot, with its clocks halved and the thermal slowdown event reasons
	// active.
	FaultThermal
)

// String returns "lost", "ecc" or "thermal".
func (k FaultKind) String() string {
	switch k {
	case FaultECC:
		return "ecc"
	case FaultThermal:
		return "thermal"
	}
	return "lost"
}

// Fault is what an unhealthy GPU's health reason says of its failure.
type Fault struct {
	Kind FaultKind
	// XID is the XID the reason names, 0 if none.
	XID int
}

// Answers reports whether a GPU with this fault still answers NVML: an ECC
// or thermal fault does, a lost GPU does not.
func (f Fault) Answers() bool { return f.Kind != FaultLost }

// The ECC XIDs (NVIDIA's XID catalog): 48 double bit ECC error, 63 ECC page
// retirement or row remapping recording event, 64 ECC page retirement or
// row remapper recording failure, 92 high single-bit ECC error rate, 94
// contained ECC error, 95 uncontained ECC error.
var eccXIDs = map[int]bool{48: true, 63: true, 64: true, 92: true, 94: true, 95: true}

var (
	eccWordRE     = regexp.MustCompile(`(?i)\becc\b`)
	thermalWordRE = regexp.MustCompile(`(?i)\bthermal\b`)
)

// ParseFault returns the fault an unhealthy GPU's health reason names: an
// ECC XID (48, 63, 64, 92, 94, 95) or the word "ECC" without an XID is
// FaultECC; the word "thermal" without an XID is FaultThermal; anything
// else (XID 79, another XID, no reason) is FaultLost. The XID is the
// reason's first (ParseXID).
func ParseFault(reason string) Fault {
	xid, ok := ParseXID(reason)
	switch {
	case ok && eccXIDs[xid]:
		return Fault{Kind: FaultECC, XID: xid}
	case ok:
		return Fault{Kind: FaultLost, XID: xid}
	case eccWordRE.MatchString(reason):
		return Fault{Kind: FaultECC}
	case thermalWordRE.MatchString(reason):
		return Fault{Kind: FaultThermal}
	}
	return Fault{Kind: FaultLost}
}

// MemoryErrors are a GPU's ECC error counts and the memory repairs they
// caused, as nvidia-smi -q shows them under "ECC Errors", "Retired Pages"
// and "Remapped Rows" and DCGM counts them. JSON tags make it part of the
// status files.
type MemoryErrors struct {
	// Corrected and uncorrected ECC errors since the driver loaded
	// (volatile) and over the GPU's life (aggregate).
	VolatileCorrected    int `json:"volatileCorrected"`
	VolatileUncorrected  int `json:"volatileUncorrected"`
	AggregateCorrected   int `json:"aggregateCorrected"`
	AggregateUncorrected int `json:"aggregateUncorrected"`
	// Rows remapped for correctable and uncorrectable errors (Ampere and
	// later: RowRemapping), whether a remapping waits for a GPU reset, and
	// whether one failed.
	RemappedCorrectable   int  `json:"remappedCorrectable"`
	RemappedUncorrectable int  `json:"remappedUncorrectable"`
	RemapPending          bool `json:"remapPending"`
	RemapFailure          bool `json:"remapFailure"`
	// Pages retired for single- and double-bit errors, and whether a
	// retirement waits for a reset (before Ampere: page retirement).
	RetiredSBE     int  `json:"retiredSbe"`
	RetiredDBE     int  `json:"retiredDbe"`
	RetiredPending bool `json:"retiredPending"`
}

// RowRemapping reports whether g's GPUs repair memory by remapping rows
// (Ampere data-center parts and later, compute capability 8.0 and up, but
// the GeForce and workstation boards) rather than by retiring pages.
func (g GPUModel) RowRemapping() bool {
	return g.Compute.Major >= 8 && !g.Board().Fan
}

// ECC reports whether g's GPUs have ECC memory enabled: the HBM data-center
// parts and the data-center GDDR boards; GeForce and workstation boards
// (those with a fan) report it disabled or not supported.
func (g GPUModel) ECC() bool { return !g.Board().Fan }

// MemoryErrors returns the memory errors a GPU of g shows with fault f: none
// for a fault that is not an ECC fault (or a model without ECC); for an ECC
// fault, what its XID records — 92 (high single-bit error rate) 120
// corrected errors and one row remapped for them (or a page retired); 63
// one uncorrected error and its row remapping pending; 64 the same with the
// remapping failed; 48, 94, 95 and an ECC fault without an XID one
// uncorrected (double-bit) error, its row remapped and pending a reset (or
// its page retired, pending).
func (g GPUModel) MemoryErrors(f Fault) MemoryErrors {
	if f.Kind != FaultECC || !g.ECC() {
		return MemoryErrors{}
	}
	var e MemoryErrors
	remap := g.RowRemapping()
	if f.XID == 92 {
		e.VolatileCorrected, e.AggregateCorrected = 120, 120
		if remap {
			e.RemappedCorrectable = 1
		} else {
			e.RetiredSBE = 1
		}
		return e
	}
	e.VolatileUncorrected, e.AggregateUncorrected = 1, 1
	if !remap {
		e.RetiredDBE, e.RetiredPending = 1, true
		return e
	}
	e.RemapPending = true
	if f.XID == 64 {
		e.RemapFailure = true
	} else {
		e.RemappedUncorrectable = 1
	}
	return e
}

// The clock event reasons as NVML's bit mask (nvmlClocksEventReason*),
// which nvidia-smi prints as clocks_event_reasons.active
// ("0x0000000000000001") and, bit by bit, as "Active" or "Not Active".
const (
	ClockEventGPUIdle                   uint64 = 0x1
	ClockEventApplicationsClocksSetting uint64 = 0x2
	ClockEventSWPowerCap                uint64 = 0x4
	ClockEventHWSlowdown                uint64 = 0x8
	ClockEventSyncBoost                 uint64 = 0x10
	ClockEventSWThermalSlowdown         uint64 = 0x20
	ClockEventHWThermalSlowdown         uint64 = 0x40
	ClockEventHWPowerBrakeSlowdown      uint64 = 0x80
	ClockEventDisplayClockSetting       uint64 = 0x100
	// ClockEventsThermal are the reasons a thermal fault makes active: the
	// hardware slowdown and both thermal slowdowns.
	ClockEventsThermal = ClockEventHWSlowdown | ClockEventHWThermalSlowdown | ClockEventSWThermalSlowdown
	// ClockEventsSupported are the reasons a data-center GPU supports
	// (clocks_event_reasons.supported): every one above.
	ClockEventsSupported uint64 = 0x1FF
)

// Temperature thresholds of a board, in °C: the GPU slows its clocks at
// SlowdownC, shuts down at ShutdownC, and is meant to run below
// MaxOperatingC (nvidia-smi -q "GPU Slowdown Temp", "GPU Shutdown Temp",
// "GPU Max Operating Temp"); a board with HBM also has a memory limit.
type TempThresholds struct {
	ShutdownC, SlowdownC, MaxOperatingC, MemoryMaxC int
}

// thresholdsByFamily are typical data-center boards' thresholds: P100,
// V100, T4, A100, L40S, H100, B200. The Hopper and Ada values are those of
// real H100, H200 and L40S boards (nvidia-smi -q "GPU Shutdown T.Limit
// Temp" -8 C and -5 C, "GPU Slowdown T.Limit Temp" -2 C, relative to a max
// operating temperature of 87 C: utkuozdemir/nvidia_gpu_exporter,
// internal/captures).
var thresholdsByFamily = map[string]TempThresholds{
	"pascal":       {90, 87, 85, 95},
	"volta":        {90, 87, 83, 85},
	"turing":       {96, 93, 85, 0},
	"ampere":       {92, 89, 85, 95},
	"ada-lovelace": {92, 89, 87, 0},
	"hopper":       {95, 89, 87, 95},
	"blackwell":    {92, 89, 87, 95},
}

// ThermalFaultTempC is the temperature a GPU of g is held at under a
// thermal fault: 1 °C above its slowdown threshold.
func (g GPUModel) ThermalFaultTempC() int { return g.Thresholds().SlowdownC + 1 }

// Thresholds returns g's temperature thresholds; a family the table lacks
// gets the Ampere values. MemoryMaxC is 0 for a board without HBM.
func (g GPUModel) Thresholds() TempThresholds {
	t, ok := thresholdsByFamily[g.Family]
	if !ok {
		t = thresholdsByFamily["ampere"]
	}
	if !g.Board().HBM {
		t.MemoryMaxC = 0
	}
	return t
}
