//go:build linux && cgo

package statestore

/*
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The settings (cArenaMax, cMmapThreshold).
#define DEDUPSTREAM_ARENA_MAX 2
#define DEDUPSTREAM_MMAP_THRESHOLD (256 << 10)

// dedupstream_arena_max and dedupstream_mmap_threshold are what
// dedupstream_malloc_setup set (0: left to glibc).
static int dedupstream_arena_max, dedupstream_mmap_threshold;

// dedupstream_malloc_setup bounds glibc's arenas before the program
// allocates anything (see cArenaMax in the Go code), unless the
// environment tunes glibc's malloc itself.
__attribute__((constructor)) static void dedupstream_malloc_setup(void) {
	const char *t = getenv("GLIBC_TUNABLES");
	if (t != NULL && strstr(t, "glibc.malloc.") != NULL) {
		return;
	}
	if (getenv("MALLOC_ARENA_MAX") == NULL && mallopt(M_ARENA_MAX, DEDUPSTREAM_ARENA_MAX) == 1) {
		dedupstream_arena_max = DEDUPSTREAM_ARENA_MAX;
	}
	if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL && mallopt(M_MMAP_THRESHOLD, DEDUPSTREAM_MMAP_THRESHOLD) == 1) {
		dedupstream_mmap_threshold = DEDUPSTREAM_MMAP_THRESHOLD;
	}
}

static int dedupstream_get_arena_max(void) { return dedupstream_arena_max; }
static int dedupstream_get_mmap_threshold(void) { return dedupstream_mmap_threshold; }

// dedupstream_arenas counts glibc's arenas (the heaps malloc_info lists);
// -1 if it cannot tell.
static int dedupstream_arenas(void) {
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f == NULL) {
		return -1;
	}
	int rc = malloc_info(0, f);
	fclose(f);
	if (rc != 0 || buf == NULL) {
		free(buf);
		return -1;
	}
	int n = 0;
	for (char *p = buf; (p = strstr(p, "<heap nr=")) != NULL; p++) {
		n++;
	}
	free(buf);
	return n;
}

static void dedupstream_alloc_free(size_t n) {
	void *p = malloc(n);
	if (p != NULL) {
		memset(p, 1, n);
	}
	free(p);
}
*/
import "C"

import (
	"sync/atomic"
	"time"
)

// cArenaMax is the most arenas glibc's malloc keeps in a process that
// links the store (M_ARENA_MAX, set by a constructor before the Go runtime
// starts, so before Pebble allocates), and cMmapThreshold the size from
// which it maps an allocation of its own instead of carving it from an
// arena (M_MMAP_THRESHOLD, fixed). glibc's defaults are 8 arenas per core
// and a threshold that rises to the largest block freed: Pebble's block
// cache allocates and frees its blocks on whatever thread reads, so each
// of up to 16 arenas on 2 cores kept its own free blocks, and its 512 KiB
// memtables moved into the arenas once the first was freed. Measured at
// 100M keys in one stage (docs/benchmarks.md, "Memory at 100M, session
// 9"): free memory in the arenas 40 -> 9 MiB at the peak, RSS peak 12 MiB
// lower, CPU per record within noise. Two arenas still let both cores
// allocate at once; more contention than that is what tcache absorbs.
// GLIBC_TUNABLES naming any glibc.malloc tunable, or MALLOC_ARENA_MAX /
// MALLOC_MMAP_THRESHOLD_ in the environment, leave the matching setting
// (all of them, for the tunables) to glibc.
const (
	cArenaMax      = C.DEDUPSTREAM_ARENA_MAX
	cMmapThreshold = C.DEDUPSTREAM_MMAP_THRESHOLD
)

// CMallocSettings returns the arena cap and the mmap threshold the store
// set in glibc's malloc at start-up (0: left to glibc, as the environment
// asked or because mallopt refused).
func CMallocSettings() (arenaMax, mmapThreshold int) {
	return int(C.dedupstream_get_arena_max()), int(C.dedupstream_get_mmap_threshold())
}

// CArenas returns how many arenas glibc's malloc has made in this process
// (malloc_info's heaps); ok is false if it cannot tell. It formats
// glibc's statistics of every arena: for benchmarks and tests, not per
// record.
func CArenas() (n int, ok bool) {
	n = int(C.dedupstream_arenas())
	return n, n >= 0
}

// cAllocFree allocates n bytes of C memory on the calling thread, writes
// them and frees them: the first malloc of a thread picks its arena.
func cAllocFree(n int) { C.dedupstream_alloc_free(C.size_t(n)) }

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
