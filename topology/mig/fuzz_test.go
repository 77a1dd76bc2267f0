package mig

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseConfig: whatever the bytes, ParseConfig returns a config or a
// *ConfigError wrapping ErrInvalidConfig, never panics, and a config it
// returns holds what it promises (version v1, non-empty layouts of entries
// with devices, mig-devices only with MIG enabled, valid profile names and
// filters).
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
		}
	})
}
