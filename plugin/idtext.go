package plugin

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on how much of a request's ids an error message or log line quotes:
// ids come from the caller and can be of any length and number.
const (
	// maxIDBytes is how many bytes of one id are quoted; a longer id is
	// cut on a rune boundary and ends in "…".
	maxIDBytes = 64
	// maxListedIDs is how many ids of a list are named; the rest are
	// counted ("… (+12 more)").
	maxListedIDs = 8
)

// shortID returns id cut to maxIDBytes bytes, with "…" if it was cut.
func shortID(id string) string {
	if len(id) <= maxIDBytes {
		return id
	}
	cut := maxIDBytes
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return id[:cut] + "…"
}

// quoteID quotes id for a message, cut as shortID does.
func quoteID(id string) string { return strconv.Quote(shortID(id)) }

// shortIDs joins ids with commas for a message: each cut as shortID does,
// at most maxListedIDs of them, the rest counted.
func shortIDs(ids []string) string {
	var b strings.Builder
	for i, id := range ids {
		if i == maxListedIDs {
			b.WriteString(",… (+")
			b.WriteString(strconv.Itoa(len(ids) - i))
			b.WriteString(" more)")
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(shortID(id))
	}
	return b.String()
}
