package telemetry

import (
	"fmt"
	"math"
	"strings"
)

// Model is a load model: how busy a container keeps the GPUs it holds. It is
// a pure function of the seed, the holder, the GPU and the second of the
// clock, so two scrapes (or a scrape and nvidia-smi) in the same second agree
// and a run can be replayed. A free GPU idles whatever the model. The zero
// value "" means ModelSteady.
//
// Besides its utilization, each holder gets from the seed and its identity
// a share of the GPU's memory (15-75 %, times 0.85 + 0.15 × utilization/100)
// and a memory copy rate (0.2-0.6 × utilization). A holder of a replica
// ("fake-0::1", a time-sliced share) is a lighter workload: half the
// utilization and a quarter of the memory. ModelIdle gives no load at all.
type Model string

// The load models (-telemetry-model).
const (
	// ModelIdle keeps every GPU idle, held ones included: 0 % utilization,
	// no memory used, idle power and temperature. Pod labels still follow
	// the holders.
	ModelIdle Model = "idle"
	// ModelSteady gives each holder a constant utilization drawn from the
	// seed and the holder (40-95 %), with ±4 points of noise that changes
	// every second.
	ModelSteady Model = "steady"
	// ModelWave gives each holder a slow sine: a mean of 35-65 %, an
	// amplitude of 20-35 points and a period of 2-15 minutes, all drawn from
	// the seed and the holder, its phase too, with ±2 points of noise.
	ModelWave Model = "wave"
	// ModelRandomWalk gives each holder a bounded random walk (a Gaussian
	// walk of 1.5 points per √s, reflected into 0..100 %), computed without
	// state: time is cut into 1024-second epochs whose end points are drawn
	// from the seed, the holder and the epoch (10-90 %), and the walk between
	// them is a Brownian bridge built by midpoint displacement, each midpoint
	// drawn from a hash of (seed, holder, epoch, second). Any second is
	// computed in 10 steps, and every second of one path agrees with the
	// others.
	ModelRandomWalk Model = "random-walk"
)

// Models lists the load models in the order of the flag's help.
var Models = []Model{ModelIdle, ModelSteady, ModelWave, ModelRandomWalk}

// ParseModel returns the model named s ("idle", "steady", "wave",
// "random-walk"); "" is ModelSteady. Any other name is ErrUnknownModel.
func ParseModel(s string) (Model, error) {
	if s == "" {
		return ModelSteady, nil
	}
	for _, m := range Models {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(Models))
	for i, m := range Models {
		names[i] = string(m)
	}
	return "", fmt.Errorf("telemetry model %q: want one of %s: %w", s, strings.Join(names, ", "), ErrUnknownModel)
}

// String returns the model's name, "steady" for the zero value.
func (m Model) String() string {
	if m == "" {
		return string(ModelSteady)
	}
	return string(m)
}

// Hashing. Every draw is a splitmix64 finalizer over a key built from the
// seed, the holder's identity, the GPU and the second: no state, no
// math/rand, the same on every platform.

const (
	golden1 = 0x9e3779b97f4a7c15
	golden2 = 0xc2b2ae3d27d4eb4f
	golden3 = 0x165667b19e3779f9
)

// mix is the splitmix64 finalizer: a bijection of uint64 with good
// avalanche.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// addString folds s and a terminating 0 byte (which no Kubernetes name
// contains) into h with FNV-1a.
func addString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	h *= 0x100000001b3 // the terminator: ("ab","c") differs from ("a","bc")
	return h
}

// draw returns the tag-th independent draw of key k.
func draw(k, tag uint64) uint64 { return mix(k ^ mix(tag*golden1+golden3)) }

// unit maps a draw to [0, 1).
func unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }

// signed maps a draw to [-1, 1).
func signed(x uint64) float64 { return 2*unit(x) - 1 }

// gauss maps a draw to an approximately standard normal value bounded by
// ±3.47: the Irwin-Hall sum of four 16-bit uniforms, centred and scaled.
func gauss(x uint64) float64 {
	const scale = 1 / 0.5773502691896258 // 1/sqrt(4/12)
	s := float64(x&0xffff) + float64(x>>16&0xffff) + float64(x>>32&0xffff) + float64(x>>48)
	return (s/65536 - 2) * scale
}

// Draw tags of a holder's profile.
const (
	tagSteady = iota + 1
	tagMemory
	tagCopy
	tagWaveMean
	tagWaveAmp
	tagWavePeriod
	tagWavePhase
	tagNoise
	tagWalkEnd
	tagWalkMid
	tagPower
	tagTemp
	tagTempNoise
	tagTensor
	tagPCIeTx
	tagPCIeRx
	tagPCIeRatio
)

// holderKey returns the hash key of a holder under seed.
func holderKey(seed uint64, h Holder) uint64 {
	k := addString(mix(seed^golden2), h.Namespace)
	k = addString(k, h.Pod)
	return mix(addString(k, h.Container))
}

