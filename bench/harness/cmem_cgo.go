//go:build linux && cgo

package harness

// #include <malloc.h>
import "C"

// cHeap returns the C allocator's bytes in use (arenas and mappings) and
// the bytes it holds free in its arenas (freed but not returned to the
// operating system), over all of glibc's arenas (mallinfo2). Pebble's block
// cache and memtables are C memory.
func cHeap() (inUse, free uint64, ok bool) {
	mi := C.mallinfo2()
	return uint64(mi.uordblks) + uint64(mi.hblkhd), uint64(mi.fordblks), true
}
