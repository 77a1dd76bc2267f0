package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// MIG device ids. A MIG device (a GPU instance of a MIG-enabled GPU, with
// its full compute instance) is "fake-<i>-mig-<profile>-<start>": its GPU's
// id, the profile with everything but letters and digits dropped
// ("1g.10gb+me" → "1g10gbme", as NVIDIA's DRA driver names its MIG
// devices "gpu-<minor>-mig-<profile>-…") and the first memory slice of its
// placement. The one id is the device's everywhere: the device plugin's
// device id, VIRTUAL_GPU_IDS, its CDI device name, its DRA device name (a
// DNS label: lower-case letters, digits and '-') and the state file's key.
// A profile and a start name one placement, so ids are stable across
// layouts: the same instance at the same place has the same id and UUID.

// MIGSeparator separates the GPU id from the profile in a MIG device id.
const MIGSeparator = "-mig-"

// MIGID returns the id of the MIG device of the given profile name
// ("3g.40gb") placed at memory slice start of GPU gpu:
// "fake-<gpu>-mig-3g40gb-<start>". It does not check its arguments.
func MIGID(gpu int, profile string, start int) string {
	return GPUID(gpu) + MIGSeparator + CompactProfile(profile) + "-" + strconv.Itoa(start)
}

// CompactProfile returns a MIG profile name with every character but
// ASCII letters and digits dropped, in lower case: "1g.10gb+me" →
// "1g10gbme". Profile names ("<g>g.<gb>gb[+attr]") stay distinct.
func CompactProfile(profile string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(profile) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// IsMIGID reports whether id is meant as a MIG device id: whether it
// contains MIGSeparator. It says nothing of validity (ParseMIGID).
func IsMIGID(id string) bool { return strings.Contains(id, MIGSeparator) }

// ParseMIGID parses a MIG device id "fake-<i>-mig-<profile>-<start>" into
// the GPU index, the compact profile (CompactProfile's form) and the
// placement start. Only the form MIGID writes is accepted: numbers decimal
// without sign or leading zeros, a profile of lower-case letters and
// digits. Errors wrap ErrInvalidMIGID and quote the id.
func ParseMIGID(id string) (gpu int, profile string, start int, err error) {
	bad := func(why string) (int, string, int, error) {
		return 0, "", 0, fmt.Errorf("MIG device id %q: %s: want %s<gpu>%s<profile>-<start>: %w", Clip(id), why, IDPrefix, MIGSeparator, ErrInvalidMIGID)
	}
	rest, ok := strings.CutPrefix(id, IDPrefix)
	if !ok {
		return bad("no " + IDPrefix + " prefix")
	}
	g, rest, ok := strings.Cut(rest, MIGSeparator)
	if !ok {
		return bad("no " + strconv.Quote(MIGSeparator))
	}
	if gpu, err = canonicalUint(g); err != nil {
		return bad("GPU number " + strconv.Quote(Clip(g)) + ": " + err.Error())
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return bad("no placement start")
	}
	profile, s := rest[:i], rest[i+1:]
	if profile == "" || CompactProfile(profile) != profile {
		return bad("profile " + strconv.Quote(Clip(profile)) + " is not lower-case letters and digits")
	}
	if start, err = canonicalUint(s); err != nil {
		return bad("placement start " + strconv.Quote(Clip(s)) + ": " + err.Error())
	}
	return gpu, profile, start, nil
}

// DeriveMIGUUID returns the UUID of MIG device id on the node whose
// identity is node: "MIG-" and the same hash as DeriveUUID's, in the form
// nvidia-smi -L prints MIG devices ("MIG-<8>-<4>-<4>-<4>-<12>" hex, as on
// driver R470 and later). Deterministic in node and id, as DeriveUUID.
func DeriveMIGUUID(node, id string) string {
	return "MIG-" + strings.TrimPrefix(DeriveUUID(node, id), "GPU-")
}
