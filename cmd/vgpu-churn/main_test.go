package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun_Table(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-topology=workstation-4gpu,dgx1-volta", "-requests=200", "-seed=3"}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"rel. score", "NVLink-full", "workstation-4gpu", "dgx1-volta", "lowest-index", "best-connected"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if n := strings.Count(s, "\n"); n != 5 {
		t.Errorf("%d lines, want a header and 4 rows:\n%s", n, s)
	}
}

func TestRun_Errors(t *testing.T) {
	for _, args := range [][]string{{"-topology=nope"}, {"-policies=random"}, {"-bogus"}} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%v): no error", args)
		}
	}
}
