package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/plugintest"
)

// TestBinary_EmptyStateFile: a state file of zero bytes (touch, a hostPath
// volume of type File) is started as a new one, with a warning naming it;
// the next start, on the file it initialised, warns no more. It was once
// taken as a fresh file without a word.
func TestBinary_EmptyStateFile(t *testing.T) {
	n := newNode(t)
	if err := os.MkdirAll(filepath.Dir(n.state), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const warning = "the state file was empty (0 bytes)"
	p, reg := n.start(t)
	var line struct{ Level, State string }
	if err := json.Unmarshal([]byte(p.logs.waitLine(t, warning)), &line); err != nil || line.Level != "warn" || line.State != n.state {
		t.Errorf("warning %+v (%v), want level warn naming %s", line, err, n.state)
	}
	plugintest.NextList(t, reg, 10*time.Second)
	p.stop(t)

	p, _ = n.start(t)
	// The warning would come before "starting": every line up to it.
	deadline := time.After(processWait)
	for started := false; !started; {
		select {
		case l := <-p.logs.lines:
			if strings.Contains(l, warning) {
				t.Errorf("second start: %s", l)
			}
			started = strings.Contains(l, `"message":"starting"`)
		case <-deadline:
			t.Fatalf("no \"starting\" line within %v", processWait)
		}
	}
	p.stop(t)
}
