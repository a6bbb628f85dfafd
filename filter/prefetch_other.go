//go:build !amd64

package filter

// prefetch does nothing on this architecture (see prefetch_amd64.go).
func prefetch(addr uintptr) {}
