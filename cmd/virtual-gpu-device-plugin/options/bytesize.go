package options

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ByteSize is a flag value counting bytes: a plain number, or one with a
// binary suffix as Kubernetes writes quantities (Ki, Mi, Gi). The zero
// value is 0 bytes.
type ByteSize int64

var _ flag.Value = (*ByteSize)(nil)

var byteSuffixes = []struct {
	suffix string
	shift  uint
}{{"Gi", 30}, {"Mi", 20}, {"Ki", 10}}

// Set parses s, e.g. "67108864" or "64Mi".
func (b *ByteSize) Set(s string) error {
	digits, shift := s, uint(0)
	for _, u := range byteSuffixes {
		if d, ok := strings.CutSuffix(s, u.suffix); ok {
			digits, shift = d, u.shift
			break
		}
	}
	n, err := strconv.ParseUint(digits, 10, 63) // no sign, no spaces
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return errors.New("want a byte count, optionally with a binary suffix Ki, Mi or Gi (e.g. 67108864 or 64Mi)")
	}
	if err != nil || n > math.MaxInt64>>shift {
		return fmt.Errorf("%s is too large", s)
	}
	*b = ByteSize(n << shift)
	return nil
}

// String prints the size with the largest suffix that divides it exactly.
func (b ByteSize) String() string {
	n := int64(b)
	for _, u := range byteSuffixes {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
