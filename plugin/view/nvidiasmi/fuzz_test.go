package nvidiasmi

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func FuzzParseFields(f *testing.F) {
	for _, s := range []string{"index,name", "gpu_name, memory.total ,clocks.gr", "name,", "", ",", "timestamp,bogus,name",
		"clocks_throttle_reasons.active,power.draw", strings.Repeat("index,", 100) + "name"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		fs, bad, ok := parseFields(list)
		checkParsed(t, list, fs, bad, ok, func(name string) *field { return fieldsByName[name] })
	})
}

func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"0", "0,1,2", " 3 , 1", "GPU-0ad70432-690a-8c80-736d-ffae01403654", "00000000:07:00.0", "07:00.0",
		"0:a1:00", "61:00.9", "0,,1", "", "abc", "-1", "1439126426468", "99999999999999999999", "GPU-", "::", "1:2:3:4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sels, ok := parseSelector(s)
		if !ok {
			return
		}
		tokens := strings.Split(s, ",")
		if len(sels) != len(tokens) {
			t.Fatalf("%d selectors for %d ids", len(sels), len(tokens))
		}
		for i, sel := range sels {
			if sel.text != strings.TrimSpace(tokens[i]) || sel.text == "" {
				t.Fatalf("selector %d is %q for id %q", i, sel.text, tokens[i])
			}
			switch sel.kind {
			case byNumber:
				if strings.Trim(sel.text, "0123456789") != "" {
					t.Fatalf("%q read as a number", sel.text)
				}
				if sel.number >= 0 && fmt.Sprint(sel.number) != strings.TrimLeft(sel.text, "0") && sel.number != 0 {
					t.Fatalf("%q read as %d", sel.text, sel.number)
				}
			case byBusID:
				// The numbers read must name the same bus id when
				// written back in nvidia-smi's form.
				back := fmt.Sprintf("%08X:%02X:%02X.%d", sel.domain, sel.bus, sel.device, sel.function)
				d, b, dev, fn, ok := parseBusID(back)
				if !ok || d != sel.domain || b != sel.bus || dev != sel.device || fn != sel.function {
					t.Fatalf("%q read as %s, which reads back as %x:%x:%x.%x", sel.text, back, d, b, dev, fn)
				}
			case byUUID:
				if !strings.EqualFold(sel.text[:4], "GPU-") {
					t.Fatalf("%q read as a UUID", sel.text)
				}
			}
		}
		// Selecting from no GPUs never succeeds and never panics.
		if _, ok := selectGPUs(nil, sels); ok {
			t.Fatal("selected from no GPUs")
		}
		g := &gpu{pos: 0, uuid: "GPU-0ad70432-690a-8c80-736d-ffae01403654", numa: -1}
		selectGPUs([]*gpu{g}, sels)
	})
}

func FuzzParseAppFields(f *testing.F) {
	for _, s := range []string{"pid,process_name,used_gpu_memory", "name, used_memory", "gpu_util,mem_util,time", "pid,", "", ",",
		"timestamp,bogus", strings.Repeat("pid,", 100) + "name"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, list string, accounted bool) {
		fields := computeAppFields
		if accounted {
			fields = accountedAppFields
		}
		fs, bad, ok := parseAppFields(list, fields)
		checkParsed(t, list, fs, bad, ok, func(name string) *appField {
			for i := range fields {
				if fields[i].name == name || slices.Contains(fields[i].aliases, name) {
					return &fields[i]
				}
			}
			return nil
		})
	})
}

// FuzzParseArgs: any command line parses without a panic; one naming a
// query list keeps its value whole, and a combination of two queries is
// refused.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"--query-compute-apps=pid --format=csv", "--query-accounted-apps pid --format csv,noheader",
		"--help-query-compute-apps", "--help-query-accounted-apps", "--query-gpu=name --query-compute-apps=pid --format=csv",
		"-q -x -i 0", "--query-compute-apps", "topo -m", "--query-compute-apps= --format=csv"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		o, msg := parseArgs(args)
		if msg != "" {
			return
		}
		queries := 0
		for _, p := range []*string{o.queryGPU, o.computeApps, o.accountedApps} {
			if p != nil {
				queries++
				if *p == "" {
					t.Fatal("an empty query list was accepted")
				}
			}
		}
		if queries > 1 && validCombination(o) {
			t.Fatalf("%q: %d queries make a valid combination", line, queries)
		}
		if o.csv() != (queries > 0) {
			t.Fatalf("%q: csv() %v with %d queries", line, o.csv(), queries)
		}
	})
}

// checkParsed checks what a query list's parser returned for list against
// known, the field a name is (nil if none): a list over the size bound
// refused, else the first unknown name reported without fields, else one
// field per name, the one it names.
func checkParsed[F comparable](t *testing.T, list string, fs []F, bad string, ok bool, known func(name string) F) {
	t.Helper()
	var none F
	if len(list) > maxFieldListBytes {
		if ok {
			t.Fatal("accepted a list over the size bound")
		}
		return
	}
	tokens := strings.Split(list, ",")
	if !ok {
		if fs != nil {
			t.Fatalf("refused with fields %v", fs)
		}
		for _, tok := range tokens {
			if tok = strings.TrimSpace(tok); known(tok) == none {
				if tok != bad {
					t.Fatalf("reported %q, but the first unknown name is %q", bad, tok)
				}
				return
			}
		}
		t.Fatalf("refused %q naming %q, but every name is a field", list, bad)
	}
	if len(fs) != len(tokens) {
		t.Fatalf("%d fields for %d names", len(fs), len(tokens))
	}
	for i, tok := range tokens {
		if fs[i] != known(strings.TrimSpace(tok)) {
			t.Fatalf("name %q gave field %v", tok, fs[i])
		}
	}
}
