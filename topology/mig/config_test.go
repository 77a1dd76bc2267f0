package mig

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// mustParse parses a config or fails the test.
func mustParse(t testing.TB, src string) *Config {
	t.Helper()
	c, err := ParseConfig("test.yaml", strings.NewReader(src))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return c
}

// TestParseConfig_Accepts: the shapes mig-parted accepts, read as it reads
// them.
func TestParseConfig_Accepts(t *testing.T) {
	c := mustParse(t, `
version: v1
mig-configs:
  custom:
    - device-filter: ["0x233010DE", "0x20B010DE:0x134F10DE"]
      devices: [0, 2]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "3g.40gb": 1
        "2g.20gb": 0
    - device-filter: "0x233510DE"
      devices: all
      mig-enabled: false
  none:
    - devices: all
      mig-enabled: true
      mig-devices: {}
`)
	want := &Config{Version: "v1", Layouts: map[string]Layout{
		"custom": {
			{DeviceFilter: []string{"0x233010DE", "0x20B010DE:0x134F10DE"}, Devices: []int{0, 2}, MIGEnabled: true,
				MIGDevices: map[string]int{"1g.10gb": 2, "3g.40gb": 1, "2g.20gb": 0}},
			{DeviceFilter: []string{"0x233510DE"}, AllDevices: true},
		},
		"none": {{AllDevices: true, MIGEnabled: true, MIGDevices: map[string]int{}}},
	}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("ParseConfig =\n%#v\nwant\n%#v", c, want)
	}
	if got := c.Names(); !slices.Equal(got, []string{"custom", "none"}) {
		t.Errorf("Names() = %v", got)
	}
}

