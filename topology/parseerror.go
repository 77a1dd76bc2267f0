package topology

import "strconv"

// ParseError is the error returned for a topology file that cannot be read:
// it names the file, the line (1-based; 0 if the problem is not tied to one
// line) and what was expected. It unwraps to ErrInvalidTopology, and to the
// underlying I/O error if there is one.
type ParseError struct {
	// File is the name given to Parse (usually the file path).
	File string
	// Line is the 1-based line of the problem, or 0 for the whole file.
	Line int
	// Msg says what is wrong and what was expected.
	Msg string
	// Err is an underlying error (for example from the reader), or nil.
	Err error
}

// Error formats the error as "file:line: msg" (or "file: msg" without a line).
func (e *ParseError) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	s += ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrInvalidTopology and the underlying error, if any.
func (e *ParseError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidTopology, e.Err}
	}
	return []error{ErrInvalidTopology}
}

func parseErr(file string, line int, msg string) *ParseError {
	return &ParseError{File: file, Line: line, Msg: msg}
}
