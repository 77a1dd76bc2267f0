package allocator

import (
	"fmt"

	"github.com/unicore/virtual-gpu-device-plugin/topology"
)

// Validate checks a request and returns nil or an error wrapping one of the
// sentinel errors, naming the offending device or number: a nil machine,
// size <= 0, an index out of the machine's range, a duplicate in available
// or mustInclude, a must-include device not in available, more must-include
// devices than size, or size > len(available). Every Policy calls it first.
func Validate(m *topology.Machine, available, mustInclude []int, size int) error {
	if m == nil {
		return ErrNilMachine
	}
	if size <= 0 {
		return fmt.Errorf("allocation size %d: %w", size, ErrInvalidSize)
	}
	n := m.Len()
	inAvail := make([]bool, n)
	for _, i := range available {
		if i < 0 || i >= n {
			return fmt.Errorf("available device index %d: machine %s has GPUs 0..%d: %w", i, m.Name(), n-1, ErrIndexOutOfRange)
		}
		if inAvail[i] {
			return fmt.Errorf("available device %s listed twice: %w", m.ID(i), ErrDuplicate)
		}
		inAvail[i] = true
	}
	inMust := make([]bool, n)
	for _, i := range mustInclude {
		if i < 0 || i >= n {
			return fmt.Errorf("must-include device index %d: machine %s has GPUs 0..%d: %w", i, m.Name(), n-1, ErrIndexOutOfRange)
		}
		if inMust[i] {
			return fmt.Errorf("must-include device %s listed twice: %w", m.ID(i), ErrDuplicate)
		}
		inMust[i] = true
		if !inAvail[i] {
			return fmt.Errorf("must-include device %s: %w", m.ID(i), ErrNotAvailable)
		}
	}
	if len(mustInclude) > size {
		return fmt.Errorf("%d must-include devices for an allocation of %d: %w", len(mustInclude), size, ErrTooManyMustInclude)
	}
	if size > len(available) {
		return fmt.Errorf("allocation size %d but %d devices available: %w", size, len(available), ErrNotEnoughDevices)
	}
	return nil
}
