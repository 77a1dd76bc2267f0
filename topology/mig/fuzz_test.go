package mig

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseConfig: whatever the bytes, ParseConfig returns a config or a
// *ConfigError wrapping ErrInvalidConfig, never panics, and a config it
// returns holds what it promises (version v1, non-empty layouts of entries
// with devices, mig-devices only with MIG enabled, valid profile names and
// filters); resolving each of its layouts on an H100 node fails only with
// the package's errors.
func FuzzParseConfig(f *testing.F) {
	f.Add(string(builtinYAML))
	f.Add("version: v1\nmig-configs:\n  L:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 7}\n")
	f.Add("version: v1\nmig-configs:\n  L:\n    - device-filter: [\"0x233010DE\"]\n      devices: [0, 3]\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2, \"1g.10gb+me\": 1}\n")
	f.Add("version: v1\nmig-configs: {L: [{devices: all, mig-enabled: false}], M: [&e {devices: [1], mig-enabled: true, mig-devices: {}}, *e]}\n")
	f.Add("version: v1\nmig-configs:\n  L:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1c.3g.40gb\": 1, \"1g.24gb-me\": 2}\n")
	f.Fuzz(func(t *testing.T, src string) {
		c, err := ParseConfig("fuzz.yaml", strings.NewReader(src))
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v (%T) is not a *ConfigError", err, err)
			}
			return
		}
		if c.Version != ConfigVersion || len(c.Layouts) == 0 {
			t.Fatalf("config %+v", c)
		}
		for name, l := range c.Layouts {
			if len(l) == 0 {
				t.Fatalf("layout %q has no entries", name)
			}
			for i, e := range l {
				if e.AllDevices == (len(e.Devices) > 0) {
					t.Fatalf("layout %q entry %d: all %v, devices %v", name, i, e.AllDevices, e.Devices)
				}
				if !e.MIGEnabled && len(e.MIGDevices) > 0 || e.MIGEnabled && e.MIGDevices == nil {
					t.Fatalf("layout %q entry %d: enabled %v, devices %v", name, i, e.MIGEnabled, e.MIGDevices)
				}
				for p, n := range e.MIGDevices {
					if _, err := ParseProfileName(p); err != nil || n < 0 {
						t.Fatalf("layout %q entry %d: %q: %d (%v)", name, i, p, n, err)
					}
				}
				for _, df := range e.DeviceFilter {
					if _, _, err := parseFilter(df); err != nil {
						t.Fatalf("layout %q entry %d: filter %q: %v", name, i, df, err)
					}
				}
			}
			if _, err := Resolve(c, name, "NVIDIA H100 80GB HBM3", 4); err != nil && !isPackageError(err) {
				t.Fatalf("Resolve(%q): %v", name, err)
			}
		}
	})
}

// isPackageError reports an error wrapping one of the resolver's sentinels.
func isPackageError(err error) bool {
	for _, s := range []error{ErrUnknownProfile, ErrDoesNotFit, ErrDeviceIndex, ErrNoMatchingEntry, ErrNoMIG} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// FuzzParseProfileName: a name ParseProfileName accepts formats back to a
// name that parses to the same value.
func FuzzParseProfileName(f *testing.F) {
	for _, s := range []string{"1g.10gb", "1g.10gb+me", "1c.3g.40gb", "1g.24gb-me", "2g.48gb+gfx,me.all", "7g.141gb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseProfileName(s)
		if err != nil {
			return
		}
		back, err := ParseProfileName(n.String())
		if err != nil || !reflect.DeepEqual(back, n) {
			t.Fatalf("%q parses to %+v, formats as %q, which parses to %+v (%v)", s, n, n.String(), back, err)
		}
	})
}
