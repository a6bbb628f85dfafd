package filter

// prefetch asks the CPU to bring the cache line at addr into the caches
// without waiting for it: unlike a load, the instruction retires at once,
// so the misses of many keys can be in flight (AddAll). It never faults.
//
//go:noescape
func prefetch(addr uintptr)
