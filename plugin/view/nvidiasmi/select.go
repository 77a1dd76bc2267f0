package nvidiasmi

import (
	"slices"
	"strconv"
	"strings"
)

// selectorKind is how nvidia-smi reads one id of -i.
type selectorKind int

const (
	// byNumber: digits, a GPU index (0 … k-1) or else a board serial.
	byNumber selectorKind = iota
	// byUUID: GPU-… (case-insensitive).
	byUUID
	// byBusID: [domain:]bus:device[.function] in hex.
	byBusID
)

// selector is one id of -i.
type selector struct {
	kind                          selectorKind
	text                          string
	number                        int // byNumber: the value, -1 if too large for an index
	domain, bus, device, function uint64
}

// maxSelectorBytes bounds an -i value (a thousand UUIDs fit).
const maxSelectorBytes = 64 << 10

// parseSelector parses the value of -i: one or more ids separated by commas,
// spaces around them ignored. Each id is a GPU index or board serial
// (digits), a UUID (GPU-…), or a PCI bus id ([domain:]bus:device[.function],
// hex). It returns false for an empty id or one of no form, which nvidia-smi
// answers with "No devices were found", as for an id that names no GPU.
func parseSelector(s string) ([]selector, bool) {
	if len(s) > maxSelectorBytes {
		return nil, false
	}
	var out []selector
	for t := range strings.SplitSeq(s, ",") {
		t = strings.TrimSpace(t)
		sel := selector{text: t}
		switch {
		case t == "":
			return nil, false
		case strings.Trim(t, "0123456789") == "":
			sel.kind = byNumber
			n, err := strconv.Atoi(t)
			if err != nil || n > 1<<20 {
				n = -1
			}
			sel.number = n
		case len(t) > 4 && strings.EqualFold(t[:4], "GPU-"):
			sel.kind = byUUID
		case strings.Contains(t, ":"):
			d, b, dev, fn, ok := parseBusID(t)
			if !ok {
				return nil, false
			}
			sel.kind, sel.domain, sel.bus, sel.device, sel.function = byBusID, d, b, dev, fn
		default:
			return nil, false
		}
		out = append(out, sel)
	}
	return out, true
}

// matches reports whether the selector names g.
func (s selector) matches(g *gpu) bool {
	switch s.kind {
	case byNumber:
		if s.number >= 0 && g.pos == s.number {
			return true
		}
		return g.st != nil && g.st.Serial != "" && g.st.Serial == s.text
	case byUUID:
		return g.uuid != "" && strings.EqualFold(g.uuid, s.text)
	case byBusID:
		d, b, dev, fn, ok := g.busParts()
		return ok && d == s.domain && b == s.bus && dev == s.device && fn == s.function
	}
	return false
}

// selectGPUs returns the GPUs the selectors name, in index order, each once,
// or false if a selector names none (nvidia-smi: "No devices were found").
// A number names the GPU at that index, else the GPU with that serial.
func selectGPUs(gpus []*gpu, sels []selector) ([]*gpu, bool) {
	picked := make([]bool, len(gpus))
	for _, s := range sels {
		i := -1
		if s.kind == byNumber && s.number >= 0 && s.number < len(gpus) {
			i = s.number
		} else {
			i = slices.IndexFunc(gpus, s.matches)
		}
		if i < 0 {
			return nil, false
		}
		picked[i] = true
	}
	var out []*gpu
	for i, g := range gpus {
		if picked[i] {
			out = append(out, g)
		}
	}
	return out, true
}
