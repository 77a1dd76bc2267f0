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

func TestRun_SharedTable(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-topology=workstation-4gpu,dgx1-volta", "-requests=200", "-seed=3", "-replicas=4", "-replica-share=0.6"}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"replicas", "whole GPUs", "replica score", "whole-GPU score", "workstation-4gpu", "dgx1-volta", "lowest-index", "packed", "distributed"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "best-connected") {
		t.Errorf("shared table lists a whole-GPU policy:\n%s", s)
	}
	if n := strings.Count(s, "\n"); n != 7 {
		t.Errorf("%d lines, want a header and 6 rows:\n%s", n, s)
	}
	out.Reset()
	if err := run([]string{"-topology=hgx-h100", "-requests=50", "-replicas=2", "-policies=packed"}, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 || !strings.Contains(out.String(), "packed") {
		t.Errorf("-policies=packed: want a header and one row:\n%s", out.String())
	}
}

func TestRun_Errors(t *testing.T) {
	for _, args := range [][]string{
		{"-topology=nope"}, {"-policies=random"}, {"-bogus"},
		{"-replicas=-1"}, {"-replicas=1025"}, {"-replicas=2", "-replica-share=0"}, {"-replicas=2", "-replica-share=1.5"},
		{"-replicas=2", "-policies=best-connected"},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%v): no error", args)
		}
	}
}
