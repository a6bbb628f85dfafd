//go:build !linux || !cgo

package statestore

// trimCHeap does nothing: without cgo Pebble's memory is the Go heap's, and
// other platforms' allocators are not glibc's.
func trimCHeap() {}

// CHeap is unknown without glibc's mallinfo2.
func CHeap() (inUse, free uint64, ok bool) { return 0, 0, false }

// CMallocSettings is 0, 0: the store tunes glibc's malloc only.
func CMallocSettings() (arenaMax, mmapThreshold int) { return 0, 0 }

// CArenas is unknown without glibc.
func CArenas() (n int, ok bool) { return 0, false }