// TestParseConfig_Rejects: every refusal names the layout, the entry and
// the field (and the line), and wraps ErrInvalidConfig.
func TestParseConfig_Rejects(t *testing.T) {
	const entry = "version: v1\nmig-configs:\n  L:\n    - "
	for name, tc := range map[string]struct{ src, want string }{
		"empty":              {"", "test.yaml: empty document"},
		"not yaml":           {"version: [", "not YAML"},
		"two documents":      {"version: v1\n---\nversion: v1\n", "more than one YAML document"},
		"not a mapping":      {"- a\n", "want a mapping, got a list"},
		"no version":         {"mig-configs: {L: [{devices: all, mig-enabled: false}]}", "version: missing"},
		"bad version":        {"version: v2\nmig-configs: {}", `test.yaml:1: version: "v2", want "v1"`},
		"version not string": {"version: 1\n", "version: want a string, got 1"},
		"unknown top field":  {"version: v1\nextra: 1\n", "test.yaml:2: extra: unknown field"},
		"no mig-configs":     {"version: v1\n", "mig-configs: missing"},
		"empty mig-configs":  {"version: v1\nmig-configs: {}\n", "mig-configs: want at least one layout"},
		"layout not list":    {"version: v1\nmig-configs:\n  L: {devices: all}\n", `test.yaml:3: mig-configs["L"]: want a list of entries`},
		"layout empty":       {"version: v1\nmig-configs:\n  L: []\n", `mig-configs["L"]: want at least one entry`},
		"duplicate layout":   {"version: v1\nmig-configs:\n  L: [{devices: all, mig-enabled: false}]\n  L: [{devices: all, mig-enabled: false}]\n", "test.yaml:4: mig-configs.L: defined twice"},
		"unknown entry field": {entry + "devices: all\n      mig-enabled: false\n      migEnabled: true\n",
			`test.yaml:6: mig-configs["L"][0].migEnabled: unknown field`},
		"no devices":      {entry + "mig-enabled: false\n", `mig-configs["L"][0].devices: missing`},
		"no mig-enabled":  {entry + "devices: all\n", `mig-configs["L"][0].mig-enabled: missing`},
		"devices string":  {entry + "devices: some\n      mig-enabled: false\n", `test.yaml:4: mig-configs["L"][0].devices: want all or a list of GPU indexes, got "some"`},
		"devices neg":     {entry + "devices: [0, -1]\n      mig-enabled: false\n", "negative GPU index -1"},
		"devices dup":     {entry + "devices: [1, 1]\n      mig-enabled: false\n", "GPU index 1 listed twice"},
		"devices empty":   {entry + "devices: []\n      mig-enabled: false\n", "devices: empty list"},
		"devices float":   {entry + "devices: [1.5]\n      mig-enabled: false\n", "devices: want a decimal integer, got 1.5"},
		"enabled yes":     {entry + "devices: all\n      mig-enabled: yes\n", `mig-enabled: want true or false, got "yes"`},
		"missing devs":    {entry + "devices: all\n      mig-enabled: true\n", "mig-devices: missing with mig-enabled: true"},
		"null devs":       {entry + "devices: all\n      mig-enabled: true\n      mig-devices:\n", "mig-devices: want a mapping of profile to count, got null"},
		"devs disabled":   {entry + "devices: all\n      mig-enabled: false\n      mig-devices: {1g.10gb: 1}\n", "MIG devices with mig-enabled: false"},
		"bad profile":     {entry + "devices: all\n      mig-enabled: true\n      mig-devices: {1x.10gb: 1}\n", `mig-configs["L"][0].mig-devices.1x.10gb: profile "1x.10gb"`},
		"negative count":  {entry + "devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: -1}\n", "mig-devices.1g.10gb: negative count -1"},
		"count string":    {entry + "devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: two}\n", `mig-devices.1g.10gb: want a decimal integer, got "two"`},
		"all zero":        {entry + "devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: 0}\n", "every count is 0"},
		"dup profile":     {entry + "devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: 1, 1g.10gb: 2}\n", "mig-devices.1g.10gb: defined twice"},
		"bad filter":      {entry + "device-filter: H100\n      devices: all\n      mig-enabled: false\n", `device-filter: PCI id "H100"`},
		"bad sub filter":  {entry + "device-filter: [\"0x233010DE:zz\"]\n      devices: all\n      mig-enabled: false\n", `device-filter: PCI id "zz"`},
		"filter number":   {entry + "device-filter: [0x233010DE]\n      devices: all\n      mig-enabled: false\n", "device-filter: want a string, got 0x233010DE (YAML reads it unquoted as a number: write \"0x233010DE\")"},
		"filter empty":    {entry + "device-filter: []\n      devices: all\n      mig-enabled: false\n", "device-filter: empty list"},
		"entry not map":   {entry + "all\n", `mig-configs["L"][0]: want a mapping, got "all"`},
		"merge key":       {"version: v1\nmig-configs:\n  <<: {}\n", "no merge keys"},
		"alias explosion": {aliasBomb(), "too large once its aliases are expanded"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig("test.yaml", strings.NewReader(tc.src))
			if err == nil {
				t.Fatalf("ParseConfig accepted %q", tc.src)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error %T is not a *ConfigError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// aliasBomb is a small valid-looking document whose aliases expand to
// millions of nodes: 300 layouts of the same 300 entries of the same 50
// MIG devices.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n  L0: &l\n")
	for i := range 300 {
		if i == 0 {
			b.WriteString("    - &e {devices: all, mig-enabled: true, mig-devices: {")
			for j := range 50 {
				if j > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%dg.%dgb: 1", j+1, j+1)
			}
			b.WriteString("}}\n")
			continue
		}
		b.WriteString("    - *e\n")
	}
	for i := 1; i < 300; i++ {
		fmt.Fprintf(&b, "  L%d: *l\n", i)
	}
	return b.String()
}

// TestParseConfig_Limit: a file over MaxConfigBytes is refused unread.
func TestParseConfig_Limit(t *testing.T) {
	big := "version: v1\n#" + strings.Repeat("x", MaxConfigBytes) + "\n"
	_, err := ParseConfig("big.yaml", strings.NewReader(big))
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("ParseConfig = %v, want a size error", err)
	}
}

// TestParseConfig_ReadError: a reader's error is returned wrapped, naming
// the source.
func TestParseConfig_ReadError(t *testing.T) {
	f, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = ParseConfig("dir", f)
	if err == nil || !strings.Contains(err.Error(), "read mig-parted config dir") {
		t.Fatalf("ParseConfig(directory) = %v", err)
	}
}

// TestParseProfileName: mig-parted's profile grammar.
func TestParseProfileName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ProfileName
	}{
		{"1g.10gb", ProfileName{C: 1, G: 1, GB: 10}},
		{"7g.141gb", ProfileName{C: 7, G: 7, GB: 141}},
		{"1g.10gb+me", ProfileName{C: 1, G: 1, GB: 10, Attributes: []string{"me"}}},
		{"1g.24gb+me.all", ProfileName{C: 1, G: 1, GB: 24, Attributes: []string{"me.all"}}},
		{"1g.24gb-me", ProfileName{C: 1, G: 1, GB: 24, NegAttributes: []string{"me"}}},
		{"1c.3g.40gb", ProfileName{C: 1, G: 3, GB: 40}},
		{"2c.3g.71gb+gfx,me", ProfileName{C: 2, G: 3, GB: 71, Attributes: []string{"gfx", "me"}}},
	} {
		got, err := ParseProfileName(tc.in)
		if err != nil {
			t.Errorf("ParseProfileName(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseProfileName(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("ParseProfileName(%q).String() = %q", tc.in, got.String())
		}
	}
	for _, bad := range []string{"", "1g", "1g.10", "g.10gb", "1g.gb", "0g.10gb", "1g.10gb+", "1g.10gb+me,me",
		"1g.10gb+me-x", "1g.10gb+1me", "1g.10gb+.me", "1g.10gb+m e", "4c.3g.40gb", "1c.1g.1g.5gb", " 1g.10gb", "1g.-1gb"} {
		if _, err := ParseProfileName(bad); err == nil {
			t.Errorf("ParseProfileName(%q) accepted", bad)
		}
	}
}

// TestBuiltinConfig: GPU Operator's default configuration parses, has its
// 81 layouts and the ones the issue names, and every call is a fresh copy.
func TestBuiltinConfig(t *testing.T) {
	c, err := BuiltinConfig()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Layouts); n != 81 {
		t.Errorf("%d layouts, GPU Operator's default has 81", n)
	}
	for _, name := range []string{"all-disabled", "all-enabled", "all-1g.5gb", "all-1g.10gb", "all-2g.20gb", "all-3g.40gb",
		"all-7g.80gb", "all-1g.18gb", "all-7g.141gb", "all-balanced"} {
		if _, err := c.Layout(name); err != nil {
			t.Errorf("Layout(%q): %v", name, err)
		}
	}
	bal, _ := c.Layout("all-balanced")
	if len(bal) != 12 {
		t.Errorf("all-balanced has %d entries, want 12 (one per product group)", len(bal))
	}
	c.Layouts["all-disabled"][0].MIGEnabled = true
	delete(c.Layouts, "all-balanced")
	again, _ := BuiltinConfig()
	if again.Layouts["all-disabled"][0].MIGEnabled || again.Layouts["all-balanced"] == nil {
		t.Error("BuiltinConfig shares its layouts between calls")
	}
	if _, err := c.Layout("all-9g.1gb"); !errors.Is(err, ErrUnknownLayout) || !strings.Contains(err.Error(), `"all-9g.1gb"`) {
		t.Errorf("Layout(all-9g.1gb) = %v, want ErrUnknownLayout naming it", err)
	}
}

