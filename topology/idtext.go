package topology

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on how much of a caller's ids (or other values) an error message or
// log line quotes: they come from a request or the command line and can be
// of any length and number.
const (
	// MaxEchoBytes is how many bytes of one id are quoted; a longer id is
	// cut on a rune boundary and ends in "…".
	MaxEchoBytes = 64
	// MaxListedIDs is how many ids of a list are named; the rest are
	// counted ("… (+12 more)").
	MaxListedIDs = 8
)

// Clip returns s (an id, a query parameter, a machine id) cut to at most
// MaxEchoBytes bytes, at a character boundary, with "…" appended when it
// was cut.
func Clip(id string) string {
	if len(id) <= MaxEchoBytes {
		return id
	}
	cut := MaxEchoBytes
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return id[:cut] + "…"
}

// QuoteID quotes id for a message, cut as Clip does.
func QuoteID(id string) string { return strconv.Quote(Clip(id)) }

// JoinIDs joins ids with commas for a message: each cut as Clip does, at
// most MaxListedIDs of them, the rest counted.
func JoinIDs(ids []string) string {
	var b strings.Builder
	for i, id := range ids {
		if i == MaxListedIDs {
			b.WriteString(",… (+")
			b.WriteString(strconv.Itoa(len(ids) - i))
			b.WriteString(" more)")
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(Clip(id))
	}
	return b.String()
}
