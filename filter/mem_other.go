//go:build !linux

package filter

// mapWords is not available on this platform: bitsets live in the Go heap.
func mapWords(n int) (raw []byte, words []uint64, ok bool) { return nil, nil, false }

func unmap(raw []byte) {}
