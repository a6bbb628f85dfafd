//go:build !amd64

package pipeline

// prefetch does nothing on this architecture (see prefetch_amd64.go).
func prefetch(addr uintptr) {}
