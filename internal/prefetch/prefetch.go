// Package prefetch asks the CPU to bring cache lines in ahead of use.
//
// A software prefetch retires at once, unlike a load that misses, so a loop
// that prefetches the line of the item it will reach several items later
// keeps many cache misses in flight while it works on the earlier ones.
// Where the architecture has no prefetch instruction Line does nothing.
package prefetch
