package options

import (
	"bytes"
	"strings"
	"testing"
)

func TestByteSize_Set(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"67108864", 64 << 20, ""},
		{"64Mi", 64 << 20, ""},
		{"512Ki", 512 << 10, ""},
		{"2Gi", 2 << 30, ""},
		{"1536Mi", 1536 << 20, ""},
		{"8589934591Gi", 8589934591 << 30, ""},
		{"8589934592Gi", 0, "too large"},
		{"9223372036854775807", 1<<63 - 1, ""},
		{"9223372036854775808", 0, "too large"},
		{"", 0, "want a byte count"},
		{"Mi", 0, "want a byte count"},
		{"-1", 0, "want a byte count"},
		{"+64Mi", 0, "want a byte count"},
		{"64MB", 0, "want a byte count"},
		{"64M", 0, "want a byte count"},
		{"64 Mi", 0, "want a byte count"},
		{"1.5Gi", 0, "want a byte count"},
		{"64mi", 0, "want a byte count"},
	} {
		var b ByteSize
		err := b.Set(tc.in)
		switch {
		case tc.err == "" && (err != nil || int64(b) != tc.want):
			t.Errorf("Set(%q) = %d, %v; want %d", tc.in, b, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Set(%q): err = %v, want one saying %q", tc.in, err, tc.err)
		}
	}
}

func TestByteSize_String(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 1000: "1000", 1024: "1Ki", 64 << 20: "64Mi", 3 << 30: "3Gi", 1536 << 20: "1536Mi", 1<<20 + 1: "1048577"} {
		if got := ByteSize(in).String(); got != want {
			t.Errorf("ByteSize(%d) = %q, want %q", in, got, want)
		}
	}
}

// FuzzByteSize: whatever Set accepts prints back to the same size.
func FuzzByteSize(f *testing.F) {
	for _, s := range []string{"0", "64Mi", "1Ki", "123", "9223372036854775807", "8589934591Gi", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b ByteSize
		if err := b.Set(s); err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("Set(%q) = %d, negative", s, b)
		}
		var back ByteSize
		if err := back.Set(b.String()); err != nil || back != b {
			t.Fatalf("Set(%q) = %d, printed %q, read back %d, %v", s, b, b.String(), back, err)
		}
	})
}

func TestLoad_HistoryMaxBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want int64
		err  string
	}{
		{"default", nil, nil, 64 << 20, ""},
		{"flag with suffix", []string{"-history-max-bytes=1Gi"}, nil, 1 << 30, ""},
		{"plain bytes", []string{"-history-max-bytes=1048576"}, nil, 1 << 20, ""},
		{"off", []string{"-history-max-bytes=0"}, nil, 0, ""},
		{"env twin", nil, map[string]string{"VGPU_HISTORY_MAX_BYTES": "128Mi"}, 128 << 20, ""},
		{"bad unit", []string{"-history-max-bytes=64MB"}, nil, 0, `invalid value "64MB" for flag -history-max-bytes: want a byte count, optionally with a binary suffix Ki, Mi or Gi`},
		{"bad env", nil, map[string]string{"VGPU_HISTORY_MAX_BYTES": "lots"}, 0, `invalid VGPU_HISTORY_MAX_BYTES="lots"`},
		{"too small", []string{"-history-max-bytes=1000"}, nil, 0, "invalid -history-max-bytes=1000: must be 0 (no byte limit) or at least 64Ki"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := func() (*Config, error) {
				o, err := Parse(tc.args, func(k string) string { return tc.env[k] })
				if err != nil {
					return nil, err
				}
				c, _, err := o.Load()
				return c, err
			}()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || cfg.History.MaxBytes != tc.want {
				t.Errorf("history-max-bytes = %v, %v; want %d", cfg, err, tc.want)
			}
		})
	}
	var help bytes.Buffer
	PrintUsage(&help)
	if !strings.Contains(help.String(), "(default 64Mi)") {
		t.Errorf("-h does not show the default 64Mi:\n%s", help.String())
	}
}
