package options

import (
	"reflect"
	"testing"
)

func TestSplitSimulateArgs(t *testing.T) {
	own, rest, err := splitSimulateArgs([]string{"-config", "/p", "-state", "/s", "--node-selector=type=kwok", "-devices=8", "-workers", "4", "--", "-state=x"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"-state", "/s", "--node-selector=type=kwok", "-workers", "4"}; !reflect.DeepEqual(own, want) {
		t.Errorf("own %q, want %q", own, want)
	}
	if want := []string{"-config", "/p", "-devices=8", "--", "-state=x"}; !reflect.DeepEqual(rest, want) {
		t.Errorf("rest %q, want %q", rest, want)
	}
}
