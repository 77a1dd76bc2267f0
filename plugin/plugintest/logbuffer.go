package plugintest

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer collects log output from concurrent writers (a zerolog sink) so
// a test can wait for, and count, log lines. The zero value is ready to use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Count reports how many times sub occurs in the log so far.
func (l *LogBuffer) Count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), sub)
}

// String is the log so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
