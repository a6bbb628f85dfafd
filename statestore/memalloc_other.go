//go:build !linux

package statestore

// Elsewhere the indexes live in the Go heap: released memory is cleared
// (it must read as zeros) and freed by the collector; OffHeap reports
// nothing.

func allocRegion(n int, _ MemKind) []byte { return make([]byte, n) }

// hugeRegions has no effect here (see memalloc_linux.go).
var hugeRegions = true

// residentBytes is never called: no region is registered here.
func residentBytes(r []byte) int { return len(r) }

func releaseRegion(r []byte) { clear(r) }

func freeRegion([]byte) {}
