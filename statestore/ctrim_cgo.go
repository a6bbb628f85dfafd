//go:build linux && cgo

package statestore

// #include <malloc.h>
import "C"

import (
	"sync/atomic"
	"time"
)

// lastTrim is when trimCHeap last ran (UnixNano).
var lastTrim atomic.Int64

// trimCHeap hands the free pages of the C allocator's arenas back to the
// operating system (glibc's malloc_trim), at most once a second per
// process. Pebble's block cache and memtables are C memory: blocks are
// allocated and freed as reads come and go, on many threads, and glibc
// keeps what is freed in the arena it came from. At 100M keys in one stage
// its arenas held 72 MiB free next to 82 MiB in use (0.75 bytes per key of
// RSS nobody used). The flusher calls it after each flush, a few
// milliseconds against the flush's second.
func trimCHeap() {
	now := time.Now().UnixNano()
	last := lastTrim.Load()
	if now-last < int64(time.Second) || !lastTrim.CompareAndSwap(last, now) {
		return
	}
	C.malloc_trim(0)
}

// CHeap returns the C allocator's bytes in use (arenas and mappings) and
// the bytes it holds free in its arenas, over all of glibc's arenas
// (mallinfo2). Pebble's block cache and memtables are C memory.
func CHeap() (inUse, free uint64, ok bool) {
	mi := C.mallinfo2()
	return uint64(mi.uordblks) + uint64(mi.hblkhd), uint64(mi.fordblks), true
}