// gpuKey returns the hash key of GPU index gpu under seed, or of holder key
// hk on that GPU (hk = 0 for the GPU alone).
func gpuKey(seed, hk uint64, gpu int) uint64 {
	return mix(seed ^ hk ^ uint64(gpu+1)*golden3)
}

// secondKey returns the key of one second for key k.
func secondKey(k uint64, sec int64) uint64 { return mix(k ^ uint64(sec)*golden1) }

// holderLoad is what one holder asks of one GPU at one second, before the
// GPU's sum is capped.
type holderLoad struct {
	util       float64 // % of the GPU, 0..100
	memFrac    float64 // of the GPU's memory, 0..1, at full utilization
	copyRate   float64 // memory copy utilization per point of utilization
	tensorRate float64 // tensor pipe activity per point of utilization
}

// load returns the load holder key hk puts on GPU gpu at second sec under
// model m. A holder of a replica (a time-sliced share of the GPU) is a
// lighter workload: half the utilization and a quarter of the memory.
func (m Model) load(seed, hk uint64, gpu int, sec int64, replica bool) holderLoad {
	l := holderLoad{
		memFrac:    0.15 + 0.6*unit(draw(hk, tagMemory)),
		copyRate:   0.2 + 0.4*unit(draw(hk, tagCopy)),
		tensorRate: 0.3 + 0.5*unit(draw(hk, tagTensor)),
	}
	noise := signed(draw(secondKey(gpuKey(seed, hk, gpu), sec), tagNoise))
	switch m {
	case ModelIdle:
		return holderLoad{copyRate: l.copyRate, tensorRate: l.tensorRate}
	case ModelWave:
		mean := 35 + 30*unit(draw(hk, tagWaveMean))
		amp := 20 + 15*unit(draw(hk, tagWaveAmp))
		period := 120 + 780*unit(draw(hk, tagWavePeriod)) // s
		phase := 2 * math.Pi * unit(draw(hk, tagWavePhase))
		// The phase of a second is taken modulo the period in integers
		// first, so that large Unix times lose no precision.
		p := int64(period * 1000)
		ms := (sec % p * 1000) % p
		if ms < 0 {
			ms += p
		}
		l.util = mean + amp*math.Sin(2*math.Pi*float64(ms)/float64(p)+phase) + 2*noise
	case ModelRandomWalk:
		l.util = randomWalk(hk, sec)
	default: // steady
		l.util = 40 + 55*unit(draw(hk, tagSteady)) + 4*noise
	}
	l.util = clamp(l.util, 0, 100)
	if replica {
		l.util /= 2
		l.memFrac /= 4
	}
	return l
}

// The random walk: epochs of 2^walkLevels seconds, a step deviation of
// walkSigma points per √s, end points uniform in walkLow..walkHigh.
const (
	walkLevels = 10
	walkSigma  = 1.5
	walkLow    = 10
	walkHigh   = 90
)

// walkDev[d] is the deviation of a midpoint at depth d of the bridge: for an
// interval of L seconds, sigma·√(L/4).
var walkDev = func() (dev [walkLevels]float64) {
	for d := range dev {
		dev[d] = walkSigma * math.Sqrt(float64(int64(1)<<(walkLevels-d))/4)
	}
	return dev
}()

// randomWalk returns the walk of holder key hk at second sec, in 0..100.
func randomWalk(hk uint64, sec int64) float64 {
	epoch := sec >> walkLevels // floor, negative seconds too
	k := sec - epoch<<walkLevels
	end := func(e int64) float64 {
		return walkLow + (walkHigh-walkLow)*unit(draw(secondKey(hk, e), tagWalkEnd))
	}
	lo, hi := int64(0), int64(1)<<walkLevels
	vlo, vhi := end(epoch), end(epoch+1)
	ek := mix(hk ^ uint64(epoch)*golden2)
	for d := 0; hi-lo > 1; d++ {
		mid := (lo + hi) / 2
		vm := (vlo+vhi)/2 + walkDev[d]*gauss(draw(secondKey(ek, mid), tagWalkMid))
		if k < mid {
			hi, vhi = mid, vm
		} else {
			lo, vlo = mid, vm
		}
	}
	return reflect(vlo, 0, 100)
}

// reflect folds v into lo..hi as a walk reflected at both bounds.
func reflect(v, lo, hi float64) float64 {
	w := hi - lo
	m := math.Mod(v-lo, 2*w)
	if m < 0 {
		m += 2 * w
	}
	if m > w {
		m = 2*w - m
	}
	return lo + m
}

// clamp returns v within lo..hi; NaN becomes lo.
func clamp(v, lo, hi float64) float64 {
	switch {
	case v >= hi:
		return hi
	case v >= lo:
		return v
	}
	return lo
}
