package filter

// prefetch asks the CPU to bring the cache line at addr into the caches
// without waiting for it: unlike a load, the instruction retires at once,
// so the misses of many keys can be in flight (AddAll). It never faults.
//
//go:noescape
func prefetch(addr uintptr)

// prefetchAt prefetches word off of every bitset in bitsets (each holds
// more than off words): the blocks of one key in every live generation, in
// one call where prefetch takes one per generation (a call the compiler
// cannot inline costs about as much as the prefetch itself).
//
//go:noescape
func prefetchAt(bitsets [][]uint64, off uint64)