// TestMerge: a user's layout replaces the built-in one of its name whole
// and adds new ones; neither input changes.
func TestMerge(t *testing.T) {
	base, err := BuiltinConfig()
	if err != nil {
		t.Fatal(err)
	}
	user := mustParse(t, `
version: v1
mig-configs:
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  mine:
    - devices: [0]
      mig-enabled: false
`)
	m := Merge(base, user)
	if len(m.Layouts) != len(base.Layouts)+1 {
		t.Errorf("merged %d layouts, want %d", len(m.Layouts), len(base.Layouts)+1)
	}
	if got := m.Layouts["all-balanced"]; !reflect.DeepEqual(got, user.Layouts["all-balanced"]) {
		t.Errorf("all-balanced = %+v, want the user's", got)
	}
	if !reflect.DeepEqual(m.Layouts["all-1g.10gb"], base.Layouts["all-1g.10gb"]) || m.Layouts["mine"] == nil {
		t.Error("merge lost a layout")
	}
	if len(base.Layouts["all-balanced"]) != 12 || len(user.Layouts) != 2 {
		t.Error("Merge modified an input")
	}
	m.Layouts["mine"][0].Devices[0] = 5
	if user.Layouts["mine"][0].Devices[0] != 0 {
		t.Error("Merge shares the user's slices")
	}
	if got := Merge(nil, nil); got == nil || got.Version != ConfigVersion || len(got.Layouts) != 0 {
		t.Errorf("Merge(nil, nil) = %+v", got)
	}
	if got := Merge(nil, user); !reflect.DeepEqual(got, user) {
		t.Errorf("Merge(nil, user) = %+v", got)
	}
}
