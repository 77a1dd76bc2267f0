package mig

import (
	"fmt"
	"strconv"
	"strings"
)

// parseDeviceID parses a 32-bit PCI id as mig-parted does (strconv base 0:
// "0x233010DE", or decimal).
func parseDeviceID(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("PCI id %q: want 0x<device><vendor>", s)
	}
	return uint32(v), nil
}

// parseFilter parses "<id>" or "<id>:<subsystem id>".
func parseFilter(s string) (id, sub uint32, err error) {
	main, subs, hasSub := strings.Cut(s, ":")
	if id, err = parseDeviceID(main); err != nil {
		return 0, 0, err
	}
	if hasSub {
		if sub, err = parseDeviceID(subs); err != nil {
			return 0, 0, err
		}
	}
	return id, sub, nil
}

// canonicalID writes a PCI id as "0x" and eight upper-case hex digits; ""
// stays "".
func canonicalID(s string) string {
	if s == "" {
		return ""
	}
	v, err := parseDeviceID(s)
	if err != nil {
		return s
	}
	return fmt.Sprintf("0x%08X", v)
}
