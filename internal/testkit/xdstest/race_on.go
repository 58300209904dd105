//go:build race

package xdstest

// raceEnabled: the race detector's shadow memory counts in the resident
// set, so Memory.Within asserts on the heap alone.
const raceEnabled = true
