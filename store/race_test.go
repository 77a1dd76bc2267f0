//go:build race

package store_test

// raceEnabled scales down the longest tests under the race detector, which
// slows every write about tenfold.
const raceEnabled = true
