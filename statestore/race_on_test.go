//go:build race

package statestore

// The race detector makes sync.Pool drop items and adds allocations.
const raceEnabled = true
