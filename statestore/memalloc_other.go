//go:build !linux

package statestore

// Elsewhere the indexes live in the Go heap: released memory is cleared
// (it must read as zeros) and freed by the collector.

func allocRegion(n int) []byte { return make([]byte, n) }

func releaseRegion(r []byte) { clear(r) }

func freeRegion([]byte) {}
